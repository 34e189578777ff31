//! Messages through their life on MariaDB/MySQL: published, claimed by whichever gateway
//! gets there first, leases kept alive while deliveries run.

use std::collections::BTreeMap;

use mysql::prelude::Queryable as _;
use mysql::{Conn, Row, TxOpts};

use super::MysqlStore;
use super::session::MySession;
use crate::model::{AttemptRecord, Delivery};
use crate::{Claimed, Fresh, NewMessage, Published, StoreError, clamp_ms};

/// A keyed message (its route orders by key) of `messages` that nothing of its topic and
/// key holds back: no older message ready or scheduled, and no other message leased (a
/// later one leased first - two publishes of the key committed out of order - holds it
/// back too) - lookups in the `messages_keyed` index. In a `FOR UPDATE` statement the
/// subquery is still a consistent read, not a locking one: a row another gateway is
/// claiming this instant reads as unfinished (a locking lookup under `SKIP LOCKED` would
/// pass over exactly that row). But its snapshot is taken when the statement starts, while
/// the locking scan reads what committed since - so the claim checks its rows once more in
/// a statement of its own ([`STILL_FREE`]).
macro_rules! not_held_back {
    () => {
        "
  AND (`key` IS NULL OR NOT (
    EXISTS (SELECT 1 FROM messages o WHERE o.topic = messages.topic
              AND o.`key` = messages.`key` AND o.state IN ('ready', 'scheduled')
              AND o.seq < messages.seq)
    OR EXISTS (SELECT 1 FROM messages o WHERE o.topic = messages.topic
                 AND o.`key` = messages.`key` AND o.state = 'leased'
                 AND o.seq <> messages.seq)))"
    };
}

/// Whether a keyed message of `messages` comes after a dead letter of its key: its key's
/// newest older dead letter is newer than its newest older delivered or discarded message
/// (the older messages are all finished, or it would be held back). Two lookups at the
/// end of `messages_keyed` ranges, however long the key's history.
macro_rules! after_dead_letter {
    () => {
        "
       (messages.`key` IS NOT NULL AND COALESCE(
           (SELECT MAX(o.seq) FROM messages o WHERE o.topic = messages.topic
               AND o.`key` = messages.`key` AND o.state = 'dead' AND o.seq < messages.seq)
           > COALESCE((SELECT MAX(o.seq) FROM messages o WHERE o.topic = messages.topic
               AND o.`key` = messages.`key` AND o.state IN ('delivered', 'discarded')
               AND o.seq < messages.seq), 0), FALSE)) AS after_dead_letter"
    };
}

/// Of the rows a claim just locked (`{seqs}`), those still not held back, read in a
/// snapshot newer than the locking scan's: a publish that committed during the scan (two
/// messages of one key the scan saw, but the subquery's older snapshot did not) holds its
/// later message back here.
const STILL_FREE: &str = concat!(
    "
SELECT seq FROM messages WHERE seq IN ({seqs})",
    not_held_back!()
);

/// When the next message falls due, or a lease expires: each state's rows read in due order
/// up to the first that is not held back - a keyed message behind an older one of its key
/// is not due, the older one's due time (or lease) is what the loop waits for.
const NEXT_DUE: &str = concat!(
    "
SELECT MIN(t) FROM (
    SELECT (SELECT next_at_ms FROM messages WHERE state = 'ready'",
    not_held_back!(),
    "
            ORDER BY next_at_ms LIMIT 1) AS t
    UNION ALL SELECT (SELECT next_at_ms FROM messages WHERE state = 'scheduled'",
    not_held_back!(),
    "
            ORDER BY next_at_ms LIMIT 1)
    UNION ALL SELECT MIN(lease_until_ms) FROM messages WHERE state = 'leased'
) due"
);

/// The due messages of one topic in one state (`ready` or `scheduled`), oldest first, that
/// no other gateway is claiming right now (`SKIP LOCKED`), locked for this transaction. Each
/// kind of due row is read on its own, in index order: one `WHERE ... OR ... ORDER BY` made
/// InnoDB sort the topic's whole backlog on every claim - and lock every row it read. A
/// keyed message waits while it is held back (`not_held_back!`).
const DUE_WAITING: &str = concat!(
    "
SELECT seq, lease, id, topic, headers, payload, content_type, attempt, deferrals,
       published_at_ms, first_failed_at_ms, state, next_at_ms, `key` IS NOT NULL AS keyed,",
    after_dead_letter!(),
    "
FROM messages
WHERE topic = ? AND state = ? AND next_at_ms <= ? AND (? OR first_failed_at_ms IS NOT NULL)",
    not_held_back!(),
    "
ORDER BY next_at_ms
LIMIT ?
FOR UPDATE SKIP LOCKED"
);

/// [`DUE_WAITING`] for leases that ran out.
const DUE_EXPIRED: &str = concat!(
    "
SELECT seq, lease, id, topic, headers, payload, content_type, attempt, deferrals,
       published_at_ms, first_failed_at_ms, state, next_at_ms, `key` IS NOT NULL AS keyed,",
    after_dead_letter!(),
    "
FROM messages
WHERE state = 'leased' AND lease_until_ms <= ? AND topic = ?
ORDER BY lease_until_ms
LIMIT ?
FOR UPDATE SKIP LOCKED"
);

impl MysqlStore {
    /// Store `messages` as ready, in one transaction.
    pub fn publish(&self, messages: &[NewMessage], now_ms: u64) -> Result<Published, StoreError> {
        self.with(|c| {
            let mut tx = c.start_transaction(TxOpts::default())?;
            let now = clamp_ms(now_ms);
            let mut out = Published::default();
            for m in messages {
                let headers = serde_json::to_string(&m.headers)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                // `ON DUPLICATE KEY` (not `INSERT IGNORE`, which would also swallow a value
                // too long for its column): 1 row when stored, 0 for a known id.
                tx.exec_drop(
                    "INSERT INTO messages
                     (id, topic, headers, payload, content_type, state, next_at_ms,
                      published_at_ms, updated_at_ms, `key`)
                     VALUES (?, ?, ?, ?, ?, 'ready', ?, ?, ?, ?)
                     ON DUPLICATE KEY UPDATE id = id",
                    (
                        &m.id,
                        &m.topic,
                        &headers,
                        &m.payload,
                        &m.content_type,
                        now,
                        now,
                        now,
                        &m.key,
                    ),
                )?;
                if tx.affected_rows() == 1 {
                    out.accepted.push(m.id.clone());
                } else {
                    out.duplicates.push(m.id.clone());
                }
            }
            tx.commit()?;
            Ok(out)
        })
    }

    /// Topics with messages pending: read from the `(state, topic)` index, so there is no
    /// list to keep (and none to forget a topic from while a publish lists it again). The
    /// distinct `(state, topic)` pairs are what the index can answer by skipping from one
    /// pair to the next (a loose index scan: a few reads per topic); `DISTINCT topic` alone
    /// read every pending row's entry on every claim round - most of the database's time.
    pub fn topics(&self) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            Ok(c.query(
                "SELECT DISTINCT topic FROM (
                     SELECT DISTINCT state, topic FROM messages
                     WHERE state IN ('ready', 'scheduled', 'leased')) AS pending
                 ORDER BY topic",
            )?)
        })
    }

    /// Nothing to forget: see [`MysqlStore::topics`].
    pub fn prune_topics(&self) -> Result<usize, StoreError> {
        Ok(0)
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

    /// [`MysqlStore::claim`] of retries only: messages that have failed before and
    /// expired leases.
    pub fn claim_retries(
        &self,
        now_ms: u64,
        wants: &[(Vec<String>, usize)],
        lease_ms: u64,
    ) -> Result<Vec<Claimed>, StoreError> {
        self.with(|c| claim_in(c, now_ms, wants, lease_ms, Fresh::Left))
    }

    /// Extend each `(seq, lease)` still held to `until_ms`.
    pub fn extend_leases(&self, held: &[(i64, i64)], until_ms: u64) -> Result<usize, StoreError> {
        if held.is_empty() {
            return Ok(0);
        }
        self.with(|c| {
            let pairs = vec!["(?, ?)"; held.len()].join(", ");
            let mut args: Vec<mysql::Value> = vec![clamp_ms(until_ms).into()];
            for (seq, lease) in held {
                args.push((*seq).into());
                args.push((*lease).into());
            }
            c.exec_drop(
                format!(
                    // Never shortened: the lease it was given holds, whatever the clock did.
                    "UPDATE messages SET lease_until_ms = GREATEST(lease_until_ms, ?)
                     WHERE state = 'leased' AND (seq, lease) IN ({pairs}) ORDER BY seq"
                ),
                args,
            )?;
            Ok(c.affected_rows() as usize)
        })
    }

    /// The earliest instant a pending message falls due (or a lease expires).
    pub fn next_due_ms(&self) -> Result<Option<u64>, StoreError> {
        self.with(|c| {
            let due: Option<Option<i64>> = c.query_first(NEXT_DUE)?;
            Ok(due.flatten().map(|t| t.max(0) as u64))
        })
    }

    /// A message's state by id.
    pub fn state_of(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.with(|c| Ok(c.exec_first("SELECT state FROM messages WHERE id = ?", (id,))?))
    }
}

/// One transaction for the whole claim round: lock each topic's due rows, lease them, read
/// their histories.
fn claim_in(
    c: &mut Conn,
    now_ms: u64,
    wants: &[(Vec<String>, usize)],
    lease_ms: u64,
    fresh: Fresh,
) -> Result<Vec<Claimed>, StoreError> {
    // Retries only: what has failed before (scheduled, or given back to wait as ready).
    let fresh = fresh == Fresh::Taken;
    let now = clamp_ms(now_ms);
    let until = clamp_ms(now_ms.saturating_add(lease_ms));
    let mut tx = c.start_transaction(TxOpts::default())?;
    let mut claimed: Vec<Claimed> = Vec::new();
    // The keyed ones among them, checked once more before they are leased.
    let mut keyed: Vec<i64> = Vec::new();
    for (topics, limit) in wants {
        let first = claimed.len();
        for topic in topics {
            let left = limit.saturating_sub(claimed.len() - first);
            if left == 0 {
                break;
            }
            let mut due: Vec<Due> = Vec::new();
            for state in ["ready", "scheduled"] {
                let rows: Vec<Row> =
                    tx.exec(DUE_WAITING, (topic, state, now, fresh, left as u64))?;
                for row in rows {
                    due.push(claimed_of(row)?);
                }
            }
            let rows: Vec<Row> = tx.exec(DUE_EXPIRED, (now, topic, left as u64))?;
            for row in rows {
                due.push(claimed_of(row)?);
            }
            // The oldest `left` of them; the rest stay as they were (locked only until
            // this transaction ends).
            due.sort_by_key(|d| (d.next_at_ms, d.claimed.seq));
            for d in due.into_iter().take(left) {
                if d.keyed {
                    keyed.push(d.claimed.seq);
                }
                claimed.push(d.claimed);
            }
        }
    }
    if !keyed.is_empty() {
        // Held back after all (see `STILL_FREE`): left as they were, unlocked at commit.
        let still_free = STILL_FREE.replace("{seqs}", &seq_list(keyed.iter().copied()));
        let free: std::collections::HashSet<i64> =
            tx.query::<i64, _>(still_free)?.into_iter().collect();
        claimed.retain(|c| !keyed.contains(&c.seq) || free.contains(&c.seq));
    }
    if claimed.is_empty() {
        tx.commit()?;
        return Ok(claimed);
    }
    let seqs = seq_list(claimed.iter().map(|c| c.seq));
    // The rows are locked by this transaction: the lease each now holds is the one read
    // plus one.
    tx.exec_drop(
        format!(
            "UPDATE messages SET state = 'leased', lease_until_ms = ?, lease = lease + 1,
                    deliveries = deliveries + 1, updated_at_ms = ?
             WHERE seq IN ({seqs})"
        ),
        (until, now),
    )?;
    // Only a message that has failed before has a history (a replay clears both).
    let failed_before = seq_list(
        claimed
            .iter()
            .filter(|c| c.delivery.first_failed_at_ms.is_some())
            .map(|c| c.seq),
    );
    let history: Vec<(i64, i64, String, String)> = if failed_before.is_empty() {
        Vec::new()
    } else {
        tx.query(format!(
            "SELECT message_seq, at_ms, kind, message FROM attempts
             WHERE message_seq IN ({failed_before}) ORDER BY message_seq, seq"
        ))?
    };
    let mut by_seq: BTreeMap<i64, Vec<AttemptRecord>> = BTreeMap::new();
    for (seq, at_ms, kind, message) in history {
        by_seq.entry(seq).or_default().push(AttemptRecord {
            at_ms: at_ms.max(0) as u64,
            kind,
            message,
        });
    }
    for c in &mut claimed {
        c.lease += 1;
        c.delivery.history = by_seq.remove(&c.seq).unwrap_or_default();
    }
    let mut session = MySession { q: &mut tx };
    for c in claimed.iter().filter(|c| c.delivery.redelivery) {
        crate::shared::audit::<super::My>(
            &mut session,
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

/// A due row as a claim read it.
struct Due {
    /// Its due time (or lease end): the claim's order.
    next_at_ms: i64,
    /// Whether it has a key (and is checked again before it is leased).
    keyed: bool,
    claimed: Claimed,
}

/// `seqs` as an SQL list.
fn seq_list(seqs: impl Iterator<Item = i64>) -> String {
    seqs.map(|seq| seq.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A due row as claimed.
fn claimed_of(mut row: Row) -> Result<Due, StoreError> {
    fn take<T: mysql::prelude::FromValue>(row: &mut Row, i: usize) -> Result<T, StoreError> {
        row.take_opt(i)
            .ok_or_else(|| StoreError::Corrupt(format!("claim: column {i} missing")))?
            .map_err(|e| StoreError::Corrupt(format!("claim: column {i}: {e}")))
    }
    let id: String = take(&mut row, 2)?;
    let headers: String = take(&mut row, 4)?;
    let headers = serde_json::from_str(&headers)
        .map_err(|e| StoreError::Corrupt(format!("message {id}: headers: {e}")))?;
    let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
    let state: String = take(&mut row, 11)?;
    let next_at_ms: i64 = take(&mut row, 12)?;
    let claimed = Claimed {
        seq: take(&mut row, 0)?,
        lease: take(&mut row, 1)?,
        delivery: Delivery {
            id,
            topic: take(&mut row, 3)?,
            headers,
            payload: take(&mut row, 5)?,
            content_type: take(&mut row, 6)?,
            attempts_spent: count(take(&mut row, 7)?),
            deferrals: count(take(&mut row, 8)?),
            published_at_ms: take::<i64>(&mut row, 9)?.max(0) as u64,
            first_failed_at_ms: take::<Option<i64>>(&mut row, 10)?.map(|t| t.max(0) as u64),
            history: Vec::new(),
            redelivery: state == "leased",
            after_dead_letter: take::<i64>(&mut row, 14)? != 0,
            source: verdict_registry::SourceKind::Embedded.name(),
        },
    };
    Ok(Due {
        next_at_ms,
        keyed: take::<i64>(&mut row, 13)? != 0,
        claimed,
    })
}
