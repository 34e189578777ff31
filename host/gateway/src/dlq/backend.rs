//! What a DLQ must offer the tools, and the embedded store's answer.

use std::collections::BTreeMap;

use crate::model::{REPLAY_HEADER, letter_headers};
use crate::store::{
    DlqEntry, DlqFilter, DlqStats, INLINE_PAYLOAD_BYTES, PayloadView, Store, StoreError,
};
use crate::telemetry::{ReplayTrace, with_traceparent};

/// Why a DLQ operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// The embedded store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The broker failed or answered something unexpected.
    #[error("{source_name}: {message}")]
    Broker {
        /// `nats` or `rabbitmq`.
        source_name: &'static str,
        /// What went wrong.
        message: String,
    },
}

impl DlqError {
    pub(crate) fn broker(source_name: &'static str, e: impl std::fmt::Display) -> DlqError {
        DlqError::Broker {
            source_name,
            message: e.to_string(),
        }
    }
}

/// How a canary's messages fared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CanaryProgress {
    /// Delivered so far.
    pub delivered: usize,
    /// At least one was dead-lettered or discarded again.
    pub failed: bool,
}

/// Dead letters a page holds when the filter names no `limit`.
pub const PAGE_SIZE: usize = 1_000;

/// The bytes of letters (as JSON) a listing page of the admin API holds when the request
/// names no `max_bytes`: a thousand letters near 1 MiB each must not make one answer of a
/// gigabyte, for the gateway's memory or any client's.
pub const PAGE_BYTES: usize = 4 << 20;

/// The most a request may ask a page to hold.
pub const PAGE_BYTES_MAX: usize = 64 << 20;

/// Letters read from a source at once while filling a page whose letters' sizes are not
/// known yet; after that, as many as the budget left holds at the largest size seen.
const FIRST_READ: usize = 4;

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct DlqPage {
    /// Dead letters matching the filter, oldest first.
    pub entries: Vec<DlqEntry>,
    /// Where the next page starts (the next filter's `after`); none after the last page.
    pub next: Option<String>,
}

/// A set of dead-letter queues the tools can work on.
pub trait DeadLetters {
    /// One page: at most `filter.limit` (else [`PAGE_SIZE`]) dead letters matching `filter`
    /// after its `after` cursor. A page may hold fewer than asked and still have a `next`:
    /// a broker DLQ is scanned a bounded stretch at a time.
    fn page(&self, filter: &DlqFilter, now_ms: u64) -> Result<DlqPage, DlqError>;

    /// The cursor a page ending with `entry` passes on (the next filter's `after`): the
    /// source's own form.
    fn cursor_of(&self, entry: &DlqEntry) -> String {
        entry.seq.to_string()
    }

    /// Every dead letter matching `filter` (at most `filter.limit`), page by page.
    fn list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, DlqError> {
        list_pages(self, filter, now_ms)
    }

    /// Depth and oldest entry per DLQ.
    fn stats(&self) -> Result<Vec<DlqStats>, DlqError>;

    /// Put `entries` back for delivery with their attempts reset, audited with `note`, each
    /// marked with `token` and carrying the trace `trace` starts for it; returns the message
    /// ids replayed (entries gone meanwhile are skipped).
    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        token: &str,
        trace: &ReplayTrace,
    ) -> Result<Vec<String>, DlqError>;

    /// Discard `entries` for good, audited with `reason`; returns how many.
    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError>;

    /// How the messages `ids`, replayed with `token`, fared since.
    fn outcome(&self, ids: &[String], token: &str) -> Result<CanaryProgress, DlqError>;
}

/// Every dead letter matching `filter` (at most `filter.limit`), read page by page.
pub(crate) fn list_pages(
    dlqs: &(impl DeadLetters + ?Sized),
    filter: &DlqFilter,
    now_ms: u64,
) -> Result<Vec<DlqEntry>, DlqError> {
    let mut out = Vec::new();
    let mut page_filter = filter.clone();
    loop {
        let wanted = filter.limit.map(|n| n.saturating_sub(out.len()));
        if wanted == Some(0) {
            return Ok(out);
        }
        page_filter.limit = Some(wanted.map_or(PAGE_SIZE, |n| n.min(PAGE_SIZE)));
        let page = dlqs.page(&page_filter, now_ms)?;
        out.extend(page.entries);
        match page.next {
            Some(next) => page_filter.after = Some(next),
            None => return Ok(out),
        }
    }
}

/// One page of at most `filter.limit` (else [`PAGE_SIZE`]) letters whose JSON takes at most
/// `max_bytes` together - or the one letter that alone takes more - with the cursor to go
/// on from. The source is read a few letters at a time (as many as the budget left holds
/// at the largest size seen so far), so the memory a page costs follows its budget, not its
/// `limit`; in all it is asked for no more than `limit` letters, as one [`DeadLetters::page`]
/// would be. Like that, a page may hold fewer than asked and still have a `next`. Unless
/// the filter asks for [`PayloadView::Full`], payloads past [`INLINE_PAYLOAD_BYTES`] are
/// summarised before they are counted.
pub fn page_within(
    dlqs: &(impl DeadLetters + ?Sized),
    filter: &DlqFilter,
    now_ms: u64,
    max_bytes: usize,
) -> Result<DlqPage, DlqError> {
    let limit = filter.limit.unwrap_or(PAGE_SIZE);
    let summarise = filter.payloads.unwrap_or_default() == PayloadView::Summary;
    let mut entries: Vec<DlqEntry> = Vec::new();
    let (mut bytes, mut largest) = (0usize, 0usize);
    // Letters asked of the source so far: a page reads no more than `limit` in all, as one
    // `page` call would (a group's letters are matched after they are read).
    let mut asked = 0usize;
    let mut read = filter.clone();
    loop {
        let fits = match largest {
            0 => FIRST_READ,
            size => (max_bytes.saturating_sub(bytes) / size).max(1),
        };
        let now = limit.saturating_sub(asked).min(fits).max(1);
        read.limit = Some(now);
        asked = asked.saturating_add(now);
        let page = dlqs.page(&read, now_ms)?;
        for mut entry in page.entries {
            if summarise {
                entry.summarise_payload(INLINE_PAYLOAD_BYTES);
            }
            let size = json_size(&entry);
            if !entries.is_empty() && bytes.saturating_add(size) > max_bytes {
                // The budget is spent inside what was read: the next page starts at this
                // letter.
                let next = entries.last().map(|last| dlqs.cursor_of(last));
                return Ok(DlqPage { entries, next });
            }
            bytes = bytes.saturating_add(size);
            largest = largest.max(size);
            entries.push(entry);
        }
        let Some(next) = page.next else {
            return Ok(DlqPage {
                entries,
                next: None,
            });
        };
        if asked >= limit || entries.len() >= limit || bytes >= max_bytes {
            return Ok(DlqPage {
                entries,
                next: Some(next),
            });
        }
        read.after = Some(next);
    }
}

/// The bytes `entry` takes as JSON, counted without building the text.
fn json_size(entry: &DlqEntry) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, entry) {
        Ok(()) => count.0,
        // An entry that cannot be written cannot be answered either: it weighs nothing
        // here, and the answer says what is wrong.
        Err(_) => 0,
    }
}

/// Whether `entry` passes `filter` (all but `limit` and `after`), for DLQs filtered in
/// memory.
pub fn matches(filter: &DlqFilter, entry: &DlqEntry, now_ms: u64) -> bool {
    let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    in_group(filter, entry)
        && filter.seq.is_none_or(|seq| entry.seq == seq)
        && filter
            .dead_before_ms
            .is_none_or(|t| entry.created_at_ms < t)
        && filter.max_repeats.is_none_or(|max| entry.repeats <= max)
        && is(&filter.topic, &entry.topic)
        && is(&filter.dlq, &entry.dlq)
        && is(&filter.class, &entry.class)
        && is(&filter.kind, &entry.kind)
        && filter
            .min_age_ms
            .is_none_or(|age| now_ms.saturating_sub(entry.created_at_ms) >= age)
}

/// Whether `entry` is in the filter's group, if it names one.
pub(crate) fn in_group(filter: &DlqFilter, entry: &DlqEntry) -> bool {
    filter
        .group
        .as_deref()
        .is_none_or(|g| super::Fingerprint::of(entry).id() == g)
}

/// A broker dead letter read back: `header` looks up the [`letter_headers`] its source wrote,
/// `body` is the envelope; `seq` and `dlq` say where it sits.
pub(crate) fn entry_from_headers(
    seq: i64,
    dlq: String,
    header: impl Fn(&str) -> String,
    body: &[u8],
) -> Result<DlqEntry, String> {
    use letter_headers::*;
    let envelope = crate::envelope::decode(&header(FORMAT), body)
        .map_err(|e| format!("{dlq}: dead letter {seq}: {e}"))?;
    Ok(DlqEntry {
        seq,
        message_id: header(MESSAGE_ID),
        topic: header(TOPIC),
        dlq,
        class: header(CLASS),
        kind: header(KIND),
        reason: header(REASON),
        attempts: header(ATTEMPTS).parse().unwrap_or(0),
        created_at_ms: header(AT_MS).parse().unwrap_or(0),
        envelope,
        repeats: 0,
        payload_summary: None,
    })
}

/// Whether any of `ids`, replayed with `token`, is back among `entries` (the DLQ read whole):
/// a failed canary.
pub(crate) fn back_again(entries: &[DlqEntry], ids: &[String], token: &str) -> bool {
    entries.iter().any(|e| {
        e.envelope
            .original
            .headers
            .get(REPLAY_HEADER)
            .map(String::as_str)
            == Some(token)
            && ids.contains(&e.message_id)
    })
}

/// A broker's cursor: the position (stream sequence, browse position) of the last dead
/// letter a page looked at.
pub(crate) fn position_after(
    filter: &DlqFilter,
    source_name: &'static str,
) -> Result<u64, DlqError> {
    match &filter.after {
        None => Ok(0),
        Some(cursor) => cursor.parse().map_err(|_| DlqError::Broker {
            source_name,
            message: format!(
                "after: `{}` is not a cursor of this DLQ (expected the `next` of a page: a number)",
                verdict_runtime::text::one_line(cursor, 64)
            ),
        }),
    }
}

/// Depth and oldest entry per (DLQ, topic), counted one dead letter at a time; a broker
/// counts no ingress beyond what it holds.
#[derive(Debug, Default)]
pub(crate) struct StatsTally {
    by: BTreeMap<(String, String), DlqStats>,
}

impl StatsTally {
    pub(crate) fn add(&mut self, dlq: &str, topic: &str, depth: u64, at_ms: u64) {
        let s = self
            .by
            .entry((dlq.to_string(), topic.to_string()))
            .or_insert_with(|| DlqStats {
                dlq: dlq.to_string(),
                topic: topic.to_string(),
                depth: 0,
                oldest_at_ms: at_ms,
                ingress: 0,
            });
        s.depth += depth;
        s.ingress += depth;
        s.oldest_at_ms = s.oldest_at_ms.min(at_ms);
    }

    pub(crate) fn finish(self) -> Vec<DlqStats> {
        self.by.into_values().collect()
    }
}

impl DeadLetters for Store {
    fn cursor_of(&self, entry: &DlqEntry) -> String {
        Store::cursor_of(entry)
    }

    fn page(&self, filter: &DlqFilter, now_ms: u64) -> Result<DlqPage, DlqError> {
        let limit = filter.limit.unwrap_or(PAGE_SIZE);
        let mut entries = self.dlq_list(
            &DlqFilter {
                limit: Some(limit.saturating_add(1)),
                ..filter.clone()
            },
            now_ms,
        )?;
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = more.then(|| entries.last().map(Store::cursor_of)).flatten();
        // A group is a fingerprint the database cannot compute: matched here, after the
        // cursor of what was read.
        entries.retain(|e| in_group(filter, e));
        Ok(DlqPage { entries, next })
    }

    fn list(&self, filter: &DlqFilter, now_ms: u64) -> Result<Vec<DlqEntry>, DlqError> {
        if filter.group.is_some() {
            return list_pages(self, filter, now_ms);
        }
        Ok(self.dlq_list(filter, now_ms)?)
    }

    fn stats(&self) -> Result<Vec<DlqStats>, DlqError> {
        Ok(self.dlq_stats()?)
    }

    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        _token: &str,
        trace: &ReplayTrace,
    ) -> Result<Vec<String>, DlqError> {
        if !trace.is_on() {
            let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
            return Ok(self.dlq_replay(&seqs, self.now_ms(), note)?);
        }
        // Traced, each message is put back carrying its replay's trace context (in one
        // transaction, like an untraced replay).
        let letters: Vec<(i64, BTreeMap<String, String>)> = entries
            .iter()
            .map(|e| {
                let headers = match trace.replay(&e.topic, &e.envelope) {
                    Some(traceparent) => {
                        with_traceparent(&e.envelope.original.headers, &traceparent)
                    }
                    None => e.envelope.original.headers.clone(),
                };
                (e.seq, headers)
            })
            .collect();
        Ok(self.dlq_replay_with_headers(&letters, self.now_ms(), note)?)
    }

    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError> {
        let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
        Ok(self.dlq_discard(&seqs, self.now_ms(), reason)?)
    }

    fn outcome(&self, ids: &[String], _token: &str) -> Result<CanaryProgress, DlqError> {
        let mut progress = CanaryProgress::default();
        for id in ids {
            match self.state_of(id)?.as_deref() {
                Some("delivered") => progress.delivered += 1,
                Some("dead" | "discarded") => progress.failed = true,
                _ => {}
            }
        }
        Ok(progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttemptRecord, DeadLetter, Delivery};

    #[test]
    fn what_a_broker_source_writes_the_dlq_tools_read_back() {
        let delivery = Delivery {
            id: "m-7".into(),
            topic: "orders".into(),
            attempts_spent: 2,
            ..Delivery::default()
        };
        let failed = AttemptRecord {
            at_ms: 1_234,
            kind: "http.503".into(),
            message: "busy".into(),
        };
        let letter = DeadLetter {
            dlq: "orders.DLQ".into(),
            class: "exhausted".into(),
            reason: "3 attempts\nspent".into(),
            format: "json",
            envelope: serde_json::to_vec(&serde_json::json!({
                "original": {"topic": "orders", "id": "m-7", "headers": {}},
                "attempts": 3, "errors": [], "consumerGroup": "g",
                "firstFailedAt": "x", "lastFailedAt": "x",
                "verdict": {"action": "dead-letter", "class": "exhausted", "reason": "r",
                            "alert": "warning", "labels": {}},
                "policy": {"name": "rules", "version": "1", "sha256": "s"},
                "dlq": "orders.DLQ", "gateway": "gw", "deadLetteredAt": "x"
            }))
            .unwrap(),
        };
        let headers: BTreeMap<&str, String> =
            letter.headers(&delivery, &failed).into_iter().collect();
        let header = |name: &str| headers.get(name).cloned().unwrap_or_default();
        let e = entry_from_headers(4, "orders.DLQ".into(), header, &letter.envelope).unwrap();
        assert_eq!(
            (
                e.message_id.as_str(),
                e.topic.as_str(),
                e.class.as_str(),
                e.kind.as_str()
            ),
            ("m-7", "orders", "exhausted", "http.503")
        );
        assert_eq!((e.attempts, e.created_at_ms, e.seq), (3, 1_234, 4));
        assert_eq!(e.reason, "3 attempts spent", "header values are one line");
        assert_eq!(e.envelope.original.id, "m-7");
        let bad = entry_from_headers(5, "orders.DLQ".into(), |_| "json".into(), b"{not json");
        assert!(bad.unwrap_err().contains("orders.DLQ: dead letter 5"));
    }

    /// A DLQ of `count` letters whose payloads take `payload_bytes` each, made as they are
    /// read (a thousand letters of 1 MiB are never in memory at once), remembering the most
    /// letters one read asked for; `stop_short` makes it hand back at most 3 letters a read
    /// with a cursor, as a broker's scanning budget does.
    struct Synthetic {
        count: i64,
        payload_bytes: usize,
        stop_short: bool,
        most_read: std::cell::Cell<usize>,
    }

    impl Synthetic {
        fn entry(&self, seq: i64) -> DlqEntry {
            serde_json::from_value(serde_json::json!({
                "seq": seq, "message_id": format!("m-{seq}"), "topic": "orders",
                "dlq": "orders.DLQ", "class": "poison", "kind": "http.422", "reason": "r",
                "attempts": 1, "created_at_ms": 1_000 + seq,
                "envelope": {
                    "original": {"topic": "orders", "id": format!("m-{seq}"), "headers": {},
                                 "payload": "x".repeat(self.payload_bytes)},
                    "attempts": 1, "errors": [], "consumerGroup": "g",
                    "firstFailedAt": "x", "lastFailedAt": "x",
                    "verdict": {"action": "dead-letter", "class": "poison", "reason": "r",
                                "alert": "warning", "labels": {}},
                    "policy": {"name": "rules", "version": "1", "sha256": "s"},
                    "dlq": "orders.DLQ", "gateway": "gw", "deadLetteredAt": "x"
                }
            }))
            .unwrap()
        }
    }

    impl DeadLetters for Synthetic {
        fn page(&self, filter: &DlqFilter, _now_ms: u64) -> Result<DlqPage, DlqError> {
            let after: i64 = filter.after.as_deref().map_or(0, |a| a.parse().unwrap());
            let mut limit = filter.limit.unwrap_or(PAGE_SIZE);
            if self.stop_short {
                limit = limit.min(3);
            }
            self.most_read.set(self.most_read.get().max(limit));
            let last = (after + i64::try_from(limit).unwrap()).min(self.count);
            let entries: Vec<DlqEntry> = (after + 1..=last).map(|s| self.entry(s)).collect();
            Ok(DlqPage {
                entries,
                next: (last < self.count).then(|| last.to_string()),
            })
        }
        fn stats(&self) -> Result<Vec<DlqStats>, DlqError> {
            Ok(Vec::new())
        }
        fn replay(
            &self,
            _: &[DlqEntry],
            _: &str,
            _: &str,
            _: &ReplayTrace,
        ) -> Result<Vec<String>, DlqError> {
            Ok(Vec::new())
        }
        fn discard(&self, _: &[DlqEntry], _: &str) -> Result<u64, DlqError> {
            Ok(0)
        }
        fn outcome(&self, _: &[String], _: &str) -> Result<CanaryProgress, DlqError> {
            Ok(CanaryProgress::default())
        }
    }

    /// Every page of `dlqs` from the start with every payload in full, each page's JSON
    /// size with it.
    fn walk(dlqs: &Synthetic, limit: usize, max_bytes: usize) -> Vec<(Vec<i64>, usize)> {
        walk_showing(dlqs, limit, max_bytes, PayloadView::Full)
    }

    fn walk_showing(
        dlqs: &Synthetic,
        limit: usize,
        max_bytes: usize,
        payloads: PayloadView,
    ) -> Vec<(Vec<i64>, usize)> {
        let mut pages = Vec::new();
        let mut filter = DlqFilter {
            limit: Some(limit),
            payloads: Some(payloads),
            ..DlqFilter::default()
        };
        loop {
            let page = page_within(dlqs, &filter, 0, max_bytes).unwrap();
            let size = serde_json::to_vec(&page.entries).unwrap().len();
            pages.push((page.entries.iter().map(|e| e.seq).collect(), size));
            match page.next {
                Some(next) => filter.after = Some(next),
                None => return pages,
            }
        }
    }

    /// The shape of a thousand letters of 1 MiB under the 4 MiB default, at a 32nd of the
    /// size (a debug build writes every byte of every page as JSON twice here).
    #[test]
    fn a_thousand_big_letters_come_in_pages_bounded_by_bytes_each_once() {
        let dlqs = Synthetic {
            count: 1_000,
            payload_bytes: 32 << 10,
            stop_short: false,
            most_read: 0.into(),
        };
        let budget = PAGE_BYTES / 32;
        let pages = walk(&dlqs, 1_000, budget);
        let seqs: Vec<i64> = pages.iter().flat_map(|(s, _)| s.clone()).collect();
        assert_eq!(seqs, (1..=1_000).collect::<Vec<_>>(), "each once, in order");
        for (page, size) in &pages {
            assert!(*size <= budget, "{} letters, {size} bytes", page.len());
        }
        // Three letters (and their envelopes) fit in four letters' bytes, a fourth does not.
        assert_eq!(pages[0].0.len(), 3, "{:?}", pages[0]);
        // Read a few at a time: what a page costs follows its budget, not its limit.
        assert!(
            dlqs.most_read.get() <= FIRST_READ,
            "{}",
            dlqs.most_read.get()
        );
    }

    #[test]
    fn a_letter_bigger_than_the_budget_comes_alone_and_small_ones_fill_the_limit() {
        let big = Synthetic {
            count: 5,
            payload_bytes: 2 << 20,
            stop_short: false,
            most_read: 0.into(),
        };
        let pages = walk(&big, 1_000, 1 << 20);
        assert_eq!(pages.len(), 5, "one letter a page, never none");
        assert!(pages.iter().all(|(p, _)| p.len() == 1));
        let small = Synthetic {
            count: 250,
            payload_bytes: 10,
            stop_short: false,
            most_read: 0.into(),
        };
        let pages = walk(&small, 100, PAGE_BYTES);
        let sizes: Vec<usize> = pages.iter().map(|(p, _)| p.len()).collect();
        assert_eq!(sizes, [100, 100, 50], "the count bounds small letters");
    }

    #[test]
    fn a_source_that_stops_short_hands_its_cursor_on_and_nothing_is_skipped() {
        let dlqs = Synthetic {
            count: 20,
            payload_bytes: 100,
            stop_short: true,
            most_read: 0.into(),
        };
        let pages = walk(&dlqs, 1_000, PAGE_BYTES);
        let seqs: Vec<i64> = pages.iter().flat_map(|(s, _)| s.clone()).collect();
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
        // A page reads no more than its limit's worth in all: two reads here (4, then the
        // rest of 1,000 asked), 3 letters each.
        assert_eq!(pages[0].0.len(), 6, "{pages:?}");
    }

    /// By default a listing shows a big payload as its size and digest: a thousand letters
    /// of 1 MiB are one page of a few hundred kilobytes, the payloads fetched one at a time.
    #[test]
    fn big_payloads_are_summarised_by_default_and_small_ones_shown() {
        let big = Synthetic {
            count: 1_000,
            payload_bytes: 1 << 20,
            stop_short: false,
            most_read: 0.into(),
        };
        let pages = walk_showing(&big, 1_000, PAGE_BYTES, PayloadView::Summary);
        assert_eq!(pages.len(), 1, "every letter on one page");
        assert_eq!(pages[0].0.len(), 1_000);
        assert!(pages[0].1 < PAGE_BYTES, "{} bytes", pages[0].1);
        let mut entry = big.entry(7);
        entry.summarise_payload(INLINE_PAYLOAD_BYTES);
        let summary = entry.payload_summary.as_ref().expect("summarised");
        assert_eq!(summary.bytes, 1 << 20);
        let digest = verdict_runtime::digest::sha256_hex("x".repeat(1 << 20).as_bytes());
        assert_eq!(summary.sha256, digest);
        assert!(entry.envelope.original.payload.is_none());
        // At the threshold a payload is shown; a letter without one is left alone.
        let small = Synthetic {
            count: 1,
            payload_bytes: INLINE_PAYLOAD_BYTES,
            stop_short: false,
            most_read: 0.into(),
        };
        let mut entry = small.entry(1);
        entry.summarise_payload(INLINE_PAYLOAD_BYTES);
        assert!(entry.payload_summary.is_none());
        assert!(entry.envelope.original.payload.is_some());
        entry.envelope.original.payload = None;
        entry.summarise_payload(0);
        assert!(entry.payload_summary.is_none());
    }
}
