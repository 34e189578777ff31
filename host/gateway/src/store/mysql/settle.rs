//! Group commit on MariaDB/MySQL: a batch of settlements in one transaction, each in a
//! savepoint of its own, each fenced by the lease its delivery holds.

use mysql::prelude::Queryable as _;
use mysql::{Params, Transaction, TxOpts, Value};

use super::{MysqlStore, audit};
use crate::model::{AttemptRecord, DeadLetter, Settlement};
use crate::store::{StoreError, clamp_ms};

impl MysqlStore {
    /// Apply each `(seq, lease, settlement)` in one transaction.
    pub fn settle(
        &self,
        batch: &[(i64, i64, &Settlement)],
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.with(|c| {
            let mut tx = c.start_transaction(TxOpts::default())?;
            let mut results: Vec<Option<Result<(), StoreError>>> =
                (0..batch.len()).map(|_| None).collect();
            for i in crate::store::in_seq_order(batch) {
                let (seq, lease, settlement) = batch[i];
                tx.query_drop("SAVEPOINT settlement")?;
                let result = apply(&mut tx, seq, lease, settlement, now_ms);
                match &result {
                    Ok(()) => tx.query_drop("RELEASE SAVEPOINT settlement")?,
                    // A deadlock rolled the whole transaction back: run the batch again.
                    Err(StoreError::Retry(m)) => return Err(StoreError::Retry(m.clone())),
                    Err(_) => tx.query_drop("ROLLBACK TO SAVEPOINT settlement")?,
                }
                results[i] = Some(result);
            }
            tx.commit()?;
            Ok(results.into_iter().flatten().collect())
        })
    }
}

fn apply(
    tx: &mut Transaction<'_>,
    seq: i64,
    lease: i64,
    settlement: &Settlement,
    now_ms: u64,
) -> Result<(), StoreError> {
    match settlement {
        Settlement::Delivered => fenced(
            tx,
            seq,
            lease,
            "UPDATE messages SET state = 'delivered', lease_until_ms = NULL, updated_at_ms = ?",
            vec![clamp_ms(now_ms).into()],
        )
        .map(drop),
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => {
            let (attempt, deferral): (i64, i64) = if *spend_attempt { (1, 0) } else { (0, 1) };
            let at = clamp_ms(failed.at_ms);
            fenced(
                tx,
                seq,
                lease,
                "UPDATE messages SET state = 'scheduled', lease_until_ms = NULL, next_at_ms = ?,
                        attempt = LEAST(attempt + ?, 4294967295),
                        deferrals = LEAST(deferrals + ?, 4294967295),
                        first_failed_at_ms = COALESCE(first_failed_at_ms, ?), updated_at_ms = ?",
                vec![
                    clamp_ms(failed.at_ms.saturating_add(*delay_ms)).into(),
                    attempt.into(),
                    deferral.into(),
                    at.into(),
                    at.into(),
                ],
            )?;
            record_attempt(tx, seq, failed)
        }
        Settlement::DeadLetter { failed, letter } => dead_letter(tx, seq, lease, failed, letter),
        Settlement::Discard { failed, reason } => {
            let (id, topic, _) = fenced(
                tx,
                seq,
                lease,
                "UPDATE messages SET state = 'discarded', lease_until_ms = NULL, updated_at_ms = ?",
                vec![clamp_ms(failed.at_ms).into()],
            )?;
            record_attempt(tx, seq, failed)?;
            audit(tx, failed.at_ms, &id, &topic, "discarded", reason)
        }
        Settlement::Release { delay_ms } => fenced(
            tx,
            seq,
            lease,
            "UPDATE messages SET state = 'ready', lease_until_ms = NULL, next_at_ms = ?,
                    deliveries = GREATEST(deliveries - 1, 0)",
            vec![clamp_ms(now_ms.saturating_add(*delay_ms)).into()],
        )
        .map(drop),
    }
}

fn dead_letter(
    tx: &mut Transaction<'_>,
    seq: i64,
    lease: i64,
    failed: &AttemptRecord,
    letter: &DeadLetter,
) -> Result<(), StoreError> {
    let at = clamp_ms(failed.at_ms);
    let (id, topic, attempt) = fenced(
        tx,
        seq,
        lease,
        "UPDATE messages SET state = 'dead', lease_until_ms = NULL,
                attempt = LEAST(attempt + 1, 4294967295),
                first_failed_at_ms = COALESCE(first_failed_at_ms, ?), updated_at_ms = ?",
        vec![at.into(), at.into()],
    )?;
    record_attempt(tx, seq, failed)?;
    let args: Vec<Value> = vec![
        seq.into(),
        id.as_str().into(),
        topic.as_str().into(),
        letter.dlq.as_str().into(),
        letter.class.as_str().into(),
        failed.kind.as_str().into(),
        letter.reason.as_str().into(),
        attempt.into(),
        at.into(),
        letter.format.into(),
        letter.envelope.as_slice().into(),
    ];
    tx.exec_drop(
        "INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason, attempts,
                          created_at_ms, format, envelope, state)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'dead')",
        Params::Positional(args),
    )?;
    audit(
        tx,
        failed.at_ms,
        &id,
        &topic,
        "dead-lettered",
        &letter.reason,
    )
}

/// Apply `change` (an `UPDATE messages SET ...` with its values in `set`) to message `seq`
/// only while lease `lease` holds it, then read what the caller records: the fence every
/// settlement passes. The `UPDATE` locks the row, so the read after it is exact.
fn fenced(
    tx: &mut Transaction<'_>,
    seq: i64,
    lease: i64,
    change: &str,
    mut set: Vec<Value>,
) -> Result<(String, String, i64), StoreError> {
    set.push(seq.into());
    set.push(lease.into());
    tx.exec_drop(
        format!("{change} WHERE seq = ? AND lease = ? AND state = 'leased'"),
        Params::Positional(set),
    )?;
    if tx.affected_rows() != 1 {
        return Err(StoreError::Fenced { seq, lease });
    }
    tx.exec_first(
        "SELECT id, topic, attempt FROM messages WHERE seq = ?",
        (seq,),
    )?
    .ok_or(StoreError::Fenced { seq, lease })
}

fn record_attempt(
    tx: &mut Transaction<'_>,
    seq: i64,
    failed: &AttemptRecord,
) -> Result<(), StoreError> {
    tx.exec_drop(
        "INSERT INTO attempts (message_seq, at_ms, kind, message) VALUES (?, ?, ?, ?)",
        (seq, clamp_ms(failed.at_ms), &failed.kind, &failed.message),
    )?;
    Ok(())
}
