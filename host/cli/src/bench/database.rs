//! A database of the run's own for the store targets, on the server the options name;
//! dropped when the target is done. Its calls block (the drivers are synchronous, like the
//! store's API): make and drop it on a blocking thread.

use anyhow::{Context, Result};
use mysql::prelude::Queryable as _;

use super::Target;

/// A scratch database and its URL for `[gateway] store`.
pub(crate) struct ScratchDatabase {
    server: String,
    name: String,
    postgres: bool,
}

impl ScratchDatabase {
    /// `verdict_bench_<pid>_<target>` on the target's server.
    /// Blocks: call it from a blocking thread.
    pub(crate) fn create(
        target: Target,
        postgres_url: &str,
        mysql_url: &str,
    ) -> Result<ScratchDatabase> {
        let postgres = matches!(target, Target::Postgres | Target::PostgresX3);
        let server = if postgres { postgres_url } else { mysql_url }
            .trim_end_matches('/')
            .to_string();
        let name = format!(
            "verdict_bench_{}_{}",
            std::process::id(),
            target.name().replace('-', "_")
        );
        let db = ScratchDatabase {
            server,
            name,
            postgres,
        };
        db.admin(&format!("DROP DATABASE IF EXISTS {}", db.name))?;
        db.admin(&format!("CREATE DATABASE {}", db.name))
            .with_context(|| format!("creating a database on {}", db.server_shown()))?;
        Ok(db)
    }

    /// The database's URL.
    pub(crate) fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }

    fn server_shown(&self) -> String {
        // `scheme://user:password@host` -> `host`
        self.server
            .rsplit('@')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    fn admin(&self, sql: &str) -> Result<()> {
        if self.postgres {
            let url = format!("{}/postgres", self.server);
            postgres::Client::connect(&url, postgres::NoTls)
                .with_context(|| format!("PostgreSQL at {}", self.server_shown()))?
                .batch_execute(sql)?;
        } else {
            let opts = mysql::Opts::from_url(&self.server)
                .with_context(|| format!("--mysql-url {}: not a MySQL URL", self.server_shown()))?;
            mysql::Conn::new(opts)
                .with_context(|| format!("MariaDB/MySQL at {}", self.server_shown()))?
                .query_drop(sql)?;
        }
        Ok(())
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        let force = if self.postgres { " WITH (FORCE)" } else { "" };
        let _ = self.admin(&format!("DROP DATABASE IF EXISTS {}{force}", self.name));
    }
}
