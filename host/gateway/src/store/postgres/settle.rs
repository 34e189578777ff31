//! Group commit on PostgreSQL: a batch of settlements in one transaction, each in a
//! savepoint of its own, each fenced by the lease its delivery holds.

use postgres::Transaction;
use postgres::types::ToSql;

use super::{PostgresStore, audit};
use crate::model::{AttemptRecord, DeadLetter, Settlement};
use crate::store::{StoreError, clamp_ms};

impl PostgresStore {
    /// Apply each `(seq, lease, settlement)` in one transaction.
    pub fn settle(
        &self,
        batch: &[(i64, i64, &Settlement)],
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let mut results = Vec::with_capacity(batch.len());
            for &(seq, lease, settlement) in batch {
                let mut savepoint = tx.savepoint("settlement")?;
                let result = apply(&mut savepoint, seq, lease, settlement, now_ms);
                if result.is_ok() {
                    savepoint.commit()?;
                } else {
                    savepoint.rollback()?;
                }
                results.push(result);
            }
            tx.commit()?;
            Ok(results)
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
        Settlement::Delivered => {
            fenced(
                tx,
                seq,
                lease,
                "UPDATE messages SET state = 'delivered', lease_until_ms = NULL, updated_at_ms = $3
                 WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt",
                &[&clamp_ms(now_ms)],
            )?;
            Ok(())
        }
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => {
            let (attempt, deferral): (i64, i64) = if *spend_attempt { (1, 0) } else { (0, 1) };
            fenced(
                tx,
                seq,
                lease,
                "UPDATE messages SET state = 'scheduled', lease_until_ms = NULL, next_at_ms = $3,
                        attempt = LEAST(attempt + $4, 4294967295),
                        deferrals = LEAST(deferrals + $5, 4294967295),
                        first_failed_at_ms = COALESCE(first_failed_at_ms, $6), updated_at_ms = $6
                 WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt",
                &[
                    &clamp_ms(failed.at_ms.saturating_add(*delay_ms)),
                    &attempt,
                    &deferral,
                    &clamp_ms(failed.at_ms),
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
                "UPDATE messages SET state = 'discarded', lease_until_ms = NULL, updated_at_ms = $3
                 WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt",
                &[&clamp_ms(failed.at_ms)],
            )?;
            record_attempt(tx, seq, failed)?;
            audit(tx, failed.at_ms, &id, &topic, "discarded", reason)
        }
        Settlement::Release { delay_ms } => {
            fenced(
                tx,
                seq,
                lease,
                "UPDATE messages SET state = 'ready', lease_until_ms = NULL, next_at_ms = $3,
                        deliveries = GREATEST(deliveries - 1, 0)
                 WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt",
                &[&clamp_ms(now_ms.saturating_add(*delay_ms))],
            )?;
            Ok(())
        }
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
                first_failed_at_ms = COALESCE(first_failed_at_ms, $3), updated_at_ms = $3
         WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt",
        &[&at],
    )?;
    record_attempt(tx, seq, failed)?;
    tx.execute(
        "INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason, attempts,
                          created_at_ms, format, envelope, state)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'dead')",
        &[
            &seq,
            &id,
            &topic,
            &letter.dlq,
            &letter.class,
            &failed.kind,
            &letter.reason,
            &attempt,
            &at,
            &letter.format,
            &letter.envelope,
        ],
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

/// Move message `seq` out of lease `lease` with `change` (`... WHERE seq = $1 AND lease =
/// $2 AND state = 'leased' RETURNING id, topic, attempt`): the fence every settlement
/// passes. The row lock the `UPDATE` takes makes it exact against a competing claim: one
/// of the two waits for the other and then sees its lease.
fn fenced(
    tx: &mut Transaction<'_>,
    seq: i64,
    lease: i64,
    change: &str,
    rest: &[&(dyn ToSql + Sync)],
) -> Result<(String, String, i64), StoreError> {
    let mut args: Vec<&(dyn ToSql + Sync)> = vec![&seq, &lease];
    args.extend_from_slice(rest);
    tx.query_opt(change, &args)?
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .ok_or(StoreError::Fenced { seq, lease })
}

fn record_attempt(
    tx: &mut Transaction<'_>,
    seq: i64,
    failed: &AttemptRecord,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO attempts (message_seq, at_ms, kind, message) VALUES ($1, $2, $3, $4)",
        &[&seq, &clamp_ms(failed.at_ms), &failed.kind, &failed.message],
    )?;
    Ok(())
}
