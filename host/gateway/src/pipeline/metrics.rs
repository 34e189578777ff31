//! The pipeline's counters and latency histogram, labelled by route (its topic pattern, so
//! cardinality is bounded by the config) - never by message data.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::Observer;
use crate::model::Handled;
use verdict_runtime::Decision;

pub(crate) type Labels = Vec<(&'static str, String)>;
/// Labels known at compile time: nothing to allocate per observation.
type StaticLabels = [(&'static str, &'static str); 2];

/// Deliveries, verdicts applied and delivery latency.
#[derive(Debug, Clone)]
pub struct PipelineMetrics {
    pub(crate) deliveries: Family<Labels, Counter>,
    pub(crate) latency: Family<Labels, Histogram, fn() -> Histogram>,
    pub(crate) applied: Family<Labels, Counter>,
    pub(crate) decide: Family<Labels, Histogram, fn() -> Histogram>,
    pub(crate) batches: Family<Labels, Histogram, fn() -> Histogram>,
    pub(crate) handling: Family<StaticLabels, Histogram, fn() -> Histogram>,
    pub(crate) faults: Family<StaticLabels, Counter>,
    pub(crate) budget_held: Family<Labels, Counter>,
    pub(crate) consumer_tls: Family<Labels, Counter>,
    pub(crate) key_mismatches: Family<[(&'static str, &'static str); 1], Counter>,
    pub(crate) route_paused: Family<Labels, Gauge>,
    pub(crate) route_pauses: Family<Labels, Counter>,
    pub(crate) parked_keys: Family<Labels, Gauge>,
    pub(crate) parked_keys_full: Family<Labels, Gauge>,
    /// Topics whose delivery statistics are kept (bounded: see `TopicWindows`).
    pub(crate) topics_tracked: Gauge,
    totals: Arc<Totals>,
}

/// Something went wrong between a delivery and its settlement (the `reason` label of
/// `verdict_settlement_faults`). Each is handled - nothing is lost or looped - but an
/// operator should see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleFault {
    /// The delivery outlived its lease and another delivery took the message over: its
    /// outcome was not applied (the message may be delivered twice).
    LeaseLost,
    /// Processing the delivery panicked; the message went to the fallback.
    Panic,
    /// Applying the settlement failed; the message was released to be delivered again.
    Released,
    /// The message failed to settle too often and was dead-lettered by the gateway itself.
    FallbackDeadLetter,
    /// No route with a consumer took the message's topic any more (a reload removed it);
    /// the gateway dead-lettered it with kind `route.removed`.
    RouteRemoved,
}

impl SettleFault {
    /// Every fault, for the series that start at zero.
    const ALL: [SettleFault; 5] = [
        SettleFault::LeaseLost,
        SettleFault::Panic,
        SettleFault::Released,
        SettleFault::FallbackDeadLetter,
        SettleFault::RouteRemoved,
    ];

    fn name(self) -> &'static str {
        match self {
            SettleFault::LeaseLost => "lease-lost",
            SettleFault::Panic => "panic",
            SettleFault::Released => "released",
            SettleFault::FallbackDeadLetter => "fallback-dead-letter",
            SettleFault::RouteRemoved => "route-removed",
        }
    }
}

/// Process-wide sums the bench (`verdict bench`) reads: exact, unlabelled.
#[derive(Default)]
struct Totals {
    /// Nanoseconds spent deciding (policy call, guardrails, fallback), wall clock.
    decide_ns: AtomicU64,
    /// Deliveries settled for good (delivered, dead-lettered, discarded).
    finished: AtomicU64,
    /// The measurement hooks attached, if any (`verdict bench`).
    observer: OnceLock<Arc<dyn Observer>>,
}

impl std::fmt::Debug for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Totals")
            .field("decide_ns", &self.decide_ns)
            .field("finished", &self.finished)
            .field("observed", &self.observer.get().is_some())
            .finish()
    }
}

/// One route's delivery counters (handles into the families: no lookup per delivery).
#[derive(Debug, Clone)]
pub(crate) struct RouteMetrics {
    delivered: Counter,
    failed: Counter,
    delivered_latency: Histogram,
    failed_latency: Histogram,
    budget_held: Counter,
    /// The route's label and the family of TLS failures (created on the first one).
    topic: String,
    consumer_tls: Family<Labels, Counter>,
}

impl RouteMetrics {
    /// One delivery's outcome and how long the consumer took.
    pub(crate) fn delivered(&self, ok: bool, took: Duration) {
        let (count, latency) = if ok {
            (&self.delivered, &self.delivered_latency)
        } else {
            (&self.failed, &self.failed_latency)
        };
        count.inc();
        latency.observe(took.as_secs_f64());
    }

    /// A retry held back by the route's retry budget.
    pub(crate) fn held(&self) {
        self.budget_held.inc();
    }

    /// A delivery that failed in TLS with `kind`.
    pub(crate) fn tls_failed(&self, kind: &str) {
        self.consumer_tls
            .get_or_create(&vec![
                ("topic", self.topic.clone()),
                ("kind", kind.to_string()),
            ])
            .inc();
    }
}

fn decide_histogram() -> Histogram {
    // 1 us .. ~0.26 s: a warm decision is microseconds; the deadline is milliseconds.
    Histogram::new(exponential_buckets(0.000_001, 4.0, 10))
}

fn batch_histogram() -> Histogram {
    // 1 .. 64 failures per call into the policy.
    Histogram::new(exponential_buckets(1.0, 2.0, 7))
}

fn handling_histogram() -> Histogram {
    // 100 us .. ~3 s.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Default for PipelineMetrics {
    fn default() -> Self {
        PipelineMetrics {
            deliveries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            applied: Family::default(),
            decide: Family::new_with_constructor(decide_histogram),
            batches: Family::new_with_constructor(batch_histogram),
            handling: Family::new_with_constructor(handling_histogram),
            faults: Family::default(),
            budget_held: Family::default(),
            consumer_tls: Family::default(),
            key_mismatches: Family::default(),
            route_paused: Family::default(),
            route_pauses: Family::default(),
            parked_keys: Family::default(),
            parked_keys_full: Family::default(),
            topics_tracked: Gauge::default(),
            totals: Arc::default(),
        }
    }
}

impl PipelineMetrics {
    /// A copy on `source` signed with another gateway's history key.
    pub fn history_key_mismatch(&self, source: &'static str) {
        self.key_mismatches
            .get_or_create(&[("source", source)])
            .inc();
    }

    /// Copies signed with another gateway's history key so far, on every source.
    pub fn history_key_mismatches(&self) -> u64 {
        self.key_mismatches
            .get_or_create(&[("source", "rabbitmq")])
            .get()
    }

    /// One settlement fault on `source`.
    pub fn fault(&self, source: &'static str, fault: SettleFault) {
        self.faults
            .get_or_create(&[("source", source), ("reason", fault.name())])
            .inc();
    }

    /// Every settlement-fault series of `source` at zero: a fault that never happened reads
    /// 0 in a rate or an alert, not "no data".
    pub(crate) fn faults_from_zero(&self, source: &'static str) {
        for fault in SettleFault::ALL {
            let _ = self
                .faults
                .get_or_create(&[("source", source), ("reason", fault.name())]);
        }
    }

    /// Settlement faults of this kind so far, on every source.
    pub fn faults(&self, fault: SettleFault) -> u64 {
        ["embedded", "nats", "rabbitmq"]
            .iter()
            .map(|source| {
                self.faults
                    .get_or_create(&[("source", source), ("reason", fault.name())])
                    .get()
            })
            .sum()
    }

    /// A route's pause, its gauge and counter looked up once.
    pub(crate) fn route_pause(&self, route: &str) -> super::RoutePause {
        let labels = vec![("topic", route.to_string())];
        let paused = self.route_paused.get_or_create(&labels).clone();
        let pauses = self.route_pauses.get_or_create(&labels).clone();
        super::RoutePause::new(route, paused, pauses)
    }

    /// A route's delivery counters, looked up once (the pipeline keeps them per route).
    pub(crate) fn route(&self, route: &str) -> RouteMetrics {
        let labels = |outcome: &str| {
            vec![
                ("topic", route.to_string()),
                ("outcome", outcome.to_string()),
            ]
        };
        let (ok, failed) = (labels("delivered"), labels("failed"));
        // One statement each: `get_or_create` holds the family's read lock until the end of
        // its statement, and a second one in the same statement would wait for its write
        // lock forever.
        let delivered = self.deliveries.get_or_create(&ok).clone();
        let failed_count = self.deliveries.get_or_create(&failed).clone();
        let delivered_latency = self.latency.get_or_create(&ok).clone();
        let failed_latency = self.latency.get_or_create(&failed).clone();
        let budget_held = self
            .budget_held
            .get_or_create(&vec![("topic", route.to_string())])
            .clone();
        RouteMetrics {
            delivered,
            failed: failed_count,
            delivered_latency,
            failed_latency,
            budget_held,
            topic: route.to_string(),
            consumer_tls: self.consumer_tls.clone(),
        }
    }

    pub(crate) fn decided(&self, route: &str, decision: &Decision, took: Duration) {
        let labels = vec![
            ("topic", route.to_string()),
            ("policy", decision.provenance.name.clone()),
        ];
        self.decide
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.totals.decide_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// `route`'s policy was handed `failures` failures at once.
    pub(crate) fn batch(&self, route: &str, failures: usize) {
        self.batches
            .get_or_create(&vec![("topic", route.to_string())])
            .observe(failures as f64);
    }

    /// A source applied a delivery's settlement `took` after receiving it.
    pub fn handled(&self, source: &'static str, outcome: Handled, took: Duration) {
        self.handling
            .get_or_create(&[("source", source), ("outcome", outcome.name())])
            .observe(took.as_secs_f64());
        if outcome.is_final() {
            self.totals.finished.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(observer) = self.observer() {
            observer.handled(outcome, took);
        }
    }

    /// Time spent deciding since the start, all routes (wall clock).
    pub fn policy_time(&self) -> Duration {
        Duration::from_nanos(self.totals.decide_ns.load(Ordering::Relaxed))
    }

    /// Attach measurement hooks (`verdict bench`); the first attached stays. `false` when
    /// one was attached already.
    pub fn observe(&self, observer: Arc<dyn Observer>) -> bool {
        self.totals.observer.set(observer).is_ok()
    }

    /// The measurement hooks attached, if any.
    pub(crate) fn observer(&self) -> Option<&dyn Observer> {
        self.totals.observer.get().map(|o| &**o)
    }

    /// Deliveries settled for good (delivered, dead-lettered, discarded) since the start.
    pub fn finished(&self) -> u64 {
        self.totals.finished.load(Ordering::Relaxed)
    }

    pub(crate) fn verdict(&self, route: &str, decision: &Decision) {
        let action = decision.verdict.action.name();
        let labels = vec![("topic", route.to_string()), ("action", action.to_string())];
        self.applied.get_or_create(&labels).inc();
    }

    /// Register on a Prometheus registry.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "verdict_deliveries",
            "Deliveries to consumers by route and outcome",
            self.deliveries.clone(),
        );
        registry.register(
            "verdict_delivery_seconds",
            "Delivery latency (request to answer) by route and outcome",
            self.latency.clone(),
        );
        registry.register(
            "verdict_policy_decide_seconds",
            "Time to a decision (policy call, guardrails, fallback; a batch's time shared among its failures) by route and policy",
            self.decide.clone(),
        );
        registry.register(
            "verdict_policy_batch_failures",
            "Failures a route's policy was handed at a time: a policy on contract 0.2 decides together, in calls of up to 64, the failures of a topic that waited while it decided others (1 when none did, and always for older policies)",
            self.batches.clone(),
        );
        registry.register(
            "verdict_verdicts_applied",
            "Verdicts applied to failed deliveries, by route and action (retry = retries scheduled)",
            self.applied.clone(),
        );
        registry.register(
            "verdict_handling_seconds",
            "Time from a delivery's receipt from its source to its settlement applied there (consumer call, verdict, broker/store write), by source and outcome",
            self.handling.clone(),
        );
        registry.register(
            "verdict_retry_budget_held",
            "Retries held back by their route's retry budget (given back to wait, nothing spent), by route",
            self.budget_held.clone(),
        );
        registry.register(
            "verdict_consumer_tls_failures",
            "Deliveries that failed in TLS before reaching the consumer, by route and kind (tls.certificate, tls.handshake, tls.config): configuration, the gateway's or the consumer's - the message is kept, no attempt spent, until it is fixed",
            self.consumer_tls.clone(),
        );
        registry.register(
            "verdict_history_key_mismatches",
            "Retried copies signed with another gateway's history key, by source: gateways sharing queues must share `[rabbitmq] history_key_file` (attempts are counted from the copy's headers, unverified)",
            self.key_mismatches.clone(),
        );
        registry.register(
            "verdict_route_paused",
            "1 while a route is paused by a `pause` verdict (no message delivered until the pause ends, then one probe), 0 otherwise, by route",
            self.route_paused.clone(),
        );
        registry.register(
            "verdict_route_pauses",
            "Pauses a route's policy began (a probe answered with a pause begins another), by route",
            self.route_pauses.clone(),
        );
        registry.register(
            "verdict_parked_keys",
            "Keys of a route ordered by key whose oldest unfinished message has failed (waiting for its retry, given back to wait, or in flight again), holding the key's later messages back, by route (read from the store about every second)",
            self.parked_keys.clone(),
        );
        registry.register(
            "verdict_route_parked_keys_full",
            "1 while a route ordered by key is at its `max_parked_keys`: it takes only retries, no new message, until a parked key clears; 0 otherwise, by route",
            self.parked_keys_full.clone(),
        );
        registry.register(
            "verdict_topics_tracked",
            "Topics whose recent delivery statistics the gateway keeps for policies (at most 10,000: idle ones are forgotten first)",
            self.topics_tracked.clone(),
        );
        registry.register(
            "verdict_settlement_faults",
            "Deliveries whose settlement went wrong and was handled by the gateway, by source and reason (lease-lost: outcome not applied, a possible duplicate; panic; released: applying failed, delivered again; fallback-dead-letter: dead-lettered after repeated failures to settle)",
            self.faults.clone(),
        );
    }
}
