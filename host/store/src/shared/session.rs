//! The few things the shared algorithm asks of a database session, so that it is written
//! once over two drivers: run a statement with arguments, read rows back, and tell a
//! schema statement that found its object already made.

use crate::StoreError;
use crate::plan::Plan;

/// An argument of a statement. Each dialect binds these its own way; a list of keys
/// (`Keys`) is an array on PostgreSQL and an inline list on MariaDB (keys are integers, so
/// inlining them cannot inject anything).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// A 64-bit integer.
    Int(i64),
    /// An integer or NULL.
    OptInt(Option<i64>),
    /// Text.
    Text(&'a str),
    /// Text or NULL.
    OptText(Option<&'a str>),
    /// Bytes.
    Bytes(&'a [u8]),
    /// Bytes or NULL.
    OptBytes(Option<&'a [u8]>),
    /// A list of keys, for `seq = ANY($n)` or `seq IN (?)`.
    Keys(&'a [i64]),
}

/// One column of a row read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell {
    /// SQL NULL.
    Null,
    /// An integer column.
    Int(i64),
    /// A text or binary column.
    Bytes(Vec<u8>),
}

/// A row read back, its columns in the statement's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row(pub(crate) Vec<Cell>);

impl Row {
    /// Column `i` as an integer.
    pub(crate) fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_int(i)?
            .ok_or_else(|| column(i, "is NULL, expected an integer"))
    }

    /// Column `i` as an integer, or `None` for NULL.
    pub(crate) fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.0.get(i) {
            Some(Cell::Null) => Ok(None),
            Some(Cell::Int(n)) => Ok(Some(*n)),
            // MariaDB answers some aggregates (`SUM`) as decimal text.
            Some(Cell::Bytes(b)) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.split('.').next()?.parse().ok())
                .map(Some)
                .ok_or_else(|| column(i, "is not an integer")),
            None => Err(column(i, "is missing")),
        }
    }

    /// Column `i` as text.
    pub(crate) fn text(&self, i: usize) -> Result<String, StoreError> {
        String::from_utf8(self.bytes(i)?).map_err(|_| column(i, "is not UTF-8 text"))
    }

    /// Column `i` as bytes.
    pub(crate) fn bytes(&self, i: usize) -> Result<Vec<u8>, StoreError> {
        match self.0.get(i) {
            Some(Cell::Bytes(b)) => Ok(b.clone()),
            Some(Cell::Int(n)) => Ok(n.to_string().into_bytes()),
            Some(Cell::Null) => Err(column(i, "is NULL, expected text")),
            None => Err(column(i, "is missing")),
        }
    }
}

fn column(i: usize, what: &str) -> StoreError {
    StoreError::Corrupt(format!("column {i} of a row read back {what}"))
}

/// A database session inside a transaction the dialect opened.
pub(crate) trait Session {
    /// Run `sql` with `args`; the rows it changed.
    fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError>;

    /// Run `sql` with `args`; the rows it answered.
    fn query(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Row>, StoreError>;

    /// Run `sql`, which takes no arguments (savepoints, schema statements).
    fn batch(&mut self, sql: &str) -> Result<(), StoreError>;

    /// Run the schema statement `sql`; `false` when the object it makes exists already (a
    /// migration cut off part-way on a database whose DDL is not transactional).
    fn define(&mut self, sql: &str) -> Result<bool, StoreError> {
        self.batch(sql).map(|()| true)
    }

    /// The first row `sql` answers, if any.
    fn query_opt(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// Apply every `(seq, lease, plan)` of `plans` in one statement, where the database
    /// can bind a column of values at once: the `(seq, lease)` pairs whose fence held and
    /// whose row changed come back, each plan's attempt recorded for those only. `None`
    /// where it cannot, and the caller applies them one by one. No plan writes a dead
    /// letter or an audit record, no pair comes twice, and every row is locked already.
    fn apply_plans(
        &mut self,
        _plans: &[(i64, i64, &Plan<'_>)],
    ) -> Option<Result<Vec<(i64, i64)>, StoreError>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_as_their_columns_and_refuse_anything_else_by_position() {
        let row = Row(vec![
            Cell::Int(7),
            Cell::Bytes(b"orders".to_vec()),
            Cell::Null,
            Cell::Bytes(b"42".to_vec()),
            Cell::Bytes(vec![0xff]),
        ]);
        assert_eq!(row.int(0).unwrap(), 7);
        assert_eq!(row.text(1).unwrap(), "orders");
        assert_eq!(row.opt_int(2).unwrap(), None);
        assert_eq!(
            row.int(3).unwrap(),
            42,
            "a decimal answer reads as its integer"
        );
        let e = row.int(2).unwrap_err().to_string();
        assert!(e.contains("column 2") && e.contains("NULL"), "{e}");
        assert!(row.text(4).unwrap_err().to_string().contains("UTF-8"));
        assert!(row.int(1).is_err());
        assert!(row.bytes(9).unwrap_err().to_string().contains("missing"));
    }
}
