//! Group commit on PostgreSQL: a batch of settlements in one transaction, each fenced by
//! the lease its delivery holds. The deliveries of a batch are one statement; a batch in
//! which a statement fails runs again with each settlement in a savepoint of its own.

use std::collections::HashSet;

use postgres::types::ToSql;
use postgres::{GenericClient, Statement, Transaction};

use super::PostgresStore;
use crate::model::{AttemptRecord, DeadLetter, Settlement};
use crate::{StoreError, clamp_ms, in_seq_order};

const DELIVERED: &str =
    "UPDATE messages SET state = 'delivered', lease_until_ms = NULL, updated_at_ms = $3
     WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt";
/// [`DELIVERED`] for a whole batch: `(seq, lease)` pairs in, the seqs still held (and now
/// delivered) out. Rows are locked in `seq` order, as every batch and lease extension
/// locks them, so that two never wait on each other in a cycle.
const DELIVERED_ALL: &str = "
WITH held AS (
    SELECT m.seq FROM messages m
    JOIN UNNEST($1::BIGINT[], $2::BIGINT[]) AS s (seq, lease)
      ON m.seq = s.seq AND m.lease = s.lease
    WHERE m.state = 'leased'
    ORDER BY m.seq
    FOR UPDATE OF m)
UPDATE messages m SET state = 'delivered', lease_until_ms = NULL, updated_at_ms = $3
FROM held WHERE m.seq = held.seq
RETURNING m.seq, m.lease";
/// Every row of a batch locked up front, in `seq` order: what follows may then touch them
/// in any order without risking a deadlock against another batch or a lease extension.
const LOCK: &str = "SELECT seq FROM messages WHERE seq = ANY($1) ORDER BY seq FOR UPDATE";
const SCHEDULED: &str =
    "UPDATE messages SET state = 'scheduled', lease_until_ms = NULL, next_at_ms = $3,
            attempt = LEAST(attempt + $4, 4294967295),
            deferrals = LEAST(deferrals + $5, 4294967295),
            first_failed_at_ms = COALESCE(first_failed_at_ms, $6), updated_at_ms = $6
     WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt";
const DISCARDED: &str =
    "UPDATE messages SET state = 'discarded', lease_until_ms = NULL, updated_at_ms = $3
     WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt";
const RELEASED: &str =
    "UPDATE messages SET state = 'ready', lease_until_ms = NULL, next_at_ms = $3,
            deliveries = GREATEST(deliveries - 1, 0)
     WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt";
const DEAD: &str = "UPDATE messages SET state = 'dead', lease_until_ms = NULL,
            attempt = LEAST(attempt + 1, 4294967295),
            dead_letterings = dead_letterings + 1,
            first_failed_at_ms = COALESCE(first_failed_at_ms, $3), updated_at_ms = $3
     WHERE seq = $1 AND lease = $2 AND state = 'leased' RETURNING id, topic, attempt";
/// Built once: prepared statements are cached by their `'static` text.
static LETTER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason,
                          attempts, created_at_ms, format, envelope, state, repeats)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'dead', {})",
        crate::repeats_of("$1")
    )
});
const ATTEMPT: &str =
    "INSERT INTO attempts (message_seq, at_ms, kind, message) VALUES ($1, $2, $3, $4)";
const AUDIT: &str =
    "INSERT INTO audit (at_ms, message_id, topic, event, detail) VALUES ($1, $2, $3, $4, $5)";

/// The batch's statements, prepared once per connection: a settlement is then one round
/// trip per statement, not two (parse, then execute).
struct Prepared {
    delivered: Statement,
    delivered_all: Statement,
    lock: Statement,
    scheduled: Statement,
    discarded: Statement,
    released: Statement,
    dead: Statement,
    letter: Statement,
    attempt: Statement,
    audit: Statement,
}

impl PostgresStore {
    /// Apply each `(seq, lease, settlement)` in one transaction.
    pub fn settle(
        &self,
        batch: &[(i64, i64, &Settlement)],
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        self.with(|c| {
            let p = Prepared {
                delivered: c.statement(DELIVERED)?,
                delivered_all: c.statement(DELIVERED_ALL)?,
                lock: c.statement(LOCK)?,
                scheduled: c.statement(SCHEDULED)?,
                discarded: c.statement(DISCARDED)?,
                released: c.statement(RELEASED)?,
                dead: c.statement(DEAD)?,
                letter: c.statement(LETTER.as_str())?,
                attempt: c.statement(ATTEMPT)?,
                audit: c.statement(AUDIT)?,
            };
            // Most batches fail nowhere, and a fenced settlement changes nothing (its
            // `UPDATE` matches no row), so the batch first runs without savepoints - two
            // round trips fewer per settlement. A statement that does fail aborts the
            // transaction; then the batch runs again, each settlement in a savepoint, so
            // that one failure is rolled back alone.
            if batch
                .iter()
                .all(|(_, _, s)| matches!(s, Settlement::Delivered))
            {
                // The usual batch - every consumer said yes - is one statement, and so one
                // round trip and one transaction of its own.
                let mut held =
                    deliver_all(&mut c.client, &p, batch.iter().map(|b| (b.0, b.1)), now_ms)?;
                return Ok(batch
                    .iter()
                    .map(|&(seq, lease, _)| fence_result(&mut held, seq, lease))
                    .collect());
            }
            match settle_in(c, &p, batch, now_ms, false)? {
                Some(results) => Ok(results),
                None => settle_in(c, &p, batch, now_ms, true)?.ok_or_else(|| {
                    StoreError::Database("a settlement batch failed even one by one".into())
                }),
            }
        })
    }
}

/// One transaction over `batch`, in message order; `None` when a settlement failed and the
/// batch ran without `isolated` savepoints (nothing was committed).
fn settle_in(
    c: &mut super::Conn,
    p: &Prepared,
    batch: &[(i64, i64, &Settlement)],
    now_ms: u64,
    isolated: bool,
) -> Result<Option<Vec<Result<(), StoreError>>>, StoreError> {
    let mut tx = c.client.transaction()?;
    let mut results: Vec<Option<Result<(), StoreError>>> = (0..batch.len()).map(|_| None).collect();
    if !isolated {
        let seqs: Vec<i64> = batch.iter().map(|b| b.0).collect();
        tx.execute(&p.lock, &[&seqs])?;
        let delivered = batch
            .iter()
            .filter(|(_, _, s)| matches!(s, Settlement::Delivered))
            .map(|b| (b.0, b.1));
        let mut held = deliver_all(&mut tx, p, delivered, now_ms)?;
        for (i, (seq, lease, settlement)) in batch.iter().enumerate() {
            if matches!(settlement, Settlement::Delivered) {
                results[i] = Some(fence_result(&mut held, *seq, *lease));
            }
        }
    }
    for i in in_seq_order(batch) {
        if results[i].is_some() {
            continue;
        }
        let (seq, lease, settlement) = batch[i];
        let result = if isolated {
            let mut savepoint = tx.savepoint("settlement")?;
            let result = apply(&mut savepoint, p, seq, lease, settlement, now_ms);
            match &result {
                Ok(()) => savepoint.commit()?,
                // A deadlock aborted the transaction: the whole batch runs again.
                Err(StoreError::Retry(m)) => return Err(StoreError::Retry(m.clone())),
                Err(StoreError::Disconnected(m)) => {
                    return Err(StoreError::Disconnected(m.clone()));
                }
                Err(_) => savepoint.rollback()?,
            }
            result
        } else {
            match apply(&mut tx, p, seq, lease, settlement, now_ms) {
                Err(StoreError::Retry(m)) => return Err(StoreError::Retry(m)),
                Err(StoreError::Disconnected(m)) => return Err(StoreError::Disconnected(m)),
                Err(StoreError::Fenced { seq, lease }) => Err(StoreError::Fenced { seq, lease }),
                // Dropping the transaction rolls it back.
                Err(_) => return Ok(None),
                Ok(()) => Ok(()),
            }
        };
        results[i] = Some(result);
    }
    tx.commit()?;
    Ok(Some(results.into_iter().flatten().collect()))
}

fn apply(
    tx: &mut Transaction<'_>,
    p: &Prepared,
    seq: i64,
    lease: i64,
    settlement: &Settlement,
    now_ms: u64,
) -> Result<(), StoreError> {
    match settlement {
        Settlement::Delivered => {
            fenced(tx, &p.delivered, seq, lease, &[&clamp_ms(now_ms)])?;
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
                &p.scheduled,
                seq,
                lease,
                &[
                    // Due on the store's clock (the database's), not the failing gateway's.
                    &clamp_ms(now_ms.saturating_add(*delay_ms)),
                    &attempt,
                    &deferral,
                    &clamp_ms(failed.at_ms),
                ],
            )?;
            record_attempt(tx, p, seq, failed)
        }
        Settlement::DeadLetter { failed, letter } => dead_letter(tx, p, seq, lease, failed, letter),
        Settlement::Discard { failed, reason } => {
            let (id, topic, _) = fenced(tx, &p.discarded, seq, lease, &[&clamp_ms(failed.at_ms)])?;
            record_attempt(tx, p, seq, failed)?;
            audit(tx, p, failed.at_ms, &id, &topic, "discarded", reason)
        }
        Settlement::Release { delay_ms } => {
            fenced(
                tx,
                &p.released,
                seq,
                lease,
                &[&clamp_ms(now_ms.saturating_add(*delay_ms))],
            )?;
            Ok(())
        }
    }
}

fn dead_letter(
    tx: &mut Transaction<'_>,
    p: &Prepared,
    seq: i64,
    lease: i64,
    failed: &AttemptRecord,
    letter: &DeadLetter,
) -> Result<(), StoreError> {
    let at = clamp_ms(failed.at_ms);
    let (id, topic, attempt) = fenced(tx, &p.dead, seq, lease, &[&at])?;
    record_attempt(tx, p, seq, failed)?;
    tx.execute(
        &p.letter,
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
        p,
        failed.at_ms,
        &id,
        &topic,
        "dead-lettered",
        &letter.reason,
    )
}

/// Deliver every `(seq, lease)` still held in one statement; the pairs it delivered.
fn deliver_all(
    client: &mut impl GenericClient,
    p: &Prepared,
    held: impl Iterator<Item = (i64, i64)>,
    now_ms: u64,
) -> Result<HashSet<(i64, i64)>, StoreError> {
    let (seqs, leases): (Vec<i64>, Vec<i64>) = held.unzip();
    if seqs.is_empty() {
        return Ok(HashSet::new());
    }
    Ok(client
        .query(&p.delivered_all, &[&seqs, &leases, &clamp_ms(now_ms)])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// A delivery's result when `delivered` holds the `(seq, lease)` pairs its statement
/// changed; each pair answers once, so a settlement that came twice is fenced the second
/// time, as it would be one by one.
fn fence_result(
    delivered: &mut HashSet<(i64, i64)>,
    seq: i64,
    lease: i64,
) -> Result<(), StoreError> {
    if delivered.remove(&(seq, lease)) {
        Ok(())
    } else {
        Err(StoreError::Fenced { seq, lease })
    }
}

/// Move message `seq` out of lease `lease` with `change` (`... WHERE seq = $1 AND lease =
/// $2 AND state = 'leased' RETURNING id, topic, attempt`): the fence every settlement
/// passes. The row lock the `UPDATE` takes makes it exact against a competing claim: one
/// of the two waits for the other and then sees its lease.
fn fenced(
    tx: &mut Transaction<'_>,
    change: &Statement,
    seq: i64,
    lease: i64,
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
    p: &Prepared,
    seq: i64,
    failed: &AttemptRecord,
) -> Result<(), StoreError> {
    tx.execute(
        &p.attempt,
        &[&seq, &clamp_ms(failed.at_ms), &failed.kind, &failed.message],
    )?;
    Ok(())
}

fn audit(
    tx: &mut Transaction<'_>,
    p: &Prepared,
    at_ms: u64,
    message_id: &str,
    topic: &str,
    event: &str,
    detail: &str,
) -> Result<(), StoreError> {
    tx.execute(
        &p.audit,
        &[&clamp_ms(at_ms), &message_id, &topic, &event, &detail],
    )?;
    Ok(())
}
