//! The gateway's pipeline, shared by every source: deliver a message to its route's consumer
//! and, on failure, ask the route's policy for a verdict and turn it into a
//! [`Settlement`](crate::model::Settlement) (with the dead-letter envelope built here, the
//! same for every source). The sources claim messages and apply settlements; deliveries of one route run up to
//! its consumer's `concurrency` at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

use crate::envelope::{Context, Envelope, MessageRef};
use crate::health::{BrokerDlqs, Readiness};
use crate::model::{AttemptRecord, DeadLetter, Delivery, Settlement};
use crate::store::Store;
use crate::telemetry::{DeliveryTrace, Tracing};
use verdict_registry::{ConsumerConfig, GatewaySection, Registry};
use verdict_runtime::{Action, Contract, Decision, Failure};

mod combiner;
mod delivery;
mod failure;
mod metrics;
mod observer;
mod parked_keys;
mod retry_budget;
mod route_pause;
mod topic_windows;

pub use crate::clock::now_ms;
use combiner::Combiner;
pub use delivery::{Consumer, deliver};
pub use delivery::{DeliveryError, MAX_ERROR_BODY_BYTES, REJECT_HEADER};
#[cfg(test)]
pub(crate) use delivery::{classify, forwardable};
use failure::{Observed, failure_of};
use metrics::RouteMetrics;
pub use metrics::{PipelineMetrics, SettleFault};
pub use observer::Observer;
pub use parked_keys::Parked;
use parked_keys::ParkedKeys;
use retry_budget::{BudgetGate, Gate, HoldLedger};
pub use route_pause::PauseStatus;
use route_pause::{Admission, Outcome, RoutePause};
use topic_windows::TopicWindows;

/// A message the pipeline could not route is looked at again after this long.
pub const UNROUTED_RETRY_MS: u64 = 5_000;

/// A message whose delivery failed in TLS (configuration) is tried again after this long.
pub const MISCONFIGURED_RETRY_MS: u64 = 10_000;

/// The kind of the dead letter of a message that followed its key's dead letter to the DLQ
/// (`on_dead_letter = "dead-letter-key"`).
pub const KEY_DEAD_LETTERED: &str = "key.dead-lettered";

/// Delivers messages and turns failures into settlements.
pub struct Pipeline {
    store: Arc<Store>,
    registry: Arc<Registry>,
    settings: GatewaySection,
    stats: TopicWindows,
    metrics: PipelineMetrics,
    wake: Notify,
    /// How many times [`Pipeline::wake`] was called: a claim loop that caches its topic
    /// list reads it again once this moved (a publish may have named a new topic).
    wakes: AtomicU64,
    routes: Mutex<HashMap<String, Arc<RouteTarget>>>,
    sources: Mutex<Vec<Readiness>>,
    broker_dlqs: BrokerDlqs,
    holds: HoldLedger,
    /// Keys parked per route ordered by key, as the embedded source last read them.
    parked: ParkedKeys,
    /// Failures of a topic waiting while its policy decides others, decided next in one
    /// batch (contract 0.2 policies).
    decisions: Combiner<Failure, Option<(Decision, Duration)>>,
    tracing: Tracing,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline over `store`, deciding with `registry`.
    pub fn new(
        store: Arc<Store>,
        registry: Arc<Registry>,
        settings: GatewaySection,
    ) -> Result<Pipeline, reqwest::Error> {
        let metrics = PipelineMetrics::default();
        let parked = ParkedKeys::new(
            metrics.parked_keys.clone(),
            metrics.parked_keys_full.clone(),
        );
        Ok(Pipeline {
            store,
            registry,
            settings,
            stats: TopicWindows::new(metrics.topics_tracked.clone()),
            metrics,
            wake: Notify::new(),
            wakes: AtomicU64::new(0),
            routes: Mutex::new(HashMap::new()),
            sources: Mutex::new(Vec::new()),
            broker_dlqs: BrokerDlqs::default(),
            holds: HoldLedger::default(),
            parked,
            decisions: Combiner::default(),
            tracing: Tracing::off(),
        })
    }

    /// The same pipeline making its spans with `tracing`.
    pub fn with_tracing(mut self, tracing: Tracing) -> Pipeline {
        self.tracing = tracing;
        self
    }

    /// What spans are made with (off unless `[telemetry]` or the environment turned it on).
    pub fn tracing(&self) -> &Tracing {
        &self.tracing
    }

    /// The spans of one delivery attempt of `delivery` begin (nothing when telemetry is
    /// off).
    pub(crate) fn trace(&self, delivery: &Delivery) -> DeliveryTrace {
        DeliveryTrace::begin(&self.tracing, delivery, &self.settings.consumer_group)
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Delivery counters (registered on `/metrics`).
    pub fn metrics(&self) -> &PipelineMetrics {
        &self.metrics
    }

    /// Look for due messages now (after a publish), instead of at the next poll.
    pub fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::Release);
        self.wake.notify_one();
    }

    /// How many times [`Pipeline::wake`] was called so far.
    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Acquire)
    }

    /// Notified by [`Pipeline::wake`].
    pub(crate) fn woken(&self) -> &Notify {
        &self.wake
    }

    /// The registry the pipeline decides with (its generation's routes are what the
    /// sources consume).
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Broker sources' connection states (what `/readyz` reports).
    pub fn sources(&self) -> Vec<Readiness> {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Register a broker source's connection state.
    pub fn add_source(&self, ready: Readiness) {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ready);
    }

    /// The broker DLQs' depths and ingress (what `/metrics` reports for them).
    pub fn broker_dlqs(&self) -> &BrokerDlqs {
        &self.broker_dlqs
    }

    /// The `[gateway]` settings.
    pub fn settings(&self) -> &GatewaySection {
        &self.settings
    }

    /// The route a message on `topic` is delivered on now: `None` when no route with a
    /// consumer takes the topic.
    pub(crate) fn route_target(&self, topic: &str) -> Option<Arc<RouteTarget>> {
        let generation = self.registry.current();
        generation
            .route(topic)
            .and_then(|r| Some(self.target(&r.topic, r.consumer.as_ref()?)))
    }

    /// The delivery target of the route whose pattern is `route` (as configured), if it
    /// has a consumer now.
    pub(crate) fn route_target_of(&self, route: &str) -> Option<Arc<RouteTarget>> {
        let generation = self.registry.current();
        generation
            .routes
            .iter()
            .find(|r| r.topic == route)
            .and_then(|r| Some(self.target(&r.topic, r.consumer.as_ref()?)))
    }

    /// Deliver `message` to its route's consumer and, when that fails, ask the route's
    /// policy: what the source must do with it now. Never fails. A message no route with a
    /// consumer takes any more - a reload removed its route, or the route's consumer, while
    /// it waited for a retry - is dead-lettered by the gateway with kind `route.removed`
    /// (replayable once a route takes its topic again), never held or dropped: every source
    /// only asks for messages of topics a route took when they were published.
    pub async fn process(&self, message: &Delivery) -> Settlement {
        self.process_traced(message, &DeliveryTrace::off()).await
    }

    /// [`Pipeline::process`], its spans in `trace`.
    pub(crate) async fn process_traced(
        &self,
        message: &Delivery,
        trace: &DeliveryTrace,
    ) -> Settlement {
        let Some(target) = self.route_target(&message.topic) else {
            return self.route_removed(message, trace);
        };
        let Some(slot) = target.slot().await else {
            return Settlement::Release {
                delay_ms: UNROUTED_RETRY_MS,
            };
        };
        self.process_held(message, &target, &slot, trace).await
    }

    /// [`Pipeline::process`] for a caller that already holds one of `target`'s slots (a
    /// source that takes messages per route, only as many as the route has room for).
    pub(crate) async fn process_held(
        &self,
        message: &Delivery,
        target: &RouteTarget,
        slot: &RouteSlot,
        trace: &DeliveryTrace,
    ) -> Settlement {
        trace.route(&target.topic);
        // A pause that began while this delivery waited for the source's own slots stops
        // it too: given back untouched, nothing spent, the consumer not called.
        if let Err(delay_ms) = target.pause.still_admits(&slot.admission) {
            return Settlement::Release { delay_ms };
        }
        if message.after_dead_letter && self.dead_letters_key(&message.topic) {
            return self.key_dead_lettered(message, trace);
        }
        let budget = self.retry_budget_of(&message.topic);
        let mut admitted_retry = None;
        if let Some((budget, max_wait_ms)) = &budget {
            let now = now_ms();
            match target.budget.ask(budget, message, now, *max_wait_ms) {
                Gate::Go { retry } => admitted_retry = retry.then_some(now),
                Gate::Hold { delay_ms } => {
                    target.metrics.held();
                    self.holds.held(message, delay_ms);
                    return Settlement::Release { delay_ms };
                }
            }
        }
        let attempt = message.attempts_spent.saturating_add(1);
        let started = Instant::now();
        let result = delivery::deliver_traced(&target.consumer, message, attempt, trace).await;
        target.metrics.delivered(result.is_ok(), started.elapsed());
        match &result {
            Err(error) if error.is_configuration() => return self.misconfigured(target, error),
            Err(_) => {}
            Ok(()) => target.health.clear_warning(),
        }
        if let (Some((budget, _)), Some(admitted), true) = (&budget, admitted_retry, result.is_ok())
        {
            target.budget.succeeded(budget, admitted, now_ms());
        }
        let settlement = self
            .judge(message, result, target, &slot.admission, trace)
            .await;
        if settlement.handled().is_final() && !matches!(settlement, Settlement::DeadLetter { .. }) {
            // Dead letters took theirs into the envelope.
            let _ = self.holds.take(message);
        }
        settlement
    }

    /// A delivery that failed in TLS: the gateway's configuration or the consumer's
    /// certificate, which no retry heals and no policy should judge. The message is kept
    /// (released, no attempt spent) and the route reported - `/readyz`, a metric, a warning
    /// a minute - until the configuration is fixed; the DLQ does not fill with messages that
    /// never reached the consumer.
    fn misconfigured(&self, target: &RouteTarget, error: &DeliveryError) -> Settlement {
        target.metrics.tls_failed(&error.kind);
        let text = format!(
            "route `{}`: deliveries fail before reaching the consumer ({}): {}",
            target.topic, error.kind, error.message
        );
        if target.health.warn(text) {
            tracing::warn!(
                route = %target.topic,
                kind = %error.kind,
                error = %error.message,
                "deliveries to this route's consumer fail in TLS: its messages are kept \
                 (no attempt spent) until the TLS settings or the consumer's certificate are fixed"
            );
        }
        Settlement::Release {
            delay_ms: MISCONFIGURED_RETRY_MS,
        }
    }

    /// Whether the parked keys are to be read: a route of the active generation orders by
    /// key, or counts of one that no longer does are still kept.
    pub(crate) fn reads_parked_keys(&self) -> bool {
        self.parked.tracked()
            || self
                .registry
                .current()
                .routes
                .iter()
                .any(|r| r.key_header.is_some())
    }

    /// The store's parked keys per topic, read just now: summed per route, the gauges set.
    pub(crate) fn parked_keys_read(&self, per_topic: &[(String, u64)]) {
        self.parked.read(&self.registry.current(), per_topic);
    }

    /// A broker source's count of the parked keys of the route `route`, which it holds
    /// itself (a RabbitMQ or NATS route ordered by key), as it changes.
    pub(crate) fn parked_keys_held(&self, route: &str, keys: u64) {
        self.parked.held(route, keys);
    }

    /// Count one key of `route` parked until the guard is dropped (a Kafka partition whose
    /// record waits out a retry in place).
    pub(crate) fn parked_while(self: &Arc<Self>, route: &str) -> parked_keys::Parking {
        parked_keys::Parking::new(self.clone(), route)
    }

    /// `route` counts its parked keys itself, from 0 if it had none counted yet.
    pub(crate) fn parked_keys_counted(&self, route: &str) {
        self.parked.step(route, None);
    }

    /// The parked keys of the route whose pattern is `route`, if it orders by key and the
    /// embedded source has read them or a broker source counted them.
    pub fn parked_keys(&self, route: &str) -> Option<Parked> {
        self.parked.of(route)
    }

    /// The pause of the route whose pattern is `route`, if its policy paused it.
    pub fn route_pause(&self, route: &str) -> Option<PauseStatus> {
        let routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        routes.get(route)?.pause.status()
    }

    /// What an operator must fix about the routes' consumers (`/readyz` shows them).
    pub fn consumer_warnings(&self) -> Vec<String> {
        let routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut warnings: Vec<String> =
            routes.values().filter_map(|t| t.health.warning()).collect();
        warnings.sort();
        warnings
    }

    /// The retry budget of the route `topic` takes now, with how long a message may fail
    /// before the budget stops holding it (the guardrails' `max_deferral_age_ms`).
    fn retry_budget_of(&self, topic: &str) -> Option<(verdict_runtime::RetryBudget, u64)> {
        let generation = self.registry.current();
        let guardrails = &generation.route(topic)?.decider.settings().guardrails;
        Some((guardrails.retry_budget?, guardrails.max_deferral_age_ms))
    }

    /// The settlement for one delivery's outcome: delivered, or the verdict applied.
    async fn judge(
        &self,
        message: &Delivery,
        result: Result<(), DeliveryError>,
        target: &RouteTarget,
        admission: &Admission,
        trace: &DeliveryTrace,
    ) -> Settlement {
        let route_topic = target.topic.as_str();
        // The store's clock (a shared database's), not this gateway's: attempt times, dead
        // letters and what the policy sees agree across a fleet whose clocks differ.
        let now = self.store.now_ms();
        let stats = self.stats.record(&message.topic, now, result.is_err());
        let error = match result {
            Ok(()) => {
                target.pause.answered(admission, Outcome::Other);
                return Settlement::Delivered;
            }
            Err(error) => error,
        };
        let failure = failure_of(
            message,
            &error,
            Observed {
                now_ms: now,
                stats,
                route_topic,
                settings: &self.settings,
            },
        );
        let decided = self.decide(&message.topic, route_topic, failure).await;
        let Some((decision, took)) = decided else {
            // The route went away between delivery and verdict: nothing spent, try later.
            return Settlement::Release {
                delay_ms: UNROUTED_RETRY_MS,
            };
        };
        let failed = AttemptRecord {
            at_ms: now,
            kind: error.kind,
            message: error.message,
        };
        self.metrics.decided(route_topic, &decision, took);
        self.metrics.verdict(route_topic, &decision);
        let outcome = match decision.verdict.action {
            Action::Pause(ms) => Outcome::Pause(ms),
            _ => Outcome::Other,
        };
        target.pause.answered(admission, outcome);
        trace.decided(&decision);
        self.settlement(message, failed, &decision, now, trace)
    }

    /// The route's decision on `failure` and the time it took (a batch's time shared
    /// among its failures). A policy on contract 0.2 decides the failures of a topic that
    /// wait while it decides another in one batch next (never waiting to fill one: see
    /// `combiner`); an older policy takes one per call, as it can only. `None` when no
    /// route takes the topic any more.
    async fn decide(
        &self,
        topic: &str,
        route_topic: &str,
        failure: Failure,
    ) -> Option<(Decision, Duration)> {
        let batches = self
            .registry
            .current()
            .route(topic)
            .is_some_and(|r| r.decider.policy().contract() >= Contract::V0_2);
        if !batches {
            let asked = Instant::now();
            let decision = self.observed(|| self.registry.decide(topic, &failure))?;
            self.metrics.batch(route_topic, 1);
            return Some((decision, asked.elapsed()));
        }
        let decide = |failures: &[Failure]| {
            let asked = Instant::now();
            let decisions = self
                .observed(|| self.registry.decide_batch(topic, failures))
                .unwrap_or_default();
            self.metrics.batch(route_topic, failures.len());
            let share = asked.elapsed() / u32::try_from(failures.len().max(1)).unwrap_or(u32::MAX);
            decisions.into_iter().map(|d| Some((d, share))).collect()
        };
        self.decisions.decide(topic, failure, decide).await
    }

    /// `decide()` under the measurement hooks, when `verdict bench` attached them.
    fn observed<T: Default>(&self, decide: impl FnOnce() -> T) -> T {
        let Some(observer) = self.metrics.observer() else {
            return decide();
        };
        let mut decide = Some(decide);
        let mut out = None;
        observer.decision(&mut || {
            if let Some(decide) = decide.take() {
                out = Some(decide());
            }
        });
        // An observer that did not call it still gets the decision made.
        out.or_else(|| decide.take().map(|decide| decide()))
            .unwrap_or_default()
    }

    fn settlement(
        &self,
        message: &Delivery,
        failed: AttemptRecord,
        decision: &Decision,
        now: u64,
        trace: &DeliveryTrace,
    ) -> Settlement {
        let again = |delay_ms, spend_attempt, failed| Settlement::Again {
            failed,
            delay_ms,
            spend_attempt,
        };
        match decision.verdict.action {
            Action::Retry(ms) => again(ms, true, failed),
            // The message waits out the pause as a delay would (a deferral, no attempt);
            // `judge` stopped the route.
            Action::Delay(ms) | Action::Pause(ms) => again(ms, false, failed),
            Action::Discard => Settlement::Discard {
                failed,
                reason: decision.verdict.reason.clone(),
            },
            Action::DeadLetter => {
                let dlq = self
                    .settings
                    .dlq_naming
                    .dlq_for(&message.topic, &self.settings.global_dlq);
                let history = message.history_with(&failed);
                let mut envelope = Envelope::new(
                    MessageRef {
                        topic: &message.topic,
                        id: &message.id,
                        headers: &message.headers,
                        payload: &message.payload,
                        content_type: message.content_type.as_deref(),
                    },
                    &history,
                    decision,
                    Context {
                        dlq: &dlq,
                        consumer_group: &self.settings.consumer_group,
                        gateway: &self.settings.instance,
                        now_ms: now,
                    },
                );
                envelope.retry_budget = self.holds.take(message);
                envelope.trace = trace.dead_letter(&dlq);
                let format = self.settings.dlq_format;
                let envelope = match envelope.encode(format) {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        // Encoding our own struct cannot fail in practice; if it ever does,
                        // keep the message (retried later) rather than lose it.
                        tracing::error!(error = %e, id = %message.id, "encoding a dead letter failed; holding the message");
                        return Settlement::Release {
                            delay_ms: UNROUTED_RETRY_MS,
                        };
                    }
                };
                Settlement::DeadLetter {
                    failed,
                    letter: DeadLetter {
                        dlq,
                        class: verdict_runtime::class_name(decision.verdict.class).to_string(),
                        reason: decision.verdict.reason.clone(),
                        format: crate::envelope::format_name(format),
                        envelope,
                    },
                }
            }
        }
    }

    /// Whether the route of `topic` - that very topic, not a pattern or default route taking
    /// it - orders its messages by key (`ordering = "key"`).
    pub(crate) fn orders_by_key(&self, topic: &str) -> bool {
        self.registry
            .current()
            .route(topic)
            .is_some_and(|r| r.ordered && r.topic == topic)
    }

    /// Whether the route `topic` takes sends a key's later messages after its dead letter
    /// (`on_dead_letter = "dead-letter-key"`).
    fn dead_letters_key(&self, topic: &str) -> bool {
        self.registry
            .current()
            .route(topic)
            .is_some_and(|r| r.dead_letters_key)
    }

    /// A keyed message whose key's previous message is a dead letter, on a route that
    /// dead-letters whole keys: the gateway's own dead letter, kind `key.dead-lettered`,
    /// the consumer not called. Each follower gets its own envelope; the key flows again
    /// once an operator replays (or discards) its dead letters.
    fn key_dead_lettered(&self, message: &Delivery, trace: &DeliveryTrace) -> Settlement {
        self.gateway_dead_letter(
            message,
            KEY_DEAD_LETTERED,
            "an earlier message of its key is dead-lettered, and this route dead-letters the \
             key's later messages with it (on_dead_letter = \"dead-letter-key\"): replay or \
             discard the key's dead letters to let it flow again",
            None,
            trace,
        )
    }

    /// A message whose route is gone: the gateway's own dead letter, kind `route.removed`.
    pub(crate) fn route_removed(&self, message: &Delivery, trace: &DeliveryTrace) -> Settlement {
        use verdict_runtime::text::Clean;
        self.metrics
            .fault(message.source, SettleFault::RouteRemoved);
        tracing::warn!(
            topic = %Clean(&message.topic),
            id = %Clean(&message.id),
            "no route with a consumer takes this topic any more (a reload removed it); \
             dead-lettering the message (kind route.removed) - replay it once a route takes the topic"
        );
        let topic = verdict_runtime::text::one_line(&message.topic, 256);
        self.gateway_dead_letter(
            message,
            "route.removed",
            &format!(
                "no route with a consumer takes topic `{topic}` any more: its route was removed \
                 or lost its consumer while the message waited"
            ),
            None,
            trace,
        )
    }

    /// The dead letter the gateway writes on its own authority when a delivery cannot be
    /// settled the normal way (processing panicked, or settling failed too often): class
    /// `unknown`, kind `gateway.fault`, the cause as the reason, the gateway as the policy.
    /// Never panics: if even the full envelope cannot be built, a minimal JSON one is.
    /// The dead letter is a span of `trace` like any other.
    pub(crate) fn fallback_dead_letter(
        &self,
        message: &Delivery,
        cause: &str,
        trace: &DeliveryTrace,
    ) -> Settlement {
        let cause =
            verdict_runtime::text::one_line(cause, verdict_runtime::text::MAX_MESSAGE_BYTES);
        let reason = format!("the gateway could not settle this message: {cause}");
        let fault = verdict_runtime::Fault::Trap {
            message: cause.clone(),
        };
        self.gateway_dead_letter(message, "gateway.fault", &reason, Some(fault), trace)
    }

    /// A dead letter of class `unknown` decided by the gateway itself (the gateway as the
    /// policy): `kind` and `reason` say why. Never panics.
    fn gateway_dead_letter(
        &self,
        message: &Delivery,
        kind: &str,
        reason: &str,
        fault: Option<verdict_runtime::Fault>,
        trace: &DeliveryTrace,
    ) -> Settlement {
        let now = self.store.now_ms();
        let reason = reason.to_string();
        let failed = AttemptRecord {
            at_ms: now,
            kind: kind.into(),
            message: verdict_runtime::text::one_line(
                &reason,
                verdict_runtime::text::MAX_MESSAGE_BYTES,
            ),
        };
        let decision = Decision {
            verdict: verdict_runtime::Verdict::dead_letter(verdict_runtime::Class::Unknown)
                .because(reason.clone()),
            provenance: Arc::new(verdict_runtime::Provenance {
                name: "verdict-gateway".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                sha256: String::new(),
            }),
            generation: None,
            fallback: fault,
            clamps: Vec::new(),
        };
        let full = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.settlement(message, failed.clone(), &decision, now, trace)
        }));
        match full {
            Ok(settlement @ Settlement::DeadLetter { .. }) => settlement,
            _ => {
                let dlq = self
                    .settings
                    .dlq_naming
                    .dlq_for(&message.topic, &self.settings.global_dlq);
                let envelope = serde_json::json!({
                    "original": {
                        "topic": message.topic,
                        "id": message.id,
                        "payloadBase64": base64::Engine::encode(
                            &base64::engine::general_purpose::STANDARD,
                            &message.payload,
                        ),
                    },
                    "verdict": {"action": "dead-letter", "class": "unknown", "reason": reason},
                    "deadLetteredAtMs": now,
                });
                Settlement::DeadLetter {
                    failed,
                    letter: DeadLetter {
                        dlq,
                        class: "unknown".into(),
                        reason,
                        format: "json",
                        envelope: envelope.to_string().into_bytes(),
                    },
                }
            }
        }
    }

    /// The route's delivery target: kept across generations while its consumer is the same
    /// (so its concurrency bound holds across reloads), made anew when it changes.
    fn target(&self, route: &str, consumer: &ConsumerConfig) -> Arc<RouteTarget> {
        let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(target) = routes.get(route)
            && target.consumer.is(consumer)
        {
            return target.clone();
        }
        // A new consumer for the route keeps its pause: the policy paused the route, not
        // the endpoint.
        let pause = match routes.get(route) {
            Some(old) => old.pause.clone(),
            None => Arc::new(self.metrics.route_pause(route)),
        };
        let target = Arc::new(RouteTarget {
            topic: route.to_string(),
            consumer: Consumer::new(consumer),
            slots: Arc::new(Semaphore::new(consumer.concurrency.max(1))),
            ahead: Arc::new(Semaphore::new(consumer.concurrency.max(1))),
            metrics: self.metrics.route(route),
            budget: BudgetGate::default(),
            health: Readiness::new("consumer"),
            pause,
        });
        routes.insert(route.to_string(), target.clone());
        target
    }
}

impl RouteTarget {
    /// Deliveries of the route in flight at most (its consumer's `concurrency`).
    pub(crate) fn concurrency(&self) -> usize {
        self.consumer.concurrency()
    }

    /// A delivery slot of the route, waiting for one - and, while the route is paused,
    /// for the pause to end (see [`RoutePause`]). The pause is asked after the slot, and
    /// asked again right before the delivery starts (a pause may begin while a delivery
    /// waits for the source's `max_in_flight`). `None` once the route's slots are closed.
    pub(crate) async fn slot(&self) -> Option<RouteSlot> {
        let slot = self.slots.clone().acquire_owned().await.ok()?;
        let admission = self.pause.admit().await;
        Some(RouteSlot {
            _slot: slot,
            admission,
        })
    }

    /// A delivery slot of the route if one is free and the route is not paused.
    pub(crate) fn try_slot(&self) -> Option<RouteSlot> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        let admission = self.pause.try_admit().ok()?;
        Some(RouteSlot {
            _slot: slot,
            admission,
        })
    }

    /// Whether the route takes messages freely now (no pause, no probe pending): a source
    /// that takes messages ahead of their slots takes none for a route that is not.
    pub(crate) fn is_open(&self) -> bool {
        self.pause.is_open()
    }

    /// The route's pattern, as configured.
    pub(crate) fn route(&self) -> &str {
        &self.topic
    }

    /// Until when the route is paused, if it is.
    pub(crate) fn pause_status(&self) -> Option<PauseStatus> {
        self.pause.status()
    }
}

/// One delivery's place on its route: a slot of its `concurrency`, and leave from the
/// route's pause (a probe's, given back if the delivery never happens). Held while the
/// consumer works on the delivery.
#[derive(Debug)]
pub(crate) struct RouteSlot {
    _slot: tokio::sync::OwnedSemaphorePermit,
    admission: Admission,
}

/// Where a route's deliveries go, and how many may be in flight.
pub(crate) struct RouteTarget {
    /// The route's topic (pattern), for metric labels.
    topic: String,
    consumer: Consumer,
    /// One per delivery in flight on the route (its consumer's `concurrency`).
    pub(crate) slots: Arc<Semaphore>,
    /// One per message the embedded store claimed ahead for the route, waiting for a slot
    /// (as many as its `concurrency`).
    pub(crate) ahead: Arc<Semaphore>,
    metrics: RouteMetrics,
    /// What the route spent against its retry budget (kept with the target, so a reload
    /// that keeps the consumer keeps the window).
    budget: BudgetGate,
    /// A consumer every delivery fails to reach (TLS), as `/readyz` shows it.
    health: Readiness,
    /// Whether the route's policy paused it (kept when the consumer changes).
    pause: Arc<RoutePause>,
}
