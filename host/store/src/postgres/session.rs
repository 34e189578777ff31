//! The shared algorithm's [`Session`] on the PostgreSQL driver: statements prepared once
//! per connection, arguments bound as their own types, rows read back by column type.

use std::collections::HashMap;

use postgres::types::{ToSql, Type};
use postgres::{GenericClient, Statement};

use crate::StoreError;
use crate::plan::Plan;
use crate::shared::session::{Arg, Cell, Row, Session};

/// How many distinct statements a connection keeps prepared. The settlement and claim
/// statements are a dozen; a DLQ listing's text varies with its filter, so the cache is
/// bounded and starts over when full.
const PREPARED_MAX: usize = 256;

/// The statements prepared on one connection, by their text.
#[derive(Default)]
pub(super) struct Prepared(HashMap<String, Statement>);

impl Prepared {
    /// `sql`, prepared on `client` the first time.
    pub(super) fn get(
        &mut self,
        client: &mut impl GenericClient,
        sql: &str,
    ) -> Result<Statement, StoreError> {
        if let Some(s) = self.0.get(sql) {
            return Ok(s.clone());
        }
        let s = client.prepare(sql)?;
        if self.0.len() >= PREPARED_MAX {
            self.0.clear();
        }
        self.0.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

/// A client or transaction with its connection's prepared statements.
pub(super) struct PgSession<'a, C: GenericClient> {
    pub(super) client: &'a mut C,
    pub(super) prepared: &'a mut Prepared,
}

impl<C: GenericClient> Session for PgSession<'_, C> {
    fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        let statement = self.prepared.get(self.client, sql)?;
        Ok(self.client.execute(&statement, &bind(args))?)
    }

    fn query(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>, StoreError> {
        let statement = self.prepared.get(self.client, sql)?;
        self.client
            .query(&statement, &bind(args))?
            .iter()
            .map(row_of)
            .collect()
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        Ok(self.client.batch_execute(sql)?)
    }

    fn apply_plans(
        &mut self,
        plans: &[(i64, i64, &Plan<'_>)],
    ) -> Option<Result<Vec<(i64, i64)>, StoreError>> {
        Some(super::settle::apply_plans(
            self.client,
            self.prepared,
            plans,
        ))
    }
}

/// `args` as the driver binds them: each as its own Rust type, so that the statement's
/// parameter types are checked, never guessed.
fn bind<'a>(args: &'a [Arg<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    args.iter()
        .map(|a| match a {
            Arg::Int(v) => v as &(dyn ToSql + Sync),
            Arg::OptInt(v) => v,
            Arg::Text(v) => v,
            Arg::OptText(v) => v,
            Arg::Bytes(v) => v,
            Arg::OptBytes(v) => v,
            Arg::Keys(v) => v,
        })
        .collect()
}

/// A row as the shared algorithm reads it, by each column's type.
fn row_of(r: &postgres::Row) -> Result<Row, StoreError> {
    let cell = |i: usize, ty: &Type| -> Result<Cell, postgres::Error> {
        Ok(match *ty {
            Type::INT8 => r
                .try_get::<_, Option<i64>>(i)?
                .map_or(Cell::Null, Cell::Int),
            Type::INT4 => r
                .try_get::<_, Option<i32>>(i)?
                .map_or(Cell::Null, |v| Cell::Int(v.into())),
            Type::INT2 => r
                .try_get::<_, Option<i16>>(i)?
                .map_or(Cell::Null, |v| Cell::Int(v.into())),
            Type::BOOL => r
                .try_get::<_, Option<bool>>(i)?
                .map_or(Cell::Null, |v| Cell::Int(v.into())),
            Type::BYTEA => r
                .try_get::<_, Option<Vec<u8>>>(i)?
                .map_or(Cell::Null, Cell::Bytes),
            _ => r
                .try_get::<_, Option<String>>(i)?
                .map_or(Cell::Null, |v| Cell::Bytes(v.into_bytes())),
        })
    };
    r.columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cell(i, c.type_()).map_err(|e| {
                StoreError::Corrupt(format!("column {i} ({}) read back: {e}", c.name()))
            })
        })
        .collect::<Result<_, _>>()
        .map(Row)
}
