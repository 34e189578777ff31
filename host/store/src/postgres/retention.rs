//! Retention on PostgreSQL: the SQLite store's rules, in bounded batches, each its own
//! short transaction. Rows another transaction holds are skipped (`SKIP LOCKED`) and taken
//! on the next pass, so pruning never waits on a delivery and never makes one wait long.

use super::PostgresStore;
use crate::{Pruned, StoreError, clamp_ms};

impl PostgresStore {
    /// Delete what is older than `before_ms` and no longer needed, `batch` rows of each
    /// kind per transaction, until a pass finds nothing.
    pub fn prune(&self, before_ms: u64, batch: usize) -> Result<Pruned, StoreError> {
        let before = clamp_ms(before_ms);
        let batch = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
        let mut pruned = Pruned::default();
        loop {
            let round = self.with(|c| {
                let mut tx = c.client.transaction()?;
                // DLQ entries first: a message row goes only once nothing refers to it.
                let dlq = tx.execute(
                    "DELETE FROM dlq WHERE seq IN (
                         SELECT seq FROM dlq
                         WHERE state IN ('replayed', 'discarded') AND created_at_ms < $1
                         LIMIT $2 FOR UPDATE SKIP LOCKED)",
                    &[&before, &batch],
                )?;
                let doomed: Vec<i64> = tx
                    .query(
                        "SELECT seq FROM messages
                         WHERE state IN ('delivered', 'discarded') AND updated_at_ms < $1
                           AND NOT EXISTS (SELECT 1 FROM dlq WHERE dlq.message_seq = messages.seq)
                         LIMIT $2 FOR UPDATE SKIP LOCKED",
                        &[&before, &batch],
                    )?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                tx.execute(
                    "DELETE FROM attempts WHERE message_seq = ANY($1)",
                    &[&doomed],
                )?;
                tx.execute("DELETE FROM messages WHERE seq = ANY($1)", &[&doomed])?;
                let audit = tx.execute(
                    "DELETE FROM audit WHERE seq IN (
                         SELECT seq FROM audit WHERE at_ms < $1 LIMIT $2)",
                    &[&before, &batch],
                )?;
                tx.commit()?;
                Ok(Pruned {
                    messages: doomed.len() as u64,
                    audit,
                    dlq,
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
