//! The dead-letter queues on PostgreSQL: listing, statistics, replay and discards.

use postgres::types::ToSql;

use super::{PostgresStore, TOPICS_LOCK, audit};
use crate::Repair;
use crate::{DlqArg, DlqEntry, DlqFilter, DlqStats, REPEATS, StoreError, clamp_ms, dlq_conditions};

const SELECT: &str = "SELECT seq, message_id, topic, dlq, class, kind, reason, attempts,
                             created_at_ms, format, envelope";

impl PostgresStore {
    /// Dead letters matching `filter`, oldest first (by failure time, then `seq`).
    pub fn dlq_list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, StoreError> {
        let (conditions, args) = dlq_conditions(filter, now_ms, |n| format!("${n}"))?;
        let limit = filter
            .limit
            .map(|n| format!(" LIMIT {n}"))
            .unwrap_or_default();
        self.dlq_query(
            &format!("{SELECT}, {REPEATS} FROM dlq WHERE state = 'dead'{conditions} ORDER BY created_at_ms, seq{limit}"),
            &args,
        )
    }

    /// The dead letter `seq`, if it is still in a DLQ.
    pub fn dlq_entry(&self, seq: i64) -> Result<Option<DlqEntry>, StoreError> {
        Ok(self
            .dlq_query(
                &format!("{SELECT}, {REPEATS} FROM dlq WHERE state = 'dead' AND seq = $1"),
                &[DlqArg::Int(seq)],
            )?
            .pop())
    }

    fn dlq_query(&self, sql: &str, args: &[DlqArg]) -> Result<Vec<DlqEntry>, StoreError> {
        let args: Vec<&(dyn ToSql + Sync)> = args
            .iter()
            .map(|a| match a {
                DlqArg::Text(t) => t as &(dyn ToSql + Sync),
                DlqArg::Int(i) => i as &(dyn ToSql + Sync),
            })
            .collect();
        self.with(|c| {
            c.client
                .query(sql, &args)?
                .iter()
                .map(|r| {
                    let seq: i64 = r.get(0);
                    let format: String = r.get(9);
                    let bytes: Vec<u8> = r.get(10);
                    let envelope = crate::envelope::decode(&format, &bytes)
                        .map_err(|e| StoreError::Corrupt(format!("dlq entry {seq}: {e}")))?;
                    Ok(DlqEntry {
                        seq,
                        message_id: r.get(1),
                        topic: r.get(2),
                        dlq: r.get(3),
                        class: r.get(4),
                        kind: r.get(5),
                        reason: r.get(6),
                        attempts: u32::try_from(r.get::<_, i64>(7).max(0)).unwrap_or(u32::MAX),
                        created_at_ms: r.get::<_, i64>(8).max(0) as u64,
                        envelope,
                        repeats: u32::try_from(r.get::<_, i64>(11).max(0)).unwrap_or(u32::MAX),
                        payload_summary: None,
                    })
                })
                .collect()
        })
    }

    /// Depth, oldest entry and ingress of every DLQ (per source topic).
    pub fn dlq_stats(&self) -> Result<Vec<DlqStats>, StoreError> {
        self.with(|c| {
            let s = c.statement(
                "SELECT dlq, topic, COUNT(*) FILTER (WHERE state = 'dead'),
                        COALESCE(MIN(created_at_ms) FILTER (WHERE state = 'dead'), 0), COUNT(*)
                 FROM dlq GROUP BY dlq, topic ORDER BY dlq, topic",
            )?;
            Ok(c.client
                .query(&s, &[])?
                .iter()
                .map(|r| DlqStats {
                    dlq: r.get(0),
                    topic: r.get(1),
                    depth: r.get::<_, i64>(2).max(0) as u64,
                    oldest_at_ms: r.get::<_, i64>(3).max(0) as u64,
                    ingress: r.get::<_, i64>(4).max(0) as u64,
                })
                .collect())
        })
    }

    /// Put dead letters back as ready messages with their attempts reset.
    pub fn dlq_replay(
        &self,
        seqs: &[i64],
        now_ms: u64,
        note: &str,
        repair: Option<&Repair>,
    ) -> Result<Vec<String>, StoreError> {
        let headers = repair.map(Repair::headers_json).transpose()?.flatten();
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock_shared($1)", &[&TOPICS_LOCK])?;
            let now = clamp_ms(now_ms);
            let mut ids = Vec::new();
            for seq in seqs {
                // Taking the entry with its row lock: two operators replaying the same
                // letter put it back once.
                let Some(row) = tx.query_opt(
                    "UPDATE dlq SET state = 'replayed' WHERE seq = $1 AND state = 'dead'
                     RETURNING message_seq, message_id, topic",
                    &[seq],
                )?
                else {
                    continue;
                };
                let (message_seq, id, topic): (i64, String, String) =
                    (row.get(0), row.get(1), row.get(2));
                tx.execute(
                    "DELETE FROM attempts WHERE message_seq = $1",
                    &[&message_seq],
                )?;
                tx.execute(
                    "UPDATE messages SET state = 'ready', attempt = 0, deferrals = 0,
                            first_failed_at_ms = NULL, next_at_ms = $2, lease_until_ms = NULL,
                            updated_at_ms = $2
                     WHERE seq = $1",
                    &[&message_seq, &now],
                )?;
                if let Some(r) = repair {
                    tx.execute(
                        "UPDATE messages SET payload = COALESCE($2, payload),
                                content_type = COALESCE($3, content_type),
                                headers = COALESCE($4, headers)
                         WHERE seq = $1",
                        &[&message_seq, &r.payload, &r.content_type, &headers],
                    )?;
                }
                tx.execute(
                    "INSERT INTO topics (topic) VALUES ($1) ON CONFLICT (topic) DO NOTHING",
                    &[&topic],
                )?;
                let event = if repair.is_some() {
                    "repaired"
                } else {
                    "replayed"
                };
                audit(&mut tx, now_ms, &id, &topic, event, note)?;
                ids.push(id);
            }
            if !ids.is_empty() {
                tx.execute("SELECT pg_notify($1, '')", &[&super::CHANNEL])?;
            }
            tx.commit()?;
            Ok(ids)
        })
    }

    /// Discard dead letters for good, each audited with `reason`.
    pub fn dlq_discard(&self, seqs: &[i64], now_ms: u64, reason: &str) -> Result<u64, StoreError> {
        self.with(|c| {
            let mut tx = c.client.transaction()?;
            let mut n = 0;
            for seq in seqs {
                let Some(row) = tx.query_opt(
                    "UPDATE dlq SET state = 'discarded' WHERE seq = $1 AND state = 'dead'
                     RETURNING message_seq, message_id, topic",
                    &[seq],
                )?
                else {
                    continue;
                };
                let (message_seq, id, topic): (i64, String, String) =
                    (row.get(0), row.get(1), row.get(2));
                tx.execute(
                    "UPDATE messages SET state = 'discarded', updated_at_ms = $2 WHERE seq = $1",
                    &[&message_seq, &clamp_ms(now_ms)],
                )?;
                audit(&mut tx, now_ms, &id, &topic, "dlq-discarded", reason)?;
                n += 1;
            }
            tx.commit()?;
            Ok(n)
        })
    }
}
