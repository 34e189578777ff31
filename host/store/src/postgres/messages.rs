//! Messages through their life on PostgreSQL: published, claimed by whichever gateway gets
//! there first, leases kept alive while deliveries run.

use std::collections::HashSet;

use super::{Conn, PostgresStore, TOPICS_LOCK};
use crate::model::{AttemptRecord, Delivery};
use crate::{Claimed, Fresh, NewMessage, Published, StoreError, clamp_ms};

/// A keyed message (its route orders by key) of `messages` that nothing of its topic and
/// key holds back: no older message ready or scheduled, and no other message leased (a
/// later one leased first - two publishes of the key committed out of order - holds it
/// back too: one message of a key in flight at a time) - lookups in the `messages_keyed`
/// index. The lookup reads the statement's snapshot, not the locks: a row
/// another gateway is claiming this instant still reads as unfinished, so two gateways
/// never take two messages of one key (a locking lookup under `SKIP LOCKED` would pass
/// over exactly that row).
macro_rules! not_held_back {
    () => {
        "
      AND (key IS NULL OR NOT (
        EXISTS (SELECT 1 FROM messages o WHERE o.topic = messages.topic
                  AND o.key = messages.key AND o.state IN ('ready', 'scheduled')
                  AND o.seq < messages.seq)
        OR EXISTS (SELECT 1 FROM messages o WHERE o.topic = messages.topic
                     AND o.key = messages.key AND o.state = 'leased'
                     AND o.seq <> messages.seq)))"
    };
}

/// Whether a keyed claimed row `c` comes after a dead letter of its key: its key's newest
/// older dead letter is newer than its newest older delivered or discarded message (the
/// older messages are all finished, or it would have been held back). Two lookups at the
/// end of `messages_keyed` ranges, however long the key's history.
macro_rules! after_dead_letter {
    () => {
        "
       (c.key IS NOT NULL AND COALESCE(
           (SELECT MAX(o.seq) FROM messages o WHERE o.topic = c.topic AND o.key = c.key
               AND o.state = 'dead' AND o.seq < c.seq)
           > COALESCE((SELECT MAX(o.seq) FROM messages o WHERE o.topic = c.topic
               AND o.key = c.key AND o.state IN ('delivered', 'discarded')
               AND o.seq < c.seq), 0), false)) AS after_dead_letter"
    };
}

/// The due messages of one topic, oldest first, that no other gateway is claiming right
/// now (`SKIP LOCKED`: competing claims take different rows instead of waiting), leased,
/// with their histories, in one statement - one round trip per topic and claim round. `was`
/// tells a redelivery (an expired lease) from a first claim; a redelivery is audited in
/// the same statement, so the audit trail and the lease cannot disagree. Each kind of due
/// row is read in index order, at most `limit` of each, and the oldest `limit` of those
/// claimed: one `WHERE ... OR ... ORDER BY` made PostgreSQL sort the topic's whole backlog
/// on every claim. A history is read only for a message that has failed before. A keyed
/// message waits while it is held back (`not_held_back!`); an expired lease is its key's
/// oldest already.
const CLAIM: &str = concat!(
    "
WITH ready AS (
    SELECT seq, state AS was, next_at_ms AS due_at FROM messages
    WHERE topic = $1 AND state = 'ready' AND next_at_ms <= $2
      AND ($5 OR first_failed_at_ms IS NOT NULL)",
    not_held_back!(),
    "
    ORDER BY next_at_ms LIMIT $3
    FOR UPDATE SKIP LOCKED),
scheduled AS (
    SELECT seq, state AS was, next_at_ms AS due_at FROM messages
    WHERE topic = $1 AND state = 'scheduled' AND next_at_ms <= $2",
    not_held_back!(),
    "
    ORDER BY next_at_ms LIMIT $3
    FOR UPDATE SKIP LOCKED),
expired AS (
    SELECT seq, state AS was, next_at_ms AS due_at FROM messages
    WHERE state = 'leased' AND lease_until_ms <= $2 AND topic = $1
    ORDER BY lease_until_ms LIMIT $3
    FOR UPDATE SKIP LOCKED),
due AS (
    SELECT seq, was FROM (
        SELECT * FROM ready UNION ALL SELECT * FROM scheduled UNION ALL SELECT * FROM expired
    ) d
    ORDER BY due_at LIMIT $3),
claimed AS (
    UPDATE messages m
    SET state = 'leased', lease_until_ms = $4, lease = m.lease + 1,
        deliveries = m.deliveries + 1, updated_at_ms = $2
    FROM due WHERE m.seq = due.seq
    RETURNING m.seq, m.lease, m.id, m.topic, m.headers, m.payload, m.content_type,
              m.attempt, m.deferrals, m.published_at_ms, m.first_failed_at_ms, due.was,
              m.key),
audited AS (
    INSERT INTO audit (at_ms, message_id, topic, event, detail)
    SELECT $2, id, topic, 'lease-expired', 'delivered again: possible duplicate'
    FROM claimed WHERE was = 'leased')
SELECT c.*, CASE WHEN c.first_failed_at_ms IS NOT NULL THEN
           (SELECT json_agg(json_build_array(a.at_ms, a.kind, a.message) ORDER BY a.seq)
            FROM attempts a WHERE a.message_seq = c.seq)::TEXT END AS history,",
    after_dead_letter!(),
    "
FROM claimed c
ORDER BY c.seq"
);

/// When the next message falls due, or a lease expires. Per listed topic (the topics a
/// claim asks): the waiting index is by topic first, so one minimum over the table would
/// read all of it. Every leased row is read: the deliveries in flight and claimed ahead, and
/// leases expired but not yet taken over. A keyed message held back by an older one of its
/// key is not due: the older one's due time (or lease) is what the loop waits for - each
/// topic's rows read in due order up to the first that is not held back.
const NEXT_DUE: &str = concat!(
    "
SELECT LEAST(
    (SELECT MIN((SELECT next_at_ms FROM messages
                 WHERE messages.topic = t.topic AND state = 'ready'",
    not_held_back!(),
    "
                 ORDER BY next_at_ms LIMIT 1))
     FROM topics t),
    (SELECT MIN((SELECT next_at_ms FROM messages
                 WHERE messages.topic = t.topic AND state = 'scheduled'",
    not_held_back!(),
    "
                 ORDER BY next_at_ms LIMIT 1))
     FROM topics t),
    (SELECT MIN(lease_until_ms) FROM messages WHERE state = 'leased'))"
);

/// A batch of messages in, as one array per column; the ids stored come back.
const PUBLISH: &str = "
INSERT INTO messages
    (id, topic, headers, payload, content_type, state, next_at_ms, published_at_ms,
     updated_at_ms, key)
SELECT id, topic, headers, payload, content_type, 'ready', $6, $6, $6, key
FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BYTEA[], $5::TEXT[], $7::TEXT[])
     WITH ORDINALITY AS m (id, topic, headers, payload, content_type, key, n)
ORDER BY n
ON CONFLICT (id) DO NOTHING
RETURNING id";

/// [`PUBLISH`]'s arguments.
#[derive(Default)]
struct PublishColumns<'a> {
    ids: Vec<&'a str>,
    topics: Vec<&'a str>,
    headers: Vec<String>,
    payloads: Vec<&'a [u8]>,
    content_types: Vec<Option<&'a str>>,
    keys: Vec<Option<&'a str>>,
}

impl PostgresStore {
    /// Store `messages` as ready, in one transaction of one `INSERT` for the whole batch:
    /// a publish of a thousand messages is a handful of round trips, not two thousand.
    pub fn publish(&self, messages: &[NewMessage], now_ms: u64) -> Result<Published, StoreError> {
        if messages.is_empty() {
            return Ok(Published::default());
        }
        let mut columns = PublishColumns::default();
        for m in messages {
            columns.ids.push(&m.id);
            columns.topics.push(&m.topic);
            columns.headers.push(
                serde_json::to_string(&m.headers)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
            columns.payloads.push(&m.payload);
            columns.content_types.push(m.content_type.as_deref());
            columns.keys.push(m.key.as_deref());
        }
        self.with(|c| {
            let insert = c.statement(PUBLISH)?;
            let list = c.statement(
                "INSERT INTO topics (topic) SELECT DISTINCT t FROM UNNEST($1::TEXT[]) AS t
                 ON CONFLICT (topic) DO NOTHING",
            )?;
            let mut tx = c.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&TOPICS_LOCK])?;
            // `DO NOTHING` also skips a second copy of an id within the batch: the first
            // copy is stored, the second is a duplicate, as if published one by one.
            let mut stored: HashSet<String> = tx
                .query(
                    &insert,
                    &[
                        &columns.ids,
                        &columns.topics,
                        &columns.headers,
                        &columns.payloads,
                        &columns.content_types,
                        &clamp_ms(now_ms),
                        &columns.keys,
                    ],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let mut out = Published::default();
            let mut topics: Vec<&str> = Vec::new();
            for m in messages {
                if stored.remove(&m.id) {
                    topics.push(&m.topic);
                    out.accepted.push(m.id.clone());
                } else {
                    out.duplicates.push(m.id.clone());
                }
            }
            if !out.accepted.is_empty() {
                tx.execute(&list, &[&topics])?;
                // Delivered to the listeners at commit: every gateway looks now.
                tx.execute("SELECT pg_notify($1, '')", &[&super::CHANNEL])?;
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
        self.with(|c| claim_in(c, now_ms, wants, lease_ms, Fresh::Taken))
    }

    /// [`PostgresStore::claim`] of retries only: messages that have failed before and
    /// expired leases.
    pub fn claim_retries(
        &self,
        now_ms: u64,
        wants: &[(Vec<String>, usize)],
        lease_ms: u64,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.with(|c| claim_in(c, now_ms, wants, lease_ms, Fresh::Left))
    }

    /// Forget topics with nothing pending.
    pub fn prune_topics(&self) -> Result<usize, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&TOPICS_LOCK])?;
            // One lookup in each state's index (none holds all three states).
            let n = tx.execute(
                "DELETE FROM topics
                 WHERE NOT EXISTS (SELECT 1 FROM messages WHERE messages.topic = topics.topic
                                     AND messages.state IN ('ready', 'scheduled'))
                   AND NOT EXISTS (SELECT 1 FROM messages WHERE messages.topic = topics.topic
                                     AND messages.state = 'leased')",
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
                // Never shortened: the lease it was given holds, whatever the clock did.
                "UPDATE messages m SET lease_until_ms = GREATEST(m.lease_until_ms, $3)
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
            let s = c.statement(NEXT_DUE)?;
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

/// Each topic of each group claimed by a statement of its own (each its own transaction:
/// a claim holds nothing the next one needs), oldest first.
fn claim_in(
    c: &mut Conn,
    now_ms: u64,
    wants: &[(Vec<String>, usize)],
    lease_ms: u64,
    fresh: Fresh,
) -> Result<Vec<Claimed>, StoreError> {
    let fresh = fresh == Fresh::Taken;
    let claim = c.statement(CLAIM)?;
    let now = clamp_ms(now_ms);
    let until = clamp_ms(now_ms.saturating_add(lease_ms));
    let mut claimed: Vec<Claimed> = Vec::new();
    for (topics, limit) in wants {
        let first = claimed.len();
        for topic in topics {
            let left = limit.saturating_sub(claimed.len() - first);
            if left == 0 {
                break;
            }
            let left = i64::try_from(left).unwrap_or(i64::MAX);
            for row in c
                .client
                .query(&claim, &[topic, &now, &left, &until, &fresh])?
            {
                claimed.push(claimed_of(&row)?);
            }
        }
    }
    Ok(claimed)
}

fn claimed_of(row: &postgres::Row) -> Result<Claimed, StoreError> {
    let id: String = row.get(2);
    let history = history_of(&id, row.get(13))?;
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
            history,
            redelivery: row.get::<_, String>(11) == "leased",
            after_dead_letter: row.get(14),
            source: verdict_registry::SourceKind::Embedded.name(),
        },
    })
}

/// A claimed message's attempts from [`CLAIM`]'s `history` column: a JSON array of
/// `[at_ms, kind, message]`, oldest first; `NULL` when it has none.
fn history_of(id: &str, json: Option<String>) -> Result<Vec<AttemptRecord>, StoreError> {
    let Some(json) = json else {
        return Ok(Vec::new());
    };
    let rows: Vec<(i64, String, String)> = serde_json::from_str(&json)
        .map_err(|e| StoreError::Corrupt(format!("message {id}: history: {e}")))?;
    Ok(rows
        .into_iter()
        .map(|(at_ms, kind, message)| AttemptRecord {
            at_ms: at_ms.max(0) as u64,
            kind,
            message,
        })
        .collect())
}
