//! The RabbitMQ source: each route's topic is a durable queue, consumed with manual acks
//! and a prefetch limit.
//!
//! - **Retry / delay** -> a copy carrying the attempt history in `x-verdict-*` headers goes
//!   to the delay bucket for the verdict's delay (see [`topology`]; delays are rounded *up*
//!   to buckets 25% apart, so a retry is never early and at most a quarter late), and once
//!   the broker confirms it the original is acked.
//! - **Dead-letter** -> the envelope goes to the DLQ queue (`<topic>.DLQ` by default) with a
//!   publisher confirm, then the original is acked.
//! - **Discard** -> an audit record (JSON) to `audit_queue`, confirmed, then ack.
//!
//! On a route ordered by key (`ordering = "key"`) one gateway consumes the queue and a key's
//! messages go one at a time, retried in place instead of through a bucket: see [`ordered`].
//!
//! A crash between the confirm and the ack redelivers the original (a duplicate, counted by
//! the consumer), never loses it. A lost connection is rebuilt with backoff; deliveries the
//! broker had not seen acked are redelivered to whichever gateway consumes next.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use futures_util::{FutureExt as _, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, ConnectionProperties};
use tokio::sync::{Semaphore, watch};

use super::signed_history::report_foreign_key;
use super::{AbortOnDrop, Held, SettlementDriver, Source, Unapplied, next_attempt};
use crate::health::{BrokerDlqs, Readiness};
use crate::model::{AuditRecord, Delivery, Settlement};
use crate::pipeline::{Pipeline, now_ms};
use verdict_registry::{GatewaySection, RabbitmqConfig};
use verdict_runtime::text::Clean;

mod access;
mod dlq;
mod due;
pub mod headers;
mod ordered;
pub mod topology;

pub use access::{RabbitAccessError, probe};
#[cfg(test)]
pub(crate) use dlq::replay_properties;
pub use dlq::{BROWSE_DEPTH_MAX, RabbitDeadLetters, SCAN_PER_PAGE, entry_of};
pub use headers::HistoryKey;
use ordered::{KeyChains, Waiting};
use topology::Topology;

/// The source's name in metrics and `/readyz`.
pub const NAME: &str = "rabbitmq";

/// The routes on RabbitMQ (`[rabbitmq]`), each topic a durable queue, consumed as one
/// source.
pub struct RabbitmqSource {
    config: RabbitmqConfig,
    queues: Vec<String>,
    /// Queue -> the header holding its messages' keys, for the routes ordered by key.
    ordered: HashMap<String, String>,
    key: HistoryKey,
    ready: Readiness,
}

impl std::fmt::Debug for RabbitmqSource {
    // Not derived: the config's URL may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitmqSource")
            .field("queues", &self.queues)
            .field("ordered", &self.ordered)
            .finish_non_exhaustive()
    }
}

impl RabbitmqSource {
    /// A source consuming `queues`; `key` signs the history headers of retried copies.
    pub fn new(config: RabbitmqConfig, queues: Vec<String>, key: HistoryKey) -> RabbitmqSource {
        RabbitmqSource {
            config,
            queues,
            ordered: HashMap::new(),
            key,
            ready: Readiness::new(NAME),
        }
    }

    /// Order `queue` by the key in its messages' `header` (`ordering = "key"`): this gateway
    /// consumes it only as its exclusive consumer, and delivers one message of a key at a
    /// time, retrying a failed one in place (see the `ordered` module).
    #[must_use]
    pub fn ordered_by(mut self, queue: &str, header: &str) -> RabbitmqSource {
        self.ordered.insert(queue.to_string(), header.to_string());
        self
    }
}

impl Source for RabbitmqSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn readiness(&self) -> Option<Readiness> {
        Some(self.ready.clone())
    }

    /// Deliveries unacked at shutdown are redelivered by the broker.
    fn run(
        self: Box<Self>,
        pipeline: Arc<Pipeline>,
        shutdown: watch::Receiver<bool>,
        grace: Duration,
    ) -> BoxFuture<'static, ()> {
        Box::pin(consume(pipeline, *self, shutdown, grace))
    }
}

/// Consume until `shutdown` turns true, reconnecting with backoff; then wait up to `grace`
/// for deliveries in flight.
async fn consume(
    pipeline: Arc<Pipeline>,
    source: RabbitmqSource,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let RabbitmqSource {
        config,
        queues,
        ordered: ordered_queues,
        key,
        ready,
    } = source;
    let dlqs = pipeline.broker_dlqs().clone();
    let settings = &pipeline.settings().clone();
    let (config, ready, dlqs, queues) = (&config, &ready, &dlqs, &queues);
    let pipeline = &pipeline;
    let driver = &SettlementDriver::new(NAME, pipeline.clone());
    let key = &key;
    let ordered_queues = &ordered_queues;
    for queue in ordered_queues.keys() {
        // Shown from the start (`parked_keys` 0), not only once a key first parks.
        pipeline.parked_keys_held(queue, 0);
    }
    // Shared by every session: a key's messages an earlier session still holds keep its
    // later ones waiting.
    let chains = &Arc::new(KeyChains::default());
    let session = move |slots: Arc<Semaphore>, shutdown: watch::Receiver<bool>| async move {
        let session = Session {
            config,
            settings,
            ready,
            dlqs,
            slots: &slots,
            driver,
            key,
            ordered_queues,
            chains,
        };
        session.run(queues, shutdown).await
    };
    super::supervise(
        NAME,
        ready,
        settings.max_in_flight,
        shutdown,
        grace,
        session,
    )
    .await;
}

struct Session<'a> {
    config: &'a RabbitmqConfig,
    settings: &'a GatewaySection,
    ready: &'a Readiness,
    dlqs: &'a BrokerDlqs,
    slots: &'a Arc<Semaphore>,
    driver: &'a SettlementDriver,
    key: &'a HistoryKey,
    /// Queue -> key header, for the routes ordered by key.
    ordered_queues: &'a HashMap<String, String>,
    chains: &'a Arc<KeyChains>,
}

impl Session<'_> {
    async fn run(&self, queues: &[String], shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
        let conn = access::connect(
            self.config,
            ConnectionProperties::default()
                .with_connection_name(format!("verdict {}", self.settings.instance).into()),
        )
        .await?;
        let topology = Topology::new(conn.create_channel().await?, self.config).await?;
        let dlq_names: Vec<String> = queues
            .iter()
            .map(|q| {
                self.settings
                    .dlq_naming
                    .dlq_for(q, &self.settings.global_dlq)
            })
            .collect();
        for name in queues.iter().chain(&dlq_names) {
            topology.queue(name).await?;
        }
        topology.queue(&self.config.audit_queue).await?;
        self.chains.set_publisher(&topology);
        let mut streams = Vec::new();
        for queue in queues
            .iter()
            .filter(|q| !self.ordered_queues.contains_key(*q))
        {
            let (channel, consumer) = self.consume(&conn, queue, false).await?;
            streams.push((queue.as_str(), channel, consumer));
        }
        // Classic buckets expire into the due queue: every gateway with them moves what
        // is due on to its route queue, whichever route it came from.
        let due = if self.config.delay_queues == verdict_registry::DelayQueues::Classic {
            let name = self.config.due_queue();
            topology.queue(&name).await?;
            let (channel, consumer) = self.consume(&conn, &name, false).await?;
            let mover = Topology::new(conn.create_channel().await?, self.config).await?;
            Some((channel, consumer, mover))
        } else {
            None
        };
        let poller = Topology::new(conn.create_channel().await?, self.config).await?;
        let _poller = AbortOnDrop(tokio::spawn(poll_dlq_depths(
            poller,
            dlq_names,
            self.settings.dlq_naming,
            self.dlqs.clone(),
        )));
        self.ready.set(true);
        tracing::info!(queues = ?queues, "rabbitmq source: consuming");
        let mut loops: Vec<BoxFuture<'_, anyhow::Result<()>>> = streams
            .into_iter()
            .map(|(queue, channel, consumer)| {
                self.consume_queue(&topology, queue, channel, consumer, shutdown.clone(), None)
                    .boxed()
            })
            .collect();
        for (queue, header) in self.ordered_queues {
            let ordered = self.consume_ordered(&conn, &topology, queue, header, shutdown.clone());
            loops.push(ordered.boxed());
        }
        let mover = due.as_ref().map(|(_, _, mover)| mover.clone());
        if let Some((channel, consumer, mover)) = due {
            let topology = topology.clone();
            let moving = async move {
                due::move_due(
                    &mover,
                    &topology,
                    self.config,
                    self.ready,
                    (channel, consumer),
                    shutdown,
                )
                .await
            };
            loops.push(moving.boxed());
        }
        let mover_broken = async {
            match &mover {
                Some(mover) => mover.broken().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            done = futures_util::future::try_join_all(loops) => {
                done?;
                Ok(())
            }
            error = topology.broken() => Err(anyhow::anyhow!(
                "the publishing channel closed ({error}); rebuilding the session"
            )),
            error = mover_broken => Err(anyhow::anyhow!(
                "the channel moving due retries closed ({error}); rebuilding the session"
            )),
        }
    }

    /// A consumer of `queue` on a channel of its own, at most `prefetch` deliveries unacked,
    /// and that channel: each delivery's task holds a clone of it until the delivery is
    /// acked or given back. A session torn down drops its consumers, which cancels them,
    /// but the channel stays open while a task still holds one of its deliveries - closing
    /// it would hand the broker back a message whose retry, dead letter or move had already
    /// been confirmed, and the copy and the redelivery would both live on.
    /// With `exclusive`, the broker refuses (`ACCESS_REFUSED`) while another consumer has
    /// the queue, and refuses everyone else while this one does.
    async fn consume(
        &self,
        conn: &lapin::Connection,
        queue: &str,
        exclusive: bool,
    ) -> anyhow::Result<(lapin::Channel, lapin::Consumer)> {
        let channel = conn.create_channel().await?;
        channel
            .basic_qos(self.config.prefetch.max(1), BasicQosOptions::default())
            .await?;
        let options = BasicConsumeOptions {
            exclusive,
            ..BasicConsumeOptions::default()
        };
        let consumer = channel
            .basic_consume(
                ShortString::from(queue),
                ShortString::from(""),
                options,
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("consuming queue `{queue}`"))?;
        Ok((channel, consumer))
    }

    /// Consume `queue`, ordered by the key in `header`, as its exclusive consumer: while
    /// another gateway holds it, stand by and look again every [`ordered::STANDBY_RETRY`].
    async fn consume_ordered(
        &self,
        conn: &lapin::Connection,
        topology: &Topology,
        queue: &str,
        header: &str,
        mut shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        // Asking for the queue while another consumer holds it is refused, which closes the
        // asking channel (and the client logs an error each time): look at the queue's
        // consumer count first, on a channel of its own.
        let looking = conn.create_channel().await?;
        let mut standing_by = false;
        loop {
            let consumers = looking
                .queue_declare(
                    ShortString::from(queue),
                    QueueDeclareOptions {
                        passive: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .with_context(|| format!("looking at queue `{queue}`"))?
                .consumer_count();
            if consumers == 0 {
                match self.consume(conn, queue, true).await {
                    Ok((channel, consumer)) => {
                        tracing::info!(
                            queue,
                            "rabbitmq source: consuming a queue ordered by key, as its only \
                             consumer"
                        );
                        standing_by = false;
                        // Whatever ends this consumer but a shutdown closes its channel, so
                        // the broker puts back everything it holds, each message in its
                        // place, before any consumer - this one again, or another
                        // gateway's - can take the queue.
                        let mut closing = ordered::CloseOnDrop(Some(channel.clone()));
                        let consumed = self
                            .consume_queue(
                                topology,
                                queue,
                                channel,
                                consumer,
                                shutdown.clone(),
                                Some(header),
                            )
                            .await;
                        match consumed {
                            Ok(()) => {
                                // Stopping: deliveries in flight finish on the open channel;
                                // what waits goes back when the connection closes.
                                closing.0 = None;
                                return Ok(());
                            }
                            // The queue's own channel failed (its consumer timeout, say): the
                            // queue is asked for again, the other routes go on.
                            Err(e) => tracing::warn!(
                                queue,
                                error = %format!("{e:#}"),
                                "rabbitmq source: the consumer of a queue ordered by key \
                                 stopped; what it held goes back to the queue in its place \
                                 and the queue is asked for again"
                            ),
                        }
                    }
                    // Another gateway asked first.
                    Err(e) if ordered::refused(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            if !standing_by {
                tracing::info!(
                    queue,
                    "rabbitmq source: another consumer holds this queue ordered by key; this \
                     gateway stands by and takes it over when that one goes"
                );
                standing_by = true;
            }
            tokio::select! {
                () = tokio::time::sleep(ordered::STANDBY_RETRY) => {}
                _ = shutdown.changed() => return Ok(()),
            }
        }
    }

    /// Take `queue`'s deliveries as the broker hands them (at most `prefetch` unacked per
    /// queue); each waits for a delivery slot of its route and one of `max_in_flight` in
    /// its own task, so a slow route holds its own slots, never the ones another route
    /// needs, and an idle queue holds none. On a queue ordered by the key in `key_header`,
    /// a message whose key is busy waits behind it instead.
    async fn consume_queue(
        &self,
        topology: &Topology,
        queue: &str,
        channel: lapin::Channel,
        mut deliveries: lapin::Consumer,
        mut shutdown: watch::Receiver<bool>,
        key_header: Option<&str>,
    ) -> anyhow::Result<()> {
        loop {
            let next = tokio::select! {
                next = deliveries.next() => next,
                _ = shutdown.changed() => return Ok(()),
            };
            let delivery = match next {
                Some(Ok(delivery)) => delivery,
                Some(Err(e)) => {
                    return Err(e).with_context(|| format!("consuming queue `{queue}`"));
                }
                None => anyhow::bail!("the broker closed the consumer of queue `{queue}`"),
            };
            let job = Job {
                driver: self.driver.clone(),
                topology: topology.clone(),
                dlqs: self.dlqs.clone(),
                key: self.key.clone(),
                slots: self.slots.clone(),
                ready: self.ready.clone(),
                channel: channel.clone(),
            };
            let key =
                key_header.and_then(|h| ordered::key_of(delivery.properties.headers().as_ref(), h));
            let queue = queue.to_string();
            match key {
                Some(key) => {
                    let waiting = Waiting {
                        job,
                        message: delivery,
                    };
                    if let Some(first) = self.chains.admit(&queue, key.clone(), waiting) {
                        ordered::run_chain(
                            self.chains.clone(),
                            queue,
                            key,
                            first,
                            shutdown.clone(),
                        );
                    }
                }
                None => {
                    tokio::spawn(async move { job.handle(&queue, delivery).await });
                }
            }
        }
    }
}

/// The id of a message published without a `message_id`: this process's random prefix and a
/// counter, so two identical messages never share one (a consumer deduplicating by id would
/// drop the second). Its retry copies carry it as their `message_id`; only a first delivery
/// that a crash or a failed settlement hands out again gets a new one - a duplicate the
/// fault explains, never a loss. At most 100 bytes (an AMQP short string holds 255).
fn generated_id(queue: &str) -> String {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(process_prefix);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name: String = queue.chars().take(64).collect();
    format!("{name}-{prefix}{n:x}")
}

/// 64 random bits from the system; without a random source, the pid and the start time
/// (the prefix only has to differ between processes, it guards nothing).
fn process_prefix() -> String {
    let mut bytes = [0u8; 8];
    let value = match verdict_runtime::fsutil::random_bytes(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => (u64::from(std::process::id()) << 32) ^ now_ms(),
    };
    format!("{value:016x}-")
}

/// What identifies a message published without a `message_id` across its redeliveries (its
/// id does not): a digest of what it carries. Its settlement failures are counted under it,
/// so their bound holds even though each redelivery gets a new id; identical messages share
/// a count, which only makes the bound come sooner.
fn content_digest(queue: &str, message: &lapin::message::Delivery) -> String {
    use sha2::Digest as _;
    let mut digest = sha2::Sha256::new();
    digest.update(queue.as_bytes());
    digest.update(format!("{:?}", message.properties).as_bytes());
    digest.update(&message.data);
    let hash = digest.finalize();
    hash[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// What one delivery's task needs.
struct Job {
    driver: SettlementDriver,
    topology: Topology,
    dlqs: BrokerDlqs,
    key: HistoryKey,
    /// The source's `max_in_flight` slots.
    slots: Arc<Semaphore>,
    ready: Readiness,
    /// The channel the delivery came on, kept open until it is settled (see
    /// [`Session::consume`]).
    channel: lapin::Channel,
}

/// A message retried in place (on a route ordered by key): delivered again after `wait`
/// with `properties`, which carry its history.
struct InPlace {
    properties: BasicProperties,
    wait: Duration,
}

/// Where a message's retries wait.
enum Retries {
    /// In a delay bucket (the copy published, the original acked).
    Buckets,
    /// In place, the message kept unacknowledged: the next attempt once one is decided.
    InPlace(Option<Box<InPlace>>),
}

impl Job {
    /// Deliver one message and apply its settlement through the driver, which bounds
    /// whatever goes wrong on the way.
    async fn handle(self, queue: &str, message: lapin::message::Delivery) {
        let attempt = Attempt {
            properties: &message.properties,
            redelivered: message.redelivered,
            retries: Retries::Buckets,
            topology: self.topology.clone(),
            failure_key: failure_key(queue, &message),
        };
        self.attempt(queue, &message, attempt).await;
    }

    /// One delivery of `message` as `attempt` reads it, and how it ended.
    async fn attempt(
        &self,
        queue: &str,
        message: &lapin::message::Delivery,
        attempt: Attempt<'_>,
    ) -> Attempted {
        let received = Instant::now();
        let (mut delivery, check) = headers::read_delivery(
            queue,
            attempt.properties,
            &message.data,
            attempt.redelivered,
            now_ms(),
            &self.key,
        );
        if let headers::HistoryCheck::ForeignKey(theirs) = &check {
            report_foreign_key(
                self.driver.pipeline(),
                &self.ready,
                NAME,
                "[rabbitmq] history_key_file",
                &self.key,
                theirs,
            );
        }
        if delivery.id.is_empty() {
            delivery.id = generated_id(queue);
        }
        let Some((held, global)) = self.driver.seats(queue, &self.slots).await else {
            return Attempted::NotDelivered;
        };
        // A message retried in place whose channel closed while it waited for its seats is
        // back in the queue: another consumer may already have it and its key's next ones.
        if matches!(attempt.retries, Retries::InPlace(_)) && !self.channel.status().connected() {
            return Attempted::NotDelivered;
        }
        let settlement = self
            .driver
            .decide(
                &delivery,
                held.as_ref().map(|(target, slot)| (target, slot)),
            )
            .await;
        // The consumer has answered: the route's slot goes to the next delivery.
        drop(held);
        let mut consumed = Consumed {
            topology: &attempt.topology,
            dlqs: &self.dlqs,
            message,
            delivery: &delivery,
            key: &self.key,
            failure_key: attempt.failure_key,
            retries: attempt.retries,
        };
        self.driver
            .settle(&mut consumed, &delivery, settlement, global, received)
            .await;
        match consumed.retries {
            Retries::InPlace(Some(again)) => Attempted::InPlace(again),
            Retries::InPlace(None) | Retries::Buckets => Attempted::Settled,
        }
    }
}

/// What names a message across its deliveries, for the bound on failed settlements and the
/// history of its retries in place: its id, or for one published without an id (whose id
/// is new at every delivery) a digest of its content.
fn failure_key(queue: &str, message: &lapin::message::Delivery) -> String {
    match message
        .properties
        .message_id()
        .as_ref()
        .map(ShortString::as_str)
    {
        Some(id) if !id.is_empty() => format!("{queue}\u{0}{id}"),
        _ => format!("{queue}\u{0}#{}", content_digest(queue, message)),
    }
}

/// How one delivery of a message reads it and settles it.
struct Attempt<'a> {
    /// Its properties now: as published, or as its last retry in place left them.
    properties: &'a BasicProperties,
    redelivered: bool,
    retries: Retries,
    /// Where its letters, audit records and retry copies are published.
    topology: Topology,
    /// See [`failure_key`].
    failure_key: String,
}

/// How a delivery ended.
enum Attempted {
    /// Settled: delivered, dead-lettered, discarded or handed on (acked, or given back to
    /// the broker).
    Settled,
    /// Kept unacknowledged, to be delivered again in place.
    InPlace(Box<InPlace>),
    /// Not delivered: the source is stopping, or the message's channel closed first.
    NotDelivered,
}

/// A message this gateway's channel holds unacknowledged, settled in RabbitMQ's terms.
struct Consumed<'a> {
    topology: &'a Topology,
    dlqs: &'a BrokerDlqs,
    message: &'a lapin::message::Delivery,
    delivery: &'a Delivery,
    key: &'a HistoryKey,
    /// Its id, or for one published without an id, a digest of its content.
    failure_key: String,
    retries: Retries,
}

impl Held for Consumed<'_> {
    async fn apply(&mut self, settlement: Settlement) -> Result<(), Unapplied> {
        if let Retries::InPlace(again) = &mut self.retries {
            // Kept unacknowledged, the history for its next attempt in memory: a copy in a
            // bucket would come back behind its key's later messages.
            if let Some((failed, delay_ms)) = next_attempt(&settlement) {
                *again = Some(Box::new(InPlace {
                    properties: headers::next_properties(self.delivery, failed, self.key),
                    wait: Duration::from_millis(delay_ms),
                }));
                return Ok(());
            }
        }
        apply(
            self.topology,
            self.dlqs,
            self.message,
            self.delivery,
            settlement,
            self.key,
        )
        .await
        .map_err(|e| Unapplied::Failed(format!("{e:#}")))
    }

    fn failure_key(&self) -> String {
        self.failure_key.clone()
    }

    async fn give_back(&mut self, wait: Duration) {
        if let Retries::InPlace(again) = &mut self.retries {
            // Handed back to the broker it would come back behind its key's later messages
            // (they are held here): it waits in place, spending nothing.
            *again = Some(Box::new(InPlace {
                properties: headers::next_properties(self.delivery, None, self.key),
                wait,
            }));
            return;
        }
        if !wait.is_zero() {
            // Past the bound: wait in a delay bucket, not in a tight requeue loop.
            let release = Settlement::Release {
                delay_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            };
            // A panic here is a failure like any other: the message still waits and is
            // given back below, never left unacknowledged.
            let moved = std::panic::AssertUnwindSafe(self.apply(release))
                .catch_unwind()
                .await;
            if matches!(moved, Ok(Ok(()))) {
                return;
            }
            // Not even the delay bucket takes it (deleted, full, refusing): wait here
            // instead (the driver has let go of its slots), so the consumer is called again
            // at the bounded rate, never in a requeue loop.
            tokio::time::sleep(wait).await;
        }
        let requeue = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        match self.message.nack(requeue).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                "rabbitmq source: giving a message back found its channel closed or the delivery already settled; an unsettled one is redelivered by the broker"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "rabbitmq source: giving a message back failed; the broker redelivers it when the channel closes");
            }
        }
    }
}

async fn apply(
    topology: &Topology,
    dlqs: &BrokerDlqs,
    message: &lapin::message::Delivery,
    delivery: &Delivery,
    settlement: Settlement,
    key: &HistoryKey,
) -> anyhow::Result<()> {
    let queue = delivery.topic.as_str();
    let delivered = settlement == Settlement::Delivered;
    match settlement {
        Settlement::Delivered => {}
        Settlement::Again { .. } | Settlement::Release { .. } => {
            if let Some((failed, delay_ms)) = next_attempt(&settlement) {
                let properties = headers::next_properties(delivery, failed, key);
                let bucket = headers::bucket_ms(delay_ms);
                topology
                    .later(queue, bucket, &delivery.payload, properties)
                    .await?;
            }
        }
        Settlement::DeadLetter { failed, letter } => {
            let mut table = FieldTable::default();
            for (name, value) in letter.headers(delivery, &failed) {
                table.insert(
                    ShortString::from(name),
                    AMQPValue::LongString(LongString::from(value)),
                );
            }
            let content_type = match letter.format {
                "msgpack" => "application/msgpack",
                _ => "application/json",
            };
            let properties = BasicProperties::default()
                .with_message_id(ShortString::from(
                    verdict_runtime::text::one_line(&delivery.id, 255).as_str(),
                ))
                .with_content_type(ShortString::from(content_type))
                .with_timestamp(failed.at_ms / 1_000)
                .with_delivery_mode(2)
                .with_headers(table);
            topology
                .to_queue(&letter.dlq, &letter.envelope, properties)
                .await?;
            dlqs.written(NAME, &letter.dlq, queue);
        }
        Settlement::Discard { failed, reason } => {
            let record = AuditRecord::new("discarded", &delivery.id, queue, now_ms())
                .kind(&failed.kind)
                .detail(&reason);
            topology.audit(&record).await?;
        }
    }
    let acked = message
        .ack(BasicAckOptions::default())
        .await
        .context("ack")?;
    anyhow::ensure!(acked, "ack: the delivery was already acknowledged");
    // Past this point the message is settled: nothing below may count as a failure to
    // settle it (that would dead-letter or requeue a message already delivered).
    if delivered && let Some(token) = delivery.headers.get(crate::model::REPLAY_HEADER) {
        // A replayed message arrived: the record a replay's canary waits for.
        let record =
            AuditRecord::new("replay-delivered", &delivery.id, queue, now_ms()).detail(token);
        if let Err(e) = topology.audit(&record).await {
            tracing::warn!(error = %format!("{e:#}"), id = %Clean(&delivery.id), "rabbitmq source: the replay-delivered record was not written; a canary waiting for it times out");
        }
    }
    Ok(())
}

/// Read each DLQ's depth from the broker about once a second.
async fn poll_dlq_depths(
    topology: Topology,
    mut names: Vec<String>,
    naming: verdict_registry::DlqNaming,
    dlqs: BrokerDlqs,
) {
    loop {
        for (source, dlq, _) in dlqs.snapshot() {
            if source == NAME && !names.contains(&dlq) {
                names.push(dlq);
            }
        }
        for dlq in &names {
            match topology.depth(dlq).await {
                Ok(depth) => {
                    dlqs.set_depth(NAME, dlq, &super::topic_of_dlq(naming, dlq), depth);
                }
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "rabbitmq source: DLQ depth not read");
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
