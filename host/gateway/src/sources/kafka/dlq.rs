//! The DLQ tools on Kafka. A topic is a log: a dead letter cannot be taken out of it. So
//! beside the DLQ topics the tools keep a compacted topic of *settled* letters (`[kafka]
//! dlq_settled_topic`): a record keyed by where a letter sits, `<dlq topic>/<partition>@<offset>`,
//! says it was replayed or discarded, and listings, statistics and replays skip that letter
//! from then on. Retention removes letters from a DLQ topic as it removes any record.
//!
//! A letter's `seq` is its place - the DLQ topic's index among the config's DLQ topics (in
//! route order), the partition and the offset - packed in one number ([`Place`]), so a
//! listing runs in that order and a page's cursor is the last place it looked at. Records in
//! a DLQ topic without a `verdict-envelope` header are another writer's (a Spring
//! application's own DLT records): the tools leave them alone.
//!
//! A replay writes the letter back to its route's topic - its key, value and producer headers
//! byte for byte, its id in `[kafka] id_header` and the replay's token - then marks it
//! settled: a crash between the two replays it twice, never loses it.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers as _, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message as _, Offset, TopicPartitionList};
use verdict_registry::{GatewayConfig, KafkaConfig, SourceKind};

use super::NAME;
use super::client::client_config;
use super::record::{ENVELOPE, record_id};
use crate::dlq::{
    CanaryProgress, DeadLetters, DlqError, DlqPage, PAGE_SIZE, Rt, StatsTally, back_again,
    entry_from_headers, matches, position_after,
};
use crate::model::{AuditRecord, REPLAY_HEADER};
use crate::store::{DlqEntry, DlqFilter, DlqStats};
use crate::telemetry::ReplayTrace;

/// Records one page looks at past its cursor, at most, whatever the filter.
pub const SCAN_PER_PAGE: usize = 10_000;

/// How long a call to the brokers may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long a read may wait for records the watermarks say are there.
const STALL: Duration = Duration::from_secs(20);

fn err(e: impl std::fmt::Display) -> DlqError {
    DlqError::broker(NAME, e)
}

/// Where a letter sits: the DLQ topic's index in the config's route order, its partition
/// and offset. Packed into a `seq` as 7 bits of index, 16 of partition and 40 of offset
/// (plus one, so that no letter is `0`, which a listing's cursor reads as "the start").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    dlq: usize,
    partition: i32,
    offset: i64,
}

impl Place {
    const MAX_DLQS: usize = 1 << 7;
    const MAX_PARTITION: i32 = (1 << 16) - 1;
    const MAX_OFFSET: i64 = (1 << 40) - 2;

    fn seq(self) -> Result<i64, DlqError> {
        if self.dlq >= Self::MAX_DLQS
            || !(0..=Self::MAX_PARTITION).contains(&self.partition)
            || !(0..=Self::MAX_OFFSET).contains(&self.offset)
        {
            return Err(err(format!(
                "a dead letter at partition {} offset {} of DLQ topic {} cannot be numbered \
                 (the tools number letters in up to {} DLQ topics, partitions up to {} and \
                 offsets below 2^40)",
                self.partition,
                self.offset,
                self.dlq,
                Self::MAX_DLQS,
                Self::MAX_PARTITION
            )));
        }
        let dlq = i64::try_from(self.dlq).unwrap_or(0);
        Ok(((dlq << 56) | (i64::from(self.partition) << 40) | self.offset) + 1)
    }

    fn of(seq: i64) -> Option<Place> {
        let packed = seq.checked_sub(1).filter(|p| *p >= 0)?;
        Some(Place {
            dlq: usize::try_from(packed >> 56).ok()?,
            partition: i32::try_from((packed >> 40) & i64::from(Self::MAX_PARTITION)).ok()?,
            offset: packed & ((1 << 40) - 1),
        })
    }
}

/// A topic read on from where the last read stopped.
#[derive(Debug, Default)]
struct Tail {
    next: HashMap<i32, i64>,
}

/// What the tools have read of the settled topic and the audit topic.
#[derive(Debug, Default)]
struct Seen {
    settled_tail: Tail,
    /// The places (`<dlq>/<partition>@<offset>`) of letters replayed or discarded.
    settled: HashSet<String>,
    audit_tail: Tail,
    /// Per replay token, the ids whose arrival the audit topic records.
    arrived: HashMap<String, HashSet<String>>,
}

/// The DLQ topics of a gateway's Kafka routes.
pub struct KafkaDeadLetters {
    config: KafkaConfig,
    /// The DLQ topics, in route order: a letter's place names one by its index.
    dlqs: Vec<String>,
    /// The route topics: a replay writes only to one of them.
    routes: Vec<String>,
    /// One reader at a time: a read assigns it the partition it reads.
    reader: Mutex<BaseConsumer>,
    producer: FutureProducer,
    admin: AdminClient<DefaultClientContext>,
    seen: Mutex<Seen>,
    runtime: Rt,
}

impl std::fmt::Debug for KafkaDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaDeadLetters")
            .field("dlqs", &self.dlqs)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl KafkaDeadLetters {
    /// Connect as `config` says, on a runtime of its own (for the command line); the DLQs
    /// are those of its Kafka routes.
    pub fn connect(config: &GatewayConfig) -> Result<KafkaDeadLetters, DlqError> {
        Self::connect_on(Rt::own().map_err(err)?, config)
    }

    /// Connect as `config` says, running on `handle` (a gateway's runtime); call it, and
    /// the operations, from a thread that may block.
    pub fn connect_with(
        handle: tokio::runtime::Handle,
        config: &GatewayConfig,
    ) -> Result<KafkaDeadLetters, DlqError> {
        Self::connect_on(Rt::Shared(handle), config)
    }

    fn connect_on(runtime: Rt, config: &GatewayConfig) -> Result<KafkaDeadLetters, DlqError> {
        let (mut dlqs, mut routes) = (Vec::new(), Vec::new());
        for route in config
            .routes
            .iter()
            .filter(|r| r.source == SourceKind::Kafka)
        {
            let dlq = config
                .gateway
                .dlq_naming
                .dlq_for(&route.topic, &config.gateway.global_dlq);
            if !dlqs.contains(&dlq) {
                dlqs.push(dlq);
            }
            routes.push(route.topic.clone());
        }
        if dlqs.len() > Place::MAX_DLQS {
            return Err(err(format!(
                "the Kafka routes name {} DLQ topics; the tools read at most {}",
                dlqs.len(),
                Place::MAX_DLQS
            )));
        }
        let kafka = &config.kafka;
        let client = client_config(kafka).map_err(err)?;
        // Clients made inside the runtime: librdkafka's futures need one to run on.
        let (reader, producer, admin) = runtime.block_on(async {
            let reader: BaseConsumer = client
                .clone()
                .set("group.id", format!("{}.dlq-tools", kafka.group_id))
                .set("enable.auto.commit", "false")
                .set("enable.auto.offset.store", "false")
                .set("enable.partition.eof", "true")
                .create()
                .map_err(err)?;
            let producer: FutureProducer = client
                .clone()
                .set("enable.idempotence", "true")
                .set("message.timeout.ms", "30000")
                .create()
                .map_err(err)?;
            let admin: AdminClient<DefaultClientContext> = client.create().map_err(err)?;
            Ok::<_, DlqError>((reader, producer, admin))
        })?;
        // Reach the brokers now, so a wrong address fails here with its reason.
        reader
            .fetch_metadata(None, TIMEOUT)
            .map_err(|e| err(format!("reaching the brokers: {e}")))?;
        Ok(KafkaDeadLetters {
            config: kafka.clone(),
            dlqs,
            routes,
            reader: Mutex::new(reader),
            producer,
            admin,
            seen: Mutex::new(Seen::default()),
            runtime,
        })
    }

    /// The partitions of `topic`, in order; none when it does not exist. Any other error
    /// is one: an unreadable settled topic read as empty would bring replayed letters back.
    fn partitions(&self, reader: &BaseConsumer, topic: &str) -> Result<Vec<i32>, DlqError> {
        let metadata = reader
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| err(format!("topic `{topic}`: {e}")))?;
        let mut out = Vec::new();
        for t in metadata.topics().iter().filter(|t| t.name() == topic) {
            match t.error().map(RDKafkaErrorCode::from) {
                None => out.extend(t.partitions().iter().map(|p| p.id())),
                Some(
                    RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
                ) => {}
                Some(code) => {
                    return Err(err(format!("topic `{topic}`: the broker answered {code}")));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The first and one past the last offset of a partition.
    fn watermarks(
        reader: &BaseConsumer,
        topic: &str,
        partition: i32,
    ) -> Result<(i64, i64), DlqError> {
        reader
            .fetch_watermarks(topic, partition, TIMEOUT)
            .map_err(|e| err(format!("topic `{topic}` partition {partition}: {e}")))
    }

    /// Hand `visit` the records of `topic`'s `partition` from `from` up to (not including)
    /// `to`, in order, until it breaks.
    fn read(
        reader: &BaseConsumer,
        topic: &str,
        partition: i32,
        (from, to): (i64, i64),
        mut visit: impl FnMut(OwnedMessage) -> Result<ControlFlow<()>, DlqError>,
    ) -> Result<(), DlqError> {
        if from >= to {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(from))
            .map_err(err)?;
        reader.assign(&tpl).map_err(err)?;
        let mut last_progress = Instant::now();
        loop {
            match reader.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    if m.topic() != topic || m.partition() != partition || m.offset() < from {
                        continue;
                    }
                    last_progress = Instant::now();
                    let offset = m.offset();
                    if visit(m.detach())?.is_break() || offset + 1 >= to {
                        break;
                    }
                }
                // The end of what can be read (a transaction's marker or records not yet
                // stable may sit before the watermark read first).
                Some(Err(KafkaError::PartitionEOF(p))) if p == partition => break,
                Some(Err(e)) => return Err(err(format!("reading `{topic}`: {e}"))),
                None if last_progress.elapsed() > STALL => {
                    return Err(err(format!(
                        "reading `{topic}` partition {partition}: no record for {} s though \
                         the broker says offsets up to {to} are there",
                        STALL.as_secs()
                    )));
                }
                None => {}
            }
        }
        let _ = reader.unassign();
        Ok(())
    }

    /// Read what `topic` gained since `tail` last stopped, handing each record to `visit`.
    fn follow(
        &self,
        reader: &BaseConsumer,
        topic: &str,
        tail: &mut Tail,
        mut visit: impl FnMut(&OwnedMessage),
    ) -> Result<(), DlqError> {
        for partition in self.partitions(reader, topic)? {
            let (low, high) = Self::watermarks(reader, topic, partition)?;
            let from = tail.next.get(&partition).copied().unwrap_or(low).max(low);
            Self::read(reader, topic, partition, (from, high), |m| {
                visit(&m);
                Ok(ControlFlow::Continue(()))
            })?;
            tail.next.insert(partition, high);
        }
        Ok(())
    }

    /// The places of settled letters, brought up to date.
    fn settled(&self, reader: &BaseConsumer) -> Result<HashSet<String>, DlqError> {
        let mut seen = lock(&self.seen);
        let Seen {
            settled_tail,
            settled,
            ..
        } = &mut *seen;
        self.follow(reader, &self.config.dlq_settled_topic, settled_tail, |m| {
            if let Some(Ok(place)) = m.key().map(std::str::from_utf8) {
                settled.insert(place.to_string());
            }
        })?;
        Ok(settled.clone())
    }

    /// The letter at `place`, unless it is gone, settled, or not a letter of ours.
    fn letter_at(
        &self,
        reader: &BaseConsumer,
        place: Place,
        settled: &HashSet<String>,
    ) -> Result<Option<(DlqEntry, OwnedMessage)>, DlqError> {
        let Some(dlq) = self.dlqs.get(place.dlq) else {
            return Ok(None);
        };
        if settled.contains(&record_id(dlq, place.partition, place.offset)) {
            return Ok(None);
        }
        let (low, high) = Self::watermarks(reader, dlq, place.partition)?;
        if place.offset < low || place.offset >= high {
            return Ok(None);
        }
        let mut found = None;
        Self::read(
            reader,
            dlq,
            place.partition,
            (place.offset, place.offset + 1),
            |m| {
                if m.offset() == place.offset {
                    found = Some(m);
                }
                Ok(ControlFlow::Break(()))
            },
        )?;
        match found {
            Some(m) => Ok(entry_of(place.seq()?, dlq, &m)?.map(|e| (e, m))),
            None => Ok(None),
        }
    }

    /// Hand `visit` every unsettled letter of ours after `after`, in place order, until it
    /// breaks or `budget` records have been looked at. The cursor to go on from: the last
    /// place looked at, when records remain past it; `None` once every DLQ is read to its
    /// end.
    fn scan(
        &self,
        reader: &BaseConsumer,
        after: Option<Place>,
        budget: usize,
        mut visit: impl FnMut(DlqEntry) -> ControlFlow<()>,
    ) -> Result<Option<Place>, DlqError> {
        let settled = self.settled(reader)?;
        let mut looked = 0usize;
        let mut last: Option<Place> = None;
        let mut stopped = false;
        for (index, dlq) in self.dlqs.iter().enumerate() {
            for partition in self.partitions(reader, dlq)? {
                let (low, high) = Self::watermarks(reader, dlq, partition)?;
                let from = match after {
                    Some(a) if (a.dlq, a.partition) > (index, partition) => continue,
                    Some(a) if (a.dlq, a.partition) == (index, partition) => a.offset + 1,
                    _ => low,
                }
                .max(low);
                if from >= high {
                    continue;
                }
                if stopped {
                    // Records remain here: the next page picks up after the last one seen.
                    return Ok(last);
                }
                Self::read(reader, dlq, partition, (from, high), |m| {
                    let place = Place {
                        dlq: index,
                        partition,
                        offset: m.offset(),
                    };
                    last = Some(place);
                    looked += 1;
                    if !settled.contains(&record_id(dlq, partition, place.offset))
                        && let Some(entry) = readable(entry_of(place.seq()?, dlq, &m))
                        && visit(entry).is_break()
                    {
                        stopped = true;
                    }
                    stopped |= looked >= budget;
                    Ok(if stopped {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    })
                })?;
                if stopped && last.is_some_and(|l| l.offset + 1 < high) {
                    return Ok(last);
                }
            }
        }
        Ok(None)
    }

    /// Mark `entry` (at `place`) settled by `event`, and audit it with `detail`.
    fn settle(
        &self,
        entry: &DlqEntry,
        place: Place,
        event: &str,
        detail: &str,
    ) -> Result<(), DlqError> {
        let Some(dlq) = self.dlqs.get(place.dlq) else {
            return Ok(());
        };
        let key = record_id(dlq, place.partition, place.offset);
        let now = crate::clock::now_ms();
        let mark = serde_json::json!({"event": event, "at_ms": now}).to_string();
        self.write(
            &self.config.dlq_settled_topic,
            Some(key.as_bytes()),
            mark.as_bytes(),
            OwnedHeaders::new(),
        )?;
        lock(&self.seen).settled.insert(key);
        let record = AuditRecord::new(event, &entry.message_id, &entry.topic, now)
            .kind(&entry.kind)
            .detail(detail);
        let body = serde_json::to_vec(&record).map_err(err)?;
        self.write(&self.config.audit_topic, None, &body, OwnedHeaders::new())
    }

    /// Write one record and wait for the broker's acknowledgement.
    fn write(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: &[u8],
        headers: OwnedHeaders,
    ) -> Result<(), DlqError> {
        self.runtime.block_on(async {
            let mut record = FutureRecord::to(topic).payload(payload).headers(headers);
            if let Some(key) = key {
                record = record.key(key);
            }
            self.producer
                .send(record, Duration::from_secs(30))
                .await
                .map(drop)
                .map_err(|(e, _)| err(format!("writing to `{topic}`: {e}")))
        })
    }

    /// Create the settled topic (compacted) and the audit topic where missing, before the
    /// first mark is written.
    fn ensure_topics(&self) -> Result<(), DlqError> {
        let replication = || TopicReplication::Fixed(self.config.topic_replication_factor);
        let settled = NewTopic::new(
            &self.config.dlq_settled_topic,
            self.config.topic_partitions,
            replication(),
        )
        .set("cleanup.policy", "compact");
        let audit = NewTopic::new(
            &self.config.audit_topic,
            self.config.topic_partitions,
            replication(),
        );
        let created = self.runtime.block_on(self.admin.create_topics(
            &[settled, audit],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        ));
        for result in created.map_err(err)? {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(err(format!(
                        "creating topic `{name}`: the broker answered {code}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Run `act` on each letter `entries` names that is still there and unsettled, then mark
    /// it settled by `event` (audited with `detail`); the ids acted on.
    fn each(
        &self,
        entries: &[DlqEntry],
        event: &str,
        detail: &str,
        mut act: impl FnMut(&DlqEntry, &OwnedMessage) -> Result<(), DlqError>,
    ) -> Result<Vec<String>, DlqError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        self.ensure_topics()?;
        let reader = lock(&self.reader);
        let mut settled = self.settled(&reader)?;
        let mut done = Vec::new();
        for wanted in entries {
            let Some(place) = Place::of(wanted.seq) else {
                continue;
            };

            let Some((entry, record)) = self.letter_at(&reader, place, &settled)? else {
                continue;
            };
            // The same letter still: a seq from an older config may name another topic.
            if entry.dlq != wanted.dlq || entry.message_id != wanted.message_id {
                continue;
            }
            act(&entry, &record)?;
            self.settle(&entry, place, event, detail)?;
            // The same letter named twice in one call is acted on once.
            settled.insert(record_id(&entry.dlq, place.partition, place.offset));
            done.push(entry.message_id);
        }
        Ok(done)
    }
}

/// The letter `record` of the DLQ topic `dlq` as the tools list it, or `None` when it is not
/// one of ours (no envelope header, or headers the client cannot read: a header name that is
/// not UTF-8 makes it panic); an error when its envelope cannot be decoded.
pub fn entry_of(seq: i64, dlq: &str, record: &OwnedMessage) -> Result<Option<DlqEntry>, DlqError> {
    let all = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        record.headers().map_or_else(Vec::new, |headers| {
            headers
                .iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect::<Vec<_>>()
        })
    }));
    let Ok(all) = all else {
        return Ok(None);
    };
    let last = |name: &str| -> Option<Vec<u8>> {
        all.iter()
            .rev()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| value.clone())
    };
    let Some(envelope) = last(ENVELOPE) else {
        return Ok(None);
    };
    let header = |name: &str| {
        last(name)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default()
    };
    entry_from_headers(seq, dlq.to_string(), header, &envelope)
        .map(Some)
        .map_err(err)
}

/// A letter read, or none when it cannot be: one record nobody can decode (another
/// writer's, a damaged one) must not stop the tools from reaching every letter after it.
fn readable(entry: Result<Option<DlqEntry>, DlqError>) -> Option<DlqEntry> {
    entry.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "kafka DLQ tools: a record of a DLQ topic is skipped");
        None
    })
}

/// The headers a replay of `record` (a dead letter of `message_id`) carries: its
/// producer's headers byte for byte - none of the letter's own (`verdict-*`,
/// `kafka_dlt-*`) nor any retry bookkeeping - its id in `id_header`, and the replay's
/// `token`.
fn replay_headers(
    record: &OwnedMessage,
    id_header: &str,
    message_id: &str,
    token: &str,
    traceparent: Option<&str>,
) -> OwnedHeaders {
    use verdict_telemetry::propagation::{TRACEPARENT, TRACESTATE};
    let mut out = OwnedHeaders::new();
    if let Some(headers) = record.headers() {
        for h in headers.iter() {
            let ours = h.key.starts_with("verdict-")
                || h.key.starts_with("kafka_dlt-")
                || h.key.starts_with(crate::sources::signed_history::PREFIX)
                || h.key == id_header;
            // A traced replay carries its own context, not the one the letter was made in.
            let replaced = traceparent.is_some()
                && (h.key.eq_ignore_ascii_case(TRACEPARENT)
                    || h.key.eq_ignore_ascii_case(TRACESTATE));
            if !ours && !replaced {
                out = out.insert(Header {
                    key: h.key,
                    value: h.value,
                });
            }
        }
    }
    if let Some(traceparent) = traceparent {
        out = out.insert(Header {
            key: TRACEPARENT,
            value: Some(traceparent),
        });
    }
    out.insert(Header {
        key: id_header,
        value: Some(message_id),
    })
    .insert(Header {
        key: REPLAY_HEADER,
        value: Some(token),
    })
}

impl DeadLetters for KafkaDeadLetters {
    fn page(&self, filter: &DlqFilter, now_ms: u64) -> Result<DlqPage, DlqError> {
        let limit = filter.limit.unwrap_or(PAGE_SIZE);
        if limit == 0 {
            return Ok(DlqPage::default());
        }
        let reader = lock(&self.reader);
        if let Some(seq) = filter.seq {
            // One letter by its place: read it alone.
            let settled = self.settled(&reader)?;
            let entry = match Place::of(seq) {
                Some(place) => self.letter_at(&reader, place, &settled)?,
                None => None,
            };
            return Ok(DlqPage {
                entries: entry
                    .map(|(e, _)| e)
                    .filter(|e| matches(filter, e, now_ms))
                    .into_iter()
                    .collect(),
                next: None,
            });
        }
        let after = match position_after(filter, NAME)? {
            0 => None,
            n => Some(
                i64::try_from(n)
                    .ok()
                    .and_then(Place::of)
                    .ok_or_else(|| err(format!("after: `{n}` is not a place in these DLQs")))?,
            ),
        };
        let mut entries = Vec::new();
        let next = self.scan(&reader, after, SCAN_PER_PAGE, |e| {
            if matches(filter, &e, now_ms) {
                entries.push(e);
            }
            if entries.len() >= limit {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        let next = next.map(Place::seq).transpose()?.map(|seq| seq.to_string());
        Ok(DlqPage { entries, next })
    }

    fn stats(&self) -> Result<Vec<DlqStats>, DlqError> {
        // Counted letter by letter (a topic's watermarks count settled letters and other
        // writers' records too), one at a time: the memory does not grow with the DLQs.
        let reader = lock(&self.reader);
        let mut tally = StatsTally::default();
        self.scan(&reader, None, usize::MAX, |e| {
            tally.add(&e.dlq, &e.topic, 1, e.created_at_ms);
            ControlFlow::Continue(())
        })?;
        Ok(tally.finish())
    }

    fn replay(
        &self,
        entries: &[DlqEntry],
        note: &str,
        token: &str,
        trace: &ReplayTrace,
    ) -> Result<Vec<String>, DlqError> {
        let id_header = self.config.id_header.clone();
        self.each(entries, "replayed", note, |entry, record| {
            if !self.routes.contains(&entry.topic) {
                return Err(err(format!(
                    "dead letter {} names topic `{}`, which no Kafka route reads: not replayed",
                    entry.seq,
                    verdict_runtime::text::one_line(&entry.topic, 128)
                )));
            }
            let traceparent = trace.replay(&entry.topic, &entry.envelope);
            let headers = replay_headers(
                record,
                &id_header,
                &entry.message_id,
                token,
                traceparent.as_deref(),
            );
            self.write(
                &entry.topic,
                record.key(),
                record.payload().unwrap_or_default(),
                headers,
            )
        })
    }

    fn discard(&self, entries: &[DlqEntry], reason: &str) -> Result<u64, DlqError> {
        let done = self.each(entries, "dlq-discarded", reason, |_, _| Ok(()))?;
        Ok(done.len() as u64)
    }

    fn outcome(&self, ids: &[String], token: &str) -> Result<CanaryProgress, DlqError> {
        let delivered = {
            let reader = lock(&self.reader);
            let mut seen = lock(&self.seen);
            let Seen {
                audit_tail,
                arrived,
                ..
            } = &mut *seen;
            self.follow(&reader, &self.config.audit_topic, audit_tail, |m| {
                // Anything on the audit topic that is not a record is no arrival.
                if let Some(Ok(r)) = m.payload().map(serde_json::from_slice::<AuditRecord>)
                    && r.event == "replay-delivered"
                {
                    arrived.entry(r.detail).or_default().insert(r.message_id);
                }
            })?;
            arrived
                .get(token)
                .map_or(0, |got| ids.iter().filter(|id| got.contains(*id)).count())
        };
        let mut failed = false;
        self.scan(&lock(&self.reader), None, usize::MAX, |e| {
            failed = back_again(std::slice::from_ref(&e), ids, token);
            if failed {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(CanaryProgress { delivered, failed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_packs_into_a_seq_and_back_in_order() {
        let places = [
            Place {
                dlq: 0,
                partition: 0,
                offset: 0,
            },
            Place {
                dlq: 0,
                partition: 0,
                offset: 7,
            },
            Place {
                dlq: 0,
                partition: 3,
                offset: 0,
            },
            Place {
                dlq: 1,
                partition: 0,
                offset: 2,
            },
            Place {
                dlq: 127,
                partition: 65_535,
                offset: Place::MAX_OFFSET,
            },
        ];
        let seqs: Vec<i64> = places.iter().map(|p| p.seq().unwrap()).collect();
        assert!(
            seqs.iter().all(|s| *s > 0),
            "no letter is 0, the start: {seqs:?}"
        );
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "in place order: {seqs:?}"
        );
        for (place, seq) in places.iter().zip(&seqs) {
            assert_eq!(Place::of(*seq), Some(*place));
        }
        assert_eq!(Place::of(0), None);
        assert_eq!(Place::of(-5), None);
        assert!(
            Place {
                dlq: 128,
                partition: 0,
                offset: 0
            }
            .seq()
            .is_err()
        );
        assert!(
            Place {
                dlq: 0,
                partition: -1,
                offset: 0
            }
            .seq()
            .is_err()
        );
        assert!(
            Place {
                dlq: 0,
                partition: 0,
                offset: 1 << 41
            }
            .seq()
            .is_err()
        );
    }

    #[test]
    fn a_replay_carries_the_producers_headers_and_none_of_the_letters() {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "tenant",
                value: Some("eu"),
            })
            .insert(Header {
                key: "trace-bin",
                value: Some(&[0xff_u8, 0][..]),
            })
            .insert(Header {
                key: "message-id",
                value: Some("forged"),
            })
            .insert(Header {
                key: "verdict-envelope",
                value: Some("{}"),
            })
            .insert(Header {
                key: "verdict-class",
                value: Some("poison"),
            })
            .insert(Header {
                key: "kafka_dlt-original-offset",
                value: Some(&[0u8; 8][..]),
            })
            .insert(Header {
                key: "x-verdict-attempt",
                value: Some("3"),
            });
        let record = OwnedMessage::new(
            Some(b"{}".to_vec()),
            Some(b"k".to_vec()),
            "orders.DLQ".into(),
            rdkafka::Timestamp::NotAvailable,
            0,
            4,
            Some(headers),
        );
        let names = |out: OwnedHeaders| -> Vec<(String, Option<Vec<u8>>)> {
            out.iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect()
        };
        let out = replay_headers(&record, "message-id", "m-1", "tok", None);
        assert_eq!(
            names(out),
            vec![
                ("tenant".into(), Some(b"eu".to_vec())),
                ("trace-bin".into(), Some(vec![0xff, 0])),
                ("message-id".into(), Some(b"m-1".to_vec())),
                (REPLAY_HEADER.into(), Some(b"tok".to_vec())),
            ]
        );
        // A traced replay: the producer's trace context gives way to the replay's.
        let headers = record
            .headers()
            .unwrap()
            .clone()
            .insert(Header {
                key: "TraceParent",
                value: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            })
            .insert(Header {
                key: "tracestate",
                value: Some("vendor=1"),
            });
        let traced = OwnedMessage::new(
            Some(b"{}".to_vec()),
            None,
            "orders.DLQ".into(),
            rdkafka::Timestamp::NotAvailable,
            0,
            5,
            Some(headers),
        );
        let replay = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let got = names(replay_headers(
            &traced,
            "message-id",
            "m-1",
            "tok",
            Some(replay),
        ));
        assert!(
            got.contains(&("traceparent".into(), Some(replay.as_bytes().to_vec()))),
            "{got:?}"
        );
        assert!(
            !got.iter()
                .any(|(k, _)| k == "TraceParent" || k == "tracestate"),
            "{got:?}"
        );
    }
}
