//! Messages through their life on PostgreSQL: published, claimed by whichever gateway gets
//! there first, leases kept alive while deliveries run.

use std::collections::BTreeMap;

use super::{Conn, PostgresStore, TOPICS_LOCK, audit};
use crate::model::{AttemptRecord, Delivery};
use crate::store::{Claimed, NewMessage, Published, StoreError, clamp_ms};

/// The due messages of one topic, oldest first, that no other gateway is claiming right
/// now (`SKIP LOCKED`: competing claims take different rows instead of waiting), leased in
/// the same statement; `was` tells a redelivery (an expired lease) from a first claim.
const CLAIM: &str = "
WITH due AS (
    SELECT seq, state AS was FROM messages
    WHERE topic = $1
      AND ((state IN ('ready', 'scheduled') AND next_at_ms <= $2)
           OR (state = 'leased' AND lease_until_ms <= $2))
    ORDER BY next_at_ms
    LIMIT $3
    FOR UPDATE SKIP LOCKED)
UPDATE messages m
SET state = 'leased', lease_until_ms = $4, lease = m.lease + 1,
    deliveries = m.deliveries + 1, updated_at_ms = $2
FROM due WHERE m.seq = due.seq
RETURNING m.seq, m.lease, m.id, m.topic, m.headers, m.payload, m.content_type, m.attempt,
          m.deferrals, m.published_at_ms, m.first_failed_at_ms, due.was";

const HISTORY: &str = "SELECT message_seq, at_ms, kind, message FROM attempts
                       WHERE message_seq = ANY($1) ORDER BY message_seq, seq";

impl PostgresStore {
    /// Store `messages` as ready, in one transaction.
    pub fn publish(&self, messages: &[NewMessage], now_ms: u64) -> Result<Published, StoreError> {
        self.with(|c| {
            let insert = c.statement(
                "INSERT INTO messages
                 (id, topic, headers, payload, content_type, state, next_at_ms, published_at_ms,
                  updated_at_ms)
                 VALUES ($1, $2, $3, $4, $5, 'ready', $6, $6, $6)
                 ON CONFLICT (id) DO NOTHING RETURNING seq",
            )?;
            let list = c.statement(
                "INSERT INTO topics (topic) VALUES ($1) ON CONFLICT (topic) DO NOTHING",
            )?;
            let mut tx = c.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&TOPICS_LOCK])?;
            let now = clamp_ms(now_ms);
            let mut out = Published::default();
            for m in messages {
                let headers = serde_json::to_string(&m.headers)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let stored = tx.query_opt(
                    &insert,
                    &[&m.id, &m.topic, &headers, &m.payload, &m.content_type, &now],
                )?;
                if stored.is_some() {
                    tx.execute(&list, &[&m.topic])?;
                    if out.accepted.is_empty() {
                        // Delivered to the listeners at commit: every gateway looks now.
                        tx.execute("SELECT pg_notify($1, '')", &[&super::CHANNEL])?;
                    }
                    out.accepted.push(m.id.clone());
                } else {
                    out.duplicates.push(m.id.clone());
                }
            }
            tx.commit()?;
            Ok(out)
        })
    }

    /// Topics that may have messages to deliver.
    pub fn topics(&self) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let s = c.statement("SELECT topic FROM topics ORDER BY topic")?;
            Ok(c.client.query(&s, &[])?.iter().map(|r| r.get(0)).collect())
        })
    }

    /// Lease due messages for each `(topics, limit)` group of `wants`, for `lease_ms`.
    pub fn claim(
        &self,
        now_ms: u64,
        wants: &[(Vec<String>, usize)],
        lease_ms: u64,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.with(|c| claim_in(c, now_ms, wants, lease_ms))
    }

    /// Forget topics with nothing pending.
    pub fn prune_topics(&self) -> Result<usize, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&TOPICS_LOCK])?;
            let n = tx.execute(
                "DELETE FROM topics WHERE NOT EXISTS (
                     SELECT 1 FROM messages
                     WHERE messages.topic = topics.topic
                       AND messages.state IN ('ready', 'scheduled', 'leased'))",
                &[],
            )?;
            tx.commit()?;
            Ok(n as usize)
        })
    }

    /// Extend each `(seq, lease)` still held to `until_ms`.
    pub fn extend_leases(&self, held: &[(i64, i64)], until_ms: u64) -> Result<usize, StoreError> {
        if held.is_empty() {
            return Ok(0);
        }
        self.with(|c| {
            let s = c.statement(
                // Rows locked in `seq` order, as a settlement batch locks them: the two
                // never wait on each other in a cycle.
                "UPDATE messages m SET lease_until_ms = $3
                 FROM (SELECT seq FROM messages
                       WHERE (seq, lease) IN (SELECT * FROM UNNEST($1::BIGINT[], $2::BIGINT[]))
                         AND state = 'leased'
                       ORDER BY seq FOR UPDATE) AS held
                 WHERE m.seq = held.seq",
            )?;
            let (seqs, leases): (Vec<i64>, Vec<i64>) = held.iter().copied().unzip();
            Ok(c.client
                .execute(&s, &[&seqs, &leases, &clamp_ms(until_ms)])? as usize)
        })
    }

    /// The earliest instant a pending message falls due (or a lease expires).
    pub fn next_due_ms(&self) -> Result<Option<u64>, StoreError> {
        self.with(|c| {
            let s = c.statement(
                "SELECT LEAST(
                     (SELECT MIN(next_at_ms) FROM messages WHERE state = 'ready'),
                     (SELECT MIN(next_at_ms) FROM messages WHERE state = 'scheduled'),
                     (SELECT MIN(lease_until_ms) FROM messages WHERE state = 'leased'))",
            )?;
            let due: Option<i64> = c.client.query_one(&s, &[])?.get(0);
            Ok(due.map(|t| t.max(0) as u64))
        })
    }

    /// A message's state by id.
    pub fn state_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.with(|c| {
            let s = c.statement("SELECT state FROM messages WHERE id = $1")?;
            Ok(c.client.query_opt(&s, &[&id])?.map(|r| r.get(0)))
        })
    }
}

/// One transaction for the whole claim round: every topic of every group, then the
/// claimed messages' histories in one query.
fn claim_in(
    c: &mut Conn,
    now_ms: u64,
    wants: &[(Vec<String>, usize)],
    lease_ms: u64,
) -> Result<Vec<Claimed>, StoreError> {
    let claim = c.statement(CLAIM)?;
    let history = c.statement(HISTORY)?;
    let now = clamp_ms(now_ms);
    let until = clamp_ms(now_ms.saturating_add(lease_ms));
    let mut tx = c.client.transaction()?;
    let mut claimed: Vec<Claimed> = Vec::new();
    for (topics, limit) in wants {
        let first = claimed.len();
        for topic in topics {
            let left = limit.saturating_sub(claimed.len() - first);
            if left == 0 {
                break;
            }
            let left = i64::try_from(left).unwrap_or(i64::MAX);
            let mut rows = tx.query(&claim, &[topic, &now, &left, &until])?;
            // `UPDATE ... RETURNING` comes in no particular order: oldest first again.
            rows.sort_by_key(|r| r.get::<_, i64>(0));
            for row in rows {
                claimed.push(claimed_of(&row)?);
            }
        }
    }
    if !claimed.is_empty() {
        let seqs: Vec<i64> = claimed.iter().map(|c| c.seq).collect();
        let mut by_seq: BTreeMap<i64, Vec<AttemptRecord>> = BTreeMap::new();
        for row in tx.query(&history, &[&seqs])? {
            by_seq.entry(row.get(0)).or_default().push(AttemptRecord {
                at_ms: row.get::<_, i64>(1).max(0) as u64,
                kind: row.get(2),
                message: row.get(3),
            });
        }
        for c in &mut claimed {
            c.delivery.history = by_seq.remove(&c.seq).unwrap_or_default();
        }
    }
    for c in claimed.iter().filter(|c| c.delivery.redelivery) {
        audit(
            &mut tx,
            now_ms,
            &c.delivery.id,
            &c.delivery.topic,
            "lease-expired",
            "delivered again: possible duplicate",
        )?;
    }
    tx.commit()?;
    Ok(claimed)
}

fn claimed_of(row: &postgres::Row) -> Result<Claimed, StoreError> {
    let id: String = row.get(2);
    let headers: String = row.get(4);
    let headers = serde_json::from_str(&headers)
        .map_err(|e| StoreError::Corrupt(format!("message {id}: headers: {e}")))?;
    let count = |i: usize| u32::try_from(row.get::<_, i64>(i).max(0)).unwrap_or(u32::MAX);
    Ok(Claimed {
        seq: row.get(0),
        lease: row.get(1),
        delivery: Delivery {
            id,
            topic: row.get(3),
            headers,
            payload: row.get(5),
            content_type: row.get(6),
            attempts_spent: count(7),
            deferrals: count(8),
            published_at_ms: row.get::<_, i64>(9).max(0) as u64,
            first_failed_at_ms: row.get::<_, Option<i64>>(10).map(|t| t.max(0) as u64),
            history: Vec::new(),
            redelivery: row.get::<_, String>(11) == "leased",
            source: verdict_registry::SourceKind::Embedded.name(),
        },
    })
}
