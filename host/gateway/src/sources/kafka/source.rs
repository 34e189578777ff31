//! The Kafka source: the routes' topics and the retry topics read by one consumer of the
//! group `[kafka] group_id`, each record delivered in a task of its own and settled
//! through the settlement driver.
//!
//! - **Delivered** -> the record is done.
//! - **Retry / delay** -> a copy with the signed history goes to the retry topic of the
//!   delay's bucket (`<prefix>.<bucket ms>`) and, once the broker has acknowledged it, the
//!   record is done. A copy read before it is due pauses its retry partition until then.
//!   On a route in `blocking` mode the record stays: its partition, paused while any of
//!   its records is in flight, waits out the delay, and the record is delivered again in
//!   place - order kept, the attempt history in memory.
//! - **Dead-letter** -> the record's key, value and headers with the envelope and Spring's
//!   `kafka_dlt-*` headers go to the route's DLQ topic (`[gateway] dlq_naming`),
//!   acknowledged, then done.
//! - **Discard** -> an audit record to `[kafka] audit_topic`, acknowledged, then done.
//!
//! The source reads about twice `max_in_flight` records ahead of the ones it delivers,
//! pausing its partitions past that ([`ReadAhead`]): a backlog waits in the broker, not in
//! memory.
//!
//! "Done" moves nothing by itself: a partition's offset is committed (every second, and
//! for partitions taken away at a rebalance) only up to its lowest record not yet done
//! ([`PartitionOffsets`]). A crash redelivers what was not committed - duplicates, never a
//! loss.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message as _, Offset, TopicPartitionList};
use tokio::sync::{Semaphore, mpsc, watch};
use verdict_registry::{KafkaConfig, KafkaRetryMode};
use verdict_runtime::text::Clean;

use super::NAME;
use super::client::{Reporting, client_config, report};
use super::offsets::PartitionOffsets;
use super::read_ahead::ReadAhead;
use super::record::{self, Incoming};
use crate::health::{BrokerDlqs, Readiness};
use crate::model::{AuditRecord, Delivery, REPLAY_HEADER, Settlement};
use crate::pipeline::{Pipeline, now_ms};
use crate::sources::delay_buckets::{all_buckets, bucket_ms};
use crate::sources::signed_history::{HistoryCheck, HistoryKey, advance, report_foreign_key};
use crate::sources::{Held, Settled, SettlementDriver, Source, Unapplied};

/// How often done records' offsets are committed.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
/// How long a write to the broker may take before it counts as failed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a delivery waits for its replay-delivered audit record: a slow audit topic must
/// not hold the delivery's slots (or a blocking route's partition).
const AUDIT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest record the gateway writes whole: Kafka's and librdkafka's default
/// (`message.max.bytes`).
const RECORD_BYTES_MAX: usize = 1_000_000;

/// The bytes `headers` take in a record, about: each name and value, and a few for their
/// lengths.
fn headers_bytes(headers: &rdkafka::message::OwnedHeaders) -> usize {
    use rdkafka::message::Headers as _;
    headers
        .iter()
        .map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len) + 8)
        .sum()
}

/// The routes on Kafka (`[kafka]`), read as one consumer group member.
pub struct KafkaSource {
    config: KafkaConfig,
    topics: Vec<String>,
    key: HistoryKey,
    ready: Readiness,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("topics", &self.topics)
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// A source reading `topics`; `key` signs the history headers of retry copies.
    pub fn new(config: KafkaConfig, topics: Vec<String>, key: HistoryKey) -> KafkaSource {
        KafkaSource {
            config,
            topics,
            key,
            ready: Readiness::new(NAME),
        }
    }
}

impl Source for KafkaSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn readiness(&self) -> Option<Readiness> {
        Some(self.ready.clone())
    }

    /// Records not done at shutdown are read again by the group's next member.
    fn run(
        self: Box<Self>,
        pipeline: Arc<Pipeline>,
        shutdown: watch::Receiver<bool>,
        grace: Duration,
    ) -> BoxFuture<'static, ()> {
        Box::pin(consume(pipeline, *self, shutdown, grace))
    }
}

async fn consume(
    pipeline: Arc<Pipeline>,
    source: KafkaSource,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let KafkaSource {
        config,
        topics,
        key,
        ready,
    } = source;
    let settings = pipeline.settings().clone();
    let dlqs: Vec<String> = topics
        .iter()
        .map(|t| settings.dlq_naming.dlq_for(t, &settings.global_dlq))
        .collect();
    let driver = SettlementDriver::new(NAME, pipeline.clone());
    let (config, topics, dlqs, key, ready, driver) =
        (&config, &topics, &dlqs, &key, &ready, &driver);
    let session = move |slots: Arc<Semaphore>, shutdown: watch::Receiver<bool>| async move {
        Session {
            config,
            grace,
            ready,
            driver,
            key,
            slots,
        }
        .run(topics, dlqs, shutdown)
        .await
    };
    super::super::supervise(
        NAME,
        ready,
        settings.max_in_flight,
        shutdown,
        grace,
        session,
    )
    .await;
}

/// Each assigned partition's records in flight, shared by the consumer's loop, the
/// delivery tasks and the rebalance callbacks. An assignment's generation tells a late
/// completion of a partition taken away (and given back since) from a current one.
#[derive(Debug)]
struct Assigned {
    partitions: HashMap<(String, i32), (u64, PartitionOffsets)>,
    /// The partitions of blocking routes paused for the record they have in flight: its
    /// generation and offset. Their other records wait in the broker.
    blocked: HashMap<(String, i32), (u64, i64)>,
    /// The retry partitions whose next copy was read before it was due: the copy is taken
    /// (the commit stays below it) but parked until the partition reads it again. Such a
    /// partition is left to its timer, never paused or resumed for room.
    waiting: HashSet<(String, i32)>,
    /// The partitions paused because too many records are in flight.
    read_ahead: ReadAhead,
    generation: u64,
}

type Shared = Arc<Mutex<Assigned>>;

/// Whether `id` is paused for a reason of its own: a blocking route's record in flight, a
/// retry copy not yet due.
fn paused_otherwise(
    blocked: &HashMap<(String, i32), (u64, i64)>,
    waiting: &HashSet<(String, i32)>,
    id: &(String, i32),
) -> bool {
    blocked.contains_key(id) || waiting.contains(id)
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Assigned> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Assigned {
    fn new(max_in_flight: usize) -> Assigned {
        Assigned {
            partitions: HashMap::new(),
            blocked: HashMap::new(),
            waiting: HashSet::new(),
            read_ahead: ReadAhead::new(max_in_flight),
            generation: 0,
        }
    }

    /// Records taken that wait for a slot or hold one, about: a parked retry copy needs
    /// none before it is due, and a blocking route's record (one per partition) waits out
    /// its delays without one, so neither counts against the read-ahead bound.
    fn waiting_for_slots(&self) -> usize {
        self.in_flight()
            .saturating_sub(self.waiting.len())
            .saturating_sub(self.blocked.len())
    }

    /// With a record just taken: the partitions to pause, when too many are in flight.
    /// Called for every record: nothing is collected below the bound.
    fn pause_for_room(&mut self) -> Vec<(String, i32)> {
        let in_flight = self.waiting_for_slots();
        let (blocked, waiting) = (&self.blocked, &self.waiting);
        let readable = self
            .partitions
            .keys()
            .filter(|id| !paused_otherwise(blocked, waiting, id));
        self.read_ahead.pause_now(in_flight, readable)
    }

    /// With a record just done: the partitions paused for room to resume, once enough
    /// have drained.
    fn resume_for_room(&mut self) -> Vec<(String, i32)> {
        if !self.read_ahead.holding() {
            return Vec::new();
        }
        let in_flight = self.waiting_for_slots();
        let (blocked, waiting) = (&self.blocked, &self.waiting);
        self.read_ahead
            .resume_now(in_flight, |id| paused_otherwise(blocked, waiting, id))
    }

    /// Records taken and not yet done, over every partition.
    fn in_flight(&self) -> usize {
        self.partitions.values().map(|(_, o)| o.in_flight()).sum()
    }

    /// The offsets to commit now for `partitions` (all assigned ones when `None`).
    fn commits(&mut self, only: Option<&TopicPartitionList>) -> TopicPartitionList {
        let mut out = TopicPartitionList::new();
        for ((topic, partition), (_, offsets)) in &mut self.partitions {
            let wanted = only.is_none_or(|tpl| tpl.find_partition(topic, *partition).is_some());
            if wanted && let Some(next) = offsets.take_commit() {
                let _ = out.add_partition_offset(topic, *partition, Offset::Offset(next));
            }
        }
        out
    }
}

/// Commits what may be committed for partitions taken away, before they go; starts fresh
/// for partitions given, and says the source is ready once the group has given it some.
struct Context {
    assigned: Shared,
    ready: Readiness,
}

impl ClientContext for Context {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        super::client::log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        report(&self.ready, &error, reason);
    }
}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(revoked) = rebalance {
            let commits = {
                let mut assigned = lock(&self.assigned);
                let commits = assigned.commits(Some(revoked));
                for element in revoked.elements() {
                    let id = (element.topic().to_string(), element.partition());
                    assigned.partitions.remove(&id);
                    assigned.blocked.remove(&id);
                    assigned.waiting.remove(&id);
                    assigned.read_ahead.forget(&id);
                }
                commits
            };
            // Lost (a session that timed out) cannot commit; the next member reads from
            // the last commit, and what was done since is delivered again.
            if commits.count() > 0
                && !consumer.assignment_lost()
                && let Err(e) = consumer.commit(&commits, CommitMode::Sync)
            {
                tracing::warn!(error = %e, "kafka source: committing partitions taken away failed; their records since the last commit are delivered again");
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(given) = rebalance {
            // Ready means reading: a member the group has given nothing yet (it joined a
            // moment ago, or the group has more members than partitions) is not.
            if consumer.assignment().is_ok_and(|a| a.count() > 0) {
                self.ready.set(true);
            }
            // A retry partition paused when it was taken away comes back paused (librdkafka
            // keeps the application's pause): a fresh assignment starts reading.
            if let Err(e) = consumer.resume(given) {
                tracing::debug!(error = %e, "kafka source: resuming partitions given");
            }
            let mut assigned = lock(&self.assigned);
            assigned.generation += 1;
            let generation = assigned.generation;
            for element in given.elements() {
                let id = (element.topic().to_string(), element.partition());
                assigned.blocked.remove(&id);
                assigned.waiting.remove(&id);
                assigned
                    .partitions
                    .insert(id, (generation, PartitionOffsets::default()));
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            tracing::debug!(error = %e, "kafka source: a commit failed; it is made again");
            let mut assigned = lock(&self.assigned);
            for element in offsets.elements() {
                let id = (element.topic().to_string(), element.partition());
                if let (Some((_, offsets)), Offset::Offset(next)) =
                    (assigned.partitions.get_mut(&id), element.offset())
                {
                    offsets.commit_failed(next);
                }
            }
        }
    }
}

/// A record the loop hands back: done (its offset may be committed), or to be delivered
/// again here after a wait (its retry copy could not be written).
enum Back {
    Done {
        topic: String,
        partition: i32,
        offset: i64,
        generation: u64,
    },
    Again(OwnedMessage, u64),
}

struct Session<'a> {
    config: &'a KafkaConfig,
    /// How long records in flight get to finish at shutdown.
    grace: Duration,
    ready: &'a Readiness,
    driver: &'a SettlementDriver,
    key: &'a HistoryKey,
    slots: Arc<Semaphore>,
}

impl Session<'_> {
    async fn run(
        &self,
        topics: &[String],
        dlqs: &[String],
        shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let max_in_flight = self.driver.pipeline().settings().max_in_flight;
        // A route ordered by key shows its parked partitions from 0, not "not counted".
        for topic in topics {
            if self.driver.pipeline().orders_by_key(topic) {
                self.driver.pipeline().parked_keys_counted(topic);
            }
        }
        let assigned: Shared = Arc::new(Mutex::new(Assigned::new(max_in_flight)));
        let ended = self.read(topics, dlqs, shutdown, &assigned).await;
        // Whatever this session had in flight is no longer its to settle or resume: a task
        // still waiting out a blocking delay sees its partition gone and stops.
        let mut assigned = lock(&assigned);
        assigned.partitions.clear();
        assigned.blocked.clear();
        assigned.waiting.clear();
        ended
    }

    async fn read(
        &self,
        topics: &[String],
        dlqs: &[String],
        mut shutdown: watch::Receiver<bool>,
        assigned: &Shared,
    ) -> anyhow::Result<()> {
        // The brokers reached once first: a TLS handshake refused or a login failed is said
        // here in librdkafka's words, not as a timeout of the first call that needed them.
        if let Err(why) = super::client::probe(self.config).await {
            if self.ready.warn(why.clone()) {
                tracing::warn!("{why}");
            }
            anyhow::bail!("{why}");
        }
        let client = client_config(self.config).map_err(anyhow::Error::msg)?;
        let retry_topics: Vec<String> = all_buckets()
            .into_iter()
            .map(|b| self.config.retry_topic(b))
            .collect();
        let mut created = retry_topics.clone();
        created.push(invalid_topic(self.config));
        created.extend(dlqs.iter().cloned());
        created.push(self.config.audit_topic.clone());
        self.create_topics(&client, &created).await?;
        let consumer: StreamConsumer<Context> = client
            .clone()
            .set("group.id", &self.config.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set(
                "session.timeout.ms",
                self.config.session_timeout_ms.to_string(),
            )
            // A third of the session, as Kafka advises, and never longer than librdkafka's
            // own default.
            // librdkafka refuses a session longer than the poll interval.
            .set(
                "max.poll.interval.ms",
                self.config.session_timeout_ms.max(300_000).to_string(),
            )
            .set(
                "heartbeat.interval.ms",
                (self.config.session_timeout_ms / 3)
                    .clamp(300, 3_000)
                    .to_string(),
            )
            // A broker holds an empty fetch this long: a retry copy that falls due in a
            // partition resumed meanwhile waits for it (librdkafka's default is 500 ms).
            .set("fetch.wait.max.ms", "100")
            // Every partition of every topic laid out in order and dealt round the members:
            // a route topic's partitions are spread even though the retry topics (one
            // partition each) outnumber them - a sticky assignor balances only the total
            // count and may give one member a route's every partition.
            .set("partition.assignment.strategy", "roundrobin")
            .create_with_context(Context {
                assigned: assigned.clone(),
                ready: self.ready.clone(),
            })
            .context("creating the Kafka consumer")?;
        let producer: FutureProducer<Reporting> = client
            .clone()
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", WRITE_TIMEOUT.as_millis().to_string())
            .create_with_context(Reporting {
                ready: self.ready.clone(),
            })
            .context("creating the Kafka producer")?;
        let mut all: Vec<&str> = topics.iter().map(String::as_str).collect();
        all.extend(retry_topics.iter().map(String::as_str));
        consumer.subscribe(&all).context("subscribing")?;
        tracing::info!(topics = ?topics, group = %self.config.group_id, "kafka source: joining the group");

        let (back_tx, mut back_rx) = mpsc::unbounded_channel::<Back>();
        let (resume_tx, mut resume_rx) = mpsc::unbounded_channel::<(String, i32)>();
        let mut commit_tick = tokio::time::interval(COMMIT_EVERY);
        let job = Job {
            config: Arc::new(self.config.clone()),
            topics: Arc::new(topics.to_vec()),
            driver: self.driver.clone(),
            producer,
            dlqs: self.driver.pipeline().broker_dlqs().clone(),
            key: self.key.clone(),
            slots: self.slots.clone(),
            ready: self.ready.clone(),
            back: back_tx,
            assigned: assigned.clone(),
        };
        loop {
            tokio::select! {
                next = consumer.recv() => match next {
                    Ok(message) => {
                        let message = message.detach();
                        self.take(&consumer, assigned, &job, &resume_tx, message)?;
                    }
                    // A client that cannot go on: rebuild the session.
                    Err(e @ KafkaError::MessageConsumptionFatal(_)) => {
                        return Err(e).context("reading records");
                    }
                    // A topic not there yet, a broker restarting: the client recovers by
                    // itself, and the other routes go on meanwhile.
                    Err(e) => {
                        report(self.ready, &e, &format!("reading records: {e}"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(back) = back_rx.recv() => back_to(&consumer, assigned, &job, back),
                Some((topic, partition)) = resume_rx.recv() => {
                    // A timer left from before a rebalance must not lift a pause for room:
                    // the partition would read past the bound until the next drain.
                    let for_room = lock(assigned).read_ahead.holds(&(topic.clone(), partition));
                    if !for_room {
                        let mut tpl = TopicPartitionList::new();
                        tpl.add_partition(&topic, partition);
                        // Resumed even when taken away meanwhile: librdkafka keeps a pause
                        // across a revoke, and a partition given back paused is never read.
                        if let Err(e) = consumer.resume(&tpl) {
                            tracing::debug!(error = %e, "kafka source: resuming a retry partition");
                        }
                    }
                }
                _ = commit_tick.tick() => {
                    commit(&consumer, assigned, CommitMode::Async);
                    resume_for_room(&consumer, assigned);
                }
                _ = shutdown.changed() => {
                    // Read no more; let what is in flight finish (up to the grace) so its
                    // offsets are committed here, not delivered again by the next member.
                    let deadline = tokio::time::Instant::now() + self.grace;
                    while lock(assigned).in_flight() > 0 {
                        match tokio::time::timeout_at(deadline, back_rx.recv()).await {
                            Ok(Some(back)) => back_to(&consumer, assigned, &job, back),
                            _ => break,
                        }
                    }
                    commit(&consumer, assigned, CommitMode::Sync);
                    return Ok(());
                }
            }
        }
    }

    /// Take one record: a retry copy not yet due pauses its partition until it is (and
    /// is read again then); anything else is delivered in a task of its own. A record of a
    /// blocking route pauses its partition until it is done, so the next is read after it.
    fn take(
        &self,
        consumer: &StreamConsumer<Context>,
        assigned: &Shared,
        job: &Job,
        resume: &mpsc::UnboundedSender<(String, i32)>,
        message: OwnedMessage,
    ) -> anyhow::Result<()> {
        let (topic, partition, offset) = (
            message.topic().to_string(),
            message.partition(),
            message.offset(),
        );
        let retry_bucket = retry_bucket_ms(&self.config.retry_topic_prefix, &topic);
        let blocking = retry_bucket.is_none() && job.blocks(&topic);
        let generation = {
            let mut assigned = lock(assigned);
            let id = (topic.clone(), partition);
            if retry_bucket.is_none() && assigned.blocked.contains_key(&id) {
                // Fetched before the pause took hold: read again after the record in flight
                // (whatever the route says now - a reload may have turned its ordering off,
                // and the partition reads on from that record once it is done).
                return Ok(());
            }
            let Some((generation, offsets)) = assigned.partitions.get_mut(&id) else {
                // Not (or no longer) assigned: its next owner reads it.
                return Ok(());
            };
            offsets.take(offset);
            let generation = *generation;
            // Reading again: its parked copy, if it had one, comes first after the seek
            // back, and parks again below if it is still not due.
            assigned.waiting.remove(&id);
            if blocking {
                assigned.blocked.insert(id, (generation, offset));
            }
            generation
        };
        if blocking {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&topic, partition);
            consumer
                .pause(&tpl)
                .context("pausing a blocking route's partition")?;
            // Fetching resumes after this record, whatever was fetched ahead of it.
            consumer
                .seek(
                    &topic,
                    partition,
                    Offset::Offset(offset.saturating_add(1)),
                    Duration::from_secs(10),
                )
                .context("seeking past a blocking route's record")?;
        }
        if let Some(bucket) = retry_bucket_ms(&self.config.retry_topic_prefix, &topic) {
            // A record whose headers cannot be read is due now: its task sets it aside.
            let due = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                record::due_at_ms(&message)
            }))
            .unwrap_or(None);
            // The due time is not signed: a copy is never due later than its bucket after
            // it was written, so a forged one cannot hold the partition's other copies.
            let written = message
                .timestamp()
                .to_millis()
                .and_then(|ms| u64::try_from(ms).ok());
            let latest = written.map_or(0, |at| at.saturating_add(bucket));
            let wait = due.map_or(0, |at| at.min(latest).saturating_sub(now_ms()));
            if wait > 0 {
                // The partition's copies are in due order (one bucket, one delay): wait
                // for this one and read on from it.
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(&topic, partition);
                lock(assigned).waiting.insert((topic.clone(), partition));
                consumer.pause(&tpl).context("pausing a retry partition")?;
                consumer
                    .seek(
                        &topic,
                        partition,
                        Offset::Offset(offset),
                        Duration::from_secs(10),
                    )
                    .context("seeking back to a retry copy")?;
                let resume = resume.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                    let _ = resume.send((topic, partition));
                });
                pause_for_room(consumer, assigned);
                return Ok(());
            }
        }
        job.clone().spawn(message, generation);
        pause_for_room(consumer, assigned);
        Ok(())
    }

    /// Create `names` (the retry, dead-letter and audit topics) where missing. The route
    /// topics are the producers' to create: a consumer waits for them.
    async fn create_topics(
        &self,
        client: &rdkafka::config::ClientConfig,
        names: &[String],
    ) -> anyhow::Result<()> {
        let admin: AdminClient<Reporting> = client
            .create_with_context(Reporting {
                ready: self.ready.clone(),
            })
            .context("creating the Kafka admin client")?;
        let replication = self.config.topic_replication_factor;
        let new: Vec<NewTopic<'_>> = names
            .iter()
            .map(|n| {
                NewTopic::new(
                    n,
                    self.config.topic_partitions,
                    TopicReplication::Fixed(replication),
                )
            })
            .collect();
        let created = admin
            .create_topics(
                &new,
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .context("creating the retry and dead-letter topics")?;
        for result in created {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    anyhow::bail!("creating topic `{name}`: the broker answered {code}")
                }
            }
        }
        Ok(())
    }
}

/// A record handed back: done (its offset may be committed, unless its partition was
/// taken away since; a blocking route's partition reads on), or to be delivered again here
/// (unless taken away: its next owner reads it from the last commit).
fn back_to(consumer: &StreamConsumer<Context>, assigned: &Shared, job: &Job, back: Back) {
    match back {
        Back::Done {
            topic,
            partition,
            offset,
            generation,
        } => {
            let id = (topic, partition);
            {
                let mut assigned = lock(assigned);
                if let Some((g, offsets)) = assigned.partitions.get_mut(&id)
                    && *g == generation
                {
                    offsets.finish(offset);
                }
                if assigned.blocked.get(&id) == Some(&(generation, offset)) {
                    assigned.blocked.remove(&id);
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition(&id.0, id.1);
                    if let Err(e) = consumer.resume(&tpl) {
                        tracing::warn!(error = %e, topic = %Clean(&id.0), partition = id.1, "kafka source: resuming a blocking route's partition failed; it is read again after the next rebalance");
                    }
                }
            }
            resume_for_room(consumer, assigned);
        }
        Back::Again(message, generation) => {
            let current = lock(assigned)
                .partitions
                .get(&(message.topic().to_string(), message.partition()))
                .is_some_and(|(g, _)| *g == generation);
            if current {
                job.clone().spawn(message, generation);
            }
        }
    }
}

/// Resume the partitions paused for room once enough records in flight have drained: at
/// each record done, and at each commit tick (records of partitions taken away stop
/// counting without one).
fn resume_for_room(consumer: &StreamConsumer<Context>, assigned: &Shared) {
    let mut assigned = lock(assigned);
    let room = assigned.resume_for_room();
    if room.is_empty() {
        return;
    }
    let tpl = partition_list(&room);
    tracing::debug!(
        partitions = room.len(),
        "kafka source: records in flight drained; reading again"
    );
    if let Err(e) = consumer.resume(&tpl) {
        // Kept paused for room: the next try resumes them.
        tracing::debug!(error = %e, "kafka source: resuming partitions paused while too many records were in flight");
        assigned.read_ahead.keep(room);
    }
}

fn partition_list(ids: &[(String, i32)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in ids {
        tpl.add_partition(topic, *partition);
    }
    tpl
}

/// With a record just taken: when too many are in flight, pause the partitions still
/// reading until they drain ([`ReadAhead`]). A pause that fails only reads further ahead.
fn pause_for_room(consumer: &StreamConsumer<Context>, assigned: &Shared) {
    let room = lock(assigned).pause_for_room();
    if room.is_empty() {
        return;
    }
    let tpl = partition_list(&room);
    tracing::debug!(
        partitions = room.len(),
        "kafka source: too many records in flight; pausing reads until they drain"
    );
    if let Err(e) = consumer.pause(&tpl) {
        tracing::debug!(error = %e, "kafka source: pausing partitions while too many records are in flight");
    }
}

/// Commit what every assigned partition may commit (asynchronously at the ticks: a failure
/// is made again at the next one, see [`Context::commit_callback`]).
fn commit(consumer: &StreamConsumer<Context>, assigned: &Shared, mode: CommitMode) {
    let commits = lock(assigned).commits(None);
    if commits.count() > 0
        && let Err(e) = consumer.commit(&commits, mode)
    {
        tracing::debug!(error = %e, "kafka source: a commit was not sent; it is made again");
        let mut assigned = lock(assigned);
        for element in commits.elements() {
            let id = (element.topic().to_string(), element.partition());
            if let (Some((_, offsets)), Offset::Offset(next)) =
                (assigned.partitions.get_mut(&id), element.offset())
            {
                offsets.commit_failed(next);
            }
        }
    }
}

/// Where records no route may take are set aside: `<retry prefix>.invalid`.
fn invalid_topic(config: &KafkaConfig) -> String {
    format!("{}.invalid", config.retry_topic_prefix)
}

/// Whether `topic` is one of the retry topics under `prefix`.
fn is_retry_topic(prefix: &str, topic: &str) -> bool {
    retry_bucket_ms(prefix, topic).is_some()
}

/// The delay bucket of `topic` when it is a retry topic under `prefix`.
fn retry_bucket_ms(prefix: &str, topic: &str) -> Option<u64> {
    let ms = topic.strip_prefix(prefix)?.strip_prefix('.')?;
    if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ms.parse().ok()
}

/// What one delivery's task needs.
#[derive(Clone)]
struct Job {
    config: Arc<KafkaConfig>,
    /// The routes' topics: a copy signed with another key may name only one of them.
    topics: Arc<Vec<String>>,
    driver: SettlementDriver,
    producer: FutureProducer<Reporting>,
    dlqs: BrokerDlqs,
    key: HistoryKey,
    /// The source's `max_in_flight` slots.
    slots: Arc<Semaphore>,
    ready: Readiness,
    back: mpsc::UnboundedSender<Back>,
    /// The session's partitions: whether a record waiting out a blocking delay is still
    /// this session's to deliver.
    assigned: Shared,
}

impl Job {
    fn spawn(self, message: OwnedMessage, generation: u64) {
        tokio::spawn(async move { self.handle(message, generation).await });
    }

    /// Deliver one record and settle it through the driver; then hand it back as done,
    /// or to be delivered again here.
    async fn handle(self, message: OwnedMessage, generation: u64) {
        let received = Instant::now();
        let from_retry = is_retry_topic(&self.config.retry_topic_prefix, message.topic());
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            record::read(
                &message,
                &self.config.id_header,
                from_retry,
                now_ms(),
                &self.key,
            )
        }));
        let incoming = match read {
            Ok(incoming) if !from_retry || self.trusted(&incoming) => incoming,
            Ok(incoming) => {
                let why = "a retry copy whose history is not signed by this group's key, or \
                           that names no route of this source";
                return self
                    .set_aside(&message, Some(&incoming), why, generation)
                    .await;
            }
            Err(_) => {
                let why = "a record whose headers cannot be read (a header name that is not UTF-8)";
                return self.set_aside(&message, None, why, generation).await;
            }
        };
        if let HistoryCheck::ForeignKey(theirs) = &incoming.check {
            report_foreign_key(
                self.driver.pipeline(),
                &self.ready,
                NAME,
                "[kafka] history_key_file",
                &self.key,
                theirs,
            );
        }
        let blocking = if from_retry {
            false
        } else {
            match self.paused_for(&incoming, generation) {
                Some(paused) => paused,
                // Taken away before its first attempt: its next owner reads it, in order.
                None if self.blocks(&incoming.delivery.topic) => return,
                None => false,
            }
        };
        let mut incoming = incoming;
        let mut received = received;
        // While an ordered route's record waits out a retry in place (and is delivered
        // again), its partition - every key in it - counts as one parked key.
        let mut parked = None;
        loop {
            let Some((held, global)) = self
                .driver
                .seats(&incoming.delivery.topic, &self.slots)
                .await
            else {
                return;
            };
            if blocking && !self.still_blocking(&incoming, generation) {
                // Taken away while it waited for a seat (a paused route waits long): its
                // next owner may have delivered it and the records after it already.
                return;
            }
            let settlement = self
                .driver
                .decide(
                    &incoming.delivery,
                    held.as_ref().map(|(target, slot)| (target, slot)),
                )
                .await;
            // The consumer has answered: the route's slot goes to the next delivery.
            drop(held);
            let mut record = Record {
                job: &self,
                incoming: &incoming,
                blocking,
                next: None,
            };
            let settled = self
                .driver
                .settle(
                    &mut record,
                    &incoming.delivery,
                    settlement,
                    global,
                    received,
                )
                .await;
            let next = record.next.take();
            let wait = match (settled, next) {
                (Settled::Applied(_), Some(Next::InPlace(advanced, wait))) => {
                    incoming.delivery = advanced;
                    wait
                }
                (Settled::GivenBack, Some(Next::Again(wait))) if blocking => wait,
                (Settled::GivenBack, Some(Next::Again(wait))) => {
                    // Nothing took it back: deliver it again here after the wait, its
                    // offset still held back.
                    let back = self.back.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        let _ = back.send(Back::Again(message, generation));
                    });
                    return;
                }
                _ => {
                    let _ = self.back.send(Back::Done {
                        topic: incoming.topic.clone(),
                        partition: incoming.partition,
                        offset: incoming.offset,
                        generation,
                    });
                    return;
                }
            };
            // A blocking route's record waits here, its partition paused and its offset
            // not committed past; taken away meanwhile, it is its next owner's to read.
            let pipeline = self.driver.pipeline();
            if parked.is_none() && pipeline.orders_by_key(&incoming.delivery.topic) {
                parked = Some(pipeline.parked_while(&incoming.delivery.topic));
            }
            tokio::time::sleep(wait).await;
            if !self.still_blocking(&incoming, generation) {
                return;
            }
            received = Instant::now();
        }
    }

    /// Whether the records of `topic` wait out their retries in place, holding their
    /// partition: the route's mode is `blocking`, or it orders by key (a retry copy would
    /// let the key's later records overtake it).
    fn blocks(&self, topic: &str) -> bool {
        self.config.mode_of(topic) == KafkaRetryMode::Blocking
            || self.driver.pipeline().orders_by_key(topic)
    }

    /// Whether `incoming` waits out its retries in place - decided when it was taken, by
    /// pausing its partition for it, so a reload meanwhile does not leave a record waiting
    /// in place behind a partition that reads on - or `None` when its partition was taken
    /// away since.
    fn paused_for(&self, incoming: &Incoming, generation: u64) -> Option<bool> {
        let id = (incoming.topic.clone(), incoming.partition);
        let assigned = lock(&self.assigned);
        match assigned.partitions.get(&id) {
            Some((current, _)) if *current == generation => {
                Some(assigned.blocked.get(&id) == Some(&(generation, incoming.offset)))
            }
            _ => None,
        }
    }

    /// Whether `incoming`'s partition is still paused for it in this session (not taken
    /// away, nor the session rebuilt, while it waited).
    fn still_blocking(&self, incoming: &Incoming, generation: u64) -> bool {
        let id = (incoming.topic.clone(), incoming.partition);
        lock(&self.assigned).blocked.get(&id) == Some(&(generation, incoming.offset))
    }

    /// Whether a retry copy may be delivered: signed by this group's key, or by another
    /// (a misconfiguration, reported) for one of this source's routes with a clean id.
    fn trusted(&self, incoming: &Incoming) -> bool {
        let d = &incoming.delivery;
        match incoming.check {
            HistoryCheck::Verified => true,
            HistoryCheck::ForeignKey(_) => {
                self.topics.contains(&d.topic)
                    && !d.id.is_empty()
                    && d.id.len() <= 255
                    && !d.id.chars().any(char::is_control)
            }
            HistoryCheck::Unsigned => false,
        }
    }

    /// Put a record no route may take aside, in `<retry prefix>.invalid` (its key, value
    /// and producer headers, and why), for an operator: never delivered, never dropped.
    /// Done once written; delivered again here after a wait when even that fails.
    async fn set_aside(
        self,
        message: &OwnedMessage,
        incoming: Option<&Incoming>,
        why: &str,
        generation: u64,
    ) {
        let topic = invalid_topic(&self.config);
        let mut headers = rdkafka::message::OwnedHeaders::new();
        for (name, value) in incoming.map(|i| i.headers.as_slice()).unwrap_or_default() {
            headers = headers.insert(rdkafka::message::Header {
                key: name,
                value: Some(value),
            });
        }
        headers = headers.insert(rdkafka::message::Header {
            key: "verdict-invalid-reason",
            value: Some(why),
        });
        let text = format!("kafka source: {why}: set aside in `{topic}`");
        if self.ready.warn(text.clone()) {
            tracing::warn!(topic = %Clean(message.topic()), "{text}");
        }
        let written = self
            .write(
                &topic,
                message.key(),
                message.payload().unwrap_or_default(),
                headers,
            )
            .await;
        let back = match written {
            Ok(()) => Back::Done {
                topic: message.topic().to_string(),
                partition: message.partition(),
                offset: message.offset(),
                generation,
            },
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "kafka source: setting a record aside failed; trying again in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
                Back::Again(message.clone(), generation)
            }
        };
        let _ = self.back.send(back);
    }

    /// Write `headers`, `key` and `payload` to `topic` and wait for the broker's
    /// acknowledgement.
    async fn write(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: &[u8],
        headers: rdkafka::message::OwnedHeaders,
    ) -> anyhow::Result<()> {
        let mut out = FutureRecord::to(topic).payload(payload).headers(headers);
        if let Some(key) = key {
            out = out.key(key);
        }
        self.producer
            .send(out, WRITE_TIMEOUT)
            .await
            .map_err(|(e, _)| anyhow::anyhow!("writing to topic `{topic}`: {e}"))?;
        Ok(())
    }

    /// A copy of `incoming` in the retry topic of `delay_ms`'s bucket, due then.
    async fn later(
        &self,
        incoming: &Incoming,
        failed: Option<(&crate::model::AttemptRecord, bool)>,
        delay_ms: u64,
    ) -> anyhow::Result<()> {
        let topic = self.config.retry_topic(bucket_ms(delay_ms.max(1)));
        let due = now_ms().saturating_add(delay_ms);
        let headers = record::retry_headers(incoming, failed, due, &self.key);
        self.write(
            &topic,
            incoming.key.as_deref(),
            &incoming.delivery.payload,
            headers,
        )
        .await
    }

    async fn apply(&self, incoming: &Incoming, settlement: Settlement) -> anyhow::Result<()> {
        let topic = incoming.delivery.topic.as_str();
        match settlement {
            Settlement::Delivered => {
                if let Some(token) = incoming.delivery.headers.get(REPLAY_HEADER) {
                    // A replayed record arrived: what a replay's canary waits for. The
                    // delivery stands whether or not this is written.
                    let record = AuditRecord::new(
                        "replay-delivered",
                        &incoming.delivery.id,
                        topic,
                        now_ms(),
                    )
                    .detail(token);
                    let body = serde_json::to_vec(&record).unwrap_or_default();
                    let write = self.write(
                        &self.config.audit_topic,
                        None,
                        &body,
                        rdkafka::message::OwnedHeaders::new(),
                    );
                    let written = tokio::time::timeout(AUDIT_TIMEOUT, write)
                        .await
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("no acknowledgement in 5 s")));
                    if let Err(e) = written {
                        tracing::warn!(error = %format!("{e:#}"), id = %Clean(&incoming.delivery.id), "kafka source: the replay-delivered record was not written; a canary waiting for it times out");
                    }
                }
            }
            Settlement::Again {
                failed,
                delay_ms,
                spend_attempt,
            } => {
                self.later(incoming, Some((&failed, spend_attempt)), delay_ms)
                    .await?;
            }
            Settlement::Release { delay_ms } => self.later(incoming, None, delay_ms).await?,
            Settlement::DeadLetter { failed, mut letter } => {
                // The record's value is the payload already: an envelope that would carry
                // it again past what a record may hold goes without it (its size and
                // sha256 kept) rather than failing to be written again and again.
                // Measured as written: the key, the value and every header (the producer's,
                // Spring's, the envelope).
                let payload = &incoming.delivery.payload;
                let fixed = payload.len() + incoming.key.as_ref().map_or(0, Vec::len);
                let mut headers =
                    record::dead_letter_headers(incoming, &failed, &letter, &self.config.group_id);
                if fixed + headers_bytes(&headers) > RECORD_BYTES_MAX {
                    letter.envelope = crate::envelope::omit_payload(
                        letter.format,
                        &letter.envelope,
                        payload,
                        "the payload is this dead-letter record's value",
                    )
                    .map_err(|e| anyhow::anyhow!("shrinking a dead letter: {e}"))?;
                    headers = record::dead_letter_headers(
                        incoming,
                        &failed,
                        &letter,
                        &self.config.group_id,
                    );
                }
                let dlt = letter.dlq.clone();
                self.write(
                    &dlt,
                    incoming.key.as_deref(),
                    &incoming.delivery.payload,
                    headers,
                )
                .await?;
                self.dlqs.written(NAME, &dlt, topic);
            }
            Settlement::Discard { failed, reason } => {
                let audit = AuditRecord::new("discarded", &incoming.delivery.id, topic, now_ms())
                    .kind(&failed.kind)
                    .detail(&reason);
                self.write(
                    &self.config.audit_topic,
                    None,
                    &serde_json::to_vec(&audit)?,
                    rdkafka::message::OwnedHeaders::new(),
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// What a delivery's task does after the settlement, when it is not done with the record.
enum Next {
    /// Deliver it again after this wait: giving it back failed, or (blocking) it is
    /// given back in place.
    Again(Duration),
    /// Blocking: deliver it again in place after this wait, as this next attempt.
    InPlace(Delivery, Duration),
}

/// A record this gateway holds (its offset not committed past) until it is settled.
struct Record<'a> {
    job: &'a Job,
    incoming: &'a Incoming,
    /// Its route waits out a retry's delay in place rather than in a retry topic.
    blocking: bool,
    /// Set when the record stays this task's: see [`Next`].
    next: Option<Next>,
}

impl Held for Record<'_> {
    async fn apply(&mut self, settlement: Settlement) -> Result<(), Unapplied> {
        if self.blocking
            && let Some((failed, delay_ms)) = crate::sources::next_attempt(&settlement)
        {
            // Nothing to write: the record stays this task's, its next attempt counted
            // here as a copy's signed history would count it.
            let mut next = self.incoming.delivery.clone();
            advance(&mut next, failed);
            self.next = Some(Next::InPlace(next, Duration::from_millis(delay_ms)));
            return Ok(());
        }
        self.job
            .apply(self.incoming, settlement)
            .await
            .map_err(|e| Unapplied::Failed(format!("{e:#}")))
    }

    fn failure_key(&self) -> String {
        // Where the record was first read: the same for its every delivery.
        self.incoming.delivery.id.clone()
    }

    async fn give_back(&mut self, wait: Duration) {
        // Set before writing: if the write panics (the driver catches it), the record is
        // still delivered again here rather than counted as done.
        self.next = Some(Next::Again(wait.max(Duration::from_millis(100))));
        if self.blocking {
            // In place, after the wait: a copy in a retry topic would let the records
            // behind it overtake it.
            return;
        }
        let delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        match self.job.later(self.incoming, None, delay_ms).await {
            Ok(()) => self.next = None,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), id = %Clean(&self.incoming.delivery.id), "kafka source: a record could not be given back to a retry topic; it is delivered again here");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_topics_are_the_prefix_and_a_bucket() {
        assert!(is_retry_topic("verdict.retry", "verdict.retry.50"));
        assert!(!is_retry_topic("verdict.retry", "verdict.retry."));
        assert!(!is_retry_topic("verdict.retry", "verdict.retry.invalid"));
        assert!(!is_retry_topic("verdict.retry", "verdict.retryx.50"));
        assert!(!is_retry_topic("verdict.retry", "orders"));
        assert_eq!(
            retry_bucket_ms("verdict.retry", "verdict.retry.3125"),
            Some(3125)
        );
        assert_eq!(
            retry_bucket_ms("verdict.retry", "verdict.retry.99999999999999999999999"),
            None,
            "past a u64: no bucket, no retry topic"
        );
    }
}
