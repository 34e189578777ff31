//! The embedded source: messages published through the admin API into the SQLite store,
//! claimed with a lease, and each settlement one store transaction.
//!
//! **Claims per route.** Each round asks every route for as many due messages as it has
//! free delivery slots (its consumer's `concurrency`, within `[gateway] max_in_flight`),
//! topic by topic, routes in turn. A message is claimed only when a slot is waiting for it,
//! so a slow or failing route holds its own slots and never the others' (routes are
//! isolated), and no claimed message waits for a slot while its lease runs out. A route's
//! slot is held while its consumer works on the message; once the consumer has answered,
//! the slot goes to the next message and the settlement waits for the writer holding only
//! one of the source's `max_in_flight` - so settlements pile up into large group commits
//! instead of the consumer waiting for each fsync.
//!
//! **Leases are kept and fenced.** While a delivery runs, its lease is extended every third
//! of `lease_ms`; a lease expires only when the process holding it stopped (crashed, or
//! stalled longer than `lease_ms`). Every claim gives the message a new lease number and
//! every settlement names the one it holds: a settlement from a delivery that lost its lease
//! changes nothing (counted as `lease-lost`), so a message is settled once.
//!
//! Settlements are group-committed: one writer takes every settlement waiting when it is
//! free and writes them in one transaction (one fsync), so under load the cost of the
//! store's durability is shared by a batch, and when idle a settlement is written at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};

use super::{AbortOnDrop, Held, SettlementDriver, Source, Unapplied};
use crate::health::Readiness;
use crate::model::Settlement;
use crate::pipeline::{Pipeline, RouteSlot, RouteTarget};
use crate::store::{Claimed, Store, StoreError};

/// The source's name in metrics.
pub const NAME: &str = "embedded";

/// Messages of topics no route takes are looked at this many per round (each is released
/// for later at once).
const UNROUTED_PER_ROUND: usize = 16;

/// The leases this process holds: message seq -> lease number, for the keeper to extend.
type Leases = Arc<Mutex<HashMap<i64, i64>>>;

/// The embedded store as a source, with its upkeep (retention, idle topics) running beside
/// it.
#[derive(Debug, Clone)]
pub struct EmbeddedSource {
    retention_ms: u64,
}

impl EmbeddedSource {
    /// A source that keeps settled rows and dead letters `retention_ms` (`[storage]`).
    pub fn new(retention_ms: u64) -> EmbeddedSource {
        EmbeddedSource { retention_ms }
    }
}

impl Source for EmbeddedSource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn readiness(&self) -> Option<Readiness> {
        None
    }

    fn run(
        self: Box<Self>,
        pipeline: Arc<Pipeline>,
        shutdown: watch::Receiver<bool>,
        grace: Duration,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let store = pipeline.store().clone();
            let _upkeep = AbortOnDrop(tokio::spawn(maintain(store, self.retention_ms)));
            consume(pipeline, shutdown, grace).await;
        })
    }
}

/// Deliver the store's due messages until `shutdown` turns true; then stop claiming and wait
/// (up to `grace`) for deliveries in flight. A delivery still running after that keeps its
/// lease and is delivered again after a restart.
async fn consume(pipeline: Arc<Pipeline>, mut shutdown: watch::Receiver<bool>, grace: Duration) {
    let settings = pipeline.settings().clone();
    let store = pipeline.store().clone();
    let max = settings.max_in_flight.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let poll = Duration::from_millis(settings.poll_ms.max(1));
    let (committer, writer) = Committer::start(store.clone());
    let held: Leases = Arc::default();
    // The lease bounds how long an outcome is written again while the database is away.
    let driver = SettlementDriver::new(NAME, pipeline.clone())
        .rewrite_for(Duration::from_millis(settings.lease_ms));
    let _keeper = AbortOnDrop(tokio::spawn(keep_leases(
        store.clone(),
        held.clone(),
        settings.lease_ms,
    )));
    // Rung when a delivery ends: its slot may be the one a waiting route needs.
    let freed = Arc::new(Notify::new());
    // Another gateway's publish or an operator's replay wakes this loop at once on a store
    // that can tell (PostgreSQL's NOTIFY); the listener stops with the loop.
    let consuming = Arc::new(());
    let (alive, woken) = (Arc::downgrade(&consuming), Arc::downgrade(&pipeline));
    store.on_new_work(move |new| match (alive.upgrade(), woken.upgrade()) {
        (Some(_), Some(pipeline)) => {
            if new {
                pipeline.wake();
            }
            true
        }
        _ => false,
    });
    let mut round = 0_usize;
    let mut outage = super::StoreOutage::default();
    let mut topics = TopicList::default();
    let mut parked_read: Option<Instant> = None;
    while !*shutdown.borrow() {
        round = round.wrapping_add(1);
        // The topic list, the seats and the claim in one trip to a blocking thread: each
        // trip waits for the store's lock, which a settlement batch holds through its fsync.
        let round_trip = {
            let (pipeline, store, slots) = (pipeline.clone(), store.clone(), slots.clone());
            let lease_ms = settings.lease_ms;
            let cached = topics.fresh(pipeline.wakes());
            let read_parked = pipeline.reads_parked_keys()
                && parked_read.is_none_or(|at| at.elapsed() >= PARKED_FRESH);
            if read_parked {
                parked_read = Some(Instant::now());
            }
            tokio::task::spawn_blocking(move || {
                if read_parked {
                    pipeline.parked_keys_read(&store.parked_keys()?);
                }
                let wakes = pipeline.wakes();
                let (list, read) = match cached {
                    Some(list) => (list, None),
                    None => {
                        let list = store.topics()?;
                        (list.clone(), Some((list, wakes)))
                    }
                };
                let planned = plan(&pipeline, list, &slots, round);
                let claimed = if planned.wants.is_empty() {
                    Vec::new()
                } else {
                    planned.claim(&store, lease_ms)?
                };
                Ok::<_, StoreError>((planned, claimed, read))
            })
        };
        let (planned, claimed) = match round_trip.await {
            Ok(Ok((planned, claimed, read))) => {
                if let Some((list, wakes)) = read {
                    topics.read(list, wakes);
                }
                (planned, claimed)
            }
            Ok(Err(e)) => {
                let wait = outage.failed(&e, poll);
                tokio::time::sleep(wait).await;
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "the claim task failed");
                continue;
            }
        };
        outage.answered();
        if claimed.is_empty() {
            if !planned.wants.is_empty() {
                // Asked and found nothing: what falls due next may be in a topic the
                // cached list does not hold yet.
                topics.forget();
            }
            // Every slot taken: only a finished delivery (or the poll) can change that, and
            // asking the store when the next message falls due would find one due now and
            // spin. Otherwise a message due now that this round did not get is another
            // gateway's to take, or its route's slots are full: look again shortly, not at
            // once.
            let idle = if planned.wants.is_empty() {
                poll
            } else {
                until_due(&store, poll).await.max(RECHECK.min(poll))
            };
            // A paused route's backlog is due and stays unclaimed: the store's next due
            // time says "now" until the pause ends, so the loop looks again at the poll's
            // pace, not every few milliseconds - and when the pause ends, whatever the poll.
            let idle = if planned.paused { idle.max(poll) } else { idle };
            // A route at its `max_parked_keys` leaves its new messages due and unclaimed
            // too: look again at a pace that still takes its retries about on time.
            let idle = if planned.retries_only.contains(&true) {
                idle.max(PARKED_RECHECK).min(poll)
            } else {
                idle
            };
            let idle = planned.resume_in.map_or(idle, |resume| idle.min(resume));
            drop(planned);
            tokio::select! {
                () = tokio::time::sleep(idle) => {}
                () = pipeline.woken().notified() => {}
                () = freed.notified() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        let mut planned = planned;
        for message in claimed {
            let Some(seat) = planned.seat_for(&message.delivery.topic) else {
                // Cannot happen (a claim takes no more than its group's seats); if it did,
                // the message's lease would bring it back.
                tracing::error!(id = %verdict_runtime::text::Clean(&message.delivery.id), "a claimed message has no delivery slot; it is delivered again when its lease expires");
                continue;
            };
            held.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(message.seq, message.lease);
            let task = Task {
                driver: driver.clone(),
                global: slots.clone(),
                committer: committer.clone(),
                held: held.clone(),
                freed: freed.clone(),
            };
            tokio::spawn(task.run(message, seat));
        }
    }
    if !super::drained(&slots, max, grace).await {
        tracing::warn!(
            "deliveries still in flight at shutdown keep their lease and are delivered again on restart"
        );
    }
    // The writer ends once every delivery task has let go of its committer.
    drop(committer);
    if tokio::time::timeout(grace, writer).await.is_err() {
        tracing::warn!("the settlement writer did not finish in time");
    }
}

/// How long the claim loop keeps its topic list before it reads it again. A busy loop
/// claims many times a second, and the list (the topics with messages pending) changes only
/// when a message is published to or replayed into a topic that had none: a publish or
/// replay through this gateway, or another gateway's on a store that notifies, wakes the
/// loop, which reads the list again at once; another gateway's publish on a store that
/// does not notify (MariaDB) is seen within this long.
const TOPICS_FRESH: Duration = Duration::from_millis(250);

/// The claim loop's topic list, read from the store at most every [`TOPICS_FRESH`].
#[derive(Default)]
struct TopicList {
    /// The list, when it was read, and [`Pipeline::wakes`] as it stood before.
    cached: Option<(Vec<String>, Instant, u64)>,
}

impl TopicList {
    /// The list, if it is young enough and nothing woke the loop since it was read.
    fn fresh(&self, wakes: u64) -> Option<Vec<String>> {
        self.cached
            .as_ref()
            .filter(|(_, at, seen)| *seen == wakes && at.elapsed() < TOPICS_FRESH)
            .map(|(list, _, _)| list.clone())
    }

    /// `list` was read just now, when [`Pipeline::wakes`] stood at `wakes`.
    fn read(&mut self, list: Vec<String>, wakes: u64) {
        self.cached = Some((list, Instant::now(), wakes));
    }

    /// Read the list again next round.
    fn forget(&mut self) {
        self.cached = None;
    }
}

/// How long the claim loop keeps the parked keys it read (see `max_parked_keys`): counting
/// them reads every unfinished keyed message, too much for every claim.
const PARKED_FRESH: Duration = Duration::from_secs(1);

/// The least an idle loop sleeps while a route takes only retries (its new messages are
/// due, and not to be taken).
const PARKED_RECHECK: Duration = Duration::from_millis(50);

/// The least an idle loop sleeps when the store says a message is due that this round
/// could not claim.
const RECHECK: Duration = Duration::from_millis(5);

/// How long an idle loop sleeps: until the store's next message falls due, at most `poll`
/// (the fallback that finds what nothing woke the loop for, such as a replay by another
/// process on SQLite). A retry due in 200 ms is claimed on time whatever `poll_ms` says.
async fn until_due(store: &Arc<Store>, poll: Duration) -> Duration {
    let store = store.clone();
    // The store's clock, not this machine's: the due time is the store's.
    match tokio::task::spawn_blocking(move || {
        Ok::<_, StoreError>((store.next_due_ms()?, store.now_ms()))
    })
    .await
    {
        Ok(Ok((Some(due), now))) => Duration::from_millis(due.saturating_sub(now)).min(poll),
        Ok(Ok((None, _))) => poll,
        _ => poll,
    }
}

/// What a claimed message is delivered with.
enum Seat {
    /// At once: a slot of its route (none for a topic no route takes) and one of
    /// `max_in_flight`.
    Now {
        route: Option<(Arc<RouteTarget>, RouteSlot)>,
        global: OwnedSemaphorePermit,
    },
    /// Claimed ahead - at most the route's `concurrency` of them - so claims come in batches
    /// rather than one per freed slot (a claim is a durable transaction): it waits for a slot
    /// of its route and then one of `max_in_flight`, holding nothing another route needs,
    /// its lease kept by the keeper meanwhile.
    Ahead {
        target: Arc<RouteTarget>,
        _ahead: OwnedSemaphorePermit,
    },
}

/// One claim round: the topics to ask, how many each group may take, and the seats waiting.
struct Plan {
    /// `(topics, limit)` per route (and one group for unrouted topics).
    wants: Vec<(Vec<String>, usize)>,
    /// Per group of `wants`: whether it takes retries only (its route is at its
    /// `max_parked_keys`).
    retries_only: Vec<bool>,
    /// Seats per group, in the order of `wants`.
    seats: Vec<Vec<Seat>>,
    /// Topic -> its group.
    group_of: HashMap<String, usize>,
    /// When the first paused route among them may take its probe.
    resume_in: Option<Duration>,
    /// Whether a route among them is paused or waits for its probe's outcome.
    paused: bool,
}

impl Plan {
    fn seat_for(&mut self, topic: &str) -> Option<Seat> {
        self.seats.get_mut(*self.group_of.get(topic)?)?.pop()
    }

    /// The round's claim: one for the groups that take anything due, one for those that
    /// take retries only.
    fn claim(&self, store: &Store, lease_ms: u64) -> Result<Vec<Claimed>, StoreError> {
        let now = store.now_ms();
        if !self.retries_only.contains(&true) {
            return store.claim(now, &self.wants, lease_ms);
        }
        let (mut fresh, mut retries) = (Vec::new(), Vec::new());
        for (want, only) in self.wants.iter().zip(&self.retries_only) {
            match only {
                true => retries.push(want.clone()),
                false => fresh.push(want.clone()),
            }
        }
        let mut claimed = if fresh.is_empty() {
            Vec::new()
        } else {
            store.claim(now, &fresh, lease_ms)?
        };
        claimed.extend(store.claim_retries(now, &retries, lease_ms)?);
        Ok(claimed)
    }
}

/// Seats for every route of `topics` with room, routes taken in turn from `round` so that
/// none is always first to the shared `max_in_flight` slots.
fn plan(pipeline: &Pipeline, topics: Vec<String>, slots: &Arc<Semaphore>, round: usize) -> Plan {
    // Topics grouped by the route they take now; unrouted ones last.
    let mut routes: Vec<(Option<Arc<RouteTarget>>, Vec<String>)> = Vec::new();
    for topic in topics {
        let target = pipeline.route_target(&topic);
        let same = |t: &Option<Arc<RouteTarget>>| match (t, &target) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        match routes.iter_mut().find(|(t, _)| same(t)) {
            Some((_, list)) => list.push(topic),
            None => routes.push((target, vec![topic])),
        }
    }
    routes.sort_by_key(|(t, _)| t.is_none());
    let routed = routes.iter().filter(|(t, _)| t.is_some()).count();
    if routed > 0 {
        routes[..routed].rotate_left(round % routed);
    }
    let mut plan = Plan {
        wants: Vec::new(),
        retries_only: Vec::new(),
        seats: Vec::new(),
        group_of: HashMap::new(),
        resume_in: None,
        paused: false,
    };
    for (target, mut topics) in routes {
        // Topics of one route in turn too: one topic's backlog must not starve the next.
        if !topics.is_empty() {
            let turn = round % topics.len();
            topics.rotate_left(turn);
        }
        // Seats are handed out last first: the ones ahead go in first, so the oldest
        // messages get the seats that run at once.
        let mut seats = Vec::new();
        if let Some(t) = &target
            && let Some(paused) = t.pause_status()
        {
            plan.paused = true;
            // A paused route claims nothing until its pause ends, then only its probe.
            if !paused.left.is_zero() {
                plan.resume_in = Some(plan.resume_in.map_or(paused.left, |r| r.min(paused.left)));
                continue;
            }
        }
        if let Some(t) = target.as_ref().filter(|t| t.is_open()) {
            while let Ok(ahead) = t.ahead.clone().try_acquire_owned() {
                seats.push(Seat::Ahead {
                    target: t.clone(),
                    _ahead: ahead,
                });
            }
        }
        let cap = match &target {
            Some(t) => t.slots.available_permits(),
            None => UNROUTED_PER_ROUND,
        };
        let mut now = 0;
        while now < cap {
            let Ok(global) = slots.clone().try_acquire_owned() else {
                break;
            };
            let route = match &target {
                Some(t) => match t.try_slot() {
                    Some(slot) => Some((t.clone(), slot)),
                    None => break,
                },
                None => None,
            };
            seats.push(Seat::Now { route, global });
            now += 1;
        }
        if seats.is_empty() {
            continue;
        }
        let group = plan.wants.len();
        for topic in &topics {
            plan.group_of.insert(topic.clone(), group);
        }
        let retries_only = target.as_ref().is_some_and(|t| {
            pipeline
                .parked_keys(t.route())
                .is_some_and(|parked| parked.full())
        });
        plan.wants.push((topics, seats.len()));
        plan.retries_only.push(retries_only);
        plan.seats.push(seats);
    }
    plan
}

/// How often the store is pruned (retention) and idle topics leave the claim round.
pub const MAINTAIN_EVERY: Duration = Duration::from_secs(60);
/// Rows of a kind one pruning transaction deletes at most.
const PRUNE_BATCH: usize = 1_000;

/// Keep the store small and its claim round short, every [`MAINTAIN_EVERY`] until the task
/// is dropped: delete what is older than `retention_ms` and no longer needed
/// ([`Store::prune`], in batches), and drop topics with nothing left to deliver.
pub async fn maintain(store: Arc<Store>, retention_ms: u64) {
    loop {
        let task = {
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                let pruned =
                    store.prune(store.now_ms().saturating_sub(retention_ms), PRUNE_BATCH)?;
                store.prune_topics()?;
                Ok::<_, StoreError>(pruned)
            })
        };
        match task.await {
            Ok(Ok(pruned)) if pruned.total() > 0 => tracing::info!(
                messages = pruned.messages,
                audit = pruned.audit,
                dlq = pruned.dlq,
                "retention: pruned the store"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "retention: pruning the store failed"),
            Err(e) => tracing::warn!(error = %e, "retention: the pruning task failed"),
        }
        tokio::time::sleep(MAINTAIN_EVERY).await;
    }
}

/// Extend the leases of the deliveries this process runs, every third of `lease_ms`.
async fn keep_leases(store: Arc<Store>, held: Leases, lease_ms: u64) {
    // At most a minute apart, however long the lease: extending early costs one statement.
    let every = Duration::from_millis((lease_ms / 3).clamp(10, 60_000));
    loop {
        tokio::time::sleep(every).await;
        let leases: Vec<(i64, i64)> = held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(seq, lease)| (*seq, *lease))
            .collect();
        if leases.is_empty() {
            continue;
        }
        let store = store.clone();
        match tokio::task::spawn_blocking(move || {
            let until = store.now_ms().saturating_add(lease_ms);
            store.extend_leases(&leases, until)
        })
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "extending leases failed; deliveries that outlive their lease may be delivered twice");
            }
            Err(e) => tracing::warn!(error = %e, "the lease keeper task failed"),
        }
    }
}

/// One delivery: process, settle, let go of its seat.
struct Task {
    driver: SettlementDriver,
    /// The `max_in_flight` slots (a seat claimed ahead takes one when its turn comes).
    global: Arc<Semaphore>,
    committer: Committer,
    held: Leases,
    freed: Arc<Notify>,
}

impl Task {
    async fn run(self, message: Claimed, seat: Seat) {
        let received = Instant::now();
        // However this task ends, the keeper stops extending its lease and its seat is
        // given back.
        let _release = Release {
            held: self.held.clone(),
            seq: message.seq,
            lease: message.lease,
            freed: self.freed.clone(),
        };
        // A seat claimed ahead waits for its slots first (its lease is kept meanwhile).
        let (route, global) = match seat {
            Seat::Ahead { target, _ahead } => {
                let Some(slot) = target.slot().await else {
                    return;
                };
                let Ok(global) = self.global.clone().acquire_owned().await else {
                    return;
                };
                // Its place ahead is free: the loop may claim the next one.
                drop(_ahead);
                self.freed.notify_one();
                (Some((target, slot)), global)
            }
            Seat::Now { route, global } => (route, global),
        };
        let settlement = self
            .driver
            .decide(
                &message.delivery,
                route.as_ref().map(|(target, slot)| (target, slot)),
            )
            .await;
        // The consumer has answered: its route's slot goes to the next message now, while
        // this one's settlement waits for the writer (the message stays leased, and the
        // source's `max_in_flight` slot is kept until it is written).
        drop(route);
        self.freed.notify_one();
        let mut leased = Leased {
            committer: self.committer,
            seq: message.seq,
            lease: message.lease,
        };
        self.driver
            .settle(&mut leased, &message.delivery, settlement, global, received)
            .await;
    }
}

/// A claimed message, settled through the group-commit writer under its lease.
struct Leased {
    committer: Committer,
    seq: i64,
    lease: i64,
}

impl Held for Leased {
    async fn apply(&mut self, settlement: Settlement) -> Result<(), Unapplied> {
        self.committer
            .settle(self.seq, self.lease, settlement)
            .await
    }

    fn failure_key(&self) -> String {
        self.seq.to_string()
    }

    async fn give_back(&mut self, wait: Duration) {
        let release = Settlement::Release {
            delay_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        // If this fails too, the lease expires and the message comes back all the same.
        let _ = self.committer.settle(self.seq, self.lease, release).await;
    }
}

/// Lets go of a delivery's lease when its task ends, however it ends, and says a seat is
/// free (the seat itself, declared after this guard, is dropped before it).
struct Release {
    held: Leases,
    seq: i64,
    lease: i64,
    freed: Arc<Notify>,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        // Only this delivery's own lease: the same message may hold a newer one by now.
        if held.get(&self.seq) == Some(&self.lease) {
            held.remove(&self.seq);
        }
        drop(held);
        self.freed.notify_one();
    }
}

/// Settlements waiting for the writer: `(seq, lease, settlement, reply)`.
type Pending = (i64, i64, Settlement, oneshot::Sender<Result<(), Unapplied>>);

/// The most settlements one transaction takes.
const MAX_BATCH: usize = 256;

/// The sending side of the group-commit writer.
#[derive(Clone)]
struct Committer {
    queue: mpsc::UnboundedSender<Pending>,
}

impl Committer {
    /// Start the writer on a blocking thread; it runs until every `Committer` is dropped.
    fn start(store: Arc<Store>) -> (Committer, tokio::task::JoinHandle<()>) {
        let (queue, mut waiting) = mpsc::unbounded_channel::<Pending>();
        let writer = tokio::task::spawn_blocking(move || {
            while let Some(first) = waiting.blocking_recv() {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match waiting.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                write(&store, batch);
            }
        });
        (Committer { queue }, writer)
    }

    /// Write the settlement of message `seq` under `lease`; resolves once it is durable.
    async fn settle(&self, seq: i64, lease: i64, settlement: Settlement) -> Result<(), Unapplied> {
        let (done, written) = oneshot::channel();
        self.queue
            .send((seq, lease, settlement, done))
            .map_err(|_| Unapplied::Failed("the settlement writer has stopped".into()))?;
        written
            .await
            .map_err(|_| Unapplied::Failed("the settlement writer stopped before writing".into()))?
    }
}

/// One transaction for the batch; each sender hears its own outcome.
fn write(store: &Store, batch: Vec<Pending>) {
    let items: Vec<(i64, i64, &Settlement)> = batch
        .iter()
        .map(|(seq, lease, s, _)| (*seq, *lease, s))
        .collect();
    let outcomes: Vec<Result<(), Unwritten>> = match store.settle(&items, store.now_ms()) {
        Ok(results) => results
            .into_iter()
            .map(|r| r.map_err(|e| Unwritten::of(&e)))
            .collect(),
        Err(e) => {
            let why = Unwritten::of(&e);
            items.iter().map(|_| Err(why.clone())).collect()
        }
    };
    drop(items);
    for ((_, _, settlement, done), outcome) in batch.into_iter().zip(outcomes) {
        let _ = done.send(outcome.map_err(|why| match why {
            Unwritten::Fenced => Unapplied::Fenced,
            Unwritten::Failed(e) => Unapplied::Failed(e),
            // Handed back to its delivery, to be written again.
            Unwritten::Unreachable(error) => Unapplied::Unreachable {
                error,
                settlement: Box::new(settlement),
            },
        }));
    }
}

/// Why one settlement of a batch was not written, before it is handed back.
#[derive(Clone)]
enum Unwritten {
    Fenced,
    Failed(String),
    Unreachable(String),
}

impl Unwritten {
    fn of(e: &StoreError) -> Unwritten {
        match e {
            StoreError::Fenced { .. } => Unwritten::Fenced,
            e if e.is_unreachable() => Unwritten::Unreachable(e.to_string()),
            e => Unwritten::Failed(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> Vec<String> {
        vec!["invoices".to_string(), "orders".to_string()]
    }

    #[test]
    fn the_topic_list_is_kept_until_a_wake_or_its_age_says_read_it_again() {
        let mut topics = TopicList::default();
        assert_eq!(topics.fresh(0), None, "nothing read yet");
        topics.read(list(), 3);
        assert_eq!(topics.fresh(3), Some(list()));
        // A publish or replay woke the loop since: the list may lack the topic it named.
        assert_eq!(topics.fresh(4), None);
        topics.read(list(), 4);
        topics.forget();
        assert_eq!(
            topics.fresh(4),
            None,
            "a claim that found nothing forgets it"
        );
        let old = Instant::now()
            .checked_sub(TOPICS_FRESH)
            .expect("the machine has been up longer than TOPICS_FRESH");
        topics.cached = Some((list(), old, 4));
        assert_eq!(topics.fresh(4), None, "too old");
    }
}
