//! `verdict run` exporting traces as the standard OpenTelemetry variables alone ask: to an
//! OTLP receiver of the test's own, with the export headers they name (never in a log line),
//! refused at start for a variable it cannot use, and delivering as usual while the
//! collector is down.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{healthy_consumer, publish_batch, scratch_with_rules, wait_until};
use verdict_tests::gateway::Route;
use verdict_tests::otlp::Receiver;

/// The secret the export headers carry.
const KEY: &str = "collector-key-5d1e9a";
/// The secret a consumer URL's query carries.
const CONSUMER_KEY: &str = "consumer-key-77c0b2";

fn config(dir: &Path, consumer: &str) -> std::path::PathBuf {
    common::rules_policy()
        .set("admin.listen", "127.0.0.1:0")
        .route(Route::new(">", "rules").consumer(consumer))
        .write_toml(dir)
}

#[test]
fn the_standard_variables_alone_turn_traces_on_and_their_headers_never_reach_a_log() {
    let dir = scratch_with_rules("traces-env");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let receiver = Receiver::start(&runtime);
    let consumer = healthy_consumer();
    let config = config(
        &dir,
        &format!(
            "{}/?api_key={CONSUMER_KEY}",
            consumer.url.trim_end_matches('/')
        ),
    );
    std::fs::write(dir.join("token"), "traces-token").unwrap();
    let log = dir.join("gateway.log");
    let headers = format!("x-collector-key={KEY}");
    let gateway = common::run_logged_with_env(
        &config,
        &log,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.http_url),
            ("OTEL_EXPORTER_OTLP_HEADERS", &headers),
            ("OTEL_SERVICE_NAME", "verdict-from-env"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    publish_batch(&gateway.url, &dir, "orders", "traced", 5);
    let spans = receiver.wait_for(Duration::from_secs(30), |s| {
        s.iter()
            .filter(|s| s.name == "process orders" && s.service == "verdict-from-env")
            .count()
            == 5
    });
    let processes: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "process orders")
        .collect();
    assert_eq!(processes.len(), 5, "{spans:#?}");
    for s in &spans {
        for (key, value) in &s.attributes {
            assert!(
                !value.contains(CONSUMER_KEY),
                "{key} carries the consumer URL's key: {s:?}"
            );
        }
    }
    assert!(
        spans.iter().any(|s| s
            .attributes
            .get("url.full")
            .is_some_and(|u| u.contains("api_key="))),
        "the pushes' URL is there, its key masked: {spans:#?}"
    );
    for p in &processes {
        assert_eq!(p.attributes["verdict.outcome"], "delivered", "{p:?}");
        assert!(
            p.parent_span_id.is_empty(),
            "no producer context: a trace of its own"
        );
        assert!(p.links.is_empty(), "{p:?}");
    }
    let exports = receiver.export_headers.lock().unwrap().clone();
    assert!(
        exports
            .iter()
            .all(|h| h.get("x-collector-key").map(String::as_str) == Some(KEY)),
        "{exports:?}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || common::metric_at(
            &gateway.url,
            "verdict_trace_spans_exported_total"
        ) >= 15),
        "/metrics counts the spans the collector took"
    );
    drop(gateway);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("exporting traces over OTLP"), "{logged}");
    assert!(
        !logged.contains(KEY),
        "the export header's value is in the log:\n{logged}"
    );
}

#[test]
fn a_variable_the_gateway_cannot_use_stops_the_start_naming_it() {
    let dir = scratch_with_rules("traces-bad-env");
    let config = config(&dir, "http://127.0.0.1:9/");
    std::fs::write(dir.join("token"), "traces-token").unwrap();
    let stderr = common::refused_start(
        &config,
        "an unsupported OTLP protocol",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    assert!(
        stderr.contains("[telemetry] OTEL_EXPORTER_OTLP_PROTOCOL: `http/json` is not supported"),
        "{stderr}"
    );
    let stderr = common::refused_start(
        &config,
        "an unknown sampler",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_SAMPLER", "sometimes"),
        ],
    );
    assert!(stderr.contains("OTEL_TRACES_SAMPLER"), "{stderr}");
}

#[test]
fn a_collector_that_is_down_costs_spans_and_one_warning_never_a_delivery() {
    let dir = scratch_with_rules("traces-down");
    let consumer = healthy_consumer();
    let config = config(&dir, &consumer.url);
    std::fs::write(dir.join("token"), "traces-token").unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let log = dir.join("gateway.log");
    let gateway = common::run_logged_with_env(
        &config,
        &log,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
        ],
    );
    publish_batch(&gateway.url, &dir, "orders", "down", 50);
    assert!(
        wait_until(Duration::from_secs(30), || common::accepted(&consumer)
            == 50),
        "delivered {} of 50",
        common::accepted(&consumer)
    );
    assert!(
        wait_until(Duration::from_secs(15), || std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("traces cannot be exported")),
        "no warning about the collector"
    );
    std::thread::sleep(Duration::from_secs(1));
    let logged = std::fs::read_to_string(&log).unwrap();
    let warnings = logged
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("traces cannot be exported"))
        .count();
    assert_eq!(warnings, 1, "one warning a minute at most:\n{logged}");
    assert!(common::metric_at(&gateway.url, "verdict_trace_exports_failed_total") >= 1);
    assert_eq!(
        common::metric_at(&gateway.url, "verdict_trace_spans_exported_total"),
        0
    );
}
