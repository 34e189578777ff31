//! The shared algorithm's [`Session`] on the MariaDB/MySQL driver.
//!
//! Placeholders are `?`. A statement with a list of keys has them written inline (its
//! other arguments too, which are then integers only - never text, so nothing from
//! outside is ever spliced into SQL) and runs as text; every other statement is prepared
//! and cached by the driver.

use mysql::prelude::Queryable;
use mysql::{Params, Value};

use super::ALREADY_MADE;
use crate::StoreError;
use crate::shared::session::{Arg, Cell, Row, Session};

/// A connection or transaction.
pub(super) struct MySession<'a, Q: Queryable> {
    pub(super) q: &'a mut Q,
}

impl<Q: Queryable> Session for MySession<'_, Q> {
    fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        let result = match inline(sql, args)? {
            Some(sql) => self.q.query_iter(sql)?.affected_rows(),
            None => self.q.exec_iter(sql, params(args))?.affected_rows(),
        };
        Ok(result)
    }

    fn query(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>, StoreError> {
        let rows: Vec<mysql::Row> = match inline(sql, args)? {
            Some(sql) => self.q.query(sql)?,
            None => self.q.exec(sql, params(args))?,
        };
        rows.into_iter().map(row_of).collect()
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        Ok(self.q.query_drop(sql)?)
    }

    fn define(&mut self, sql: &str) -> Result<bool, StoreError> {
        match self.q.query_drop(sql) {
            Err(mysql::Error::MySqlError(e)) if ALREADY_MADE.contains(&e.code) => Ok(false),
            done => done.map(|()| true).map_err(StoreError::from),
        }
    }
}

/// `args` bound by position.
fn params(args: &[Arg<'_>]) -> Params {
    if args.is_empty() {
        return Params::Empty;
    }
    Params::Positional(
        args.iter()
            .map(|a| match *a {
                Arg::Int(v) => Value::from(v),
                Arg::OptInt(v) => Value::from(v),
                Arg::Text(v) => Value::from(v),
                Arg::OptText(v) => Value::from(v),
                Arg::Bytes(v) => Value::from(v),
                Arg::OptBytes(v) => Value::from(v),
                // `inline` took every statement with keys.
                Arg::Keys(_) => Value::NULL,
            })
            .collect(),
    )
}

/// `sql` with its arguments written in, when one of them is a list of keys (`IN (?)`);
/// `None` when there is none. Only integers are ever written in.
fn inline(sql: &str, args: &[Arg<'_>]) -> Result<Option<String>, StoreError> {
    if !args.iter().any(|a| matches!(a, Arg::Keys(_))) {
        return Ok(None);
    }
    let mut parts = sql.split('?');
    let mut out = parts.next().unwrap_or_default().to_string();
    for (part, arg) in parts.zip(args.iter().map(Some).chain(std::iter::repeat(None))) {
        match arg {
            Some(Arg::Int(v)) => out += &v.to_string(),
            Some(Arg::OptInt(v)) => out += &v.map_or("NULL".to_string(), |v| v.to_string()),
            // An empty list matches nothing.
            Some(Arg::Keys([])) => out += "NULL",
            Some(Arg::Keys(keys)) => {
                out += &keys
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ");
            }
            Some(_) => {
                return Err(StoreError::database(
                    "a statement with a list of keys takes integers only",
                ));
            }
            None => {
                return Err(StoreError::database(format!(
                    "a statement has more placeholders than its {} arguments",
                    args.len()
                )));
            }
        }
        out += part;
    }
    Ok(Some(out))
}

/// A row as the shared algorithm reads it.
fn row_of(row: mysql::Row) -> Result<Row, StoreError> {
    row.unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            Ok(match v {
                Value::NULL => Cell::Null,
                Value::Int(n) => Cell::Int(n),
                Value::UInt(n) => Cell::Int(i64::try_from(n).unwrap_or(i64::MAX)),
                Value::Bytes(b) => Cell::Bytes(b),
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "column {i} read back as {other:?}, expected an integer or text"
                    )));
                }
            })
        })
        .collect::<Result<_, _>>()
        .map(Row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_written_in_and_nothing_else_is() {
        let sql = inline(
            "UPDATE m SET t = ? WHERE seq IN (?) AND x = ?",
            &[Arg::Int(5), Arg::Keys(&[1, 2, 3]), Arg::OptInt(None)],
        )
        .unwrap();
        assert_eq!(
            sql.as_deref(),
            Some("UPDATE m SET t = 5 WHERE seq IN (1, 2, 3) AND x = NULL")
        );
        assert_eq!(
            inline("DELETE FROM m WHERE seq IN (?)", &[Arg::Keys(&[])]).unwrap(),
            Some("DELETE FROM m WHERE seq IN (NULL)".to_string())
        );
        // Without keys the statement is prepared and bound as usual.
        assert_eq!(inline("SELECT ?", &[Arg::Text("x")]).unwrap(), None);
        // Text beside keys is refused, never spliced in.
        let e = inline(
            "SELECT 1 WHERE a IN (?) AND b = ?",
            &[Arg::Keys(&[1]), Arg::Text("'; DROP TABLE m; --")],
        )
        .unwrap_err();
        assert!(e.to_string().contains("integers only"), "{e}");
        assert!(inline("SELECT ? IN (?)", &[Arg::Keys(&[1])]).is_err());
    }
}
