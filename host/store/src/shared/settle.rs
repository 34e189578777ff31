//! Group commit on a shared database: a batch of settlements in one transaction, each
//! fenced by the lease its delivery holds.
//!
//! Every row of the batch is locked and read first, in one statement; the deliveries are
//! then one statement more, and every other settlement is its [`plan`] applied - the
//! retries, delays and releases together in one statement more where the database can
//! bind a column of values (PostgreSQL's arrays), each dead letter and discard alone. Most
//! batches fail nowhere and a fenced settlement changes nothing, so the batch first runs
//! without savepoints (two round trips fewer per settlement); a statement that does fail
//! aborts that run, and the batch runs again with each settlement in a savepoint of its
//! own, so that one failure is rolled back alone.

use std::collections::{HashMap, HashSet};

use super::{Arg, Dialect, Session, Shared, audit};
use crate::model::Settlement;
use crate::plan::{Plan, plan};
use crate::{StoreError, clamp_ms, in_seq_order};

/// What a settlement records about the message it settles, read when its row is locked.
struct Held {
    id: String,
    topic: String,
    attempt: i64,
}

type Results = Vec<Result<(), StoreError>>;

impl<D: Dialect> Shared<D> {
    /// Apply each `(seq, lease, settlement)` of `batch` in one transaction. The outer
    /// error means nothing was written; otherwise each settlement's own result, in order
    /// (a settlement whose lease no longer holds its message is [`StoreError::Fenced`] and
    /// changes nothing).
    pub(crate) fn settle(
        &self,
        batch: &[(i64, i64, &Settlement)],
        now_ms: u64,
    ) -> Result<Results, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.with(|conn| {
            if batch
                .iter()
                .all(|(_, _, s)| matches!(s, Settlement::Delivered))
                && let Some(done) = D::deliver_only(conn, batch, now_ms)
            {
                return done;
            }
            match D::transaction(conn, |s| settle_in::<D>(s, batch, now_ms, false)) {
                Ok(results) => Ok(results),
                Err(Abort::Error(e)) => Err(e),
                // A statement failed and the run rolled back: again, each in a savepoint.
                Err(Abort::Isolate) => D::transaction(conn, |s| {
                    settle_in::<D>(s, batch, now_ms, true).map_err(|e| match e {
                        Abort::Error(e) => e,
                        Abort::Isolate => {
                            StoreError::database("a settlement batch failed even one by one")
                        }
                    })
                }),
            }
        })
    }
}

/// Why a run of the batch stopped.
enum Abort {
    /// The whole transaction failed: pass it on (a deadlock victim runs again whole).
    Error(StoreError),
    /// One settlement's statement failed without savepoints: run again with them.
    Isolate,
}

impl From<StoreError> for Abort {
    fn from(e: StoreError) -> Self {
        Abort::Error(e)
    }
}

fn settle_in<D: Dialect>(
    s: &mut dyn Session,
    batch: &[(i64, i64, &Settlement)],
    now_ms: u64,
    isolated: bool,
) -> Result<Results, Abort> {
    let seqs: Vec<i64> = batch.iter().map(|b| b.0).collect();
    let mut held: HashMap<(i64, i64), Held> = HashMap::new();
    for row in s.query(D::SQL.lock_batch, &[Arg::Keys(&seqs)])? {
        held.insert(
            (row.int(0)?, row.int(1)?),
            Held {
                id: row.text(2)?,
                topic: row.text(3)?,
                attempt: row.int(4)?,
            },
        );
    }
    let mut results: Vec<Option<Result<(), StoreError>>> = (0..batch.len()).map(|_| None).collect();
    let mut delivered = Vec::new();
    for (i, &(seq, lease, settlement)) in batch.iter().enumerate() {
        if matches!(settlement, Settlement::Delivered) {
            // Each pair answers once: a settlement that came twice is fenced the second
            // time, as it would be one by one.
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
        s.execute(
            D::SQL.delivered,
            &[Arg::Int(clamp_ms(now_ms)), Arg::Keys(&delivered)],
        )?;
    }
    // Every other settlement still held, in seq order, as the row change it makes.
    let mut planned: Vec<(usize, Held, Plan<'_>)> = Vec::new();
    for i in in_seq_order(batch) {
        if results[i].is_some() {
            continue;
        }
        let (seq, lease, settlement) = batch[i];
        match held.remove(&(seq, lease)) {
            Some(row) => planned.push((i, row, plan(settlement, now_ms))),
            None => results[i] = Some(Err(StoreError::Fenced { seq, lease })),
        }
    }
    if !isolated {
        apply_plain(s, batch, &planned, &mut results)?;
    }
    for (i, row, plan) in &planned {
        let i = *i;
        if results[i].is_some() {
            continue;
        }
        let (seq, lease, _) = batch[i];
        let result = if isolated {
            s.batch("SAVEPOINT settlement")?;
            match apply::<D>(s, seq, lease, row, plan) {
                Ok(()) => {
                    s.batch("RELEASE SAVEPOINT settlement")?;
                    Ok(())
                }
                // The transaction itself failed: the whole batch runs again.
                Err(e @ (StoreError::Retry { .. } | StoreError::Disconnected { .. })) => {
                    return Err(e.into());
                }
                Err(e) => {
                    s.batch("ROLLBACK TO SAVEPOINT settlement")?;
                    Err(e)
                }
            }
        } else {
            match apply::<D>(s, seq, lease, row, plan) {
                Err(e @ (StoreError::Retry { .. } | StoreError::Disconnected { .. })) => {
                    return Err(e.into());
                }
                Err(e @ StoreError::Fenced { .. }) => Err(e),
                Err(_) => return Err(Abort::Isolate),
                Ok(()) => Ok(()),
            }
        };
        results[i] = Some(result);
    }
    Ok(results.into_iter().flatten().collect())
}

/// The retries, delays and releases of `planned` - most failures, each a row change and an
/// attempt with no letter or audit record beside it - in one statement, where the session
/// can ([`Session::apply_plans`]); their results go into `results`. Fewer than two are left
/// to the one-by-one path, which is one statement each already. A failing statement makes
/// the batch run again isolated, where every settlement is applied alone.
fn apply_plain(
    s: &mut dyn Session,
    batch: &[(i64, i64, &Settlement)],
    planned: &[(usize, Held, Plan<'_>)],
    results: &mut [Option<Result<(), StoreError>>],
) -> Result<(), Abort> {
    let plain: Vec<(usize, (i64, i64, &Plan<'_>))> = planned
        .iter()
        .filter(|(_, _, p)| p.letter.is_none() && p.audit.is_none())
        .map(|(i, _, p)| (*i, (batch[*i].0, batch[*i].1, p)))
        .collect();
    if plain.len() < 2 {
        return Ok(());
    }
    let plans: Vec<(i64, i64, &Plan<'_>)> = plain.iter().map(|(_, p)| *p).collect();
    let changed = match s.apply_plans(&plans) {
        None => return Ok(()),
        Some(Ok(changed)) => changed,
        Some(Err(e @ (StoreError::Retry { .. } | StoreError::Disconnected { .. }))) => {
            return Err(e.into());
        }
        Some(Err(_)) => return Err(Abort::Isolate),
    };
    let mut changed: HashSet<(i64, i64)> = changed.into_iter().collect();
    for (i, (seq, lease, _)) in plain {
        // The rows are locked and no pair comes twice, so every one changes; the
        // statement's own fence keeps the answer exact all the same.
        results[i] = Some(if changed.remove(&(seq, lease)) {
            Ok(())
        } else {
            Err(StoreError::Fenced { seq, lease })
        });
    }
    Ok(())
}

/// `plan` applied to message `seq`, held by `lease` and read as `row` under its lock.
fn apply<D: Dialect>(
    s: &mut dyn Session,
    seq: i64,
    lease: i64,
    row: &Held,
    plan: &Plan<'_>,
) -> Result<(), StoreError> {
    let mut args = vec![
        Arg::Text(plan.state),
        Arg::OptInt(plan.due_at_ms),
        Arg::Int(plan.attempts_spent),
        Arg::Int(plan.deferrals_counted),
        Arg::Int(plan.dead_letterings_counted),
        Arg::Int(plan.deliveries_returned),
        Arg::OptInt(plan.failed_at_ms),
        Arg::OptInt(plan.updated_at_ms),
        Arg::Int(seq),
        Arg::Int(lease),
    ];
    let recorded = match (plan.attempt, D::SQL.settle_recording) {
        (Some(failed), Some(both)) => {
            args.extend([
                Arg::Int(clamp_ms(failed.at_ms)),
                Arg::Text(&failed.kind),
                Arg::Text(&failed.message),
            ]);
            Some(both)
        }
        _ => None,
    };
    let changed = s.execute(recorded.unwrap_or(D::SQL.settle), &args)?;
    // The batch read the row under lock already; the statement's own fence keeps it exact.
    if changed != 1 {
        return Err(StoreError::Fenced { seq, lease });
    }
    if let Some(failed) = plan.attempt.filter(|_| recorded.is_none()) {
        s.execute(
            D::SQL.attempt,
            &[
                Arg::Int(seq),
                Arg::Int(clamp_ms(failed.at_ms)),
                Arg::Text(&failed.kind),
                Arg::Text(&failed.message),
            ],
        )?;
    }
    if let (Some(letter), Some(failed)) = (plan.letter, plan.attempt) {
        s.execute(
            D::SQL.letter,
            &[
                Arg::Int(seq),
                Arg::Text(&row.id),
                Arg::Text(&row.topic),
                Arg::Text(&letter.dlq),
                Arg::Text(&letter.class),
                Arg::Text(&failed.kind),
                Arg::Text(&letter.reason),
                Arg::Int(plan.attempts_after(row.attempt)),
                Arg::Int(clamp_ms(failed.at_ms)),
                Arg::Text(letter.format),
                Arg::Bytes(&letter.envelope),
                Arg::Int(seq),
            ],
        )?;
    }
    if let Some(a) = plan.audit {
        audit::<D>(s, a.at_ms, &row.id, &row.topic, a.event, a.detail)?;
    }
    Ok(())
}
