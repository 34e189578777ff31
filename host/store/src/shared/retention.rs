//! Retention on a shared database: the SQLite store's rules, in bounded batches, each its
//! own short transaction. Rows another transaction holds are skipped (`SKIP LOCKED`) and
//! taken on the next pass, so pruning never waits on a delivery and never makes one wait
//! long.

use super::{Arg, Dialect, Session, Shared};
use crate::{Pruned, StoreError, clamp_ms};

impl<D: Dialect> Shared<D> {
    /// Delete what is older than `before_ms` and no longer needed, `batch` rows of each
    /// kind per transaction, until a pass finds nothing.
    pub(crate) fn prune(&self, before_ms: u64, batch: usize) -> Result<Pruned, StoreError> {
        let before = Arg::Int(clamp_ms(before_ms));
        let batch = Arg::Int(i64::try_from(batch.max(1)).unwrap_or(i64::MAX));
        let mut pruned = Pruned::default();
        loop {
            let round = self.transaction(|s| {
                // DLQ entries first: a message row goes only once nothing refers to it.
                let dlq = seqs(s, D::SQL.prune_dlq, &[before, batch])?;
                delete(s, D::SQL.delete_dlq, &dlq)?;
                let doomed = seqs(s, D::SQL.prune_messages, &[before, batch])?;
                delete(s, D::SQL.delete_attempts, &doomed)?;
                delete(s, D::SQL.delete_messages, &doomed)?;
                let audit = s.execute(D::SQL.prune_audit, &[before, batch])?;
                Ok(Pruned {
                    messages: doomed.len() as u64,
                    audit,
                    dlq: dlq.len() as u64,
                })
            })?;
            pruned.messages += round.messages;
            pruned.audit += round.audit;
            pruned.dlq += round.dlq;
            if round.total() == 0 {
                return Ok(pruned);
            }
        }
    }
}

/// The first column of every row `sql` answers.
fn seqs(s: &mut dyn Session, sql: &str, args: &[Arg<'_>]) -> Result<Vec<i64>, StoreError> {
    s.query(sql, args)?.iter().map(|r| r.int(0)).collect()
}

/// `sql` run on `keys`, unless there are none.
fn delete(s: &mut dyn Session, sql: &str, keys: &[i64]) -> Result<(), StoreError> {
    if !keys.is_empty() {
        s.execute(sql, &[Arg::Keys(keys)])?;
    }
    Ok(())
}
