//! Group commit on MariaDB/MySQL: a batch of settlements in one transaction, each fenced by
//! the lease its delivery holds.

use std::collections::HashMap;

use mysql::prelude::Queryable as _;
use mysql::{Params, Transaction, TxOpts, Value};

use super::{MysqlStore, audit};
use crate::model::{AttemptRecord, DeadLetter, Settlement};
use crate::{StoreError, clamp_ms};

impl MysqlStore {
    /// Apply each `(seq, lease, settlement)` in one transaction: every row of the batch
    /// locked and read in one statement, the deliveries applied in one more, each other
    /// settlement in a savepoint of its own (a statement that fails rolls back its
    /// settlement alone).
    pub fn settle(
        &self,
        batch: &[(i64, i64, &Settlement)],
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.with(|c| {
            let mut tx = c.start_transaction(TxOpts::default())?;
            let mut held = lock_batch(&mut tx, batch)?;
            let mut results: Vec<Option<Result<(), StoreError>>> =
                (0..batch.len()).map(|_| None).collect();
            let mut delivered = Vec::new();
            for (i, &(seq, lease, settlement)) in batch.iter().enumerate() {
                if matches!(settlement, Settlement::Delivered) {
                    // Each pair answers once: a settlement that came twice is fenced the
                    // second time, as it would be one by one.
                    results[i] = Some(match held.remove(&(seq, lease)) {
                        Some(_) => {
                            delivered.push(seq);
                            Ok(())
                        }
                        None => Err(StoreError::Fenced { seq, lease }),
                    });
                }
            }
            if !delivered.is_empty() {
                let seqs = delivered.iter().map(i64::to_string).collect::<Vec<_>>();
                tx.exec_drop(
                    format!(
                        "UPDATE messages SET state = 'delivered', lease_until_ms = NULL,
                                updated_at_ms = ?
                         WHERE seq IN ({}) AND state = 'leased'",
                        seqs.join(", ")
                    ),
                    (clamp_ms(now_ms),),
                )?;
            }
            for i in crate::in_seq_order(batch) {
                if results[i].is_some() {
                    continue;
                }
                let (seq, lease, settlement) = batch[i];
                let Some(row) = held.remove(&(seq, lease)) else {
                    results[i] = Some(Err(StoreError::Fenced { seq, lease }));
                    continue;
                };
                tx.query_drop("SAVEPOINT settlement")?;
                let result = apply(&mut tx, seq, lease, &row, settlement, now_ms);
                match &result {
                    Ok(()) => tx.query_drop("RELEASE SAVEPOINT settlement")?,
                    // A deadlock rolled the whole transaction back: run the batch again.
                    Err(StoreError::Retry(m)) => return Err(StoreError::Retry(m.clone())),
                    Err(StoreError::Disconnected(m)) => {
                        return Err(StoreError::Disconnected(m.clone()));
                    }
                    Err(_) => tx.query_drop("ROLLBACK TO SAVEPOINT settlement")?,
                }
                results[i] = Some(result);
            }
            tx.commit()?;
            Ok(results.into_iter().flatten().collect())
        })
    }
}

/// What a settlement records about the message it settles, read when its row is locked.
struct Held {
    id: String,
    topic: String,
    attempt: i64,
}

/// Lock every row of `batch` in `seq` order - as every batch and lease extension locks
/// them, so that two never wait on each other in a cycle - and read the ones still leased:
/// `(seq, lease)` to what their settlements record. The locks make the read exact: no one
/// else can settle or claim these rows until this transaction ends.
fn lock_batch(
    tx: &mut Transaction<'_>,
    batch: &[(i64, i64, &Settlement)],
) -> Result<HashMap<(i64, i64), Held>, StoreError> {
    let seqs = batch.iter().map(|b| b.0.to_string()).collect::<Vec<_>>();
    let rows: Vec<(i64, i64, String, String, i64)> = tx.query(format!(
        "SELECT seq, lease, id, topic, attempt FROM messages
         WHERE seq IN ({}) AND state = 'leased' ORDER BY seq FOR UPDATE",
        seqs.join(", ")
    ))?;
    Ok(rows
        .into_iter()
        .map(|(seq, lease, id, topic, attempt)| ((seq, lease), Held { id, topic, attempt }))
        .collect())
}

fn apply(
    tx: &mut Transaction<'_>,
    seq: i64,
    lease: i64,
    row: &Held,
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
        ),
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
                    // Due on the store's clock (the database's), not the failing gateway's.
                    clamp_ms(now_ms.saturating_add(*delay_ms)).into(),
                    attempt.into(),
                    deferral.into(),
                    at.into(),
                    at.into(),
                ],
            )?;
            record_attempt(tx, seq, failed)
        }
        Settlement::DeadLetter { failed, letter } => {
            dead_letter(tx, seq, lease, row, failed, letter)
        }
        Settlement::Discard { failed, reason } => {
            fenced(
                tx,
                seq,
                lease,
                "UPDATE messages SET state = 'discarded', lease_until_ms = NULL, updated_at_ms = ?",
                vec![clamp_ms(failed.at_ms).into()],
            )?;
            record_attempt(tx, seq, failed)?;
            audit(tx, failed.at_ms, &row.id, &row.topic, "discarded", reason)
        }
        Settlement::Release { delay_ms } => fenced(
            tx,
            seq,
            lease,
            "UPDATE messages SET state = 'ready', lease_until_ms = NULL, next_at_ms = ?,
                    deliveries = GREATEST(deliveries - 1, 0)",
            vec![clamp_ms(now_ms.saturating_add(*delay_ms)).into()],
        ),
    }
}

fn dead_letter(
    tx: &mut Transaction<'_>,
    seq: i64,
    lease: i64,
    row: &Held,
    failed: &AttemptRecord,
    letter: &DeadLetter,
) -> Result<(), StoreError> {
    let at = clamp_ms(failed.at_ms);
    fenced(
        tx,
        seq,
        lease,
        "UPDATE messages SET state = 'dead', lease_until_ms = NULL,
                dead_letterings = dead_letterings + 1,
                attempt = LEAST(attempt + 1, 4294967295),
                first_failed_at_ms = COALESCE(first_failed_at_ms, ?), updated_at_ms = ?",
        vec![at.into(), at.into()],
    )?;
    record_attempt(tx, seq, failed)?;
    // The attempt the `UPDATE` above counted.
    let attempt = row.attempt.saturating_add(1).min(4_294_967_295);
    let mut args: Vec<Value> = vec![
        seq.into(),
        row.id.as_str().into(),
        row.topic.as_str().into(),
        letter.dlq.as_str().into(),
        letter.class.as_str().into(),
        failed.kind.as_str().into(),
        letter.reason.as_str().into(),
        attempt.into(),
        at.into(),
        letter.format.into(),
        letter.envelope.as_slice().into(),
    ];
    args.push(seq.into());
    tx.exec_drop(
        format!(
            "INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason, attempts,
                              created_at_ms, format, envelope, state, repeats)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'dead', {})",
            crate::repeats_of("?")
        ),
        Params::Positional(args),
    )?;
    audit(
        tx,
        failed.at_ms,
        &row.id,
        &row.topic,
        "dead-lettered",
        &letter.reason,
    )
}

/// Apply `change` (an `UPDATE messages SET ...` with its values in `set`) to message `seq`
/// only while lease `lease` holds it: the fence every settlement passes (the batch read
/// the row under lock already; the condition keeps the statement exact on its own).
fn fenced(
    tx: &mut Transaction<'_>,
    seq: i64,
    lease: i64,
    change: &str,
    mut set: Vec<Value>,
) -> Result<(), StoreError> {
    set.push(seq.into());
    set.push(lease.into());
    tx.exec_drop(
        format!("{change} WHERE seq = ? AND lease = ? AND state = 'leased'"),
        Params::Positional(set),
    )?;
    if tx.affected_rows() != 1 {
        return Err(StoreError::Fenced { seq, lease });
    }
    Ok(())
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
