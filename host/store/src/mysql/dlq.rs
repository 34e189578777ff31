//! The dead-letter queues on MariaDB/MySQL: listing, statistics, replay and discards.

use mysql::prelude::Queryable as _;
use mysql::{Params, Row, TxOpts, Value};

use super::{MysqlStore, audit};
use crate::Repair;
use crate::{DlqArg, DlqEntry, DlqFilter, DlqStats, REPEATS, StoreError, clamp_ms, dlq_conditions};

const SELECT: &str = "SELECT seq, message_id, topic, dlq, class, kind, reason, attempts,
                             created_at_ms, format, envelope";

impl MysqlStore {
    /// Dead letters matching `filter`, oldest first (by failure time, then `seq`).
    pub fn dlq_list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, StoreError> {
        let (conditions, args) = dlq_conditions(filter, now_ms, |_| "?".to_string())?;
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
                &format!("{SELECT}, {REPEATS} FROM dlq WHERE state = 'dead' AND seq = ?"),
                &[DlqArg::Int(seq)],
            )?
            .pop())
    }

    fn dlq_query(&self, sql: &str, args: &[DlqArg]) -> Result<Vec<DlqEntry>, StoreError> {
        let values: Vec<Value> = args
            .iter()
            .map(|a| match a {
                DlqArg::Text(t) => Value::from(t.as_str()),
                DlqArg::Int(i) => Value::from(*i),
            })
            .collect();
        self.with(|c| {
            let params = if values.is_empty() {
                Params::Empty
            } else {
                Params::Positional(values.clone())
            };
            let rows: Vec<Row> = c.exec(sql, params)?;
            rows.into_iter().map(entry_of).collect()
        })
    }

    /// Depth, oldest entry and ingress of every DLQ (per source topic).
    pub fn dlq_stats(&self) -> Result<Vec<DlqStats>, StoreError> {
        self.with(|c| {
            let rows: Vec<(String, String, i64, i64, i64)> = c.query(
                "SELECT dlq, topic, COALESCE(SUM(state = 'dead'), 0),
                        COALESCE(MIN(CASE WHEN state = 'dead' THEN created_at_ms END), 0),
                        COUNT(*)
                 FROM dlq GROUP BY dlq, topic ORDER BY dlq, topic",
            )?;
            Ok(rows
                .into_iter()
                .map(|(dlq, topic, depth, oldest, ingress)| DlqStats {
                    dlq,
                    topic,
                    depth: depth.max(0) as u64,
                    oldest_at_ms: oldest.max(0) as u64,
                    ingress: ingress.max(0) as u64,
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
            let mut tx = c.start_transaction(TxOpts::default())?;
            let now = clamp_ms(now_ms);
            let mut ids = Vec::new();
            for seq in seqs {
                let Some((message_seq, id, topic)) = tx.exec_first::<(i64, String, String), _, _>(
                    "SELECT message_seq, message_id, topic FROM dlq
                     WHERE seq = ? AND state = 'dead' FOR UPDATE",
                    (seq,),
                )?
                else {
                    continue;
                };
                tx.exec_drop("UPDATE dlq SET state = 'replayed' WHERE seq = ?", (seq,))?;
                tx.exec_drop("DELETE FROM attempts WHERE message_seq = ?", (message_seq,))?;
                tx.exec_drop(
                    "UPDATE messages SET state = 'ready', attempt = 0, deferrals = 0,
                            first_failed_at_ms = NULL, next_at_ms = ?, lease_until_ms = NULL,
                            updated_at_ms = ?
                     WHERE seq = ?",
                    (now, now, message_seq),
                )?;
                if let Some(r) = repair {
                    tx.exec_drop(
                        "UPDATE messages SET payload = COALESCE(?, payload),
                                content_type = COALESCE(?, content_type),
                                headers = COALESCE(?, headers)
                         WHERE seq = ?",
                        (&r.payload, &r.content_type, &headers, message_seq),
                    )?;
                }
                let event = if repair.is_some() {
                    "repaired"
                } else {
                    "replayed"
                };
                audit(&mut tx, now_ms, &id, &topic, event, note)?;
                ids.push(id);
            }
            tx.commit()?;
            Ok(ids)
        })
    }

    /// Discard dead letters for good, each audited with `reason`.
    pub fn dlq_discard(&self, seqs: &[i64], now_ms: u64, reason: &str) -> Result<u64, StoreError> {
        self.with(|c| {
            let mut tx = c.start_transaction(TxOpts::default())?;
            let mut n = 0;
            for seq in seqs {
                let Some((message_seq, id, topic)) = tx.exec_first::<(i64, String, String), _, _>(
                    "SELECT message_seq, message_id, topic FROM dlq
                     WHERE seq = ? AND state = 'dead' FOR UPDATE",
                    (seq,),
                )?
                else {
                    continue;
                };
                tx.exec_drop("UPDATE dlq SET state = 'discarded' WHERE seq = ?", (seq,))?;
                tx.exec_drop(
                    "UPDATE messages SET state = 'discarded', updated_at_ms = ? WHERE seq = ?",
                    (clamp_ms(now_ms), message_seq),
                )?;
                audit(&mut tx, now_ms, &id, &topic, "dlq-discarded", reason)?;
                n += 1;
            }
            tx.commit()?;
            Ok(n)
        })
    }
}

fn entry_of(mut row: Row) -> Result<DlqEntry, StoreError> {
    fn take<T: mysql::prelude::FromValue>(row: &mut Row, i: usize) -> Result<T, StoreError> {
        row.take_opt(i)
            .ok_or_else(|| StoreError::Corrupt(format!("dlq: column {i} missing")))?
            .map_err(|e| StoreError::Corrupt(format!("dlq: column {i}: {e}")))
    }
    let seq: i64 = take(&mut row, 0)?;
    let format: String = take(&mut row, 9)?;
    let bytes: Vec<u8> = take(&mut row, 10)?;
    let envelope = crate::envelope::decode(&format, &bytes)
        .map_err(|e| StoreError::Corrupt(format!("dlq entry {seq}: {e}")))?;
    Ok(DlqEntry {
        seq,
        message_id: take(&mut row, 1)?,
        topic: take(&mut row, 2)?,
        dlq: take(&mut row, 3)?,
        class: take(&mut row, 4)?,
        kind: take(&mut row, 5)?,
        reason: take(&mut row, 6)?,
        attempts: u32::try_from(take::<i64>(&mut row, 7)?.max(0)).unwrap_or(u32::MAX),
        created_at_ms: take::<i64>(&mut row, 8)?.max(0) as u64,
        envelope,
        repeats: u32::try_from(take::<i64>(&mut row, 11)?.max(0)).unwrap_or(u32::MAX),
        payload_summary: None,
    })
}
