//! The shared store on PostgreSQL: several gateways on one database, each claiming with
//! `FOR UPDATE SKIP LOCKED` and settling under the lease fence.
//!
//! A few connections per gateway ([`super::pool`]), each made on first use and again after
//! it breaks: a call that
//! finds the database gone fails (the caller retries it, `/readyz` says 503 naming the
//! store) and the next one reconnects. Nothing is lost in between - a transaction that did
//! not commit changed nothing, and a lease held by a gateway that cannot reach the database
//! expires and is claimed by another.

use std::path::Path;

use postgres::fallible_iterator::FallibleIterator as _;
use postgres::{Client, NoTls};

use tls::MakeRustls;

mod messages;
mod schema;
pub use schema::MIGRATIONS;
mod session;
mod settle;
mod statements;
mod tls;

use session::{PgSession, Prepared};

use crate::StoreError;
use crate::shared::{Dialect, Session, Shared, Statements};

/// A PostgreSQL store.
pub struct PostgresStore {
    shared: Shared<Pg>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.shared.target)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    /// The driver closes a connection by blocking on a runtime of its own, which panics on
    /// an async worker - where the last handle on a store often goes (a gateway shutting
    /// down). The connection is let go on a plain thread instead.
    fn drop(&mut self) {
        let conns = self.shared.drain();
        if !conns.is_empty() {
            let _ = std::thread::Builder::new()
                .name("verdict-pg-close".into())
                .spawn(move || drop(conns));
        }
    }
}

/// The PostgreSQL dialect: where the database is and how to reach it.
struct Pg {
    config: postgres::Config,
    /// TLS per the URL's `sslmode` (`None`: disabled).
    tls: Option<MakeRustls>,
    target: String,
}

/// A live connection and the statements prepared on it.
struct Conn {
    client: Client,
    prepared: Prepared,
}

impl Conn {
    /// `sql`, prepared once per connection.
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, StoreError> {
        self.prepared.get(&mut self.client, sql)
    }
}

impl Dialect for Pg {
    type Conn = Conn;

    const SQL: &'static Statements = &statements::SQL;

    fn connect(&self) -> Result<Conn, StoreError> {
        let client = connect(&self.config, self.tls.as_ref())
            .map_err(|e| tls::connect_failed(&self.target, e))?;
        Ok(Conn {
            client,
            prepared: Prepared::default(),
        })
    }

    fn usable(conn: &Conn) -> bool {
        !conn.client.is_closed()
    }

    /// The driver rolls back a transaction it drops unfinished: the session is clean.
    fn keeps_after_error(conn: &Conn, _: &StoreError) -> bool {
        !conn.client.is_closed()
    }

    fn session<T>(
        conn: &mut Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(&mut PgSession {
            client: &mut conn.client,
            prepared: &mut conn.prepared,
        })
    }

    fn transaction<T, E: From<StoreError>>(
        conn: &mut Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut tx = conn.client.transaction().map_err(StoreError::from)?;
        let done = f(&mut PgSession {
            client: &mut tx,
            prepared: &mut conn.prepared,
        })?;
        tx.commit().map_err(StoreError::from)?;
        Ok(done)
    }

    /// Schema changes are transactional here: the migrations run as one transaction
    /// holding the migration lock, whole or not at all.
    fn migrating<T>(
        conn: &mut Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        Self::transaction(conn, |s| {
            s.execute(
                "SELECT pg_advisory_xact_lock($1)",
                &[crate::shared::Arg::Int(MIGRATE_LOCK)],
            )?;
            f(s)
        })
    }

    fn deliver_only(
        conn: &mut Conn,
        batch: &[(i64, i64, &crate::model::Settlement)],
        now_ms: u64,
    ) -> Option<Result<Vec<Result<(), StoreError>>, StoreError>> {
        Some(settle::deliver_only(conn, batch, now_ms))
    }
}

/// Publishes and replays hold this advisory lock shared, forgetting idle topics holds it
/// exclusive: a topic must never be forgotten beside a publish that lists it again but has
/// not committed yet (its message would wait, unclaimed, for the next publish).
const TOPICS_LOCK: i64 = 0x7665_7264_6963_7401;
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
        let target = target_of(&config);
        let store = PostgresStore {
            shared: Shared::new(
                Pg {
                    config,
                    tls,
                    target: target.clone(),
                },
                target,
            ),
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
                store = %self.shared.target,
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

    crate::shared::shared_operations!();

    /// Apply the migrations this database lacks, in one transaction; the schema version
    /// after. A database already current is only read, so gateways whose user may not
    /// change the schema start against one an operator migrated (`verdict store migrate`).
    pub fn migrate(&self) -> Result<u32, StoreError> {
        self.shared.migrate(MIGRATIONS)
    }

    /// Call `wake(true)` on every notification of [`CHANNEL`], from a thread with a
    /// connection of its own (reconnected with backoff when it breaks), until `wake`
    /// returns `false`; a quiet second calls `wake(false)` to ask whether anyone still
    /// listens. Each reconnect wakes too: a notification sent while the listener was away
    /// is not lost work, only a late look.
    pub fn listen(&self, wake: impl Fn(bool) -> bool + Send + 'static) {
        let pg = &self.shared.dialect;
        let (config, target, tls) = (pg.config.clone(), pg.target.clone(), pg.tls.clone());
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

    /// Run `f` on a connection (see [`Shared::with`]).
    fn with<T>(&self, f: impl FnMut(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.shared.with(f)
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
