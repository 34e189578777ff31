//! Retention: what the store no longer needs is deleted once it is older than `[storage]
//! retention_ms`, in bounded batches (each its own short transaction, so deliveries never
//! wait long for the store), off the delivery path.
//!
//! Pruned: delivered and discarded messages (with their attempt records), audit records,
//! and DLQ entries already replayed or discarded. Kept whatever their age: messages still
//! pending and dead letters still in a DLQ. A message id is remembered - and a second
//! publish of it refused as a duplicate - for as long as its message is kept: the
//! retention is the duplicate-publish window.

use rusqlite::params;

use super::SqliteStore;
use crate::{Pruned, StoreError, clamp_ms};

impl SqliteStore {
    /// Delete what is older than `before_ms` and no longer needed, at most `batch` rows of
    /// a kind per transaction, until nothing is left to delete.
    pub fn prune(&self, before_ms: u64, batch: usize) -> Result<Pruned, StoreError> {
        let before = clamp_ms(before_ms);
        let batch = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
        let mut pruned = Pruned::default();
        loop {
            let round = self.write(|tx| {
                // DLQ entries first: a message row goes only once nothing refers to it.
                let dlq = tx.execute(
                    "DELETE FROM dlq WHERE seq IN (
                         SELECT seq FROM dlq
                         WHERE state IN ('replayed', 'discarded') AND created_at_ms < ?1
                         LIMIT ?2)",
                    params![before, batch],
                )?;
                let doomed: Vec<i64> = tx
                    .prepare_cached(DOOMED_MESSAGES)?
                    .query_map(params![before, batch], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                let mut forget_attempts =
                    tx.prepare_cached("DELETE FROM attempts WHERE message_seq = ?1")?;
                let mut forget_message =
                    tx.prepare_cached("DELETE FROM messages WHERE seq = ?1")?;
                for seq in &doomed {
                    forget_attempts.execute([seq])?;
                    forget_message.execute([seq])?;
                }
                let audit = tx.execute(
                    "DELETE FROM audit WHERE seq IN (
                         SELECT seq FROM audit WHERE at_ms < ?1 LIMIT ?2)",
                    params![before, batch],
                )?;
                Ok(Pruned {
                    messages: doomed.len() as u64,
                    audit: audit as u64,
                    dlq: dlq as u64,
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

/// Settled messages older than the horizon that no dead letter refers to. The state list is
/// the settled-state index's own, word for word: SQLite uses a partial index only for the
/// same `IN` list. A keyed message that is its key's newest finished one while an older
/// message of its key is a dead letter stays: it is what tells the key's next message that
/// the key went on after that letter (`after_dead_letter`); one such row per key at most.
pub(super) const DOOMED_MESSAGES: &str = "
    SELECT seq FROM messages
    WHERE state IN ('delivered', 'discarded') AND updated_at_ms < ?1
      AND NOT EXISTS (SELECT 1 FROM dlq WHERE dlq.message_seq = messages.seq)
      AND (messages.key IS NULL
           OR NOT EXISTS (SELECT 1 FROM messages d WHERE d.topic = messages.topic
                            AND d.key = messages.key AND d.state = 'dead'
                            AND d.seq < messages.seq)
           OR EXISTS (SELECT 1 FROM messages n WHERE n.topic = messages.topic
                        AND n.key = messages.key AND n.state IN ('delivered', 'discarded')
                        AND n.seq > messages.seq))
    LIMIT ?2";

#[cfg(test)]
mod tests {
    use crate::NewMessage;
    use crate::model::Settlement;
    use crate::sqlite::SqliteStore;

    #[test]
    fn old_settled_rows_go_and_pending_messages_and_dead_letters_stay() {
        let dir = std::env::temp_dir().join(format!("verdict-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = SqliteStore::open(&dir.join("db.sqlite")).unwrap();
        let messages: Vec<NewMessage> = (0..6)
            .map(|i| NewMessage {
                id: format!("m{i}"),
                topic: "orders".into(),
                payload: b"{}".to_vec(),
                ..NewMessage::default()
            })
            .collect();
        store.publish(&messages, 0).unwrap();
        let claimed = store
            .claim(10, &[(vec!["orders".into()], 5)], 1_000_000)
            .unwrap();
        let failed = super::super::settle::tests::failed();
        let letter = super::super::settle::tests::letter();
        let discard = Settlement::Discard {
            failed: failed.clone(),
            reason: "no".into(),
        };
        let again = Settlement::Again {
            failed,
            delay_ms: 10,
            spend_attempt: true,
        };
        let outcomes = [
            &Settlement::Delivered,
            &Settlement::Delivered,
            &discard,
            &letter,
            &again,
        ];
        let batch: Vec<_> = claimed
            .iter()
            .zip(outcomes)
            .map(|(c, s)| (c.seq, c.lease, s))
            .collect();
        store.settle(&batch, 100).unwrap();
        let before = store.counts().unwrap();
        assert_eq!(
            (
                before.delivered,
                before.discarded,
                before.dead,
                before.scheduled,
                before.ready
            ),
            (2, 1, 1, 1, 1)
        );
        // Nothing is old enough yet.
        assert_eq!(store.prune(50, 1).unwrap().total(), 0);
        // Past the retention: delivered and discarded go (in batches of one), with their
        // audit records; the dead letter, the scheduled and the ready message stay.
        let pruned = store.prune(10_000, 1).unwrap();
        assert_eq!(pruned.messages, 3, "{pruned:?}");
        assert!(pruned.audit >= 2, "{pruned:?}");
        let after = store.counts().unwrap();
        assert_eq!(
            (
                after.delivered,
                after.discarded,
                after.dead,
                after.scheduled,
                after.ready
            ),
            (0, 0, 1, 1, 1)
        );
        assert_eq!(store.dlq_stats().unwrap()[0].depth, 1);
        // A pruned id can be published again: the retention is the duplicate window.
        let again = store.publish(&messages[..1], 20_000).unwrap();
        assert_eq!(again.accepted, ["m0"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
