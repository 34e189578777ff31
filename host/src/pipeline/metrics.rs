//! The pipeline's counters and latency histogram, labelled by route (its topic pattern, so
//! cardinality is bounded by the config) - never by message data.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::{Action, Decision};

type Labels = Vec<(&'static str, String)>;

/// Deliveries, verdicts applied and delivery latency.
#[derive(Debug, Clone)]
pub struct PipelineMetrics {
    pub(crate) deliveries: Family<Labels, Counter>,
    pub(crate) latency: Family<Labels, Histogram, fn() -> Histogram>,
    pub(crate) applied: Family<Labels, Counter>,
    pub(crate) decide: Family<Labels, Histogram, fn() -> Histogram>,
}

fn decide_histogram() -> Histogram {
    // 1 us .. ~0.26 s: a warm decision is microseconds; the deadline is milliseconds.
    Histogram::new(exponential_buckets(0.000_001, 4.0, 10))
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
        }
    }
}

impl PipelineMetrics {
    pub(crate) fn delivered(&self, route: &str, ok: bool, took: Duration) {
        let outcome = if ok { "delivered" } else { "failed" };
        let labels = vec![
            ("topic", route.to_string()),
            ("outcome", outcome.to_string()),
        ];
        self.deliveries.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub(crate) fn decided(&self, route: &str, decision: &Decision, took: Duration) {
        let labels = vec![
            ("topic", route.to_string()),
            ("policy", decision.provenance.name.clone()),
        ];
        self.decide
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub(crate) fn verdict(&self, route: &str, decision: &Decision) {
        let action = match decision.verdict.action {
            Action::Retry(_) => "retry",
            Action::Delay(_) => "delay",
            Action::DeadLetter => "dead-letter",
            Action::Discard => "discard",
        };
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
            "Time to a decision (policy call, guardrails, fallback) by route and policy",
            self.decide.clone(),
        );
        registry.register(
            "verdict_verdicts_applied",
            "Verdicts applied to failed deliveries, by route and action (retry = retries scheduled)",
            self.applied.clone(),
        );
    }
}
