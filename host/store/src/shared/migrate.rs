//! Schema migrations on a shared database: numbered, applied in order, each recorded once
//! it has run, by one process at a time.
//!
//! Where schema changes are transactional (PostgreSQL) a migration run is one transaction:
//! it happens whole or not at all. Where they are not (MariaDB, MySQL) each statement
//! commits on its own, so a migration cut off part-way (a crash, a lost connection) left
//! some of its objects behind; run again, it passes over each one its statement finds
//! already made - every statement makes exactly one object, so "already made" means it
//! ran - and goes on from there.

use super::{Arg, Dialect, Shared};
use crate::StoreError;

impl<D: Dialect> Shared<D> {
    /// The schema version the database is at (0 before the first migration).
    pub(crate) fn schema_version(&self) -> Result<u32, StoreError> {
        self.read(|s| {
            if s.query_opt(D::SQL.schema_exists, &[])?.is_none() {
                return Ok(0);
            }
            let version = s.query_opt(D::SQL.schema_version, &[])?;
            Ok(version.map_or(Ok(0), |r| r.int(0))?.max(0) as u32)
        })
    }

    /// Apply the migrations of `migrations` (one list of statements each) this database
    /// lacks; the schema version after. A database already current is only read, so
    /// gateways whose user may not change the schema start against one an operator
    /// migrated (`verdict store migrate`).
    pub(crate) fn migrate(&self, migrations: &[&[&str]]) -> Result<u32, StoreError> {
        let known = migrations.len() as u32;
        if self.schema_version()? == known {
            return Ok(known);
        }
        self.with(|conn| {
            D::migrating(conn, |s| {
                s.batch(D::SQL.schema_table)?;
                let current = s
                    .query_opt(D::SQL.schema_version, &[])?
                    .map_or(Ok(0), |r| r.int(0))?
                    .max(0) as u32;
                if current > known {
                    return Err(StoreError::Connect {
                        cause: None,
                        target: self.target.clone(),
                        message: format!(
                            "the database's schema is version {current}, newer than this \
                             gateway's {known}: upgrade the gateway"
                        ),
                    });
                }
                for (n, statements) in migrations.iter().enumerate().skip(current as usize) {
                    for sql in *statements {
                        if !s.define(sql)? {
                            tracing::info!(
                                store = %self.target,
                                migration = n + 1,
                                "a statement of a migration cut off earlier had already run"
                            );
                        }
                    }
                    s.execute(D::SQL.schema_applied, &[Arg::Int(n as i64 + 1)])?;
                }
                Ok(known)
            })
        })
    }
}
