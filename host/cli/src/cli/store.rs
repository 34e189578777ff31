//! `verdict store`: the gateway's store as an operator sees it - which backend, which schema
//! version, how many messages in each state - and `migrate`, for teams that change a shared
//! database's schema by hand before gateways (whose user may lack that right) start on it.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use verdict_gateway::store::StateCounts;
use verdict_registry::GatewayConfig;

/// What `verdict store status` and `migrate` print.
#[derive(Debug, Serialize)]
pub struct StoreStatus {
    /// `sqlite <path>` or `postgres host:port/database` (never a password).
    pub store: String,
    /// The shared database's schema version; absent for SQLite.
    pub schema_version: Option<u32>,
    /// Messages by state.
    pub messages: StateCounts,
}

/// Open the store `config_path` names, bring its schema up to date (what a starting gateway
/// does too) and say where it stands.
pub fn migrate(config_path: &Path) -> Result<StoreStatus> {
    let config = GatewayConfig::load(config_path)?;
    let base = config_path.parent().unwrap_or(Path::new("."));
    let store = verdict_gateway::open_store(&config, base)
        .with_context(|| format!("{}: opening the store", config_path.display()))?;
    let schema_version = store.migrate()?;
    Ok(StoreStatus {
        store: store.describe(),
        schema_version,
        messages: store.counts()?,
    })
}
