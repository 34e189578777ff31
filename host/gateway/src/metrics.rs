//! Prometheus exposition of the registry: read at scrape time from the counters decisions
//! already keep, so metrics cost the hot path nothing. Labels are the route's topic pattern,
//! policy, action and class - never payload data, never an unbounded value.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::health::BrokerDlqs;
use crate::pipeline::PipelineMetrics;
use crate::store::Store;
use verdict_registry::Registry;

/// The `/metrics` page of a gateway: the registry's collector plus whatever else registers.
pub struct Metrics {
    registry: prometheus_client::registry::Registry,
    admin: AdminCounters,
}

/// What the admin listener counts about the requests it refuses.
#[derive(Debug, Clone, Default)]
pub struct AdminCounters {
    /// Requests naming a host the listener does not answer to (421).
    pub misdirected_requests: prometheus_client::metrics::counter::Counter,
    /// Wrong credentials presented (bearer tokens and console logins).
    pub auth_failures: prometheus_client::metrics::counter::Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The content type of [`Metrics::render`].
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Metrics {
    /// Metrics of `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        let mut metrics = prometheus_client::registry::Registry::default();
        metrics.register_collector(Box::new(RegistryCollector(registry)));
        let admin = AdminCounters::default();
        metrics.register(
            "verdict_admin_misdirected_requests",
            "Admin requests refused (421) because their Host named no address this listener answers to (a DNS rebinding attempt, or a proxy missing from [admin] allowed_hosts)",
            admin.misdirected_requests.clone(),
        );
        metrics.register(
            "verdict_admin_auth_failures",
            "Wrong admin credentials presented (bearer tokens and console logins); past 10 a second every credential gets 429 for the rest of it",
            admin.auth_failures.clone(),
        );
        Metrics {
            registry: metrics,
            admin,
        }
    }

    /// The admin listener's counters.
    pub fn admin(&self) -> &AdminCounters {
        &self.admin
    }

    /// Add the gateway's: deliveries and verdicts applied, and the store's message states and
    /// DLQs (read at scrape time, so `/metrics` always equals the store).
    pub fn with_gateway(
        mut self,
        registry: Arc<Registry>,
        store: Arc<Store>,
        pipeline: &PipelineMetrics,
        brokers: BrokerDlqs,
    ) -> Self {
        pipeline.register(&mut self.registry);
        self.registry.register_collector(Box::new(StoreCollector {
            store,
            registry,
            brokers,
        }));
        self
    }

    /// Add what the trace exporter sent and failed to send (a gateway with traces on).
    pub fn with_telemetry(mut self, counts: Arc<verdict_telemetry::ExportCounts>) -> Self {
        self.registry
            .register_collector(Box::new(TelemetryCollector(counts)));
        self
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

struct RegistryCollector(Arc<Registry>);

impl std::fmt::Debug for RegistryCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RegistryCollector")
    }
}

/// One metric family: a descriptor, then one sample per label set.
fn family<V: Copy, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help): (&str, &str),
    series: &[(Vec<(&str, &str)>, V)],
    sample: impl Fn(V) -> M,
    kind: prometheus_client::metrics::MetricType,
) -> std::fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in series {
        sample(*value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(Vec<(&str, &str)>, u64)],
) -> std::fmt::Result {
    use prometheus_client::metrics::MetricType::Counter;
    family(encoder, (name, help), series, ConstCounter::new, Counter)
}

/// The trace exporter's counts, read at scrape time.
#[derive(Debug)]
struct TelemetryCollector(Arc<verdict_telemetry::ExportCounts>);

impl Collector for TelemetryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        use std::sync::atomic::Ordering::Relaxed;
        counter(
            &mut encoder,
            "verdict_trace_spans_exported",
            "Spans the OTLP collector accepted",
            &[(Vec::new(), self.0.exported_spans.load(Relaxed))],
        )?;
        counter(
            &mut encoder,
            "verdict_trace_exports_failed",
            "Batches of spans the OTLP collector did not take (their spans are dropped; deliveries never wait for a collector)",
            &[(Vec::new(), self.0.failed_exports.load(Relaxed))],
        )
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(Vec<(&str, &str)>, i64)],
) -> std::fmt::Result {
    use prometheus_client::metrics::MetricType::Gauge;
    family(encoder, (name, help), series, ConstGauge::new, Gauge)
}

impl Collector for RegistryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let registry = &self.0;
        let generation = registry.current();
        let mut decisions = Vec::new();
        let mut faults = Vec::new();
        let mut clamps = Vec::new();
        let stats: Vec<_> = generation
            .routes
            .iter()
            .map(|r| (r, r.decider.stats()))
            .collect();
        for (route, stats) in &stats {
            let base = [
                ("topic", route.topic.as_str()),
                ("policy", route.policy.as_str()),
            ];
            for v in &stats.by_verdict {
                let mut labels = base.to_vec();
                labels.extend([("action", v.action), ("class", v.class)]);
                decisions.push((labels, v.count));
            }
            faults.push((base.to_vec(), stats.faults));
            clamps.push((base.to_vec(), stats.clamped));
        }
        counter(
            &mut encoder,
            "verdict_decisions",
            "Decisions by route, policy, action and class",
            &decisions,
        )?;
        counter(
            &mut encoder,
            "verdict_policy_faults",
            "Decisions where the policy faulted and the route's fallback verdict applied",
            &faults,
        )?;
        counter(
            &mut encoder,
            "verdict_guardrail_clamps",
            "Decisions a guardrail changed",
            &clamps,
        )?;

        let reports = registry.shadow_report();
        let mut compared = Vec::new();
        let mut disagreements = Vec::new();
        for r in &reports {
            let base = [
                ("topic", r.topic.as_str()),
                ("policy", r.active.as_str()),
                ("shadow", r.shadow.as_str()),
            ];
            compared.push((base.to_vec(), r.compared));
            for (class, n) in &r.by_class {
                let mut labels = base.to_vec();
                labels.push(("class", class.as_str()));
                disagreements.push((labels, *n));
            }
        }
        counter(
            &mut encoder,
            "verdict_shadow_comparisons",
            "Decisions a shadow policy was compared on",
            &compared,
        )?;
        counter(
            &mut encoder,
            "verdict_shadow_disagreements",
            "Shadow decisions whose action or class differed, by the active verdict's class",
            &disagreements,
        )?;

        let status = registry.status();
        counter(
            &mut encoder,
            "verdict_registry_changes",
            "Registry changes (reloads, activations, rollbacks) by outcome",
            &[
                (vec![("outcome", "applied")], status.reloads),
                (vec![("outcome", "refused")], status.refused),
            ],
        )?;
        let cache = registry.cache_stats();
        counter(
            &mut encoder,
            "verdict_component_loads",
            "Components loaded by the serving engine, by how",
            &[
                (vec![("outcome", "compiled")], cache.compiled),
                (vec![("outcome", "cache_hit")], cache.hits),
                (vec![("outcome", "cache_rejected")], cache.rejected),
            ],
        )?;
        let gauge = ConstGauge::new(i64::try_from(generation.number).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "verdict_registry_generation",
            "The active generation's number",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

struct StoreCollector {
    store: Arc<Store>,
    registry: Arc<Registry>,
    brokers: BrokerDlqs,
}

impl std::fmt::Debug for StoreCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreCollector")
    }
}

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let now = crate::clock::now_ms();
        // A store that cannot be read shows as missing series, not as a failed scrape.
        let (Ok(dlqs), Ok(counts)) = (self.store.dlq_stats(), self.store.counts()) else {
            tracing::warn!("metrics: the store could not be read");
            return Ok(());
        };
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let generation = self.registry.current();
        // One row per DLQ: the store's, then the brokers' (as last read from the broker).
        let mut rows: Vec<DlqRow> = dlqs
            .into_iter()
            .map(|d| DlqRow {
                source: "embedded",
                oldest_at_ms: (d.depth > 0).then_some(d.oldest_at_ms),
                dlq: d.dlq,
                topic: d.topic,
                depth: d.depth,
                ingress: d.ingress,
            })
            .collect();
        rows.extend(
            self.brokers
                .snapshot()
                .into_iter()
                .map(|(source, dlq, d)| DlqRow {
                    source,
                    dlq,
                    topic: d.topic,
                    depth: d.depth,
                    oldest_at_ms: None,
                    ingress: d.ingress,
                }),
        );
        let core = |topic: &str| {
            if generation.route(topic).is_some_and(|r| r.core) {
                "true"
            } else {
                "false"
            }
        };
        let depth: Vec<_> = rows
            .iter()
            .map(|d| {
                let mut labels = d.labels();
                labels.push(("core", core(&d.topic)));
                (labels, as_i64(d.depth))
            })
            .collect();
        gauge(
            &mut encoder,
            "verdict_dlq_depth",
            "Dead letters waiting, by DLQ, source topic and source (brokers' as they count them)",
            &depth,
        )?;
        let age: Vec<_> = rows
            .iter()
            .filter_map(|d| {
                let oldest = d.oldest_at_ms?;
                Some((d.labels(), as_i64(now.saturating_sub(oldest) / 1_000)))
            })
            .collect();
        gauge(
            &mut encoder,
            "verdict_dlq_oldest_age_seconds",
            "Age of the oldest dead letter, by DLQ and source topic (embedded store)",
            &age,
        )?;
        let ingress: Vec<_> = rows.iter().map(|d| (d.labels(), d.ingress)).collect();
        counter(
            &mut encoder,
            "verdict_dlq_ingress",
            "Dead letters written (replayed and discarded ones too; for a broker, by this \
             process), by DLQ and source topic",
            &ingress,
        )?;
        let states = [
            ("ready", counts.ready),
            ("scheduled", counts.scheduled),
            ("leased", counts.leased),
            ("delivered", counts.delivered),
            ("dead", counts.dead),
            ("discarded", counts.discarded),
        ];
        let series: Vec<_> = states
            .iter()
            .map(|(state, n)| (vec![("state", *state)], as_i64(*n)))
            .collect();
        gauge(
            &mut encoder,
            "verdict_messages",
            "Messages in the store by state",
            &series,
        )
    }
}

struct DlqRow {
    source: &'static str,
    dlq: String,
    topic: String,
    depth: u64,
    oldest_at_ms: Option<u64>,
    ingress: u64,
}

impl DlqRow {
    fn labels(&self) -> Vec<(&str, &str)> {
        vec![
            ("dlq", self.dlq.as_str()),
            ("topic", self.topic.as_str()),
            ("source", self.source),
        ]
    }
}
