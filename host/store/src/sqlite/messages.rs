//! Messages through their life: published, claimed (leased), then delivered, scheduled
//! again, dead-lettered or discarded - each change one transaction.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteStore, audit};
use crate::model::{AttemptRecord, Delivery};
use crate::plan::Plan;
use crate::{Claimed, Fresh, NewMessage, Published, StoreError, clamp_ms};

impl SqliteStore {
    /// Store `messages` as ready, in one transaction.
    pub fn publish(&self, messages: &[NewMessage], now_ms: u64) -> Result<Published, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut out = Published::default();
        {
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO messages
                 (id, topic, headers, payload, content_type, state, next_at_ms, published_at_ms,
                  updated_at_ms, key)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'ready', ?6, ?6, ?6, ?7)",
            )?;
            let mut topics =
                tx.prepare_cached("INSERT OR IGNORE INTO topics (topic) VALUES (?1)")?;
            for m in messages {
                let headers = serde_json::to_string(&m.headers)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let n = insert.execute(params![
                    m.id,
                    m.topic,
                    headers,
                    m.payload,
                    m.content_type,
                    clamp_ms(now_ms),
                    m.key
                ])?;
                if n == 1 {
                    topics.execute([&m.topic])?;
                    out.accepted.push(m.id.clone());
                } else {
                    out.duplicates.push(m.id.clone());
                }
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Return every leased message to ready (at start: the process that leased them is
    /// gone). Each is counted as a possible duplicate delivery in the audit log.
    pub fn recover_leases(&self, now_ms: u64) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let leased: Vec<(String, String)> = tx
            .prepare("SELECT id, topic FROM messages WHERE state = 'leased'")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        for (id, topic) in &leased {
            audit(
                &tx,
                now_ms,
                id,
                topic,
                "lease-recovered",
                "leased at shutdown or crash",
            )?;
        }
        tx.execute(
            "UPDATE messages SET state = 'ready', lease_until_ms = NULL, updated_at_ms = ?1
             WHERE state = 'leased'",
            [now_ms],
        )?;
        tx.commit()?;
        Ok(leased.len() as u64)
    }

    /// Topics that may have messages to deliver (each published or replayed topic, until
    /// [`Store::prune_topics`] finds it idle): the claim loop asks each route's topics for
    /// work in turn.
    pub fn topics(&self) -> Result<Vec<String>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT topic FROM topics ORDER BY topic")?;
        let topics = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(topics)
    }

    /// Lease due messages for each `(topics, limit)` group of `wants` - at most `limit` from
    /// the group's topics together, each topic oldest first - ready or scheduled with
    /// `next_at` passed, or leased with the lease expired, for `lease_ms`.
    /// Each claimed message carries a new lease number: only a settlement naming it applies.
    pub fn claim(
        &self,
        now_ms: u64,
        wants: &[(Vec<String>, usize)],
        lease_ms: u64,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.claim_unsynced(now_ms, wants, lease_ms, Fresh::Taken)
    }

    /// [`SqliteStore::claim`] of retries only: messages that have failed before (scheduled,
    /// or given back to wait) and expired leases - no message delivered for the first time.
    pub fn claim_retries(
        &self,
        now_ms: u64,
        wants: &[(Vec<String>, usize)],
        lease_ms: u64,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.claim_unsynced(now_ms, wants, lease_ms, Fresh::Left)
    }

    /// A claim need not wait for the disk before its delivery starts. In WAL mode a commit
    /// without a sync survives the process crashing; only a power loss or an OS crash can
    /// lose it, and then the message is simply ready again (delivered anew, at least once).
    /// The next settlement's sync covers the claims before it. Claims come as often as
    /// slots free up: one fsync each made them the store's bottleneck.
    fn claim_unsynced(
        &self,
        now_ms: u64,
        wants: &[(Vec<String>, usize)],
        lease_ms: u64,
        fresh: Fresh,
    ) -> Result<Vec<Claimed>, StoreError> {
        let mut conn = self.conn();
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let claimed = claim_in(&mut conn, now_ms, wants, lease_ms, fresh);
        conn.pragma_update(None, "synchronous", "FULL")?;
        claimed
    }

    /// Per topic, how many keys are held back by a retry of their oldest message.
    pub fn parked_keys(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.conn();
        let mut parked = conn.prepare_cached(PARKED_KEYS)?;
        let rows = parked.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Per topic, the distinct keys with an unfinished keyed message that has failed before:
/// only a key's oldest unfinished message can have been delivered, so these are the keys
/// held back by a retry - waiting for it, released back to wait (a retry budget's hold, a
/// pause), or in flight.
const PARKED_KEYS: &str = "
    SELECT topic, COUNT(DISTINCT key) FROM messages
    WHERE state IN ('ready', 'scheduled', 'leased') AND key IS NOT NULL
      AND first_failed_at_ms IS NOT NULL
    GROUP BY topic ORDER BY topic";

/// [`Store::claim`]'s transaction.
fn claim_in(
    conn: &mut Connection,
    now_ms: u64,
    wants: &[(Vec<String>, usize)],
    lease_ms: u64,
    fresh: Fresh,
) -> Result<Vec<Claimed>, StoreError> {
    {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let now = clamp_ms(now_ms);
        let until = clamp_ms(now_ms.saturating_add(lease_ms));
        let mut claimed = Vec::new();
        for (topics, limit) in wants {
            let first = claimed.len();
            for topic in topics {
                let left = limit.saturating_sub(claimed.len() - first);
                if left == 0 {
                    break;
                }
                claim_topic(&tx, topic, left, (now, until), fresh, &mut claimed)?;
            }
        }
        for c in claimed.iter().filter(|c| c.delivery.redelivery) {
            audit(
                &tx,
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
}

impl SqliteStore {
    /// Forget topics with no message ready, scheduled or leased (a publish or a replay
    /// lists a topic again), so a claim round asks only topics that may have work; how
    /// many were forgotten.
    pub fn prune_topics(&self) -> Result<usize, StoreError> {
        self.write(|tx| Ok(tx.execute(PRUNE_TOPICS, [])?))
    }

    /// Keep the leases of deliveries still running: each `(seq, lease)` whose message is
    /// still held by that lease is extended to `until_ms`. Returns how many were.
    pub fn extend_leases(&self, held: &[(i64, i64)], until_ms: u64) -> Result<usize, StoreError> {
        self.write(|tx| {
            let mut extend = tx.prepare_cached(
                // Never shortened: the lease it was given holds, whatever the clock did.
                "UPDATE messages SET lease_until_ms = MAX(lease_until_ms, ?3)
                 WHERE seq = ?1 AND lease = ?2 AND state = 'leased'",
            )?;
            let mut n = 0;
            for (seq, lease) in held {
                n += extend.execute(params![seq, lease, clamp_ms(until_ms)])?;
            }
            Ok(n)
        })
    }

    /// The earliest instant a pending message falls due (or a lease expires).
    pub fn next_due_ms(&self) -> Result<Option<u64>, StoreError> {
        let conn = self.conn();
        let due: Option<i64> = conn.prepare_cached(NEXT_DUE)?.query_row([], |r| r.get(0))?;
        Ok(due.map(|t| t.max(0) as u64))
    }

    /// A message's state by id.
    pub fn state_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT state FROM messages WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .optional()?)
    }
}

fn record_attempt(tx: &Connection, seq: i64, failed: &AttemptRecord) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO attempts (message_seq, at_ms, kind, message) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        seq,
        clamp_ms(failed.at_ms),
        failed.kind,
        failed.message
    ])?;
    Ok(())
}

/// `m`, a keyed message (its route orders by key), is not held back: no older message of
/// its topic and key is ready or scheduled, and no other is leased (a later one leased
/// first holds it back too: one message of a key in flight at a time) - one lookup per
/// state, each in the `messages_keyed` index (an `IN` list would match no index). Spelled
/// once for the claim and the next-due time, which must agree.
macro_rules! not_held_back {
    () => {
        "
    AND (m.key IS NULL OR NOT (
        EXISTS (SELECT 1 FROM messages o WHERE o.topic = m.topic AND o.key = m.key
                AND o.state = 'ready' AND o.seq < m.seq)
        OR EXISTS (SELECT 1 FROM messages o WHERE o.topic = m.topic AND o.key = m.key
                   AND o.state = 'scheduled' AND o.seq < m.seq)
        OR EXISTS (SELECT 1 FROM messages o WHERE o.topic = m.topic AND o.key = m.key
                   AND o.state = 'leased' AND o.seq <> m.seq)))"
    };
}

/// Whether a keyed message of `messages` comes after a dead letter of its key: its key's
/// newest older dead letter is newer than its newest older delivered or discarded message
/// (the older messages are all finished, or it would be held back). Two lookups at the
/// end of `messages_keyed` ranges, however long the key's history.
macro_rules! after_dead_letter {
    () => {
        "
    (messages.key IS NOT NULL AND COALESCE(
        (SELECT MAX(o.seq) FROM messages o WHERE o.topic = messages.topic
            AND o.key = messages.key AND o.state = 'dead' AND o.seq < messages.seq)
        > COALESCE((SELECT MAX(o.seq) FROM messages o WHERE o.topic = messages.topic
            AND o.key = messages.key AND o.state IN ('delivered', 'discarded')
            AND o.seq < messages.seq), 0), 0))"
    };
}

/// A claim of one topic's due messages: the first `limit` of each kind of due message (ready,
/// scheduled, leased past its lease), each read in index order, then the first `limit` of
/// those. One `WHERE ... OR ... ORDER BY` over the topic's backlog would make SQLite sort
/// every due row on every claim. A keyed message waits while it is held back
/// (`not_held_back!`); an expired lease is its key's oldest already.
pub(super) const CLAIM_TOPIC: &str = concat!(
    "
    SELECT seq, id, topic, headers, payload, content_type, attempt, deferrals,
           published_at_ms, first_failed_at_ms, state,",
    after_dead_letter!(),
    "
    FROM messages
    WHERE seq IN (
        SELECT seq FROM (SELECT seq FROM messages m
            WHERE topic = ?3 AND state = 'ready' AND next_at_ms <= ?1
              AND (?4 OR first_failed_at_ms IS NOT NULL)
",
    not_held_back!(),
    "
            ORDER BY next_at_ms LIMIT ?2)
        UNION ALL
        SELECT seq FROM (SELECT seq FROM messages m
            WHERE topic = ?3 AND state = 'scheduled' AND next_at_ms <= ?1
",
    not_held_back!(),
    "
            ORDER BY next_at_ms LIMIT ?2)
        UNION ALL
        SELECT seq FROM (SELECT seq FROM messages
            WHERE state = 'leased' AND lease_until_ms <= ?1 AND topic = ?3
            ORDER BY lease_until_ms LIMIT ?2))
    ORDER BY next_at_ms LIMIT ?2"
);

/// Topics with nothing ready, scheduled or leased, forgotten: one lookup per state, since an
/// `IN` over the three states matches no state index.
pub(super) const PRUNE_TOPICS: &str = "
    DELETE FROM topics
    WHERE NOT EXISTS (SELECT 1 FROM messages
                      WHERE messages.topic = topics.topic AND messages.state = 'ready')
      AND NOT EXISTS (SELECT 1 FROM messages
                      WHERE messages.topic = topics.topic AND messages.state = 'scheduled')
      AND NOT EXISTS (SELECT 1 FROM messages
                      WHERE messages.topic = topics.topic AND messages.state = 'leased')";

/// The earliest instant a pending message falls due or a lease expires, per listed topic (the
/// topics a claim asks): the waiting index is by topic first, so one minimum over the whole
/// table would read all of it. Every leased row is read: the deliveries in flight and claimed
/// ahead, and leases expired but not yet taken over. A keyed message held back by an older
/// one of its key is not due: the older one's due time (or lease) is what the loop waits for.
pub(super) const NEXT_DUE: &str = concat!(
    "
    SELECT MIN(t) FROM (
        SELECT (SELECT MIN(next_at_ms) FROM messages m
                WHERE topic = topics.topic AND state = 'ready'
",
    not_held_back!(),
    ")
               AS t FROM topics
        UNION ALL
        SELECT (SELECT MIN(next_at_ms) FROM messages m
                WHERE topic = topics.topic AND state = 'scheduled'
",
    not_held_back!(),
    ")
               FROM topics
        UNION ALL
        SELECT MIN(lease_until_ms) FROM messages WHERE state = 'leased')"
);

/// `(now, lease until)`, ms.
type Times = (i64, i64);

fn claim_topic(
    tx: &Connection,
    topic: &str,
    limit: usize,
    (now, until): Times,
    fresh: Fresh,
    claimed: &mut Vec<Claimed>,
) -> Result<(), StoreError> {
    let mut due = tx.prepare_cached(CLAIM_TOPIC)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = due.query_map(params![now, limit, topic, fresh == Fresh::Taken], |r| {
        let headers: String = r.get(3)?;
        let state: String = r.get(10)?;
        Ok((
            Claimed {
                seq: r.get(0)?,
                lease: 0,
                delivery: Delivery {
                    id: r.get(1)?,
                    topic: r.get(2)?,
                    headers: BTreeMap::new(),
                    payload: r.get(4)?,
                    content_type: r.get(5)?,
                    attempts_spent: r.get(6)?,
                    deferrals: r.get(7)?,
                    published_at_ms: r.get(8)?,
                    first_failed_at_ms: r.get(9)?,
                    history: Vec::new(),
                    redelivery: state == "leased",
                    after_dead_letter: r.get(11)?,
                    source: verdict_registry::SourceKind::Embedded.name(),
                },
            },
            headers,
        ))
    })?;
    let first = claimed.len();
    for row in rows {
        let (mut c, headers) = row?;
        c.delivery.headers = serde_json::from_str(&headers)
            .map_err(|e| StoreError::Corrupt(format!("message {}: headers: {e}", c.delivery.id)))?;
        claimed.push(c);
    }
    let mut lease = tx.prepare_cached(
        "UPDATE messages SET state = 'leased', lease_until_ms = ?2, lease = lease + 1,
                deliveries = deliveries + 1, updated_at_ms = ?3
         WHERE seq = ?1 RETURNING lease",
    )?;
    let mut history = tx.prepare_cached(
        "SELECT at_ms, kind, message FROM attempts WHERE message_seq = ?1 ORDER BY rowid",
    )?;
    for c in &mut claimed[first..] {
        c.lease = lease.query_row(params![c.seq, until, now], |r| r.get(0))?;
        // Every settlement that records an attempt and leaves the message deliverable sets
        // `first_failed_at_ms` (and a replay clears both): without it there is no history
        // to read - most claims, a message's first delivery.
        if c.delivery.first_failed_at_ms.is_none() {
            continue;
        }
        c.delivery.history = history
            .query_map([c.seq], |r| {
                Ok(AttemptRecord {
                    at_ms: r.get(0)?,
                    kind: r.get(1)?,
                    message: r.get(2)?,
                })
            })?
            .collect::<Result<_, _>>()?;
    }
    Ok(())
}

/// A [`Plan`] applied to message `seq` while lease `lease` holds it, and only then (the
/// fence every settlement passes): the row changed, the failed attempt recorded, the
/// dead letter written, the audit record kept - inside the caller's transaction (a batch:
/// a savepoint each in one transaction). A message no longer held by that lease is
/// [`StoreError::Fenced`] and changes nothing.
pub(super) fn settle_in(
    tx: &Connection,
    seq: i64,
    lease: i64,
    plan: &Plan<'_>,
) -> Result<(), StoreError> {
    let (id, topic, attempts): (String, String, i64) = tx
        .prepare_cached(
            "UPDATE messages SET state = ?3, lease_until_ms = NULL,
                    next_at_ms = COALESCE(?4, next_at_ms),
                    attempt = MIN(attempt + ?5, 4294967295),
                    deferrals = MIN(deferrals + ?6, 4294967295),
                    dead_letterings = dead_letterings + ?7,
                    deliveries = MAX(deliveries - ?8, 0),
                    first_failed_at_ms = COALESCE(first_failed_at_ms, ?9),
                    updated_at_ms = COALESCE(?10, updated_at_ms)
             WHERE seq = ?1 AND lease = ?2 AND state = 'leased'
             RETURNING id, topic, attempt",
        )?
        .query_row(
            params![
                seq,
                lease,
                plan.state,
                plan.due_at_ms,
                plan.attempts_spent,
                plan.deferrals_counted,
                plan.dead_letterings_counted,
                plan.deliveries_returned,
                plan.failed_at_ms,
                plan.updated_at_ms,
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?
        .ok_or(StoreError::Fenced { seq, lease })?;
    if let Some(failed) = plan.attempt {
        record_attempt(tx, seq, failed)?;
    }
    if let (Some(letter), Some(failed)) = (plan.letter, plan.attempt) {
        tx.execute(
            &format!(
                "INSERT INTO dlq (message_seq, message_id, topic, dlq, class, kind, reason,
                                  attempts, created_at_ms, format, envelope, state, repeats)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'dead', {})",
                crate::repeats_of("?1")
            ),
            params![
                seq,
                id,
                topic,
                letter.dlq,
                letter.class,
                failed.kind,
                letter.reason,
                attempts,
                clamp_ms(failed.at_ms),
                letter.format,
                letter.envelope
            ],
        )?;
    }
    if let Some(a) = plan.audit {
        audit(tx, a.at_ms, &id, &topic, a.event, a.detail)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_takes_due_messages_oldest_first_and_expired_leases_again() {
        let dir = std::env::temp_dir().join(format!("verdict-claim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = SqliteStore::open(&dir.join("db.sqlite")).unwrap();
        let message = |id: &str| NewMessage {
            id: id.into(),
            topic: "orders".into(),
            payload: b"{}".to_vec(),
            ..NewMessage::default()
        };
        store.publish(&[message("a")], 0).unwrap();
        store.publish(&[message("b"), message("c")], 5).unwrap();
        assert_eq!(store.topics().unwrap(), ["orders"]);
        // A topic with messages to deliver is kept.
        assert_eq!(store.prune_topics().unwrap(), 0);
        let want = |n: usize| [(vec!["orders".to_string()], n)];
        let ids = |claimed: &[Claimed]| -> Vec<String> {
            claimed.iter().map(|c| c.delivery.id.clone()).collect()
        };
        // Oldest first, and no more than asked.
        let first = store.claim(10, &want(1), 100).unwrap();
        assert_eq!(ids(&first), ["a"]);
        // `a` is leased until 110: not due at 50.
        assert_eq!(ids(&store.claim(50, &want(10), 100).unwrap()), ["b", "c"]);
        assert!(store.claim(60, &want(10), 100).unwrap().is_empty());
        // Past its lease `a` comes back, flagged as a possible duplicate.
        // (`b` and `c` are leased until 150.)
        let again = store.claim(120, &want(10), 100).unwrap();
        assert_eq!(ids(&again), ["a"]);
        assert!(again[0].delivery.redelivery);
        let _ = std::fs::remove_dir_all(dir);
    }
}
