//! Retention on MariaDB/MySQL: the SQLite store's rules, in bounded batches, each its own
//! short transaction; rows another transaction holds are skipped and taken next pass.

use mysql::TxOpts;
use mysql::prelude::Queryable as _;

use super::MysqlStore;
use crate::{Pruned, StoreError, clamp_ms};

impl MysqlStore {
    /// Delete what is older than `before_ms` and no longer needed, `batch` rows of each
    /// kind per transaction, until a pass finds nothing.
    pub fn prune(&self, before_ms: u64, batch: usize) -> Result<Pruned, StoreError> {
        let before = clamp_ms(before_ms);
        let batch = batch.max(1) as u64;
        let mut pruned = Pruned::default();
        loop {
            let round = self.with(|c| {
                let mut tx = c.start_transaction(TxOpts::default())?;
                // DLQ entries first: a message row goes only once nothing refers to it.
                let dlq: Vec<i64> = tx.exec(
                    "SELECT seq FROM dlq
                     WHERE state IN ('replayed', 'discarded') AND created_at_ms < ?
                     LIMIT ? FOR UPDATE SKIP LOCKED",
                    (before, batch),
                )?;
                delete_in(&mut tx, "dlq", "seq", &dlq)?;
                let doomed: Vec<i64> = tx.exec(
                    "SELECT seq FROM messages
                     WHERE state IN ('delivered', 'discarded') AND updated_at_ms < ?
                       AND NOT EXISTS (SELECT 1 FROM dlq WHERE dlq.message_seq = messages.seq)
                     LIMIT ? FOR UPDATE SKIP LOCKED",
                    (before, batch),
                )?;
                delete_in(&mut tx, "attempts", "message_seq", &doomed)?;
                delete_in(&mut tx, "messages", "seq", &doomed)?;
                tx.exec_drop(
                    "DELETE FROM audit WHERE at_ms < ? ORDER BY seq LIMIT ?",
                    (before, batch),
                )?;
                let audit = tx.affected_rows();
                tx.commit()?;
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

fn delete_in(
    tx: &mut mysql::Transaction<'_>,
    table: &str,
    column: &str,
    keys: &[i64],
) -> Result<(), StoreError> {
    if keys.is_empty() {
        return Ok(());
    }
    let list = keys
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    tx.query_drop(format!("DELETE FROM {table} WHERE {column} IN ({list})"))?;
    Ok(())
}
