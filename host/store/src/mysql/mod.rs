//! The shared store on MariaDB (10.6+) and MySQL (8): several gateways on one database,
//! each claiming with `FOR UPDATE SKIP LOCKED` and settling under the lease fence, like the
//! PostgreSQL store. What differs is the dialect: no `RETURNING` on `UPDATE` (a claim reads
//! the rows it locked, then leases them), no shared advisory locks (the topic list is the
//! pending messages' own index, so nothing can forget a topic beside a publish), no
//! `NOTIFY` (an idle gateway sleeps until the next message falls due; the poll finds other
//! gateways' publishes). Sessions run `READ COMMITTED`, so claims and publishes take no gap
//! locks; a transaction the server picks as a deadlock victim is retried whole.

use std::path::Path;
use std::sync::MutexGuard;

use mysql::prelude::Queryable as _;
use mysql::{Conn, Opts};

mod dlq;
mod messages;
mod retention;
mod schema;
mod settle;
mod tls;

use super::db_clock::DbClock;
use super::pool::Pool;
use super::{StateCounts, StoreError};

/// A MariaDB or MySQL store.
pub struct MysqlStore {
    opts: Opts,
    /// TLS per the URL's `ssl-mode`.
    tls: tls::MysqlTls,
    target: String,
    conns: Pool<Conn>,
    /// The database's clock: every instant this store compares comes from it.
    clock: DbClock,
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// The server's answers to a schema statement whose object exists already: table or view
/// (1050), column (1060), key (1061).
const ALREADY_MADE: [u16; 3] = [1050, 1060, 1061];

/// How often a transaction chosen as a deadlock victim (or timed out on a lock) is run
/// again before its error is returned.
const RETRIES: usize = 3;

impl From<mysql::Error> for StoreError {
    /// The server's "try again" errors - deadlock victim (1213), lock wait timeout (1205) -
    /// are [`StoreError::Retry`]: the store runs the transaction again.
    fn from(e: mysql::Error) -> Self {
        match &e {
            mysql::Error::MySqlError(server) if server.code == 1213 || server.code == 1205 => {
                StoreError::Retry(format!("mysql: {e}"))
            }
            // The session ended under the call: killed (1927), the server gone (2006) or
            // the connection lost (2013), or the socket itself failed.
            mysql::Error::MySqlError(server) if matches!(server.code, 1927 | 2006 | 2013) => {
                StoreError::Disconnected(format!("mysql: {e}"))
            }
            mysql::Error::IoError(_)
            | mysql::Error::CodecError(_)
            | mysql::Error::DriverError(mysql::DriverError::PacketOutOfSync) => {
                StoreError::Disconnected(format!("mysql: {e}"))
            }
            _ => StoreError::Database(format!("mysql: {e}")),
        }
    }
}

impl MysqlStore {
    /// Connect to `url` (`mysql://user[:password]@host[:port]/database`) and bring its
    /// schema up to date.
    pub fn connect(url: &str) -> Result<MysqlStore, StoreError> {
        Self::connect_from(url, Path::new(""))
    }

    /// [`MysqlStore::connect`], with the URL's relative TLS files (`ssl-ca`, `ssl-cert`,
    /// `ssl-key`) taken from `base`.
    pub fn connect_from(url: &str, base: &Path) -> Result<MysqlStore, StoreError> {
        let (opts, tls) = tls::split(url, base)?;
        let target = format!(
            "{}:{}/{}",
            opts.get_ip_or_hostname(),
            opts.get_tcp_port(),
            opts.get_db_name().unwrap_or("?")
        );
        if opts.get_db_name().is_none() {
            return Err(StoreError::Url(format!(
                "`mysql://...@{target}` names no database; add it as the URL's path"
            )));
        }
        let store = MysqlStore {
            opts,
            tls,
            target,
            conns: Pool::new(),
            clock: DbClock::default(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// Connect once to `url` and say what answered - the server's version, whether the
    /// connection is encrypted and with what - without touching the schema
    /// (`verdict check --probe`).
    pub fn probe(url: &str, base: &Path) -> Result<String, StoreError> {
        let (opts, tls) = tls::split(url, base)?;
        let target = format!(
            "{}:{}/{}",
            opts.get_ip_or_hostname(),
            opts.get_tcp_port(),
            opts.get_db_name().unwrap_or("?")
        );
        let failed = |e| tls::connect_failed(&target, e);
        let mut conn = tls.connect(&opts).map_err(failed)?;
        let version: Option<String> = conn.query_first("SELECT VERSION()").map_err(failed)?;
        let cipher: Option<(String, String)> = conn
            .query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            .map_err(failed)?;
        let version = version.unwrap_or_default();
        Ok(match cipher.map(|(_, c)| c).filter(|c| !c.is_empty()) {
            Some(cipher) => format!("MariaDB/MySQL {version} at {target}, TLS ({cipher})"),
            None => format!("MariaDB/MySQL {version} at {target}, plain TCP"),
        })
    }

    /// Now by the database server's clock (see [`DbClock`]): what every gateway sharing
    /// this database compares leases, due times and retention with.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// `host:port/database`, for logs and errors: never the password.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The schema version the database is at (0 before the first migration).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.with(|c| {
            let exists: Option<i64> = c.query_first(
                "SELECT COUNT(*) FROM information_schema.tables
                 WHERE table_schema = DATABASE() AND table_name = 'verdict_schema'",
            )?;
            if exists.unwrap_or(0) == 0 {
                return Ok(0);
            }
            let version: Option<i64> =
                c.query_first("SELECT COALESCE(MAX(version), 0) FROM verdict_schema")?;
            Ok(version.unwrap_or(0).max(0) as u32)
        })
    }

    /// Apply the migrations this database lacks; the schema version after.
    pub fn migrate(&self) -> Result<u32, StoreError> {
        let known = schema::MIGRATIONS.len() as u32;
        if self.schema_version()? == known {
            return Ok(known);
        }
        self.with(|c| {
            let locked: Option<i64> = c.query_first("SELECT GET_LOCK('verdict_migrate', 60)")?;
            if locked != Some(1) {
                return Err(StoreError::Connect {
                    target: self.target.clone(),
                    message: "another process held the migration lock for a minute".into(),
                });
            }
            let applied = apply_migrations(c, known, &self.target);
            c.query_drop("DO RELEASE_LOCK('verdict_migrate')")?;
            applied
        })
    }

    /// Messages by state, counted (see the PostgreSQL store for why not kept).
    pub fn counts(&self) -> Result<StateCounts, StoreError> {
        self.with(|c| {
            let rows: Vec<(String, i64)> =
                c.query("SELECT state, COUNT(*) FROM messages GROUP BY state")?;
            let mut counts = StateCounts::default();
            for (state, n) in rows {
                let n = n.max(0) as u64;
                counts.set(&state, n)?;
            }
            Ok(counts)
        })
    }

    /// Audit events with this name.
    pub fn audit_count(&self, event: &str) -> Result<u64, StoreError> {
        self.with(|c| {
            let n: Option<i64> =
                c.exec_first("SELECT COUNT(*) FROM audit WHERE event = ?", (event,))?;
            Ok(n.unwrap_or(0).max(0) as u64)
        })
    }

    /// Run `f` on the connection, connecting first when there is none. A deadlock victim
    /// or a lock wait timeout runs `f` again (its transaction was rolled back whole); a
    /// connection that failed is dropped, so the next call connects anew.
    fn with<T>(
        &self,
        mut f: impl FnMut(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = self.lock();
        let mut tries = 0;
        let mut reconnected = false;
        loop {
            if guard.is_none() {
                let mut conn = self
                    .tls
                    .connect(&self.opts)
                    .map_err(|e| tls::connect_failed(&self.target, e))?;
                conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")?;
                *guard = Some(conn);
            }
            let conn = guard.as_mut().expect("connected above");
            if self.clock.stale() {
                let read = self.clock.read(|| {
                    conn.query_first::<i64, _>(
                        "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
                    )
                    .map(Option::unwrap_or_default)
                });
                if let Err(e) = read {
                    *guard = None;
                    match StoreError::from(e) {
                        StoreError::Disconnected(_) if !reconnected => {
                            reconnected = true;
                            continue;
                        }
                        e => return Err(e),
                    }
                }
            }
            match f(conn) {
                Err(StoreError::Retry(_)) if tries < RETRIES => tries += 1,
                Err(StoreError::Retry(message)) => return Err(StoreError::Database(message)),
                Err(StoreError::Disconnected(_)) if !reconnected => {
                    *guard = None;
                    reconnected = true;
                }
                // Still gone: the caller decides (a settlement waits for the database
                // while its lease holds).
                Err(e @ StoreError::Disconnected(_)) => {
                    *guard = None;
                    return Err(e);
                }
                Err(e @ StoreError::Database(_)) => {
                    // Whatever failed, a fresh session starts clean (no half transaction).
                    *guard = None;
                    return Err(e);
                }
                other => return other,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Conn>> {
        self.conns.get()
    }
}

fn apply_migrations(c: &mut Conn, known: u32, target: &str) -> Result<u32, StoreError> {
    c.query_drop(
        "CREATE TABLE IF NOT EXISTS verdict_schema (
             version INT NOT NULL PRIMARY KEY,
             applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE = InnoDB",
    )?;
    let current: Option<i64> =
        c.query_first("SELECT COALESCE(MAX(version), 0) FROM verdict_schema")?;
    let current = current.unwrap_or(0).max(0) as u32;
    if current > known {
        return Err(StoreError::Connect {
            target: target.to_string(),
            message: format!(
                "the database's schema is version {current}, newer than this gateway's \
                 {known}: upgrade the gateway"
            ),
        });
    }
    for (n, statements) in schema::MIGRATIONS.iter().enumerate().skip(current as usize) {
        for sql in *statements {
            match c.query_drop(sql) {
                // DDL is not transactional here: a migration cut off part-way (a crash, a
                // lost connection) left some of its tables, columns or keys behind, and
                // running it again meets them. Each is exactly what the statement makes.
                Err(mysql::Error::MySqlError(e)) if ALREADY_MADE.contains(&e.code) => {
                    tracing::info!(
                        migration = n + 1,
                        "a statement of a migration cut off earlier had already run: {}",
                        e.message
                    );
                }
                done => done?,
            }
        }
        c.exec_drop(
            "INSERT INTO verdict_schema (version) VALUES (?)",
            (n as u32 + 1,),
        )?;
    }
    Ok(known)
}

fn audit(
    tx: &mut mysql::Transaction<'_>,
    at_ms: u64,
    message_id: &str,
    topic: &str,
    event: &str,
    detail: &str,
) -> Result<(), StoreError> {
    tx.exec_drop(
        "INSERT INTO audit (at_ms, message_id, topic, event, detail) VALUES (?, ?, ?, ?, ?)",
        (super::clamp_ms(at_ms), message_id, topic, event, detail),
    )?;
    Ok(())
}
