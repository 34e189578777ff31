//! `[storage]`: where the gateway keeps its state.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

/// The gateway's state directory: uploaded components (`uploads/`), the compiled-artifact
/// cache (`artifacts/`) and the admission ledger (`admitted`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// The directory, relative to the config file. Created (mode 0700) when missing.
    pub dir: PathBuf,
    /// Keep compiled components and passed admission checks on disk (keyed by digests of
    /// everything they depend on), so a restart neither recompiles nor re-checks them.
    pub artifact_cache: bool,
    /// How long the embedded store keeps delivered and discarded messages, audit records
    /// and replayed or discarded dead letters (pending messages and dead letters in a DLQ
    /// are kept whatever their age). A message id is refused as a duplicate publish for as
    /// long as its message is kept: this is the duplicate-publish window.
    pub retention_ms: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            dir: PathBuf::from(".verdict"),
            artifact_cache: true,
            retention_ms: 7 * 24 * 3_600_000,
        }
    }
}
