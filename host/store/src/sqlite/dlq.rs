//! The dead-letter queues: listing, statistics, replay and operator discards.

use rusqlite::params;

use super::{SqliteStore, audit};
use crate::Repair;
use crate::{DlqArg, DlqEntry, DlqFilter, DlqStats, REPEATS, StoreError};

const SELECT: &str = "SELECT seq, message_id, topic, dlq, class, kind, reason, attempts,
                             created_at_ms, format, envelope";

impl SqliteStore {
    /// Dead letters matching `filter`, oldest first (by failure time, then `seq`); a
    /// cursor is `<created_at_ms>-<seq>` of the last entry seen ([`Store::cursor_of`]).
    pub fn dlq_list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, StoreError> {
        let (sql, args) = where_clause(filter, now_ms)?;
        let limit = filter
            .limit
            .map(|n| format!(" LIMIT {n}"))
            .unwrap_or_default();
        // By failure time, not insertion order: concurrent deliveries commit in any order.
        self.dlq_query(&format!("{sql} ORDER BY created_at_ms, seq{limit}"), &args)
    }

    /// The dead letter `seq`, if it is still in a DLQ.
    pub fn dlq_entry(&self, seq: i64) -> Result<Option<DlqEntry>, StoreError> {
        let args = [rusqlite::types::Value::Integer(seq)];
        Ok(self.dlq_query(" AND seq = ?1", &args)?.pop())
    }

    fn dlq_query(
        &self,
        conditions: &str,
        args: &[rusqlite::types::Value],
    ) -> Result<Vec<DlqEntry>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "{SELECT}, {REPEATS} FROM dlq WHERE state = 'dead'{conditions}"
        ))?;
        let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), |r| {
            let seq: i64 = r.get(0)?;
            let format: String = r.get(9)?;
            let bytes: Vec<u8> = r.get(10)?;
            let envelope = match crate::envelope::decode(&format, &bytes) {
                Ok(envelope) => envelope,
                Err(e) => return Ok(Err(StoreError::Corrupt(format!("dlq entry {seq}: {e}")))),
            };
            Ok(Ok(DlqEntry {
                seq,
                message_id: r.get(1)?,
                topic: r.get(2)?,
                dlq: r.get(3)?,
                class: r.get(4)?,
                kind: r.get(5)?,
                reason: r.get(6)?,
                attempts: r.get(7)?,
                created_at_ms: r.get(8)?,
                envelope,
                repeats: r.get(11)?,
                payload_summary: None,
            }))
        })?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// Depth, oldest entry and ingress of every DLQ (per source topic), including DLQs
    /// emptied by replay (depth 0), so gauges fall to zero instead of vanishing.
    pub fn dlq_stats(&self) -> Result<Vec<DlqStats>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT dlq, topic, SUM(state = 'dead'),
                    COALESCE(MIN(CASE WHEN state = 'dead' THEN created_at_ms END), 0), COUNT(*)
             FROM dlq GROUP BY dlq, topic ORDER BY dlq, topic",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(DlqStats {
                dlq: r.get(0)?,
                topic: r.get(1)?,
                depth: r.get(2)?,
                oldest_at_ms: r.get(3)?,
                ingress: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Put dead letters back as ready messages with their attempts reset, in one
    /// transaction, each audited with `note` (who and why).
    pub fn dlq_replay(
        &self,
        items: &[(i64, Option<&Repair>)],
        now_ms: u64,
        note: &str,
        event: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut ids = Vec::new();
        for (seq, repair) in items {
            let headers = repair.map(Repair::headers_json).transpose()?.flatten();
            let Some((message_seq, id, topic)) = dead_entry(&tx, *seq)? else {
                continue;
            };
            tx.execute("DELETE FROM attempts WHERE message_seq = ?1", [message_seq])?;
            tx.execute(
                "UPDATE messages SET state = 'ready', attempt = 0, deferrals = 0,
                        first_failed_at_ms = NULL, next_at_ms = ?2, lease_until_ms = NULL,
                        updated_at_ms = ?2
                 WHERE seq = ?1",
                params![message_seq, now_ms],
            )?;
            if let Some(r) = repair {
                tx.execute(
                    "UPDATE messages SET payload = COALESCE(?2, payload),
                            content_type = COALESCE(?3, content_type),
                            headers = COALESCE(?4, headers)
                     WHERE seq = ?1",
                    params![message_seq, r.payload, r.content_type, headers],
                )?;
            }
            // The claim loop asks the topic list for work: the topic may have been pruned.
            tx.execute("INSERT OR IGNORE INTO topics (topic) VALUES (?1)", [&topic])?;
            tx.execute("UPDATE dlq SET state = 'replayed' WHERE seq = ?1", [seq])?;
            audit(&tx, now_ms, &id, &topic, event, note)?;
            ids.push(id);
        }
        tx.commit()?;
        Ok(ids)
    }

    /// Discard dead letters for good, each audited with the operator's `reason`.
    pub fn dlq_discard(&self, seqs: &[i64], now_ms: u64, reason: &str) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut n = 0;
        for seq in seqs {
            let Some((message_seq, id, topic)) = dead_entry(&tx, *seq)? else {
                continue;
            };
            tx.execute("UPDATE dlq SET state = 'discarded' WHERE seq = ?1", [seq])?;
            tx.execute(
                "UPDATE messages SET state = 'discarded', updated_at_ms = ?2 WHERE seq = ?1",
                params![message_seq, now_ms],
            )?;
            audit(&tx, now_ms, &id, &topic, "dlq-discarded", reason)?;
            n += 1;
        }
        tx.commit()?;
        Ok(n)
    }
}

fn dead_entry(
    tx: &rusqlite::Transaction<'_>,
    seq: i64,
) -> Result<Option<(i64, String, String)>, StoreError> {
    use rusqlite::OptionalExtension;
    Ok(tx
        .query_row(
            "SELECT message_seq, message_id, topic FROM dlq WHERE seq = ?1 AND state = 'dead'",
            [seq],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?)
}

fn where_clause(
    f: &DlqFilter,
    now_ms: u64,
) -> Result<(String, Vec<rusqlite::types::Value>), StoreError> {
    use rusqlite::types::Value;
    let (sql, args) = crate::dlq_conditions(f, now_ms, |n| format!("?{n}"))?;
    let args = args
        .into_iter()
        .map(|a| match a {
            DlqArg::Text(t) => Value::Text(t),
            DlqArg::Int(i) => Value::Integer(i),
        })
        .collect();
    Ok((sql, args))
}
