//! The shared SQL store of a `postgres` or `mysql` run: a database of the run's own on the
//! machine's server, created before the gateways start and dropped at the end. Every
//! gateway of the run uses it; the harness reads its audit trail to learn how many
//! deliveries the store itself says may have been duplicates.

use anyhow::{Context, Result};

/// PostgreSQL as `.ci/run` starts it (trust authentication on loopback).
pub const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432";
/// MariaDB as `.ci/run` starts it (root, no password).
pub const MYSQL_URL: &str = "mysql://root@127.0.0.1:3306";

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// PostgreSQL.
    Postgres,
    /// MariaDB or MySQL.
    Mysql,
}

/// A database of the run's own (`name` is the run's prefix, a plain identifier).
#[derive(Debug, Clone)]
pub struct Database {
    server: Server,
    name: String,
}

impl Database {
    /// Create it afresh (one a killed earlier run left is dropped first). Blocking: call it
    /// off the async workers, as the gateway does with its store.
    pub fn create(server: Server, name: &str) -> Result<Database> {
        let db = Database {
            server,
            name: name.to_string(),
        };
        db.drop_database()?;
        db.admin_sql(&format!("CREATE DATABASE {name}"))?;
        Ok(db)
    }

    /// The store URL the gateways are given.
    pub fn url(&self) -> String {
        format!("{}/{}", self.server_url(), self.name)
    }

    fn server_url(&self) -> &'static str {
        match self.server {
            Server::Postgres => POSTGRES_URL,
            Server::Mysql => MYSQL_URL,
        }
    }

    /// Deliveries the store recorded as possible duplicates: a lease taken over after it
    /// expired (a gateway killed or stalled while delivering), one audit record each.
    pub fn counted_redeliveries(&self) -> Result<u64> {
        let sql = "SELECT COUNT(*) FROM audit WHERE event = 'lease-expired'";
        match self.server {
            Server::Postgres => {
                let mut client = postgres::Client::connect(&self.url(), postgres::NoTls)
                    .with_context(|| format!("PostgreSQL at {}", self.url()))?;
                let n: i64 = client.query_one(sql, &[])?.get(0);
                Ok(n.max(0) as u64)
            }
            Server::Mysql => {
                use mysql::prelude::Queryable as _;
                let mut conn = mysql::Conn::new(mysql::Opts::from_url(&self.url())?)
                    .with_context(|| format!("MariaDB at {}", self.url()))?;
                let n: Option<u64> = conn.query_first(sql)?;
                Ok(n.unwrap_or(0))
            }
        }
    }

    /// Cut every connection to it (the gateways' and any other): their next statement fails
    /// and they reconnect, as after a network fault or a failover. How many were cut.
    pub fn cut_connections(&self) -> Result<u64> {
        match self.server {
            Server::Postgres => {
                let url = format!("{}/postgres", self.server_url());
                let mut client = postgres::Client::connect(&url, postgres::NoTls)
                    .with_context(|| format!("PostgreSQL at {url}"))?;
                let row = client.query_one(
                    "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                    &[&self.name],
                )?;
                Ok(row.get::<_, i64>(0).max(0) as u64)
            }
            Server::Mysql => {
                use mysql::prelude::Queryable as _;
                let url = self.server_url();
                let mut conn = mysql::Conn::new(mysql::Opts::from_url(url)?)
                    .with_context(|| format!("MariaDB at {url}"))?;
                let ids: Vec<u64> = conn.exec(
                    "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
                    (&self.name,),
                )?;
                let mut cut = 0;
                for id in ids {
                    // Gone already (it ended on its own): nothing to cut.
                    if conn.query_drop(format!("KILL {id}")).is_ok() {
                        cut += 1;
                    }
                }
                Ok(cut)
            }
        }
    }

    /// Drop it (the gateways stopped first: PostgreSQL's `FORCE` ends their sessions
    /// anyway).
    pub fn drop_database(&self) -> Result<()> {
        let force = match self.server {
            Server::Postgres => " WITH (FORCE)",
            Server::Mysql => "",
        };
        self.admin_sql(&format!("DROP DATABASE IF EXISTS {}{force}", self.name))
    }

    fn admin_sql(&self, sql: &str) -> Result<()> {
        match self.server {
            Server::Postgres => {
                let url = format!("{}/postgres", self.server_url());
                postgres::Client::connect(&url, postgres::NoTls)
                    .with_context(|| format!("PostgreSQL at {url} (.ci/run starts it)"))?
                    .batch_execute(sql)
                    .with_context(|| sql.to_string())
            }
            Server::Mysql => {
                use mysql::prelude::Queryable as _;
                let url = self.server_url();
                mysql::Conn::new(mysql::Opts::from_url(url)?)
                    .with_context(|| format!("MariaDB at {url} (.ci/run starts it)"))?
                    .query_drop(sql)
                    .with_context(|| sql.to_string())
            }
        }
    }
}
