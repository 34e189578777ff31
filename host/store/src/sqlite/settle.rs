//! Group commit: many settlements in one transaction, so one fsync covers them all. Each
//! settlement runs in a savepoint of its own: one that fails (a row gone, a constraint) is
//! rolled back alone and reported alone, the rest still commit.

use super::SqliteStore;
use super::messages::settle_in;
use crate::StoreError;
use crate::model::Settlement;
use crate::plan::plan;

impl SqliteStore {
    /// Apply each `(seq, lease, settlement)` of `batch` - the outcome of the delivery of
    /// message `seq` that holds `lease` - in one transaction. A settlement whose lease is no
    /// longer the message's is [`StoreError::Fenced`] and changes nothing. The outer error means nothing was written (the
    /// transaction could not begin or commit); otherwise each settlement's own result, in
    /// order.
    pub fn settle(
        &self,
        batch: &[(i64, i64, &Settlement)],
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut conn = self.conn();
        let mut tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut results = Vec::with_capacity(batch.len());
        for &(seq, lease, settlement) in batch {
            let savepoint = tx.savepoint()?;
            let result = apply(&savepoint, seq, lease, settlement, now_ms);
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
    lease: i64,
    settlement: &Settlement,
    now_ms: u64,
) -> Result<(), StoreError> {
    settle_in(conn, seq, lease, &plan(settlement, now_ms))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::NewMessage;
    use crate::model::{AttemptRecord, DeadLetter};

    fn store(name: &str) -> (SqliteStore, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("verdict-settle-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (SqliteStore::open(&dir.join("db.sqlite")).unwrap(), dir)
    }

    /// A dead letter of a `permanent` failure, as tests settle it.
    pub(crate) fn letter() -> Settlement {
        Settlement::DeadLetter {
            failed: failed(),
            letter: DeadLetter {
                dlq: "orders.DLQ".into(),
                class: "permanent".into(),
                reason: "bad".into(),
                format: "json",
                envelope: b"{}".to_vec(),
            },
        }
    }

    pub(crate) fn failed() -> AttemptRecord {
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
        let claimed = store
            .claim(10, &[(vec!["orders".into()], 3)], 60_000)
            .unwrap();
        assert_eq!(claimed.len(), 3);
        let lease = |i: usize| (claimed[i].seq, claimed[i].lease);
        let (a, b, c) = (lease(0), lease(1), lease(2));
        let letter = letter();
        let again = Settlement::Again {
            failed: failed(),
            delay_ms: 500,
            spend_attempt: true,
        };
        let missing = (c.0 + 1_000, 1);
        let results = store
            .settle(
                &[
                    (a.0, a.1, &Settlement::Delivered),
                    (missing.0, missing.1, &letter),
                    (b.0, b.1, &again),
                    (c.0, c.1, &letter),
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

    #[test]
    fn a_settlement_applies_only_to_the_lease_that_holds_the_message() {
        let (store, dir) = store("fence");
        let message = NewMessage {
            id: "m".into(),
            topic: "orders".into(),
            payload: b"{}".to_vec(),
            ..NewMessage::default()
        };
        store.publish(&[message], 0).unwrap();
        let want = [(vec!["orders".to_string()], 1)];
        // The first delivery outlives its lease; a second claim takes the message over.
        let first = store.claim(10, &want, 100).unwrap().remove(0);
        let second = store.claim(200, &want, 100).unwrap().remove(0);
        assert_eq!(first.seq, second.seq);
        assert_ne!(first.lease, second.lease);
        // The first delivery's outcomes are all refused, whatever they are.
        let letter = letter();
        let stale = [
            Settlement::Delivered,
            letter.clone(),
            Settlement::Again {
                failed: failed(),
                delay_ms: u64::MAX,
                spend_attempt: true,
            },
            Settlement::Discard {
                failed: failed(),
                reason: "no".into(),
            },
            Settlement::Release { delay_ms: 5 },
        ];
        for settlement in &stale {
            let results = store
                .settle(&[(first.seq, first.lease, settlement)], 250)
                .unwrap();
            assert!(
                matches!(results[0], Err(StoreError::Fenced { .. })),
                "{settlement:?}: {:?}",
                results[0]
            );
        }
        assert_eq!(store.counts().unwrap().leased, 1);
        assert!(
            store.dlq_stats().unwrap().is_empty(),
            "no DLQ row from a stale lease"
        );
        // Only the holder settles, and only once.
        let results = store
            .settle(&[(second.seq, second.lease, &letter)], 260)
            .unwrap();
        assert!(results[0].is_ok());
        let results = store
            .settle(&[(second.seq, second.lease, &letter)], 270)
            .unwrap();
        assert!(matches!(results[0], Err(StoreError::Fenced { .. })));
        assert_eq!(
            store
                .dlq_stats()
                .unwrap()
                .iter()
                .map(|s| s.depth)
                .sum::<u64>(),
            1
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn huge_delays_and_leases_saturate_instead_of_wrapping() {
        let (store, dir) = store("saturate");
        let message = NewMessage {
            id: "m".into(),
            topic: "orders".into(),
            payload: b"{}".to_vec(),
            ..NewMessage::default()
        };
        store.publish(&[message], 0).unwrap();
        let want = [(vec!["orders".to_string()], 1)];
        let c = store.claim(10, &want, u64::MAX).unwrap().remove(0);
        // A lease to the end of time is not expired at any later instant.
        let late = u64::try_from(i64::MAX - 1).unwrap();
        assert!(store.claim(late, &want, 1).unwrap().is_empty());
        let again = Settlement::Again {
            failed: AttemptRecord {
                at_ms: u64::MAX - 5,
                ..failed()
            },
            delay_ms: u64::MAX,
            spend_attempt: true,
        };
        let results = store.settle(&[(c.seq, c.lease, &again)], 20).unwrap();
        assert!(results[0].is_ok(), "{:?}", results[0]);
        assert_eq!(store.counts().unwrap().scheduled, 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn idle_topics_leave_the_claim_round_until_published_again() {
        let (store, dir) = store("topics");
        let message = |id: &str, topic: &str| NewMessage {
            id: id.into(),
            topic: topic.into(),
            payload: b"{}".to_vec(),
            ..NewMessage::default()
        };
        store
            .publish(&[message("a", "orders"), message("b", "invoices")], 0)
            .unwrap();
        let c = store
            .claim(10, &[(vec!["orders".into()], 1)], 1_000)
            .unwrap()
            .remove(0);
        store
            .settle(&[(c.seq, c.lease, &Settlement::Delivered)], 20)
            .unwrap();
        // `orders` has nothing left; `invoices` still has a ready message.
        assert_eq!(store.prune_topics().unwrap(), 1);
        assert_eq!(store.topics().unwrap(), ["invoices"]);
        store.publish(&[message("c", "orders")], 30).unwrap();
        assert_eq!(store.topics().unwrap(), ["invoices", "orders"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
