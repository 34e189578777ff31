//! The shared store on MariaDB (10.6+) and MySQL (8): several gateways on one database,
//! each claiming with `FOR UPDATE SKIP LOCKED` and settling under the lease fence, like the
//! PostgreSQL store. What differs is the dialect: no `RETURNING` on `UPDATE` (a claim reads
//! the rows it locked, then leases them), no shared advisory locks (the topic list is the
//! pending messages' own index, so nothing can forget a topic beside a publish), no
//! `NOTIFY` (an idle gateway sleeps until the next message falls due; the poll finds other
//! gateways' publishes). Sessions run `READ COMMITTED`, so claims and publishes take no gap
//! locks; a transaction the server picks as a deadlock victim is retried whole.

use std::path::Path;

use mysql::prelude::Queryable as _;
use mysql::{Conn, Opts, TxOpts};

mod messages;
mod schema;
pub use schema::MIGRATIONS;
mod session;
mod statements;
mod tls;

use session::MySession;

use crate::StoreError;
use crate::shared::{Dialect, Session, Shared, Statements};

/// A MariaDB or MySQL store.
pub struct MysqlStore {
    shared: Shared<My>,
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlStore")
            .field("target", &self.shared.target)
            .finish_non_exhaustive()
    }
}

/// The MariaDB/MySQL dialect: where the database is and how to reach it.
struct My {
    opts: Opts,
    /// TLS per the URL's `ssl-mode`.
    tls: tls::MysqlTls,
    target: String,
}

impl Dialect for My {
    type Conn = Conn;

    const SQL: &'static Statements = &statements::SQL;

    fn connect(&self) -> Result<Conn, StoreError> {
        let mut conn = self
            .tls
            .connect(&self.opts)
            .map_err(|e| tls::connect_failed(&self.target, e))?;
        // Claims and publishes then take no gap locks.
        conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")?;
        Ok(conn)
    }

    fn usable(_: &Conn) -> bool {
        true
    }

    /// After anything the database said, a fresh session starts clean (no half
    /// transaction); a failure of ours alone (a value that does not decode) keeps it.
    fn keeps_after_error(_: &Conn, error: &StoreError) -> bool {
        !matches!(
            error,
            StoreError::Database { .. }
                | StoreError::Retry { .. }
                | StoreError::Disconnected { .. }
                | StoreError::Connect { .. }
        )
    }

    fn session<T>(
        conn: &mut Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(&mut MySession { q: conn })
    }

    fn transaction<T, E: From<StoreError>>(
        conn: &mut Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .map_err(StoreError::from)?;
        let done = f(&mut MySession { q: &mut tx })?;
        tx.commit().map_err(StoreError::from)?;
        Ok(done)
    }

    /// Schema changes are not transactional here: each statement commits on its own,
    /// under a named lock so that two gateways never run one migration together.
    fn migrating<T>(
        conn: &mut Conn,
        f: impl FnOnce(&mut dyn Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let locked: Option<i64> = conn.query_first("SELECT GET_LOCK('verdict_migrate', 60)")?;
        if locked != Some(1) {
            return Err(StoreError::database(
                "another process held the migration lock for a minute",
            ));
        }
        let applied = f(&mut MySession { q: &mut *conn });
        conn.query_drop("DO RELEASE_LOCK('verdict_migrate')")?;
        applied
    }
}

/// The server's answers to a schema statement whose object exists already: table or view
/// (1050), column (1060), key (1061).
const ALREADY_MADE: [u16; 3] = [1050, 1060, 1061];

impl From<mysql::Error> for StoreError {
    /// The server's "try again" errors - deadlock victim (1213), lock wait timeout (1205) -
    /// are [`StoreError::Retry`]: the store runs the transaction again.
    fn from(e: mysql::Error) -> Self {
        let message = format!("mysql: {e}");
        let retry = matches!(&e, mysql::Error::MySqlError(server) if server.code == 1213 || server.code == 1205);
        // The session ended under the call: killed (1927), the server gone (2006) or the
        // connection lost (2013), or the socket itself failed.
        let gone = matches!(&e, mysql::Error::MySqlError(server) if matches!(server.code, 1927 | 2006 | 2013))
            || matches!(
                &e,
                mysql::Error::IoError(_)
                    | mysql::Error::CodecError(_)
                    | mysql::Error::DriverError(mysql::DriverError::PacketOutOfSync)
            );
        let cause = Some(Box::new(e) as crate::error::Cause);
        if retry {
            StoreError::Retry { message, cause }
        } else if gone {
            StoreError::Disconnected { message, cause }
        } else {
            StoreError::Database { message, cause }
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
            shared: Shared::new(
                My {
                    opts,
                    tls,
                    target: target.clone(),
                },
                target,
            ),
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

    crate::shared::shared_operations!();

    /// Apply the migrations this database lacks; the schema version after.
    pub fn migrate(&self) -> Result<u32, StoreError> {
        self.shared.migrate(MIGRATIONS)
    }

    /// Run `f` on the connection (see [`Shared::with`]).
    fn with<T>(&self, f: impl FnMut(&mut Conn) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.shared.with(f)
    }
}
