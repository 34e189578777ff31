//! Group commit: many settlements in one transaction, so one fsync covers them all. Each
//! settlement runs in a savepoint of its own: one that fails (a row gone, a constraint) is
//! rolled back alone and reported alone, the rest still commit.

use super::messages::{dead_letter_in, delivered_in, discard_in, release_in, schedule_in};
use super::{Store, StoreError};
use crate::sources::Settlement;

impl Store {
    /// Apply each `(seq, settlement)` of `batch` - the outcome of one delivery of the
    /// message `seq` - in one transaction. The outer error means nothing was written (the
    /// transaction could not begin or commit); otherwise each settlement's own result, in
    /// order.
    pub fn settle(
        &self,
        batch: &[(i64, &Settlement)],
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut conn = self.conn();
        let mut tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut results = Vec::with_capacity(batch.len());
        for &(seq, settlement) in batch {
            let savepoint = tx.savepoint()?;
            let result = apply(&savepoint, seq, settlement, now_ms);
            if result.is_ok() {
                savepoint.commit()?;
            }
            // Dropping an uncommitted savepoint rolls it back.
            results.push(result);
        }
        tx.commit()?;
        Ok(results)
    }
}

fn apply(
    conn: &rusqlite::Connection,
    seq: i64,
    settlement: &Settlement,
    now_ms: u64,
) -> Result<(), StoreError> {
    match settlement {
        Settlement::Delivered => delivered_in(conn, seq, now_ms),
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => schedule_in(conn, seq, failed, failed.at_ms + delay_ms, *spend_attempt),
        Settlement::DeadLetter { failed, letter } => dead_letter_in(conn, seq, failed, letter),
        Settlement::Discard { failed, reason } => discard_in(conn, seq, failed, reason),
        Settlement::Release { delay_ms } => release_in(conn, seq, now_ms + delay_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{AttemptRecord, DeadLetter};
    use crate::store::NewMessage;

    fn store(name: &str) -> (Store, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("verdict-settle-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (Store::open(&dir.join("db.sqlite")).unwrap(), dir)
    }

    fn failed() -> AttemptRecord {
        AttemptRecord {
            at_ms: 1_000,
            kind: "http.503".into(),
            message: "down".into(),
        }
    }

    #[test]
    fn a_batch_commits_together_and_a_failing_settlement_alone_is_rolled_back() {
        let (store, dir) = store("batch");
        let messages: Vec<NewMessage> = (0..3)
            .map(|i| NewMessage {
                id: format!("m{i}"),
                topic: "orders".into(),
                payload: b"{}".to_vec(),
                ..NewMessage::default()
            })
            .collect();
        store.publish(&messages, 0).unwrap();
        let claimed = store.claim(10, 3, 60_000).unwrap();
        assert_eq!(claimed.len(), 3);
        let (a, b, c) = (claimed[0].seq, claimed[1].seq, claimed[2].seq);
        let letter = Settlement::DeadLetter {
            failed: failed(),
            letter: DeadLetter {
                dlq: "orders.dlq".into(),
                class: "permanent".into(),
                reason: "bad".into(),
                format: "json",
                envelope: b"{}".to_vec(),
            },
        };
        let again = Settlement::Again {
            failed: failed(),
            delay_ms: 500,
            spend_attempt: true,
        };
        let missing = c + 1_000;
        let results = store
            .settle(
                &[
                    (a, &Settlement::Delivered),
                    (missing, &letter),
                    (b, &again),
                    (c, &letter),
                ],
                2_000,
            )
            .unwrap();
        assert!(results[0].is_ok() && results[2].is_ok() && results[3].is_ok());
        assert!(
            results[1].is_err(),
            "a message that is not there cannot be dead-lettered"
        );
        let counts = store.counts().unwrap();
        assert_eq!(
            (
                counts.delivered,
                counts.scheduled,
                counts.dead,
                counts.leased
            ),
            (1, 1, 1, 0),
            "{counts:?}"
        );
        // The failed savepoint left nothing behind: one DLQ entry, one dead-lettered audit.
        assert_eq!(
            store
                .dlq_stats()
                .unwrap()
                .iter()
                .map(|s| s.depth)
                .sum::<u64>(),
            1
        );
        assert_eq!(store.audit_count("dead-lettered").unwrap(), 1);
        let _ = std::fs::remove_dir_all(dir);
    }
}
