//! The NATS JetStream source: one stream, and a durable pull consumer with explicit acks
//! per route, filtered to the route's subjects.
//!
//! - **Routes are isolated.** Each route fetches on a durable consumer of its own, at most
//!   twice its consumer's `concurrency` messages taken and unsettled at once (one fetched
//!   ahead of each slot); each message then
//!   waits for a delivery slot of its route and one of `max_in_flight`, with in-progress
//!   acks running from receipt. A route whose consumer is down, with thousands of messages
//!   waiting out a retry delay, holds its own consumer's pending set and nothing of another
//!   route's. A message a route's filter matches but a more specific NATS route takes is
//!   acknowledged on the wider route's consumer and delivered by the more specific one
//!   (whose consumer starts where the wider one's stopped acknowledging: nothing falls
//!   between them).
//! - **Delays do not starve new messages.** JetStream counts a message waiting out a `nak`
//!   delay as ack-pending; `[nats] max_ack_pending` applies per route and is unlimited by
//!   default, so a route's retry backlog never blocks its own new messages (the gateway
//!   bounds what is in flight itself: `max_in_flight`, each route's `concurrency`).
//!
//! - **Retry / delay** -> the attempt history goes to a key-value bucket (keyed by stream
//!   sequence, shared by every gateway of the group), then `nak` with the verdict's delay.
//!   The gateway counts attempts from that history, not from JetStream's delivery count, so
//!   a delay spends none and a crash before the history write costs a duplicate, not an
//!   attempt.
//! - **Dead-letter** -> the envelope is published to `<dlq_subject_prefix>.<dlq>` in the
//!   DLQ stream; only after its PubAck is the original `term`inated.
//! - **Discard** -> an audit record to the audit stream (PubAck), then `term`.
//! - While a consumer works, in-progress acks every half `ack_wait_ms` keep the delivery
//!   from being redelivered elsewhere.
//! - **A route ordered by key** (`ordering = "key"`) is delivered by one gateway at a time,
//!   a key's messages one at a time, a retry waiting in place instead of a `nak`: see
//!   [`ordered`].
//!
//! Connection loss is survived twice over: the client reconnects by itself, and a session
//! that fails (stream gone, consumer deleted) is rebuilt with backoff. `/readyz` reflects
//! the connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind, consumer, stream};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt as _, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::{AbortOnDrop, Held, Settled, SettlementDriver, Source, Unapplied};
use crate::health::{BrokerDlqs, Readiness};
use crate::model::{Delivery, Settlement};
use crate::pipeline::{Pipeline, RouteSlot, RouteTarget};
use verdict_registry::{GatewaySection, NatsConfig};
use verdict_runtime::text::Clean;

mod access;
mod dlq;
mod history;
mod holder;
mod ordered;
mod ownership;
mod setup;
mod stale;

pub use access::{NatsAccessError, NatsProbe, probe};
pub use dlq::NatsDeadLetters;
#[cfg(test)]
pub(crate) use dlq::replay_headers;
pub use history::History;
use ownership::Ownership;
use setup::OwnerUnknown;
pub(crate) use setup::{Broker, PullConsumer, connect};
pub use setup::{route_durable, widest as widest_subjects};

/// The source's name in metrics and `/readyz`.
pub const NAME: &str = "nats";

/// The routes of one JetStream stream (`[nats]`), consumed as one source: the
/// `source = "nats"` routes of the running generation, followed across reloads.
#[derive(Debug)]
pub struct NatsSource {
    config: NatsConfig,
    ready: Readiness,
}

impl NatsSource {
    /// A source consuming the NATS routes of the pipeline's registry.
    pub fn new(config: NatsConfig) -> NatsSource {
        NatsSource {
            config,
            ready: Readiness::new(NAME),
        }
    }
}

impl Source for NatsSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn readiness(&self) -> Option<Readiness> {
        Some(self.ready.clone())
    }

    /// Messages fetched but not started at shutdown are redelivered by JetStream after
    /// `ack_wait_ms`.
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
    source: NatsSource,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let NatsSource { config, ready } = source;
    let dlqs = pipeline.broker_dlqs().clone();
    let settings = &pipeline.settings().clone();
    let (config, ready, dlqs) = (&config, &ready, &dlqs);
    let pipeline = &pipeline;
    let driver = &SettlementDriver::new(NAME, pipeline.clone());
    let session = move |slots: Arc<Semaphore>, shutdown: watch::Receiver<bool>| async move {
        let session = Session {
            pipeline: pipeline.clone(),
            config,
            settings,
            ready,
            dlqs,
            slots,
            driver: driver.clone(),
        };
        session.run(shutdown).await
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
    pipeline: Arc<Pipeline>,
    config: &'a NatsConfig,
    settings: &'a GatewaySection,
    ready: &'a Readiness,
    dlqs: &'a BrokerDlqs,
    slots: Arc<Semaphore>,
    driver: SettlementDriver,
}

/// Why a session's consumers stopped.
enum Ended {
    /// The gateway is shutting down.
    Shutdown,
    /// A reload changed the NATS routes: consume again, with the new ones.
    RoutesChanged,
    /// A route's boundary was left pending by a gateway that stopped while removing the
    /// route: consume again, the session's start settling it ([`stale`]).
    StaleBoundary,
}

impl Session<'_> {
    /// Consume the NATS routes of the running generation until shutdown (`Ok`) or until a
    /// consumer fails; a reload that adds, removes or changes a NATS route starts the
    /// consumers again on the same connection setup, retiring the ones no route uses.
    async fn run(&self, shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
        loop {
            let routes = nats_routes(&self.pipeline);
            match self.consume(&routes, shutdown.clone()).await? {
                Ended::Shutdown => return Ok(()),
                Ended::RoutesChanged => {
                    tracing::info!("nats source: the NATS routes changed; consuming the new ones");
                }
                Ended::StaleBoundary => {}
            }
        }
    }

    /// One set of routes' life: set up, then consume every route (and drain every retired
    /// consumer) until shutdown, a change of routes, or a consumer's failure.
    async fn consume(
        &self,
        routes: &[String],
        shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<Ended> {
        let broker = connect(self.config, self.settings, routes, Some(self.ready.clone())).await?;
        let (ownership, consumers) = broker.consumers(routes).await?;
        let ownership = Arc::new(ownership);
        self.ready.set(true);
        tracing::info!(
            stream = %self.config.stream,
            routes = routes.len(),
            retired = consumers.len() - routes.len(),
            "nats source: consuming"
        );
        let poller = tokio::spawn(poll_dlq_depths(
            broker.clone(),
            self.settings.dlq_naming,
            self.dlqs.clone(),
        ));
        let _poller = AbortOnDrop(poller);
        let loops: Vec<_> = consumers
            .into_iter()
            .map(|(durable, consumer)| {
                self.consume_one(&broker, &ownership, durable, consumer, shutdown.clone())
                    .boxed()
            })
            .collect();
        let mut shutdown = shutdown;
        let consuming = async move {
            futures_util::future::try_join_all(loops).await?;
            // Every loop ends on shutdown, a retired one also once it is drained.
            let _ = shutdown.wait_for(|stop| *stop).await;
            Ok(Ended::Shutdown)
        };
        let ended = tokio::select! {
            ended = consuming => ended,
            () = routes_changed(&self.pipeline, routes) => Ok(Ended::RoutesChanged),
            durable = broker.stale_boundary() => {
                tracing::warn!(
                    %durable,
                    pending_for_s = stale::STALE_AFTER.as_secs(),
                    "nats source: a route consumer's boundary is still pending (a gateway \
                     removing its route stopped between its two writes?); the messages it \
                     covers wait until it is settled: consuming again, settling it as this \
                     gateway's routes say"
                );
                Ok(Ended::StaleBoundary)
            }
        };
        // The session's delivery jobs outlive it, settling on its connection: it is kept
        // until the last of them is done and what they queued (their acks) is written.
        tokio::spawn(broker.flush_when_released(SESSION_DRAIN_LIMIT));
        ended
    }

    /// Take the consumer `durable`'s messages as it has room - at most twice its route's
    /// `concurrency` taken and not yet settled: one for each slot and one fetched ahead to
    /// take the slot as soon as it is free, so no slot waits for a pull's round trip - in
    /// fetches of exactly that many, so no message waits in a client buffer without
    /// in-progress acks (one fetched ahead waits in its task, its acks running). A taken message that
    /// another consumer owns ([`Ownership`]) is acknowledged here and left to it; one of its
    /// own waits for a delivery slot of the route that takes its subject now and one of
    /// `max_in_flight`, with its in-progress acks running. A retired consumer ends once it
    /// has delivered everything it was responsible for, and is deleted.
    async fn consume_one(
        &self,
        broker: &Broker,
        ownership: &Arc<Ownership>,
        durable: String,
        consumer: PullConsumer,
        mut shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let Some(me) = ownership.member(&durable).cloned() else {
            return Ok(());
        };
        if me.active
            && let Some(header) = ordered::key_header(&self.pipeline, &me.filter)
        {
            return self
                .consume_ordered(broker, ownership, &me, &consumer, &header, shutdown)
                .await;
        }
        let room = if me.active {
            self.pipeline
                .route_target_of(&me.filter)
                .map_or(1, |t| t.concurrency())
        } else {
            RETIRED_CONCURRENCY
        };
        let room = Arc::new(Semaphore::new(room.max(1).saturating_mul(2)));
        loop {
            if let Some(through) = me.retired_through()
                && drained(&consumer, through).await
            {
                let stream = broker.jetstream().get_stream(broker.stream_name()).await?;
                stream.delete_consumer(&durable).await?;
                tracing::info!(%durable, "nats source: a retired route consumer delivered all it held; deleted");
                return Ok(());
            }
            // A route its policy paused fetches nothing until the pause ends (what was
            // fetched before waits for its slot, its in-progress acks running).
            if me.active
                && let Some(target) = self.pipeline.route_target_of(&me.filter)
                && let Some(paused) = target.pause_status()
                && !paused.left.is_zero()
            {
                tokio::select! {
                    () = tokio::time::sleep(paused.left) => {}
                    _ = shutdown.changed() => return Ok(()),
                }
                continue;
            }
            let first = tokio::select! {
                permit = room.clone().acquire_owned() => permit?,
                _ = shutdown.changed() => return Ok(()),
            };
            let mut taken = vec![first];
            while let Ok(permit) = room.clone().try_acquire_owned() {
                taken.push(permit);
            }
            let fetch = consumer
                .fetch()
                .max_messages(taken.len())
                .expires(FETCH_WAIT)
                .messages();
            let mut batch = tokio::select! {
                batch = fetch => match batch {
                    Ok(batch) => batch,
                    Err(e) if self.ready.is_up() => {
                        // Connected, yet the consumer cannot be read (deleted, say): the
                        // session is rebuilt, consumers and all.
                        return Err(anyhow::anyhow!("fetching on `{durable}`: {e}"));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, %durable, "nats source: fetch failed while disconnected");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = shutdown.changed() => return Ok(()),
            };
            loop {
                let next = tokio::select! {
                    next = batch.next() => next,
                    _ = shutdown.changed() => return Ok(()),
                };
                let message = match next {
                    None => break,
                    Some(Ok(message)) => message,
                    Some(Err(e)) => {
                        // Missed heartbeats while the server restarts, and the like.
                        tracing::debug!(error = %e, %durable, "nats source: fetch error");
                        break;
                    }
                };
                let Some(room) = taken.pop() else {
                    // JetStream sent more than asked: it comes back after `ack_wait`.
                    break;
                };
                let seq = message.info().map_or(0, |i| i.stream_sequence);
                let job = Job {
                    driver: self.driver.clone(),
                    broker: broker.clone(),
                    dlqs: self.dlqs.clone(),
                    slots: self.slots.clone(),
                    owner: Owner::of(ownership, &me, &message.subject, seq),
                    seq,
                };
                tokio::spawn(async move {
                    job.handle(message).await;
                    drop(room);
                });
            }
        }
    }
}

/// The longest an ended session's connection waits for its delivery jobs to let go (longer
/// than any delivery and its settlement).
const SESSION_DRAIN_LIMIT: Duration = Duration::from_secs(15 * 60);

/// How long a message whose owner cannot be decided now waits before it comes back.
const OWNER_UNKNOWN_WAIT: Duration = Duration::from_secs(1);

/// How many messages a retired consumer works on at once (each also waits for a slot of
/// the route that takes it now).
const RETIRED_CONCURRENCY: usize = 16;

/// Whether a retired consumer has acknowledged everything up to `through` (an unreadable
/// consumer is not: the fetch that follows tells why).
async fn drained(consumer: &PullConsumer, through: u64) -> bool {
    consumer
        .get_info()
        .await
        .is_ok_and(|i| i.ack_floor.stream_sequence >= through && i.num_ack_pending == 0)
}

/// The patterns of the running generation's NATS routes, in config order.
fn nats_routes(pipeline: &Pipeline) -> Vec<String> {
    pipeline
        .registry()
        .current()
        .config()
        .routes
        .iter()
        .filter(|r| r.source == verdict_registry::SourceKind::Nats)
        .map(|r| r.topic.clone())
        .collect()
}

/// Resolves once a new generation's NATS routes differ from `routes`, or order differently
/// (checked each time the generation number changes, looked at twice a second): a session
/// reads each route's ordering when it starts.
async fn routes_changed(pipeline: &Pipeline, routes: &[String]) {
    let mut seen = pipeline.registry().current().number;
    let ordering = nats_ordering(pipeline, routes);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let number = pipeline.registry().current().number;
        if number != seen {
            seen = number;
            if nats_routes(pipeline) != routes || nats_ordering(pipeline, routes) != ordering {
                return;
            }
        }
    }
}

/// The key header each of `routes` is ordered by now (`None`: not ordered).
fn nats_ordering(pipeline: &Pipeline, routes: &[String]) -> Vec<Option<String>> {
    routes
        .iter()
        .map(|route| ordered::key_header(pipeline, route))
        .collect()
}

/// How long one fetch waits for messages before it is renewed (an idle route costs one
/// pull request this often).
const FETCH_WAIT: Duration = Duration::from_secs(5);

/// What one delivery's task needs.
struct Job {
    driver: SettlementDriver,
    broker: Broker,
    dlqs: BrokerDlqs,
    /// The source's `max_in_flight` slots.
    slots: Arc<Semaphore>,
    /// Which consumer of the group delivers this message ([`Ownership`]).
    owner: Owner,
    /// Its stream sequence.
    seq: u64,
}

/// What [`Job::owner_check`] found.
enum OwnerCheck {
    /// This gateway delivers the message.
    Mine,
    /// Another consumer does; acknowledged here.
    Left,
    /// Nobody can say now.
    Unknown,
}

/// How the consumer that fetched a message knows whether it delivers it.
#[derive(Debug, PartialEq, Eq)]
enum Owner {
    /// It does: no other consumer of the group covers the subject, or the message lies in
    /// one of its own lives that ended (those never change again).
    Mine,
    /// A retired consumer does, within a life that ended: acknowledged here and left.
    Retired,
    /// Decided from the lives as the server has them now, among these consumers (durable,
    /// route; the one that fetched it first): another gateway may have removed or added
    /// one of their routes since this session read them.
    Confirm(Vec<(String, String)>),
}

impl Owner {
    /// How the consumer `me` settles who delivers the message at `seq` on `subject`.
    fn of(ownership: &Ownership, me: &ownership::Member, subject: &str, seq: u64) -> Owner {
        let owner = ownership
            .owner(subject, seq)
            .and_then(|o| ownership.member(o));
        match owner {
            Some(o) if o.durable != me.durable && !o.active => Owner::Retired,
            Some(o) if o.durable == me.durable && !me.active => Owner::Mine,
            None => Owner::Mine,
            Some(_) => {
                let others: Vec<(String, String)> = ownership
                    .others_covering(subject, &me.durable)
                    .map(|m| (m.durable.clone(), m.filter.clone()))
                    .collect();
                if others.is_empty() {
                    return Owner::Mine;
                }
                let mut candidates = vec![(me.durable.clone(), me.filter.clone())];
                candidates.extend(others);
                Owner::Confirm(candidates)
            }
        }
    }
}

impl Job {
    /// Whether this gateway delivers the message: `false` once it is acknowledged for the
    /// consumer that does, or given back while nobody can say which one does.
    async fn settle_owner(&self, message: &jetstream::Message) -> bool {
        match self.owner_check(message).await {
            OwnerCheck::Mine => true,
            OwnerCheck::Left => false,
            OwnerCheck::Unknown => {
                tracing::debug!(
                    seq = self.seq,
                    "nats source: which consumer delivers this message is not known now; given back"
                );
                let _ = message
                    .ack_with(AckKind::Nak(Some(OWNER_UNKNOWN_WAIT)))
                    .await;
                false
            }
        }
    }

    /// Who delivers the message: this gateway, another consumer (it is then acknowledged
    /// here), or nobody can say now (the caller gives it back, or waits and asks again).
    async fn owner_check(&self, message: &jetstream::Message) -> OwnerCheck {
        let leave = match &self.owner {
            Owner::Mine => return OwnerCheck::Mine,
            Owner::Retired => true,
            Owner::Confirm(candidates) => {
                let by: Vec<(&str, &str)> = candidates
                    .iter()
                    .map(|(d, f)| (d.as_str(), f.as_str()))
                    .collect();
                let patience = Duration::from_millis(self.broker.config().ack_wait_ms / 3);
                match self.broker.owner_now(&by, self.seq, patience).await {
                    // Nobody responsible: delivered here - a duplicate at worst, never a
                    // message nobody delivers.
                    Ok(Some(0) | None) => false,
                    Ok(Some(owner)) => {
                        tracing::debug!(durable = %by[owner].0, seq = self.seq, "nats source: another consumer delivers this message; acknowledged here");
                        true
                    }
                    Err(OwnerUnknown) => return OwnerCheck::Unknown,
                }
            }
        };
        if leave {
            // Delivered by the consumer that owns it; done here.
            if let Err(e) = message.ack().await {
                tracing::debug!(error = %e, "nats source: acknowledging another route's message failed; it comes back and is skipped again");
            }
            return OwnerCheck::Left;
        }
        OwnerCheck::Mine
    }

    /// Deliver one message and apply its settlement through the driver, which bounds
    /// whatever goes wrong on the way.
    async fn handle(self, message: jetstream::Message) {
        // In-progress acks from receipt to the consumer's answer, on one schedule across
        // the owner check, the history read, the wait for slots and the delivery: a stage
        // that started the countdown again could let `ack_wait` run out under load, and
        // JetStream would hand the message out a second time while this one delivers it.
        let every = Duration::from_millis(self.broker.config().ack_wait_ms / 2);
        let alive = keep_alive(&message, every);
        tokio::pin!(alive);
        let mine = tokio::select! {
            biased;
            mine = self.settle_owner(&message) => mine,
            never = alive.as_mut() => match never {},
        };
        if !mine {
            return;
        }
        let received = Instant::now();
        let run = std::panic::AssertUnwindSafe(handle(
            &self.driver,
            &self.broker,
            &self.dlqs,
            &message,
            &self.slots,
            received,
            alive.as_mut(),
        ))
        .catch_unwind()
        .await;
        if let Err(panic) = run {
            let why = super::panic_text(&*panic);
            self.dead_letter_panicked(&message, &why, received).await;
        }
    }

    /// Dead-letter a message whose delivery panicked (`why`: the panic's text) past the
    /// settlement driver. Never
    /// expected (inputs are cleaned before they reach a header); if it happens the message
    /// is dead-lettered like any delivery that panicked, within the bound on failed
    /// settlements - not left for JetStream to loop.
    async fn dead_letter_panicked(
        &self,
        message: &jetstream::Message,
        why: &str,
        received: Instant,
    ) {
        let (seq, delivered) = message.info().map_or((0, 0), |i| {
            (i.stream_sequence, u64::try_from(i.delivered).unwrap_or(0))
        });
        let delivery = to_delivery(message, self.broker.stream_name(), seq, 0);
        let letter = self
            .driver
            .panicked(&delivery, why, &crate::telemetry::DeliveryTrace::off());
        let key = self.broker.history_key(seq);
        let mut held = Fetched {
            broker: &self.broker,
            dlqs: &self.dlqs,
            message,
            delivery: &delivery,
            key: &key,
            delivered,
            marked: false,
        };
        self.driver
            .settle(&mut held, &delivery, letter, (), received)
            .await;
    }
}

/// A JetStream message this gateway holds (its in-progress acks keep it here), settled in
/// JetStream's terms.
struct Fetched<'a> {
    broker: &'a Broker,
    dlqs: &'a BrokerDlqs,
    message: &'a jetstream::Message,
    delivery: &'a Delivery,
    /// Its attempt history's key.
    key: &'a str,
    /// JetStream's delivery count.
    delivered: u64,
    /// Whether its history now marks it dead-lettered (the letter is written but its
    /// `term` failed): that history must outlive the settlement, so the redelivery only
    /// terminates it.
    marked: bool,
}

impl Held for Fetched<'_> {
    async fn apply(&mut self, settlement: Settlement) -> Result<(), Unapplied> {
        let applied = apply(
            self.broker,
            self.dlqs,
            self.message,
            self.delivery,
            self.key,
            settlement,
            self.delivered,
        )
        .await
        .map_err(|e| Unapplied::Failed(format!("{e:#}")))?;
        self.marked = applied == Applied::MarkedDeadLettered;
        Ok(())
    }

    fn failure_key(&self) -> String {
        self.key.to_string()
    }

    async fn give_back(&mut self, wait: Duration) {
        let _ = self.message.ack_with(AckKind::Nak(Some(wait))).await;
    }
}

/// Deliver one message and settle it; a message that cannot be read is given back to
/// JetStream (to be delivered again) or terminated when it is not JetStream's at all.
async fn handle(
    driver: &SettlementDriver,
    broker: &Broker,
    dlqs: &BrokerDlqs,
    message: &jetstream::Message,
    slots: &Arc<Semaphore>,
    received: Instant,
    mut alive: std::pin::Pin<&mut impl Future<Output = std::convert::Infallible>>,
) {
    let Ok(info) = message.info() else {
        tracing::error!(subject = %Clean(&message.subject), "nats source: a message without JetStream metadata; terminating it");
        let _ = message.ack_with(AckKind::Term).await;
        return;
    };
    let seq = info.stream_sequence;
    let delivered = u64::try_from(info.delivered).unwrap_or(0);
    let published_at_ms =
        u64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let key = broker.history_key(seq);
    // A first delivery has no history; later ones read it (another gateway may have written it).
    let history = if delivered > 1 {
        let read = tokio::select! {
            biased;
            read = broker.history().get(&key, delivered) => read,
            never = alive.as_mut() => match never {},
        };
        match read {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, seq, "nats source: the history could not be read; trying again later");
                let _ = message
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
                return;
            }
        }
    } else {
        None
    };
    if history.as_ref().is_some_and(|h| h.dead_lettered) {
        // Dead-lettered already; only the term was lost.
        if let Err(e) = message.double_ack_with(AckKind::Term).await {
            tracing::debug!(error = %e, seq, "nats source: terminating a dead-lettered message failed; it comes back and is terminated again");
            return;
        }
        let _ = broker.history().forget(&key).await;
        return;
    }
    let had_history = history.is_some();
    let mut delivery = to_delivery(message, broker.stream_name(), seq, published_at_ms);
    if let Some(h) = &history {
        h.apply_to(&mut delivery);
    } else {
        delivery.redelivery = delivered > 1;
    }
    // In-progress acks go on (`alive`) while the message waits for its slots and while
    // the consumer works. In the same task, not a spawned one: a task and a message copy
    // per delivery cost more than the delivery's own bookkeeping.
    let pipeline = driver.pipeline();
    let seats = tokio::select! {
        biased;
        seats = take_seats(pipeline, &delivery.topic, slots) => seats,
        never = alive.as_mut() => match never {},
    };
    let settlement = tokio::select! {
        biased;
        settlement = driver.decide(&delivery, seats.as_ref().map(|(target, slot, _)| (target, slot))) => settlement,
        never = alive.as_mut() => match never {},
    };
    // The consumer has answered: its route's slot goes to the next message, while this
    // one's settlement (a history write and a `nak`, a dead letter and its `term`) holds
    // only a slot of `max_in_flight`.
    let seats = seats.map(|(_, _, global)| global);
    let mut held = Fetched {
        broker,
        dlqs,
        message,
        delivery: &delivery,
        key: &key,
        delivered,
        marked: false,
    };
    let settled = driver
        .settle(&mut held, &delivery, settlement, seats, received)
        .await;
    let fin = match settled {
        Settled::Applied(handled) => handled.is_final(),
        Settled::ByGateway => true,
        Settled::GivenBack | Settled::Fenced => false,
    };
    // Once the message is gone from the stream's point of view, so is its history - in a
    // task of its own, so the purge's round trip holds none of the route's room - unless
    // the history is what stops its redelivery from reaching the consumer again.
    if fin && had_history && !held.marked {
        let broker = broker.clone();
        tokio::spawn(async move {
            if let Err(e) = broker.history().forget(&key).await {
                tracing::debug!(error = %e, seq, "nats source: a settled history was not purged (it expires)");
            }
        });
    }
}

/// A delivery slot of the route that takes `topic` (waiting out its pause, if its policy
/// paused it), held until the consumer has answered, and one of `max_in_flight`, held until
/// the settlement is applied; `None` when no route takes the topic now (the pipeline then
/// releases the message).
async fn take_seats(
    pipeline: &Pipeline,
    topic: &str,
    slots: &Arc<Semaphore>,
) -> Option<(Arc<RouteTarget>, RouteSlot, OwnedSemaphorePermit)> {
    let target = pipeline.route_target(topic)?;
    let slot = target.slot().await?;
    let global = slots.clone().acquire_owned().await.ok()?;
    Some((target, slot, global))
}

/// What applying a settlement left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applied {
    /// The message is settled with JetStream.
    Settled,
    /// The dead letter is written but the `term` failed: the history marks the message
    /// dead-lettered, so its redelivery is only terminated.
    MarkedDeadLettered,
}

async fn apply(
    broker: &Broker,
    dlqs: &BrokerDlqs,
    message: &jetstream::Message,
    delivery: &Delivery,
    key: &str,
    settlement: Settlement,
    delivered: u64,
) -> anyhow::Result<Applied> {
    let ack = |kind| async move {
        message
            .ack_with(kind)
            .await
            .map_err(|e| anyhow::anyhow!("ack: {e}"))
    };
    match settlement {
        Settlement::Delivered => {
            ack(AckKind::Ack).await?;
            // Once acknowledged it is settled: a replay's record that cannot be written must
            // not count as a failed settlement (on a route ordered by key that would bring
            // the message back to the consumer).
            if let Err(e) = replay_delivered(broker, delivery).await {
                tracing::warn!(error = %e, "nats source: a replayed message was delivered, but the record a replay's canary waits for could not be written");
            }
            Ok(Applied::Settled)
        }
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => {
            let next = History::after(delivery, &failed, spend_attempt);
            broker.history().put(key, &next, delivered).await?;
            ack(AckKind::Nak(Some(Duration::from_millis(delay_ms)))).await?;
            Ok(Applied::Settled)
        }
        Settlement::DeadLetter { failed, letter } => {
            broker.dead_letter(delivery, &failed, &letter, key).await?;
            dlqs.written(NAME, &letter.dlq, &delivery.topic);
            let Err(e) = message.double_ack_with(AckKind::Term).await else {
                return Ok(Applied::Settled);
            };
            // The letter is written: JetStream will deliver the original again, and that
            // delivery must only terminate it, not reach the consumer a second time.
            let done = History {
                dead_lettered: true,
                ..History::after(delivery, &failed, true)
            };
            broker
                .history()
                .put(key, &done, delivered)
                .await
                .map_err(|put| {
                    anyhow::anyhow!(
                        "term after dead-lettering: {e}; marking it dead-lettered: {put}"
                    )
                })?;
            tracing::warn!(
                id = %Clean(&delivery.id),
                error = %e,
                "nats source: the dead letter is written but terminating the original failed; \
                 its redelivery is terminated without delivering it"
            );
            Ok(Applied::MarkedDeadLettered)
        }
        Settlement::Discard { failed, reason } => {
            broker
                .audit("discarded", delivery, &failed.kind, &reason)
                .await?;
            ack(AckKind::Term).await?;
            Ok(Applied::Settled)
        }
        Settlement::Release { delay_ms } => {
            ack(AckKind::Nak(Some(Duration::from_millis(delay_ms)))).await?;
            Ok(Applied::Settled)
        }
    }
}

/// A replayed message arrived: the record a replay's canary waits for.
async fn replay_delivered(broker: &Broker, delivery: &Delivery) -> anyhow::Result<()> {
    match delivery.headers.get(crate::model::REPLAY_HEADER) {
        Some(token) => broker.audit("replay-delivered", delivery, "", token).await,
        None => Ok(()),
    }
}

/// In-progress acks while the consumer works, so JetStream does not hand the message to
/// another gateway. Never returns: it ends when the delivery does.
async fn keep_alive(message: &jetstream::Message, every: Duration) -> std::convert::Infallible {
    let every = every.max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = message.ack_with(AckKind::Progress).await {
            // The connection is down; the ack of the outcome will tell.
            tracing::debug!(error = %e, "nats source: an in-progress ack failed");
        }
    }
}

fn to_delivery(
    message: &jetstream::Message,
    stream: &str,
    seq: u64,
    published_at_ms: u64,
) -> Delivery {
    delivery_of(
        &message.subject,
        &message.payload,
        message.headers.as_ref(),
        stream,
        seq,
        published_at_ms,
    )
}

/// The delivery a JetStream message stands for, from its parts: what [`to_delivery`] reads
/// of a message.
pub(crate) fn delivery_of(
    subject: &str,
    payload: &[u8],
    headers: Option<&async_nats::HeaderMap>,
    stream: &str,
    seq: u64,
    published_at_ms: u64,
) -> Delivery {
    let mut delivery = Delivery {
        id: format!("{stream}-{seq}"),
        topic: subject.to_string(),
        payload: payload.to_vec(),
        published_at_ms,
        source: NAME,
        ..Delivery::default()
    };
    if let Some(headers) = headers {
        // A replay carries the original id (its own Nats-Msg-Id would be deduplicated).
        let replayed = headers.get("verdict-message-id").is_some();
        // In name order, not the map's (which differs from map to map): `Content-Type` and
        // `content-type`, or a `Nats-TTL` and the producer's own deadline header, then
        // resolve the same way every time (the later name, the producer's deadline).
        let sorted: BTreeMap<String, _> = headers
            .iter()
            .filter_map(|(name, values)| Some((name.to_string(), values.first()?)))
            .collect();
        for (name, value) in sorted {
            match name.as_str() {
                "Nats-Msg-Id" if !replayed => delivery.id = value.to_string(),
                "verdict-message-id" => delivery.id = value.to_string(),
                // The message's own TTL: its deadline, for policies.
                "Nats-TTL" => {
                    if let Some(ttl) = nats_ttl_ms(value.as_str()) {
                        delivery.headers.insert(
                            crate::model::DEADLINE_HEADER.to_string(),
                            published_at_ms.saturating_add(ttl).to_string(),
                        );
                    }
                }
                n if n.eq_ignore_ascii_case("content-type") => {
                    delivery.content_type = Some(value.to_string());
                }
                n if n.starts_with("Nats-") => {}
                _ => {
                    delivery.headers.insert(name, value.to_string());
                }
            }
        }
    }
    delivery
}

/// A `Nats-TTL` value in ms: a duration (`30s`, `1h`) or whole seconds; `never` is none.
fn nats_ttl_ms(value: &str) -> Option<u64> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds.saturating_mul(1_000));
    }
    humantime::parse_duration(value)
        .ok()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Read each DLQ's depth from the DLQ stream about once a second.
async fn poll_dlq_depths(broker: Broker, naming: verdict_registry::DlqNaming, dlqs: BrokerDlqs) {
    loop {
        match broker.dlq_depths().await {
            Ok(depths) => {
                for (dlq, depth) in depths {
                    dlqs.set_depth(NAME, &dlq, &super::topic_of_dlq(naming, &dlq), depth);
                }
            }
            Err(e) => tracing::debug!(error = %e, "nats source: DLQ depths not read"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The config the gateway gives the durable consumer of `route`.
pub(crate) fn consumer_config(
    config: &NatsConfig,
    durable: &str,
    route: &str,
    from: consumer::DeliverPolicy,
) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(durable.to_string()),
        filter_subject: route.to_string(),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_millis(config.ack_wait_ms),
        // The gateway counts attempts (a delay spends none): JetStream must never give up.
        max_deliver: -1,
        max_ack_pending: config.max_ack_pending,
        deliver_policy: from,
        ..Default::default()
    }
}

/// The config of a stream the gateway creates.
pub(crate) fn stream_config(name: &str, subjects: Vec<String>) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects,
        storage: stream::StorageType::File,
        allow_direct: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use async_nats::{HeaderMap, HeaderName, HeaderValue};

    use super::{Owner, Ownership, delivery_of, ownership};

    fn member(filter: &str, lives: &[(u64, Option<u64>)], active: bool) -> ownership::Member {
        ownership::Member {
            durable: format!("d-{filter}"),
            filter: filter.into(),
            lives: lives
                .iter()
                .map(|&(after, through)| ownership::Life { after, through })
                .collect(),
            active,
        }
    }

    #[test]
    fn a_fetched_message_is_checked_with_the_server_wherever_another_consumer_covers_it() {
        let wide = member("orders.>", &[(0, None)], true);
        let vip = member("orders.vip", &[(0, None)], true);
        let gone = member("orders.eu", &[(0, Some(40))], false);
        let o = Ownership::new(vec![wide.clone(), vip.clone(), gone.clone()]);
        // Nobody else covers it: no round trip.
        assert_eq!(Owner::of(&o, &wide, "orders.us", 50), Owner::Mine);
        // Its own by the session's view, but another covers it: asked, itself first.
        let both = |first: &ownership::Member, second: &ownership::Member| {
            Owner::Confirm(vec![
                (first.durable.clone(), first.filter.clone()),
                (second.durable.clone(), second.filter.clone()),
            ])
        };
        assert_eq!(Owner::of(&o, &vip, "orders.vip", 50), both(&vip, &wide));
        assert_eq!(Owner::of(&o, &wide, "orders.vip", 50), both(&wide, &vip));
        // A retired consumer's ended life never changes: left without asking.
        assert_eq!(Owner::of(&o, &wide, "orders.eu", 30), Owner::Retired);
        assert_eq!(Owner::of(&o, &gone, "orders.eu", 30), Owner::Mine);
        // Past its boundary the wide route takes it, asked because the retired one covers it.
        assert_eq!(Owner::of(&o, &wide, "orders.eu", 41), both(&wide, &gone));
    }

    #[test]
    fn headers_that_collide_resolve_the_same_way_whatever_the_map_order() {
        // Found by `tests/fuzz.rs`: the header map's iteration order differs from map to
        // map, and decided which of two colliding headers won.
        let pairs = [
            ("Content-Type", "text/plain"),
            ("content-type", "application/json"),
            ("Nats-TTL", "30s"),
            (crate::model::DEADLINE_HEADER, "5000"),
            ("tenant", "eu"),
        ];
        for _ in 0..20 {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(
                    HeaderName::from_str(name).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            let d = delivery_of("orders", b"", Some(&headers), "S", 1, 1_000);
            assert_eq!(d.content_type.as_deref(), Some("application/json"));
            assert_eq!(d.deadline_ms(), Some(5_000), "the producer's own deadline");
            assert_eq!(d.headers.get("tenant").map(String::as_str), Some("eu"));
        }
        let mut ttl_only = HeaderMap::new();
        ttl_only.insert("Nats-TTL", "30s");
        let d = delivery_of("orders", b"", Some(&ttl_only), "S", 1, 1_000);
        assert_eq!(d.deadline_ms(), Some(31_000));
    }
}
