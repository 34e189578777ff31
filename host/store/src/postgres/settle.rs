//! What PostgreSQL settles faster than the shared algorithm: a batch of deliveries only -
//! the usual batch, every consumer said yes - in one statement, and so one round trip and
//! one transaction of its own, instead of a lock, an update and a commit.

use std::collections::HashSet;

use super::Conn;
use crate::model::Settlement;
use crate::{StoreError, clamp_ms};

/// Every `(seq, lease)` pair still held, delivered; the pairs it delivered come back. Rows
/// are locked in `seq` order, as every batch and lease extension locks them, so that two
/// never wait on each other in a cycle.
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

/// Settle `batch`, whose every settlement is [`Settlement::Delivered`], in one statement.
pub(super) fn deliver_only(
    c: &mut Conn,
    batch: &[(i64, i64, &Settlement)],
    now_ms: u64,
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let (seqs, leases): (Vec<i64>, Vec<i64>) = batch.iter().map(|b| (b.0, b.1)).unzip();
    let statement = c.statement(DELIVERED_ALL)?;
    let mut delivered: HashSet<(i64, i64)> = c
        .client
        .query(&statement, &[&seqs, &leases, &clamp_ms(now_ms)])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // Each pair answers once: a settlement that came twice is fenced the second time, as
    // it would be one by one.
    Ok(batch
        .iter()
        .map(|&(seq, lease, _)| {
            if delivered.remove(&(seq, lease)) {
                Ok(())
            } else {
                Err(StoreError::Fenced { seq, lease })
            }
        })
        .collect())
}
