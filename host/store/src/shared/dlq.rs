//! The dead-letter queues on a shared database: listing, statistics, replay and discards.

use super::{Arg, Dialect, Row, Session, Shared, audit};
use crate::{
    DlqArg, DlqEntry, DlqFilter, DlqStats, REPEATS, Repair, StoreError, clamp_ms, dlq_conditions,
};

impl<D: Dialect> Shared<D> {
    /// Dead letters matching `filter`, oldest first (by failure time, then `seq`).
    pub(crate) fn dlq_list(
        &self,
        filter: &DlqFilter,
        now_ms: u64,
    ) -> Result<Vec<DlqEntry>, StoreError> {
        let (conditions, args) = dlq_conditions(filter, now_ms, D::SQL.placeholder)?;
        let limit = filter
            .limit
            .map(|n| format!(" LIMIT {n}"))
            .unwrap_or_default();
        let sql = format!(
            "{}, {REPEATS} FROM dlq WHERE state = 'dead'{conditions} \
             ORDER BY created_at_ms, seq{limit}",
            D::SQL.dlq_select
        );
        let args: Vec<Arg<'_>> = args
            .iter()
            .map(|a| match a {
                DlqArg::Text(t) => Arg::Text(t),
                DlqArg::Int(i) => Arg::Int(*i),
            })
            .collect();
        self.read(|s| s.query(&sql, &args)?.iter().map(entry_of).collect())
    }

    /// The dead letter `seq`, if it is still in a DLQ.
    pub(crate) fn dlq_entry(&self, seq: i64) -> Result<Option<DlqEntry>, StoreError> {
        let sql = format!(
            "{}, {REPEATS} FROM dlq WHERE state = 'dead' AND seq = {}",
            D::SQL.dlq_select,
            (D::SQL.placeholder)(1)
        );
        self.read(|s| {
            s.query_opt(&sql, &[Arg::Int(seq)])?
                .as_ref()
                .map(entry_of)
                .transpose()
        })
    }

    /// Depth, oldest entry and ingress of every DLQ (per source topic).
    pub(crate) fn dlq_stats(&self) -> Result<Vec<DlqStats>, StoreError> {
        self.read(|s| {
            s.query(D::SQL.dlq_stats, &[])?
                .iter()
                .map(|r| {
                    Ok(DlqStats {
                        dlq: r.text(0)?,
                        topic: r.text(1)?,
                        depth: r.int(2)?.max(0) as u64,
                        oldest_at_ms: r.int(3)?.max(0) as u64,
                        ingress: r.int(4)?.max(0) as u64,
                    })
                })
                .collect()
        })
    }

    /// Put dead letters back as ready messages with their attempts reset (and, with
    /// `repair`, what an operator changed); the ids put back.
    pub(crate) fn dlq_replay(
        &self,
        items: &[(i64, Option<&Repair>)],
        now_ms: u64,
        note: &str,
        event: &str,
    ) -> Result<Vec<String>, StoreError> {
        let headers: Vec<Option<String>> = items
            .iter()
            .map(|(_, repair)| {
                repair
                    .map(Repair::headers_json)
                    .transpose()
                    .map(Option::flatten)
            })
            .collect::<Result<_, _>>()?;
        self.transaction(|s| {
            if let Some(sql) = D::SQL.ready_begin {
                s.batch(sql)?;
            }
            let now = clamp_ms(now_ms);
            let mut ids = Vec::new();
            for (&(seq, repair), headers) in items.iter().zip(&headers) {
                // Taking the entry with its row lock: two operators replaying the same
                // letter put it back once.
                let Some((message_seq, id, topic)) = take::<D>(s, seq, "replayed")? else {
                    continue;
                };
                s.execute(D::SQL.forget_attempts, &[Arg::Int(message_seq)])?;
                s.execute(
                    D::SQL.ready_again,
                    &[Arg::Int(now), Arg::Int(now), Arg::Int(message_seq)],
                )?;
                if let Some(r) = repair {
                    s.execute(
                        D::SQL.repair,
                        &[
                            Arg::OptBytes(r.payload.as_deref()),
                            Arg::OptText(r.content_type.as_deref()),
                            Arg::OptText(headers.as_deref()),
                            Arg::Int(message_seq),
                        ],
                    )?;
                }
                if let Some(sql) = D::SQL.topic_listed {
                    s.execute(sql, &[Arg::Text(&topic)])?;
                }
                audit::<D>(s, now_ms, &id, &topic, event, note)?;
                ids.push(id);
            }
            if let Some(sql) = D::SQL.made_ready
                && !ids.is_empty()
            {
                s.batch(sql)?;
            }
            Ok(ids)
        })
    }

    /// Discard dead letters for good, each audited with `reason`; how many were.
    pub(crate) fn dlq_discard(
        &self,
        seqs: &[i64],
        now_ms: u64,
        reason: &str,
    ) -> Result<u64, StoreError> {
        self.transaction(|s| {
            let mut n = 0;
            for &seq in seqs {
                let Some((message_seq, id, topic)) = take::<D>(s, seq, "discarded")? else {
                    continue;
                };
                s.execute(
                    D::SQL.discard_message,
                    &[Arg::Int(clamp_ms(now_ms)), Arg::Int(message_seq)],
                )?;
                audit::<D>(s, now_ms, &id, &topic, "dlq-discarded", reason)?;
                n += 1;
            }
            Ok(n)
        })
    }
}

/// Take dead letter `seq` out of its DLQ into `state`, if it is still dead: its message's
/// `(seq, id, topic)`.
fn take<D: Dialect>(
    s: &mut dyn Session,
    seq: i64,
    state: &str,
) -> Result<Option<(i64, String, String)>, StoreError> {
    let Some(row) = s.query_opt(D::SQL.dlq_take, &[Arg::Int(seq)])? else {
        return Ok(None);
    };
    s.execute(D::SQL.dlq_leave, &[Arg::Text(state), Arg::Int(seq)])?;
    Ok(Some((row.int(0)?, row.text(1)?, row.text(2)?)))
}

/// A dead letter from a row of [`Statements::dlq_select`](super::Statements) and its
/// repeats.
fn entry_of(r: &Row) -> Result<DlqEntry, StoreError> {
    let seq = r.int(0)?;
    let envelope = crate::envelope::decode(&r.text(9)?, &r.bytes(10)?)
        .map_err(|e| StoreError::Corrupt(format!("dlq entry {seq}: {e}")))?;
    let count = |i: usize| -> Result<u32, StoreError> {
        Ok(u32::try_from(r.int(i)?.max(0)).unwrap_or(u32::MAX))
    };
    Ok(DlqEntry {
        seq,
        message_id: r.text(1)?,
        topic: r.text(2)?,
        dlq: r.text(3)?,
        class: r.text(4)?,
        kind: r.text(5)?,
        reason: r.text(6)?,
        attempts: count(7)?,
        created_at_ms: r.int(8)?.max(0) as u64,
        envelope,
        repeats: count(11)?,
        payload_summary: None,
    })
}
