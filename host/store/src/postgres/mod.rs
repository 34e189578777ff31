//! The shared store on PostgreSQL: several gateways on one database, each claiming with
//! `FOR UPDATE SKIP LOCKED` and settling under the lease fence.
//!
//! A few connections per gateway ([`super::pool`]), each made on first use and again after
//! it breaks: a call that
//! finds the database gone fails (the caller retries it, `/readyz` says 503 naming the
//! store) and the next one reconnects. Nothing is lost in between - a transaction that did
//! not commit changed nothing, and a lease held by a gateway that cannot reach the database
//! expires and is claimed by another.

use std::collections::HashMap;
use std::path::Path;
use std::sync::MutexGuard;

use postgres::fallible_iterator::FallibleIterator as _;
use postgres::{Client, NoTls, Statement};

use tls::MakeRustls;

mod dlq;
mod messages;
mod retention;
mod schema;
mod settle;
mod tls;

use super::db_clock::DbClock;
use super::pool::Pool;
use super::{StateCounts, StoreError};

/// A PostgreSQL store.
pub struct PostgresStore {
    config: postgres::Config,
    /// TLS per the URL's `sslmode` (`None`: disabled).
    tls: Option<MakeRustls>,
    target: String,
    conns: Pool<Conn>,
    /// The database's clock: every instant this store compares comes from it.
    clock: DbClock,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    /// The driver closes a connection by blocking on a runtime of its own, which panics on
    /// an async worker - where the last handle on a store often goes (a gateway shutting
    /// down). The connection is let go on a plain thread instead.
    fn drop(&mut self) {
        let conns = self.conns.drain();
        if !conns.is_empty() {
            let _ = std::thread::Builder::new()
                .name("verdict-pg-close".into())
                .spawn(move || drop(conns));
        }
    }
}

/// A live connection and the statements prepared on it.
struct Conn {
    client: Client,
    prepared: HashMap<&'static str, Statement>,
}

impl Conn {
    /// `sql`, prepared once per connection.
    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }
}

/// Publishes and replays hold this advisory lock shared, forgetting idle topics holds it
/// exclusive: a topic must never be forgotten beside a publish that lists it again but has
/// not committed yet (its message would wait, unclaimed, for the next publish).
const TOPICS_LOCK: i64 = 0x7665_7264_6963_7401;
/// How often a transaction the server picked as a deadlock victim is run again.
const RETRIES: usize = 3;
/// The channel publishes and replays notify at commit, so that every gateway claims at once
/// instead of at its next poll.
const CHANNEL: &str = "verdict_due";
/// Serialises migrations between gateways starting together.
const MIGRATE_LOCK: i64 = 0x7665_7264_6963_7402;

impl PostgresStore {
    /// Connect to `url` (`postgres://user[:password]@host[:port]/database`) and bring its
    /// schema up to date.
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        Self::connect_from(url, Path::new(""))
    }

    /// [`PostgresStore::connect`], with the URL's relative TLS files (`sslrootcert`,
    /// `sslcert`, `sslkey`) taken from `base`.
    pub fn connect_from(url: &str, base: &Path) -> Result<PostgresStore, StoreError> {
        let (config, tls) = tls::split(url, base)?;
        let store = PostgresStore {
            target: target_of(&config),
            tls,
            config,
            conns: Pool::new(),
            clock: DbClock::default(),
        };
        store.migrate()?;
        store.warn_without_autovacuum();
        Ok(store)
    }

    /// Say so when the server does not vacuum on its own: every settlement updates a
    /// `messages` row, and without autovacuum the old versions pile up - the claim query
    /// wades through them and throughput falls as the table grows (RELIABILITY.md, the
    /// PostgreSQL soak).
    fn warn_without_autovacuum(&self) {
        let setting = self.with(|c| {
            let row = c
                .client
                .query_one("SELECT current_setting('autovacuum')", &[])?;
            Ok(row.get::<_, String>(0))
        });
        if matches!(setting.as_deref(), Ok("off")) {
            tracing::warn!(
                store = %self.target,
                "autovacuum is off on this PostgreSQL server: the store's tables keep every \
                 old row version and claims slow down as they grow; turn it on, or VACUUM the \
                 messages table regularly"
            );
        }
    }

    /// Connect once to `url` and say what answered - the server's version, whether the
    /// connection is encrypted and with what - without touching the schema
    /// (`verdict check --probe`).
    pub fn probe(url: &str, base: &Path) -> Result<String, StoreError> {
        let (config, tls) = tls::split(url, base)?;
        let target = target_of(&config);
        let failed = |e| tls::connect_failed(&target, e);
        let seen = std::thread::scope(|scope| {
            // The driver blocks on a runtime of its own: never on an async worker.
            scope
                .spawn(|| {
                    let mut client = connect(&config, tls.as_ref()).map_err(failed)?;
                    let row = client
                        .query_one(
                            "SELECT current_setting('server_version'), \
                             COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false), \
                             COALESCE((SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()), '')",
                            &[],
                        )
                        .map_err(failed)?;
                    let (version, ssl, protocol): (String, bool, String) =
                        (row.get(0), row.get(1), row.get(2));
                    Ok::<_, StoreError>(if ssl {
                        format!("PostgreSQL {version} at {target}, TLS ({protocol})")
                    } else {
                        format!("PostgreSQL {version} at {target}, plain TCP")
                    })
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(StoreError::Url("probing PostgreSQL panicked".into()))
                })
        })?;
        Ok(seen)
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
            let exists: bool = c
                .client
                .query_one("SELECT to_regclass('verdict_schema') IS NOT NULL", &[])?
                .get(0);
            if !exists {
                return Ok(0);
            }
            let version: i32 = c
                .client
                .query_one("SELECT COALESCE(MAX(version), 0) FROM verdict_schema", &[])?
                .get(0);
            Ok(version.max(0) as u32)
        })
    }

    /// Apply the migrations this database lacks; the schema version after. A database
    /// already current is only read, so gateways whose user may not change the schema
    /// start against one an operator migrated (`verdict store migrate`).
    pub fn migrate(&self) -> Result<u32, StoreError> {
        let known = schema::MIGRATIONS.len() as u32;
        if self.schema_version()? == known {
            return Ok(known);
        }
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS verdict_schema (
                     version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )?;
            let current: i32 = tx
                .query_one("SELECT COALESCE(MAX(version), 0) FROM verdict_schema", &[])?
                .get(0);
            let known = schema::MIGRATIONS.len() as i32;
            if current > known {
                return Err(StoreError::Connect {
                    target: self.target.clone(),
                    message: format!(
                        "the database's schema is version {current}, newer than this \
                         gateway's {known}: upgrade the gateway"
                    ),
                });
            }
            for (n, sql) in schema::MIGRATIONS.iter().enumerate().skip(current as usize) {
                tx.batch_execute(sql)?;
                tx.execute(
                    "INSERT INTO verdict_schema (version) VALUES ($1)",
                    &[&(n as i32 + 1)],
                )?;
            }
            tx.commit()?;
            Ok(known as u32)
        })
    }

    /// Messages by state. Counted, not kept in counters: a counter row every settlement
    /// updates would serialise the gateways sharing the database.
    pub fn counts(&self) -> Result<StateCounts, StoreError> {
        self.with(|c| {
            let s = c.statement("SELECT state, COUNT(*) FROM messages GROUP BY state")?;
            let mut counts = StateCounts::default();
            for row in c.client.query(&s, &[])? {
                let (state, n): (String, i64) = (row.get(0), row.get(1));
                let n = n.max(0) as u64;
                counts.set(&state, n)?;
            }
            Ok(counts)
        })
    }

    /// Audit events with this name.
    pub fn audit_count(&self, event: &str) -> Result<u64, StoreError> {
        self.with(|c| {
            let s = c.statement("SELECT COUNT(*) FROM audit WHERE event = $1")?;
            let n: i64 = c.client.query_one(&s, &[&event])?.get(0);
            Ok(n.max(0) as u64)
        })
    }

    /// Call `wake(true)` on every notification of [`CHANNEL`], from a thread with a
    /// connection of its own (reconnected with backoff when it breaks), until `wake`
    /// returns `false`; a quiet second calls `wake(false)` to ask whether anyone still
    /// listens. Each reconnect wakes too: a notification sent while the listener was away
    /// is not lost work, only a late look.
    pub fn listen(&self, wake: impl Fn(bool) -> bool + Send + 'static) {
        let (config, target, tls) = (self.config.clone(), self.target.clone(), self.tls.clone());
        let spawned = std::thread::Builder::new()
            .name("verdict-pg-listen".into())
            .spawn(move || {
                let mut backoff = std::time::Duration::from_millis(100);
                loop {
                    match connect(&config, tls.as_ref()) {
                        Ok(mut client) => {
                            backoff = std::time::Duration::from_millis(100);
                            if client.batch_execute(&format!("LISTEN {CHANNEL}")).is_err() {
                                continue;
                            }
                            if !wake(true) {
                                return;
                            }
                            loop {
                                // A fresh iterator per wait: the driver's `TimeoutIter` resets
                                // its timer only when a notification comes, so once a quiet
                                // second had passed, a kept one answered "nothing" at once,
                                // forever - a thread spinning at full speed.
                                let next = client
                                    .notifications()
                                    .timeout_iter(std::time::Duration::from_secs(1))
                                    .next();
                                match next {
                                    Ok(Some(_)) => {
                                        if !wake(true) {
                                            return;
                                        }
                                    }
                                    Ok(None) => {
                                        if !wake(false) {
                                            return;
                                        }
                                    }
                                    Err(_) => break,
                                }
                            }
                        }
                        Err(e) => {
                            tracing::debug!(store = %target, error = %StoreError::from(e), "listening for new work: reconnecting");
                            std::thread::sleep(backoff);
                            backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the PostgreSQL listener; new work is found by polling");
        }
    }

    /// Run `f` on a connection, connecting first when there is none; a deadlock victim runs
    /// `f` again; a connection the call found broken is dropped, so the next call connects
    /// anew.
    fn with<T>(
        &self,
        mut f: impl FnMut(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut guard = self.lock();
        let mut tries = 0;
        let mut reconnected = false;
        loop {
            if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
                let client = connect(&self.config, self.tls.as_ref())
                    .map_err(|e| tls::connect_failed(&self.target, e))?;
                *guard = Some(Conn {
                    client,
                    prepared: HashMap::new(),
                });
            }
            let conn = guard.as_mut().expect("connected above");
            if self.clock.stale() {
                let read = self.clock.read(|| {
                    conn.client
                        .query_one(
                            "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
                            &[],
                        )
                        .map(|row| row.get::<_, i64>(0))
                });
                if let Err(e) = read {
                    if conn.client.is_closed() {
                        *guard = None;
                    }
                    match StoreError::from(e) {
                        StoreError::Disconnected(_) if !reconnected => {
                            *guard = None;
                            reconnected = true;
                            continue;
                        }
                        e => return Err(e),
                    }
                }
            }
            match f(conn) {
                // A deadlock victim's transaction was rolled back whole: run it again.
                Err(StoreError::Retry(_)) if tries < RETRIES => tries += 1,
                Err(StoreError::Retry(message)) => return Err(StoreError::Database(message)),
                // The session ended under the call: once more on a new one.
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
                Err(e) => {
                    if conn.client.is_closed() {
                        *guard = None;
                    }
                    return Err(e);
                }
                ok => return ok,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Conn>> {
        self.conns.get()
    }
}

/// A connection with `config`, over TLS when `tls` is set.
fn connect(config: &postgres::Config, tls: Option<&MakeRustls>) -> Result<Client, postgres::Error> {
    match tls {
        Some(tls) => config.connect(tls.clone()),
        None => config.connect(NoTls),
    }
}

/// `host:port/database` of a config (the first host; `?` when the URL names none).
fn target_of(config: &postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "?".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{host}:{port}/{}",
        config
            .get_dbname()
            .unwrap_or(config.get_user().unwrap_or("?"))
    )
}

fn audit(
    tx: &mut postgres::Transaction<'_>,
    at_ms: u64,
    message_id: &str,
    topic: &str,
    event: &str,
    detail: &str,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO audit (at_ms, message_id, topic, event, detail) VALUES ($1, $2, $3, $4, $5)",
        &[
            &super::clamp_ms(at_ms),
            &message_id,
            &topic,
            &event,
            &detail,
        ],
    )?;
    Ok(())
}
