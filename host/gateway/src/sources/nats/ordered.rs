//! Key order on a NATS route (`ordering = "key"`): one gateway at a time delivers the
//! route, one message of a key at a time, a failed one retried in place.
//!
//! - **One holder.** A JetStream pull consumer hands its messages to whoever asks, so the
//!   gateways agree on one through a record in the history bucket ([`super::holder`]); the
//!   others stand by, looking at the record every [`STANDBY_RETRY`], and take over once it
//!   has stopped changing.
//! - **Stream order at every start of a hold.** What an earlier holder took and did not
//!   settle (a crash, a hold lost, a session rebuilt) comes back once its in-progress acks
//!   have stopped for `ack_wait`. A new hold first waits that long when the consumer has
//!   messages pending, then takes everything the server hands out again in one fetch and
//!   puts it in stream order before delivering any of it, so an older message of a key is
//!   never overtaken by a newer one that happened to come back first.
//! - **Nothing missed within a hold.** The holder is the only gateway pulling from the
//!   consumer, so each message it receives is the consumer's next delivery. A gap in the
//!   delivery sequence - a message the server sent that never arrived (a connection lost
//!   mid-fetch), or an earlier holder's last pull still open at the server - ends the hold:
//!   the next one takes everything back in stream order. A new hold also waits for any
//!   other gateway's pull to end before its first fetch.
//! - **One message of a key at a time.** A message whose key (the value of the route's
//!   `key_header` header) has one in flight or waiting to retry waits behind it in the
//!   hold's [`Chains`], its in-progress acks running from the moment it is taken. A message
//!   without the header is not ordered: it is delivered and retried as on any NATS route.
//! - **Retries in place.** A `nak` with a delay would let the key's later messages go
//!   first. A failed message stays held, its history written to the bucket as for any
//!   retry (so a crash does not reset its attempts), and is delivered again after its delay.
//!
//! A hold ends when the gateway loses its record (another took it over after this one
//! stopped writing it - a stall, a partition from the server), at a gap in the delivery
//! sequence, when the session ends, or at shutdown: nothing more is delivered, in-progress acks stop, and JetStream hands what the
//! hold had back out after `ack_wait`, to the next hold. A message in a consumer call
//! when its hold ended may come twice (the fault's duplicate).
//!
//! Limits: a new hold starts delivering `ack_wait` (plus a margin) after it is taken when
//! anything was pending - after a crash, [`super::holder::STALE_AFTER`] more. What waits
//! behind a failed key takes the route's room ([`room`]): a key with that many messages in
//! a row holds every key until its first is settled. Messages `nak`ed before the route was
//! ordered come back when their delay ends, in no order with the rest.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind};
use futures_util::{FutureExt as _, StreamExt as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use verdict_runtime::text::Clean;

use super::super::AbortOnDrop;
use super::holder::{Holder, Holding};
use super::ownership::{Member, Ownership};
use super::setup::Broker;
use super::{
    FETCH_WAIT, Fetched, History, Job, OWNER_UNKNOWN_WAIT, Owner, OwnerCheck, PullConsumer,
    Session, take_seats,
};
use crate::pipeline::Pipeline;
use crate::sources::key_chains::{Chains, bounded_key};
use crate::sources::{Held, Settled, Unapplied, next_attempt};

/// How often a gateway standing by looks at the route's holder record.
const STANDBY_RETRY: Duration = Duration::from_secs(2);

/// After this many failed looks at the holder record in a row (10 s), a warning.
const HOLDER_FAILURES_WARN: u32 = 5;

/// Beyond `ack_wait`, how long a new hold waits before its first fetch when messages were
/// pending: the server hands an expired message out again on a timer of its own.
const GATHER_MARGIN: Duration = Duration::from_secs(2);

/// How long a hold's first fetch waits for what the server hands out again.
const GATHER_FETCH: Duration = Duration::from_secs(1);

/// How often a message waiting in place looks whether the route is still held.
const HOLD_CHECK: Duration = Duration::from_millis(250);

/// How often a new hold looks whether another gateway's pull is still open at the server,
/// and how long at most (an earlier holder's last fetch expires within [`FETCH_WAIT`]).
const PULL_CHECK: Duration = Duration::from_millis(500);
const PULL_PATIENCE: Duration = Duration::from_secs(15);

/// The fewest messages an ordered route takes and holds at once (see [`room`]).
const MIN_ROOM: usize = 64;

/// The most (a semaphore's permits are bounded, and so is the gateway's memory).
const MAX_ROOM: usize = 100_000;

/// How many messages an ordered route takes and holds at once: twice its concurrency,
/// between [`MIN_ROOM`] and [`MAX_ROOM`] - a failed key's later messages wait in it.
pub(super) fn room(concurrency: usize) -> usize {
    concurrency.saturating_mul(2).clamp(MIN_ROOM, MAX_ROOM)
}

/// The header a NATS route orders its messages by, if the running generation orders the
/// route `route` (a subject pattern) by key.
pub(super) fn key_header(pipeline: &Pipeline, route: &str) -> Option<String> {
    pipeline
        .registry()
        .current()
        .config()
        .routes
        .iter()
        .find(|r| {
            r.source == verdict_registry::SourceKind::Nats
                && r.topic == route
                && r.ordering == verdict_registry::RouteOrdering::Key
        })
        .and_then(|r| r.key_header.clone())
}

/// The key of a message on a route ordered by the header `header` (its name matched
/// without regard to case): its first value, bounded ([`bounded_key`]); `None` without it.
pub(super) fn key_of(headers: Option<&async_nats::HeaderMap>, header: &str) -> Option<String> {
    let (_, values) = headers?
        .iter()
        .find(|(name, _)| AsRef::<str>::as_ref(*name).eq_ignore_ascii_case(header))?;
    bounded_key(values.first()?.as_str().to_string())
}

/// One hold of the route: what this gateway took while it held it.
struct Hold {
    route: String,
    holding: Holding,
    ended: AtomicBool,
    chains: Chains<Waiting>,
    /// Stream sequences taken in this hold and not done: a copy JetStream hands out again
    /// while the first is held (its in-progress acks lost in a reconnect) is dropped.
    taken: Mutex<HashSet<u64>>,
    /// Keys whose message is retrying in place.
    parked: Mutex<HashSet<String>>,
    pipeline: Arc<Pipeline>,
}

impl Hold {
    /// Whether messages taken in this hold may still be delivered and settled.
    fn valid(&self) -> bool {
        !self.ended.load(Ordering::Relaxed) && self.holding.held()
    }

    /// Deliver nothing more: the record is let go, and what the hold took comes back
    /// from the server after `ack_wait`. Its parked keys are counted 0 from now on.
    fn end(&self) {
        {
            let mut keys = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
            if !self.ended.swap(true, Ordering::Relaxed) {
                keys.clear();
                self.pipeline.parked_keys_held(&self.route, 0);
            }
        }
        self.holding.release();
    }

    fn park(&self, key: &str, parked: bool) {
        let mut keys = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        // An ended hold's count was set back to 0 (under this lock), and a newer hold
        // counts its own.
        if self.ended.load(Ordering::Relaxed) {
            return;
        }
        let changed = if parked {
            keys.insert(key.to_string())
        } else {
            keys.remove(key)
        };
        if changed {
            self.pipeline
                .parked_keys_held(&self.route, keys.len() as u64);
        }
    }

    fn done(&self, seq: u64) {
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&seq);
    }
}

/// Ends the hold when the loop that took it stops, however it stops (the session dropped
/// mid-fetch included).
struct EndOnDrop(Arc<Hold>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A message taken in a hold, with what delivering it needs and its in-progress acks
/// (running from the moment it was taken until it is dropped).
struct Waiting {
    job: Job,
    message: jetstream::Message,
    _room: OwnedSemaphorePermit,
    _acks: AbortOnDrop,
}

/// Why a hold ended.
enum HoldEnded {
    Shutdown,
    /// The record lost, or the hold ended by a panic.
    Lost,
    /// A delivery the server sent did not arrive here.
    Gap,
}

impl Session<'_> {
    /// Consume the ordered route of the consumer `me` (a route ordered by `header`): stand
    /// by while another gateway holds it, deliver it while this one does.
    pub(super) async fn consume_ordered(
        &self,
        broker: &Broker,
        ownership: &Arc<Ownership>,
        me: &Member,
        consumer: &PullConsumer,
        header: &str,
        mut shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let mut holder = Holder::new(
            broker.history().bucket().clone(),
            broker.holder_key(&me.durable),
            &self.settings.instance,
        );
        let route = me.filter.clone();
        self.pipeline.parked_keys_held(&route, 0);
        let mut standing_by = false;
        let mut failures = 0u32;
        loop {
            let taken = holder.try_take().await;
            failures = if taken.is_err() { failures + 1 } else { 0 };
            let holding = match taken {
                Ok(Some(holding)) => holding,
                Ok(None) => {
                    if !standing_by {
                        tracing::info!(route = %Clean(&route), "nats source: another gateway delivers this route ordered by key; standing by");
                        standing_by = true;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(STANDBY_RETRY) => continue,
                        _ = shutdown.changed() => return Ok(()),
                    }
                }
                Err(e) => {
                    // Nobody may be delivering the route meanwhile: said once it lasts.
                    if failures == HOLDER_FAILURES_WARN {
                        tracing::warn!(error = %e, route = %Clean(&route), "nats source: the record naming the gateway that delivers this route ordered by key cannot be read or written; the route waits until it can");
                    } else {
                        tracing::debug!(error = %e, route = %Clean(&route), "nats source: the holder record of an ordered route could not be read or written; trying again");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(STANDBY_RETRY) => continue,
                        _ = shutdown.changed() => return Ok(()),
                    }
                }
            };
            standing_by = false;
            tracing::info!(route = %Clean(&route), "nats source: this gateway delivers the route ordered by key");
            let hold = Arc::new(Hold {
                route: route.clone(),
                holding,
                ended: AtomicBool::new(false),
                chains: Chains::default(),
                taken: Mutex::default(),
                parked: Mutex::default(),
                pipeline: self.pipeline.clone(),
            });
            let end = EndOnDrop(hold.clone());
            let ended = self
                .hold(
                    broker,
                    ownership,
                    me,
                    consumer,
                    header,
                    &hold,
                    &mut shutdown,
                )
                .await;
            drop(end);
            self.pipeline.parked_keys_held(&route, 0);
            match ended? {
                HoldEnded::Shutdown => return Ok(()),
                HoldEnded::Lost => {
                    tracing::warn!(route = %Clean(&route), "nats source: this gateway stopped delivering the route ordered by key (its record was not renewed in time or another gateway took it, or a delivery panicked); what it held comes back after `ack_wait`, to be taken again in stream order");
                }
                HoldEnded::Gap => {
                    tracing::warn!(route = %Clean(&route), durable = %me.durable, "nats source: a message the server handed out did not reach this gateway (a connection lost mid-fetch, or another gateway pulling from the route's consumer without ordering it); taking everything back in stream order after `ack_wait`");
                }
            }
        }
    }

    /// One hold: wait for what an earlier one left pending, take it all and put it in
    /// stream order, then go on taking the route's messages as it has room.
    #[allow(clippy::too_many_arguments)]
    async fn hold(
        &self,
        broker: &Broker,
        ownership: &Arc<Ownership>,
        me: &Member,
        consumer: &PullConsumer,
        header: &str,
        hold: &Arc<Hold>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<HoldEnded> {
        let ack_wait = Duration::from_millis(broker.config().ack_wait_ms);
        // Another gateway's last pull may still be open at the server: nothing may be
        // handed out but to this hold from now on.
        let mut patience = PULL_PATIENCE;
        let info = loop {
            let info = match self.info_now(consumer, hold, shutdown).await? {
                Look::Info(info) => info,
                Look::Ended(ended) => return Ok(ended),
            };
            if info.num_waiting == 0 || patience.is_zero() {
                break info;
            }
            patience = patience.saturating_sub(PULL_CHECK);
            tokio::select! {
                () = tokio::time::sleep(PULL_CHECK) => {}
                _ = shutdown.changed() => return Ok(HoldEnded::Shutdown),
                () = hold.holding.lost() => return Ok(HoldEnded::Lost),
            }
        };
        let info = if info.num_ack_pending > 0 {
            tokio::select! {
                () = tokio::time::sleep(ack_wait + GATHER_MARGIN) => {}
                _ = shutdown.changed() => return Ok(HoldEnded::Shutdown),
                () = hold.holding.lost() => return Ok(HoldEnded::Lost),
            }
            match self.info_now(consumer, hold, shutdown).await? {
                Look::Info(info) => info,
                Look::Ended(ended) => return Ok(ended),
            }
        } else {
            info
        };
        // Every delivery from here is this hold's: the next one's number.
        let mut expected = info.delivered.consumer_sequence + 1;
        let concurrency = self
            .pipeline
            .route_target_of(&me.filter)
            .map_or(1, |t| t.concurrency());
        // The first fetch takes everything pending at once, however much an earlier
        // holder with a larger room left; the extra room goes once it is given back.
        let usual = room(concurrency);
        let pending = info.num_ack_pending.min(MAX_ROOM);
        let room = Arc::new(Semaphore::new(usual.max(pending)));
        let mut extra = pending.saturating_sub(usual);
        let mut first = true;
        loop {
            if !hold.valid() {
                return Ok(HoldEnded::Lost);
            }
            // Once the first fetch has taken what was pending, the extra room goes as it is
            // given back.
            if !first && extra > 0 {
                extra -= room.forget_permits(extra);
            }
            if let Some(target) = self.pipeline.route_target_of(&me.filter)
                && let Some(paused) = target.pause_status()
                && !paused.left.is_zero()
            {
                tokio::select! {
                    () = tokio::time::sleep(paused.left) => {}
                    _ = shutdown.changed() => return Ok(HoldEnded::Shutdown),
                    () = hold.holding.lost() => return Ok(HoldEnded::Lost),
                }
                continue;
            }
            let permit = tokio::select! {
                permit = room.clone().acquire_owned() => permit?,
                _ = shutdown.changed() => return Ok(HoldEnded::Shutdown),
                () = hold.holding.lost() => return Ok(HoldEnded::Lost),
            };
            let mut taken = vec![permit];
            while let Ok(permit) = room.clone().try_acquire_owned() {
                taken.push(permit);
            }
            let fetch = consumer
                .fetch()
                .max_messages(taken.len())
                .expires(if first { GATHER_FETCH } else { FETCH_WAIT })
                .messages();
            let mut batch = tokio::select! {
                batch = fetch => match batch {
                    Ok(batch) => batch,
                    Err(e) if self.ready.is_up() => {
                        return Err(anyhow::anyhow!("fetching on `{}`: {e}", me.durable));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, durable = %me.durable, "nats source: fetch failed while disconnected");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = shutdown.changed() => return Ok(HoldEnded::Shutdown),
                () = hold.holding.lost() => return Ok(HoldEnded::Lost),
            };
            let mut gathered = Vec::new();
            loop {
                let next = tokio::select! {
                    next = batch.next() => next,
                    _ = shutdown.changed() => return Ok(HoldEnded::Shutdown),
                    () = hold.holding.lost() => return Ok(HoldEnded::Lost),
                };
                let message = match next {
                    None => break,
                    Some(Ok(message)) => message,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, durable = %me.durable, "nats source: fetch error");
                        break;
                    }
                };
                let delivery_number = message.info().map_or(0, |i| i.consumer_sequence);
                if delivery_number != expected {
                    return Ok(HoldEnded::Gap);
                }
                expected += 1;
                let Some(permit) = taken.pop() else {
                    // More than asked for, not taken: as good as missed.
                    return Ok(HoldEnded::Gap);
                };
                if first {
                    gathered.push((message, permit));
                } else {
                    self.admit(
                        broker, ownership, me, header, hold, message, permit, shutdown,
                    );
                }
            }
            if first {
                gathered
                    .sort_by_key(|(message, _)| message.info().map_or(0, |i| i.stream_sequence));
                for (message, permit) in gathered {
                    self.admit(
                        broker, ownership, me, header, hold, message, permit, shutdown,
                    );
                }
                first = false;
            }
        }
    }

    /// Hand a message taken in `hold` to its key's chain (or, without a key, to the
    /// route's usual delivery).
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        broker: &Broker,
        ownership: &Arc<Ownership>,
        me: &Member,
        header: &str,
        hold: &Arc<Hold>,
        message: jetstream::Message,
        permit: OwnedSemaphorePermit,
        shutdown: &watch::Receiver<bool>,
    ) {
        let seq = message.info().map_or(0, |i| i.stream_sequence);
        let fresh = hold
            .taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(seq);
        if !fresh {
            // Handed out again while this hold still has it: the first copy goes on.
            return;
        }
        let job = Job {
            driver: self.driver.clone(),
            broker: broker.clone(),
            dlqs: self.dlqs.clone(),
            slots: self.slots.clone(),
            owner: Owner::of(ownership, me, &message.subject, seq),
            seq,
        };
        let Some(key) = key_of(message.headers.as_ref(), header) else {
            let hold = hold.clone();
            tokio::spawn(async move {
                job.handle(message).await;
                hold.done(seq);
                drop(permit);
            });
            return;
        };
        let every = Duration::from_millis(broker.config().ack_wait_ms / 3);
        let acks = AbortOnDrop(tokio::spawn(keep_alive(
            message.clone(),
            every,
            hold.clone(),
        )));
        let waiting = Waiting {
            job,
            message,
            _room: permit,
            _acks: acks,
        };
        if let Some(first) = hold.chains.admit(&hold.route, key.clone(), waiting) {
            run_chain(hold.clone(), key, first, shutdown.clone());
        }
    }
}

/// Deliver `first` and then, one at a time, each message of `key` that waited behind it,
/// until the key's chain is empty. Once the hold has ended nothing more is delivered.
fn run_chain(hold: Arc<Hold>, key: String, first: Waiting, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut next = Some(first);
        while let Some(waiting) = next {
            let seq = waiting.job.seq;
            let delivered = AssertUnwindSafe(deliver(
                &waiting.job,
                &hold,
                &key,
                &waiting.message,
                &mut shutdown,
            ))
            .catch_unwind()
            .await;
            // The driver turns a panic in processing into a dead letter; one past it is
            // dead-lettered here, as on an unordered route, before the key's next message
            // goes (ending the hold instead would bring a panic that repeats back at every
            // hold). Should even that panic, the hold ends: the next one takes everything
            // back in stream order.
            if let Err(panic) = delivered {
                let why = crate::sources::panic_text(&*panic);
                drop(panic);
                tracing::error!(
                    route = %Clean(&hold.route),
                    "nats source: delivering a message of a route ordered by key panicked; \
                     it is dead-lettered, and its key goes on"
                );
                if hold.valid() {
                    let letter =
                        waiting
                            .job
                            .dead_letter_panicked(&waiting.message, &why, Instant::now());
                    if AssertUnwindSafe(letter).catch_unwind().await.is_err() {
                        hold.end();
                    }
                }
            }
            hold.park(&key, false);
            hold.done(seq);
            drop(waiting);
            next = hold.chains.next(&hold.route, &key);
        }
    });
}

/// In-progress acks while the message is held and the hold is valid: once it is not, they
/// stop, so the server hands the message to the next hold after `ack_wait`.
async fn keep_alive(message: jetstream::Message, every: Duration, hold: Arc<Hold>) {
    let every = every.max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        if !hold.valid() {
            return;
        }
        if let Err(e) = message.ack_with(AckKind::Progress).await {
            tracing::debug!(error = %e, "nats source: an in-progress ack failed");
        }
    }
}

/// What [`Session::info_now`] found.
enum Look {
    Info(Box<jetstream::consumer::Info>),
    Ended(HoldEnded),
}

impl Session<'_> {
    /// The consumer's info now, read again while the connection is down; the hold's end
    /// (lost meanwhile, or shutdown) is an end, not an error. Unreadable while connected (the
    /// consumer deleted, say): an error, so the session is rebuilt, as a fetch's would be.
    async fn info_now(
        &self,
        consumer: &PullConsumer,
        hold: &Hold,
        shutdown: &mut watch::Receiver<bool>,
    ) -> anyhow::Result<Look> {
        loop {
            let read = tokio::select! {
                read = consumer.get_info() => read,
                _ = shutdown.changed() => return Ok(Look::Ended(HoldEnded::Shutdown)),
            };
            match read {
                Ok(info) => return Ok(Look::Info(Box::new(info))),
                Err(_) if !hold.valid() => return Ok(Look::Ended(HoldEnded::Lost)),
                Err(e) if self.ready.is_up() => {
                    return Err(anyhow::anyhow!("reading an ordered route's consumer: {e}"));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "nats source: reading an ordered route's consumer failed while disconnected; trying again");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.changed() => return Ok(Look::Ended(HoldEnded::Shutdown)),
            }
        }
    }
}

/// Deliver `message`, retrying it in place until it is settled otherwise. Returns without
/// settling it once the hold has ended or the source is stopping. Its in-progress acks run
/// beside it ([`Waiting`]).
async fn deliver(
    job: &Job,
    hold: &Hold,
    key: &str,
    message: &jetstream::Message,
    shutdown: &mut watch::Receiver<bool>,
) {
    if !hold.valid() {
        return;
    }
    // Whether another route's consumer delivers it; when nobody can say now it waits here
    // and asks again (given back, its key's next message would go first).
    loop {
        match job.owner_check(message).await {
            OwnerCheck::Mine => break,
            OwnerCheck::Left => return,
            OwnerCheck::Unknown => {
                if !wait_in_place(OWNER_UNKNOWN_WAIT, hold, shutdown).await {
                    return;
                }
            }
        }
    }
    let Ok(info) = message.info() else {
        tracing::error!(subject = %Clean(&message.subject), "nats source: a message without JetStream metadata; terminating it");
        let _ = message.ack_with(AckKind::Term).await;
        return;
    };
    let (seq, delivered) = (
        info.stream_sequence,
        u64::try_from(info.delivered).unwrap_or(0),
    );
    let published_at_ms =
        u64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let history_key = job.broker.history_key(seq);
    // Handed out before (an earlier hold, or a retry before the route was ordered): its
    // attempts so far are in the bucket.
    let mut history = None;
    if delivered > 1 {
        loop {
            match job.broker.history().get(&history_key, delivered).await {
                Ok(found) => {
                    history = found;
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, seq, "nats source: the history could not be read; trying again");
                    if !wait_in_place(Duration::from_secs(1), hold, shutdown).await {
                        return;
                    }
                }
            }
        }
    }
    if history.as_ref().is_some_and(|h| h.dead_lettered) {
        // Dead-lettered already; only the term was lost.
        if message.double_ack_with(AckKind::Term).await.is_ok() {
            let _ = job.broker.history().forget(&history_key).await;
        }
        return;
    }
    let mut had_history = history.is_some();
    loop {
        if !hold.valid() || *shutdown.borrow() {
            return;
        }
        let received = Instant::now();
        let mut delivery =
            super::to_delivery(message, job.broker.stream_name(), seq, published_at_ms);
        match &history {
            Some(h) => h.apply_to(&mut delivery),
            None => delivery.redelivery = delivered > 1,
        }
        let seats = take_seats(job.driver.pipeline(), &delivery.topic, &job.slots).await;
        // Ended while it waited for its seats (a paused route waits long): the next hold
        // delivers it, and its key's next ones after it.
        if !hold.valid() {
            return;
        }
        let settlement = job
            .driver
            .decide(
                &delivery,
                seats.as_ref().map(|(target, slot, _)| (target, slot)),
            )
            .await;
        let seats = seats.map(|(_, _, global)| global);
        let mut held = InPlace {
            fetched: Fetched {
                broker: &job.broker,
                dlqs: &job.dlqs,
                message,
                delivery: &delivery,
                key: &history_key,
                delivered,
                marked: false,
            },
            next: None,
        };
        let settled = job
            .driver
            .settle(&mut held, &delivery, settlement, seats, received)
            .await;
        let marked = held.fetched.marked;
        let fin = match (settled, held.next) {
            (Settled::Applied(_) | Settled::GivenBack, Some((next, wait))) => {
                if let Some(next) = next {
                    history = Some(next);
                    had_history = true;
                }
                hold.park(key, true);
                if !wait_in_place(wait, hold, shutdown).await {
                    return;
                }
                continue;
            }
            (Settled::Applied(handled), None) => handled.is_final(),
            (Settled::ByGateway, _) => true,
            _ => false,
        };
        // Settled: its history goes, unless it is what stops a redelivery (a dead letter
        // whose `term` failed) from reaching the consumer again.
        if fin && had_history && !marked {
            let _ = job.broker.history().forget(&history_key).await;
        }
        return;
    }
}

/// Wait `wait` with the message held: false as soon as the hold ends or the source stops.
async fn wait_in_place(wait: Duration, hold: &Hold, shutdown: &mut watch::Receiver<bool>) -> bool {
    let until = tokio::time::Instant::now() + wait;
    loop {
        if !hold.valid() || *shutdown.borrow() {
            return false;
        }
        let now = tokio::time::Instant::now();
        if now >= until {
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep((until - now).min(HOLD_CHECK)) => {}
            _ = shutdown.changed() => return false,
        }
    }
}

/// A message of an ordered route as the settlement driver holds it: final settlements as on
/// any NATS route; a retry (or a release, or a settlement given back) only notes the next
/// attempt - its history written to the bucket first - and the message stays held.
struct InPlace<'a> {
    fetched: Fetched<'a>,
    /// The next attempt: its history when a failure was added, and the wait before it.
    next: Option<(Option<History>, Duration)>,
}

impl Held for InPlace<'_> {
    async fn apply(&mut self, settlement: crate::model::Settlement) -> Result<(), Unapplied> {
        let Some((failed, delay_ms)) = next_attempt(&settlement) else {
            return self.fetched.apply(settlement).await;
        };
        let next = match failed {
            Some((failed, spend_attempt)) => {
                let next = History::after(self.fetched.delivery, failed, spend_attempt);
                self.fetched
                    .broker
                    .history()
                    .put(self.fetched.key, &next, self.fetched.delivered)
                    .await
                    .map_err(|e| Unapplied::Failed(format!("{e:#}")))?;
                Some(next)
            }
            None => None,
        };
        self.next = Some((next, Duration::from_millis(delay_ms)));
        Ok(())
    }

    fn failure_key(&self) -> String {
        self.fetched.failure_key()
    }

    /// Its settlement could not be written (the server restarting, say): delivered again
    /// in place after `ack_wait` at the soonest - as soon as a `nak`ed message would come
    /// back - so the failures the driver bounds are not spent while the server is away.
    async fn give_back(&mut self, wait: Duration) {
        let ack_wait = Duration::from_millis(self.fetched.broker.config().ack_wait_ms);
        self.next = Some((None, wait.max(ack_wait)));
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr as _;

    use async_nats::{HeaderMap, HeaderName, HeaderValue};

    use super::{key_of, room};

    #[test]
    fn a_key_is_its_header_matched_without_case_and_a_message_without_it_is_not_ordered() {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_str("Order-Id").unwrap(),
            HeaderValue::from_str("o-1").unwrap(),
        );
        assert_eq!(key_of(Some(&headers), "order-id").as_deref(), Some("o-1"));
        assert_eq!(key_of(Some(&headers), "other"), None);
        assert_eq!(key_of(None, "order-id"), None);
        let mut empty = HeaderMap::new();
        empty.insert("order-id", "");
        assert_eq!(
            key_of(Some(&empty), "order-id"),
            None,
            "an empty key orders nothing"
        );
        let mut long = HeaderMap::new();
        long.insert("order-id", "k".repeat(5_000).as_str());
        let key = key_of(Some(&long), "order-id").unwrap();
        assert!(key.starts_with("sha256:"), "bounded: {key}");
    }

    #[test]
    fn an_ordered_route_holds_twice_its_concurrency_within_bounds() {
        assert_eq!(room(1), 64);
        assert_eq!(room(100), 200);
        assert_eq!(
            room(usize::MAX),
            100_000,
            "bounded: a semaphore's permits are"
        );
    }
}
