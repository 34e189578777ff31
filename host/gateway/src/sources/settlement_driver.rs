//! The settlement driver: the one place that decides what becomes of a delivery whose
//! outcome cannot be applied the normal way, for every source.
//!
//! A source fetches a message, hands it to the driver for a [`Settlement`], and implements
//! two things only ([`Held`]): how to apply a settlement in its own terms, and how to give
//! the message back to be delivered later. The rules around them are written once, here:
//!
//! - **A panic never ends a delivery unsettled.** Processing that panics becomes the
//!   gateway's own dead letter ([`SettlementDriver::decide`]); a source's apply that panics
//!   counts as a failed settlement.
//! - **An unreachable source is written to again while the message is still held.** A
//!   shared store that restarts or whose connection is cut answers
//!   [`Unapplied::Unreachable`]; the same settlement is written again (100 ms doubling to
//!   2 s) for as long as the delivery's lease lasts ([`SettlementDriver::rewrite_for`]) -
//!   the consumer has answered, and its answer is applied once the store is back, instead of
//!   a redelivery and a duplicate. Writing again is safe whether or not an earlier write
//!   committed: settlements are fenced by their lease.
//! - **A settlement that keeps failing is bounded.** The message is given back to its source
//!   at once after each failure in a row until the [`MAX_SETTLE_FAILURES`]th; at that one
//!   the gateway dead-letters it itself (policy `verdict-gateway`); when even that cannot
//!   be written (the DLQ refuses),
//!   it is given back at a bounded rate (5 s doubling to 5 minutes) and counted - never
//!   redelivered in a tight loop, never dropped.
//!
//! Every outcome is counted in the same metrics under the source's name
//! (`verdict_handling_seconds`, `verdict_settlement_faults_total`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use verdict_runtime::text::Clean;

use super::settle_failures::{MAX_SETTLE_FAILURES, SettleFailures, release_delay};
use crate::model::{AttemptRecord, Delivery, Handled, Settlement};
use crate::pipeline::{Pipeline, RouteSlot, RouteTarget, SettleFault};
use crate::telemetry::DeliveryTrace;

/// Why a source did not apply a settlement.
#[derive(Debug)]
pub(crate) enum Unapplied {
    /// The message is no longer this delivery's (another took its lease over): nothing was
    /// changed, and the delivery that holds it now settles it.
    Fenced,
    /// The source could not be reached (a database restarting, a connection cut); the
    /// settlement, handed back, may be applied in a moment.
    Unreachable {
        /// What the source said.
        error: String,
        /// The settlement, to be applied again.
        settlement: Box<Settlement>,
    },
    /// Applying it failed.
    Failed(String),
}

/// A message a source holds until it is settled: how the source applies a settlement to it
/// and how it gives it back. Everything else about settling is the driver's.
pub(crate) trait Held: Send {
    /// Apply `settlement`, writing the new state before letting go of the old one (a crash
    /// between the two delivers the message twice, never zero times). A source that keeps a
    /// retried message where it is (a RabbitMQ or NATS route ordered by key) writes nothing a
    /// retry would go back to the broker through: it only notes the next attempt (NATS also
    /// writes its history), and the message stays held.
    fn apply(
        &mut self,
        settlement: Settlement,
    ) -> impl Future<Output = Result<(), Unapplied>> + Send;

    /// What names the message across its deliveries, for the bound on failed settlements
    /// (a store's sequence number, a stream's, a broker message's id). Asked only when a
    /// settlement fails, or one succeeds while some message's have failed.
    fn failure_key(&self) -> String;

    /// Give the message back to be delivered again after `wait` (zero: at once), holding
    /// none of the gateway's delivery slots meanwhile. Best effort: when this fails too, the
    /// source's own redelivery (an expired lease, an acknowledgement deadline, a closed
    /// channel) brings the message back.
    fn give_back(&mut self, wait: Duration) -> impl Future<Output = ()> + Send;
}

/// A delivery's seats ([`SettlementDriver::seats`]): its route's slot, when routed, and one
/// of the source's.
pub(crate) type Seats = (
    Option<(Arc<RouteTarget>, RouteSlot)>,
    tokio::sync::OwnedSemaphorePermit,
);

/// A delivery's settlement, with the spans of its attempt (settling ends them).
#[derive(Debug)]
pub(crate) struct Decided {
    settlement: Settlement,
    trace: DeliveryTrace,
}

impl From<Settlement> for Decided {
    /// A settlement decided outside the pipeline (a panic's dead letter), without spans.
    fn from(settlement: Settlement) -> Decided {
        Decided {
            settlement,
            trace: DeliveryTrace::off(),
        }
    }
}

/// What became of a delivery's settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Applied: what it did.
    Applied(Handled),
    /// Its settlement failed [`MAX_SETTLE_FAILURES`] times in a row: the gateway
    /// dead-lettered the message itself.
    ByGateway,
    /// Given back to the source, to be delivered again.
    GivenBack,
    /// Another delivery holds the message now; this outcome was not applied.
    Fenced,
}

/// Settles deliveries for one source: processing guarded against panics, outcomes written
/// again while the source is out of reach, and the bound on settlements that fail. Cheap
/// to clone; clones share the failure counts.
#[derive(Debug, Clone)]
pub(crate) struct SettlementDriver {
    source: &'static str,
    pipeline: Arc<Pipeline>,
    failures: SettleFailures,
    rewrite_for: Duration,
}

/// Why writing a settlement stopped.
enum Stopped {
    /// Fenced; `rewritten` when it was the settlement's second or later write.
    Fenced {
        rewritten: bool,
    },
    Failed(String),
}

impl SettlementDriver {
    /// A driver for the source named `source` (its label in metrics and logs).
    pub(crate) fn new(source: &'static str, pipeline: Arc<Pipeline>) -> SettlementDriver {
        pipeline.metrics().faults_from_zero(source);
        SettlementDriver {
            source,
            pipeline,
            failures: SettleFailures::default(),
            rewrite_for: Duration::ZERO,
        }
    }

    /// Write a settlement again while the source answers [`Unapplied::Unreachable`], for up
    /// to `hold` - how long the message stays this delivery's (a store's lease). Zero (the
    /// default) counts an unreachable source as a failed settlement at once.
    pub(crate) fn rewrite_for(mut self, hold: Duration) -> SettlementDriver {
        self.rewrite_for = hold;
        self
    }

    /// The seats a delivery of `topic` takes: a slot of its route (none when no route
    /// takes the topic now: the pipeline releases it; waiting out the route's pause, if
    /// its policy paused it), held while its consumer works on it - let go once the consumer has answered, so the route's next delivery does not
    /// wait for this one's settlement to be written - and one of the source's
    /// `max_in_flight` (`global`), held until the settlement is applied. Taken in that
    /// order, so a slow route waits on its own slots, never on the ones another route
    /// needs. `None` once the source's slots are closed.
    pub(crate) async fn seats(
        &self,
        topic: &str,
        global: &Arc<tokio::sync::Semaphore>,
    ) -> Option<Seats> {
        let route = match self.pipeline.route_target(topic) {
            Some(target) => target.slot().await.map(|slot| (target, slot)),
            None => None,
        };
        let global = global.clone().acquire_owned().await.ok()?;
        Some((route, global))
    }

    /// The pipeline it settles for.
    pub(crate) fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// The pipeline's settlement for `delivery` (in `slot` of `target`, already held, when
    /// given), or the gateway's own dead letter if processing panicked.
    pub(crate) async fn decide(
        &self,
        delivery: &Delivery,
        route: Option<(&Arc<RouteTarget>, &RouteSlot)>,
    ) -> Decided {
        let trace = self.pipeline.trace(delivery);
        let processing = async {
            match route {
                Some((target, slot)) => {
                    self.pipeline
                        .process_held(delivery, target, slot, &trace)
                        .await
                }
                None => self.pipeline.process_traced(delivery, &trace).await,
            }
        };
        let settlement = self.guarded(delivery, processing, &trace).await;
        Decided { settlement, trace }
    }

    /// `processing`'s settlement, or if it panicked the gateway's dead letter for
    /// `delivery` (a span of `trace`).
    pub(crate) async fn guarded(
        &self,
        delivery: &Delivery,
        processing: impl Future<Output = Settlement>,
        trace: &DeliveryTrace,
    ) -> Settlement {
        match AssertUnwindSafe(processing).catch_unwind().await {
            Ok(settlement) => settlement,
            Err(panic) => self.panicked(delivery, &super::panic_text(&*panic), trace),
        }
    }

    /// Handling `delivery` panicked with `cause`: counted, logged, and the gateway's dead
    /// letter for it (a span of `trace`), to be settled like any other.
    pub(crate) fn panicked(
        &self,
        delivery: &Delivery,
        cause: &str,
        trace: &DeliveryTrace,
    ) -> Settlement {
        self.pipeline
            .metrics()
            .fault(self.source, SettleFault::Panic);
        tracing::error!(
            source = self.source,
            id = %Clean(&delivery.id),
            cause = %Clean(cause),
            "handling a delivery panicked; dead-lettering the message"
        );
        self.pipeline.fallback_dead_letter(delivery, cause, trace)
    }

    /// Apply `settlement` to the message `held` holds. `seats` are the delivery slots it
    /// holds, let go before it waits to be given back; `received` is when the delivery
    /// began.
    pub(crate) async fn settle<H: Held>(
        &self,
        held: &mut H,
        delivery: &Delivery,
        decided: impl Into<Decided>,
        seats: impl Send,
        received: Instant,
    ) -> Settled {
        let Decided { settlement, trace } = decided.into();
        trace.settling();
        let settled = self
            .settle_traced(held, delivery, settlement, seats, received, &trace)
            .await;
        let (outcome, applied, letter_written) = match settled {
            Settled::Applied(handled) => (outcome_name(handled), true, true),
            Settled::ByGateway => ("dead-lettered-by-gateway", false, true),
            Settled::GivenBack => ("given-back", false, false),
            Settled::Fenced => ("fenced", false, false),
        };
        trace.settled(outcome, applied, letter_written);
        settled
    }

    async fn settle_traced<H: Held>(
        &self,
        held: &mut H,
        delivery: &Delivery,
        settlement: Settlement,
        seats: impl Send,
        received: Instant,
        trace: &DeliveryTrace,
    ) -> Settled {
        let handled = settlement.handled();
        match self.apply_while_held(held, settlement).await {
            Ok(()) => {
                if self.failures.any() {
                    self.failures.settled(&held.failure_key());
                }
                self.pipeline
                    .metrics()
                    .handled(self.source, handled, received.elapsed());
                Settled::Applied(handled)
            }
            Err(Stopped::Fenced { rewritten: false }) => {
                self.pipeline
                    .metrics()
                    .fault(self.source, SettleFault::LeaseLost);
                tracing::warn!(
                    source = self.source,
                    id = %Clean(&delivery.id),
                    "a delivery outlived its lease and another delivery took the message over; \
                     this outcome is not applied (the consumer may see the message twice)"
                );
                Settled::Fenced
            }
            // Which of the two cannot be told from here; a takeover is audited by the store
            // (`lease-expired`) either way.
            Err(Stopped::Fenced { rewritten: true }) => {
                tracing::info!(
                    source = self.source,
                    id = %Clean(&delivery.id),
                    "an outcome written again once the store was back found its message no \
                     longer held: its first write had committed before the connection broke, \
                     or the lease ran out and another delivery took the message over"
                );
                Settled::Fenced
            }
            Err(Stopped::Failed(error)) => {
                self.failed(held, delivery, &error, seats, received, trace)
                    .await
            }
        }
    }

    /// Apply `settlement`; while the source cannot be reached, again every little while for
    /// up to [`SettlementDriver::rewrite_for`].
    async fn apply_while_held<H: Held>(
        &self,
        held: &mut H,
        settlement: Settlement,
    ) -> Result<(), Stopped> {
        let mut waited = Duration::ZERO;
        let mut pause = Duration::from_millis(100);
        let mut settlement = settlement;
        loop {
            match apply_once(held, settlement).await {
                Ok(()) => return Ok(()),
                Err(Unapplied::Fenced) => {
                    return Err(Stopped::Fenced {
                        rewritten: !waited.is_zero(),
                    });
                }
                Err(Unapplied::Failed(error)) => return Err(Stopped::Failed(error)),
                Err(Unapplied::Unreachable {
                    error,
                    settlement: back,
                }) => {
                    if waited + pause >= self.rewrite_for {
                        return Err(Stopped::Failed(error));
                    }
                    if waited.is_zero() {
                        tracing::warn!(
                            source = self.source,
                            error = %Clean(&error),
                            "the store cannot be reached; the delivery's outcome is written \
                             again while its lease lasts"
                        );
                    }
                    settlement = *back;
                    tokio::time::sleep(pause).await;
                    waited += pause;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// A settlement could not be applied: give the message back at once, until the
    /// [`MAX_SETTLE_FAILURES`]th failure in a row; at that one dead-letter it through the
    /// gateway's fallback; when even that fails, give it back at the bounded rate of
    /// [`release_delay`]. The gateway's dead letter is a span of `trace`, in place of the
    /// policy's that could not be written.
    async fn failed<H: Held>(
        &self,
        held: &mut H,
        delivery: &Delivery,
        error: &str,
        seats: impl Send,
        received: Instant,
        trace: &DeliveryTrace,
    ) -> Settled {
        let key = held.failure_key();
        let failed = self.failures.failed(&key);
        let metrics = self.pipeline.metrics();
        if failed >= MAX_SETTLE_FAILURES {
            let letter = self.pipeline.fallback_dead_letter(delivery, error, trace);
            if apply_once(held, letter).await.is_ok() {
                self.failures.settled(&key);
                metrics.fault(self.source, SettleFault::FallbackDeadLetter);
                metrics.handled(self.source, Handled::DeadLettered, received.elapsed());
                tracing::error!(
                    source = self.source,
                    id = %Clean(&delivery.id),
                    error = %Clean(error),
                    "a message could not be settled repeatedly; dead-lettered by the gateway"
                );
                return Settled::ByGateway;
            }
        }
        let wait = release_delay(failed);
        metrics.fault(self.source, SettleFault::Released);
        tracing::error!(
            source = self.source,
            id = %Clean(&delivery.id),
            error = %Clean(error),
            failed,
            retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "applying a delivery's outcome failed; the message is delivered again"
        );
        drop(seats);
        // A panic here leaves the message to the source's own redelivery, like any failure
        // to give it back.
        let _ = AssertUnwindSafe(held.give_back(wait)).catch_unwind().await;
        Settled::GivenBack
    }
}

/// What a settlement that was applied did, as traces name it.
fn outcome_name(handled: Handled) -> &'static str {
    match handled {
        Handled::Delivered => "delivered",
        Handled::Again => "retry-scheduled",
        Handled::DeadLettered => "dead-lettered",
        Handled::Discarded => "discarded",
        Handled::Released => "released",
    }
}

/// [`Held::apply`], a panic in it counted as a failure.
async fn apply_once<H: Held>(held: &mut H, settlement: Settlement) -> Result<(), Unapplied> {
    AssertUnwindSafe(held.apply(settlement))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            Err(Unapplied::Failed(format!(
                "panicked: {}",
                super::panic_text(&*panic)
            )))
        })
}

/// The next attempt a settlement asks for - the failure it adds to the history (with
/// whether it spends an attempt) and the delay - or `None` for a final settlement: what a
/// source that keeps a retried message in place (RabbitMQ, NATS or Kafka ordered by key, Kafka
/// blocking) or writes a retry copy (RabbitMQ's buckets) carries to the next attempt.
pub(crate) fn next_attempt(
    settlement: &Settlement,
) -> Option<(Option<(&AttemptRecord, bool)>, u64)> {
    match settlement {
        Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        } => Some((Some((failed, *spend_attempt)), *delay_ms)),
        Settlement::Release { delay_ms } => Some((None, *delay_ms)),
        Settlement::Delivered | Settlement::DeadLetter { .. } | Settlement::Discard { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::model::AttemptRecord;

    /// The fake source counts under a real source's name: the metrics sum those.
    const SOURCE: &str = "embedded";

    /// What the fake source does at each apply.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Ok,
        Fenced,
        Unreachable,
        Fail,
        Panic,
    }

    /// A source that applies as scripted and remembers what it was asked.
    #[derive(Default)]
    struct Fake {
        script: VecDeque<Step>,
        /// What each apply was asked to do.
        asked: Vec<Handled>,
        /// The policy each dead letter asked for names.
        letters: Vec<String>,
        given_back: Vec<Duration>,
        /// Seats still held when the message was given back.
        seats_at_give_back: Vec<usize>,
        seats: Option<Arc<()>>,
        key: &'static str,
    }

    impl Fake {
        fn new(script: &[Step]) -> Fake {
            Fake {
                script: script.iter().copied().collect(),
                key: "m-1",
                ..Fake::default()
            }
        }
    }

    impl Held for Fake {
        async fn apply(&mut self, settlement: Settlement) -> Result<(), Unapplied> {
            self.asked.push(settlement.handled());
            if let Settlement::DeadLetter { letter, .. } = &settlement {
                let envelope: serde_json::Value =
                    serde_json::from_slice(&letter.envelope).unwrap_or_default();
                self.letters
                    .push(envelope["policy"]["name"].as_str().unwrap_or("").into());
            }
            match self.script.pop_front().unwrap_or(Step::Ok) {
                Step::Ok => Ok(()),
                Step::Fenced => Err(Unapplied::Fenced),
                Step::Unreachable => Err(Unapplied::Unreachable {
                    error: "connection refused".into(),
                    settlement: Box::new(settlement),
                }),
                Step::Fail => Err(Unapplied::Failed("the broker refused it".into())),
                Step::Panic => panic!("the source's apply panicked"),
            }
        }

        fn failure_key(&self) -> String {
            self.key.into()
        }

        async fn give_back(&mut self, wait: Duration) {
            self.given_back.push(wait);
            let held = self.seats.as_ref().map_or(0, |s| Arc::strong_count(s) - 1);
            self.seats_at_give_back.push(held);
        }
    }

    /// A directory of the test's own, removed with it.
    struct Scratch(std::path::PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A real pipeline (an embedded store, no routes): the driver's fallback letters and
    /// metrics are the pipeline's own.
    fn pipeline() -> (Arc<Pipeline>, Scratch) {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = Scratch(
            std::env::temp_dir().join(format!("verdict-driver-{}-{n}", std::process::id())),
        );
        std::fs::create_dir_all(&dir.0).unwrap();
        let store = Arc::new(crate::store::Store::open(&dir.0.join("s.db")).unwrap());
        let config =
            verdict_registry::GatewayConfig::parse("[policies]\n", "verdict.toml").unwrap();
        let registry = Arc::new(verdict_registry::Registry::new(&config, &dir.0).unwrap());
        let pipeline = Pipeline::new(store, registry, config.gateway.clone()).unwrap();
        (Arc::new(pipeline), dir)
    }

    fn delivery() -> Delivery {
        Delivery {
            id: "m-1".into(),
            topic: "orders".into(),
            ..Delivery::default()
        }
    }

    fn retry() -> Settlement {
        Settlement::Again {
            failed: AttemptRecord {
                at_ms: 1,
                kind: "http.503".into(),
                message: String::new(),
            },
            delay_ms: 100,
            spend_attempt: true,
        }
    }

    async fn settle(driver: &SettlementDriver, fake: &mut Fake, s: Settlement) -> Settled {
        let seats = Arc::new(());
        fake.seats = Some(seats.clone());
        driver
            .settle(fake, &delivery(), s, seats, Instant::now())
            .await
    }

    #[tokio::test]
    async fn an_applied_settlement_is_counted_as_what_it_did() {
        let (pipeline, _dir) = pipeline();
        let driver = SettlementDriver::new(SOURCE, pipeline.clone());
        let mut fake = Fake::new(&[Step::Ok]);
        assert_eq!(
            settle(&driver, &mut fake, retry()).await,
            Settled::Applied(Handled::Again)
        );
        assert_eq!(fake.asked, [Handled::Again]);
        assert!(fake.given_back.is_empty());
        assert_eq!(pipeline.metrics().faults(SettleFault::Released), 0);
    }

    #[tokio::test]
    async fn processing_that_panics_becomes_the_gateways_dead_letter() {
        let (pipeline, _dir) = pipeline();
        let driver = SettlementDriver::new(SOURCE, pipeline.clone());
        let settlement = driver
            .guarded(
                &delivery(),
                async { panic!("a bug in processing") },
                &DeliveryTrace::off(),
            )
            .await;
        let Settlement::DeadLetter { failed, letter } = &settlement else {
            panic!("{settlement:?}");
        };
        assert_eq!(failed.kind, "gateway.fault");
        assert!(
            String::from_utf8_lossy(&letter.envelope).contains("a bug in processing"),
            "the cause is in the letter"
        );
        assert_eq!(pipeline.metrics().faults(SettleFault::Panic), 1);
        let mut fake = Fake::new(&[Step::Ok]);
        assert_eq!(
            settle(&driver, &mut fake, settlement).await,
            Settled::Applied(Handled::DeadLettered)
        );
        assert_eq!(fake.letters, ["verdict-gateway"]);
    }

    #[tokio::test]
    async fn a_fenced_settlement_is_a_lost_lease_unless_it_was_written_again() {
        let (pipeline, _dir) = pipeline();
        let driver =
            SettlementDriver::new(SOURCE, pipeline.clone()).rewrite_for(Duration::from_secs(5));
        let mut fake = Fake::new(&[Step::Fenced]);
        assert_eq!(settle(&driver, &mut fake, retry()).await, Settled::Fenced);
        assert_eq!(pipeline.metrics().faults(SettleFault::LeaseLost), 1);
        // Fenced on the second write: the first may have committed as its connection broke.
        let mut fake = Fake::new(&[Step::Unreachable, Step::Fenced]);
        assert_eq!(settle(&driver, &mut fake, retry()).await, Settled::Fenced);
        assert_eq!(fake.asked.len(), 2);
        assert_eq!(pipeline.metrics().faults(SettleFault::LeaseLost), 1);
        assert!(fake.given_back.is_empty(), "nothing to give back: not ours");
    }

    #[tokio::test]
    async fn an_unreachable_source_is_written_again_while_the_message_is_held() {
        let (pipeline, _dir) = pipeline();
        let held =
            SettlementDriver::new(SOURCE, pipeline.clone()).rewrite_for(Duration::from_secs(5));
        let mut fake = Fake::new(&[Step::Unreachable, Step::Unreachable, Step::Ok]);
        assert_eq!(
            settle(&held, &mut fake, retry()).await,
            Settled::Applied(Handled::Again)
        );
        assert_eq!(
            fake.asked,
            [Handled::Again; 3],
            "the same settlement each time"
        );
        assert_eq!(pipeline.metrics().faults(SettleFault::Released), 0);
        // Past the hold (or with none, as on a broker), it is a failed settlement.
        let brief =
            SettlementDriver::new(SOURCE, pipeline.clone()).rewrite_for(Duration::from_millis(250));
        let mut fake = Fake::new(&[Step::Unreachable; 4]);
        assert_eq!(settle(&brief, &mut fake, retry()).await, Settled::GivenBack);
        assert_eq!(
            fake.asked.len(),
            2,
            "written at 0 and 100 ms; 300 ms is past the hold"
        );
        let none = SettlementDriver::new(SOURCE, pipeline.clone());
        let mut fake = Fake::new(&[Step::Unreachable]);
        assert_eq!(settle(&none, &mut fake, retry()).await, Settled::GivenBack);
        assert_eq!(fake.given_back, [Duration::ZERO]);
    }

    #[tokio::test]
    async fn failing_settlements_are_given_back_then_dead_lettered_by_the_gateway() {
        let (pipeline, _dir) = pipeline();
        let driver = SettlementDriver::new(SOURCE, pipeline.clone());
        // A failure and a panic in apply count alike.
        for step in [Step::Fail, Step::Panic] {
            let mut fake = Fake::new(&[step]);
            assert_eq!(
                settle(&driver, &mut fake, retry()).await,
                Settled::GivenBack
            );
            assert_eq!(fake.given_back, [Duration::ZERO], "given back at once");
            assert_eq!(fake.seats_at_give_back, [0], "its slots let go first");
        }
        // The third failure in a row: the gateway's own dead letter instead.
        let mut fake = Fake::new(&[Step::Fail, Step::Ok]);
        assert_eq!(
            settle(&driver, &mut fake, retry()).await,
            Settled::ByGateway
        );
        assert_eq!(fake.asked, [Handled::Again, Handled::DeadLettered]);
        assert_eq!(fake.letters, ["verdict-gateway"]);
        assert!(fake.given_back.is_empty());
        assert_eq!(
            pipeline.metrics().faults(SettleFault::FallbackDeadLetter),
            1
        );
        // Settled, the message starts over.
        let mut fake = Fake::new(&[Step::Fail]);
        assert_eq!(
            settle(&driver, &mut fake, retry()).await,
            Settled::GivenBack
        );
        assert_eq!(fake.given_back, [Duration::ZERO]);
    }

    #[tokio::test]
    async fn when_not_even_the_gateways_dead_letter_is_written_the_message_waits_longer_each_time()
    {
        let (pipeline, _dir) = pipeline();
        let driver = SettlementDriver::new(SOURCE, pipeline.clone());
        let mut waits = Vec::new();
        for _ in 0..6 {
            let mut fake = Fake::new(&[Step::Fail, Step::Fail]);
            assert_eq!(
                settle(&driver, &mut fake, retry()).await,
                Settled::GivenBack
            );
            waits.extend(fake.given_back.iter().map(Duration::as_secs));
        }
        assert_eq!(waits, [0, 0, 5, 10, 20, 40]);
        assert_eq!(pipeline.metrics().faults(SettleFault::Released), 6);
        assert_eq!(
            pipeline.metrics().faults(SettleFault::FallbackDeadLetter),
            0
        );
        // Another message is not held back by this one's failures.
        let mut other = Fake {
            key: "m-2",
            ..Fake::new(&[Step::Fail])
        };
        let seats = Arc::new(());
        let settled = driver
            .settle(&mut other, &delivery(), retry(), seats, Instant::now())
            .await;
        assert_eq!(
            (settled, other.given_back),
            (Settled::GivenBack, vec![Duration::ZERO])
        );
    }
}
