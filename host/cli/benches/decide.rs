//! Decision cost: every shipped policy through the host against the same logic called
//! natively through the SDK; a warm reused instance against a fresh pooled instance per
//! decision; fuel metering off and on; `rules` built for contract 0.1 against 0.2, one
//! decision per call against a batch of 32 in one call. Criterion reports each; a summary at
//! the end prints the ratios measured in this same run.
//!
//! Run: `cargo bench -p verdict-cli --bench decide` (the policies are built first, into a
//! target directory of their own).

mod common;

use common::{ns, percentiles};

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use serde_json::json;
use verdict_runtime::{Decider, Failure, FailureSpec, Host, Limits, TopicSettings};
use verdict_sdk::{AttemptRecord, Policy, TopicStats, Verdict};

/// One policy under test: its crate, its config, a representative failure, and the same
/// logic called natively.
struct Case {
    name: &'static str,
    config: &'static str,
    kind: &'static str,
    native: fn(&str) -> NativeDecide,
}

/// The policy's `decide`, called directly.
type NativeDecide = Box<dyn Fn(&verdict_sdk::Failure) -> Verdict>;

fn native<P: Policy>(config: &str) -> NativeDecide {
    let policy: P = verdict_sdk::instantiate(config).expect("bench config is valid");
    Box::new(move |f| policy.decide(f))
}

const CASES: [Case; 4] = [
    Case {
        name: "rules",
        config: r#"{"max_attempts": 5}"#,
        kind: "db.timeout",
        native: native::<rules::Rules>,
    },
    Case {
        name: "rocketmq",
        config: "{}",
        kind: "http.503",
        native: native::<rocketmq::RocketMq>,
    },
    Case {
        name: "adaptive",
        config: "{}",
        kind: "http.503",
        native: native::<adaptive::Adaptive>,
    },
    Case {
        name: "payments",
        config: "{}",
        kind: "gateway.503",
        native: native::<payments::Payments>,
    },
];

const PAYLOAD: &str = r#"{"schema_version":2,"amount":129.5,"currency":"EUR","order":"o-7781","customer":"c-1203","items":[{"sku":"A-1","qty":2},{"sku":"B-9","qty":1}]}"#;

fn host_failure(kind: &str) -> Failure {
    FailureSpec::from_json(
        &json!({
            "topic": "payments.captured", "message-id": "m-000123", "consumer-group": "capture",
            "attempt": 2, "first-failed-at-ms": 1_000, "now-ms": 61_000, "jitter-seed": 42,
            "error": {"kind": kind, "message": "dial tcp 10.0.0.7:5432: i/o timeout"},
            "history": [{"at-ms": 1_000, "kind": kind, "message": "dial tcp: i/o timeout"}],
            "headers": {"traceparent": "00-abc-def-01", "content-type": "application/json"},
            "payload": PAYLOAD,
            "stats": {"window-ms": 60_000, "deliveries": 200, "failures": 30, "consecutive-failures": 2}
        })
        .to_string(),
    )
    .expect("bench failure is valid")
    .into_failure()
}

fn native_failure(kind: &str) -> verdict_sdk::Failure {
    verdict_sdk::Failure::new(kind)
        .with_attempt(2)
        .with_first_failed_at_ms(1_000)
        .with_now_ms(61_000)
        .with_jitter_seed(42)
        .with_topic("payments.captured")
        .with_message_id("m-000123")
        .with_error_message("dial tcp 10.0.0.7:5432: i/o timeout")
        .with_history(vec![AttemptRecord {
            at_ms: 1_000,
            kind: kind.into(),
            message: "dial tcp: i/o timeout".into(),
        }])
        .with_header("traceparent", "00-abc-def-01")
        .with_payload(PAYLOAD.as_bytes().to_vec())
        .with_stats(TopicStats {
            window_ms: 60_000,
            deliveries: 200,
            failures: 30,
            consecutive_failures: 2,
        })
}

fn components() -> Vec<PathBuf> {
    CASES
        .iter()
        .map(|c| common::component(&format!("policies/{}", c.name)))
        .collect()
}

/// The hosts compared: warm reused instances (the default), a fresh pooled instance per
/// decision, and fuel metering on.
struct Hosts {
    warm: Host,
    fresh: Host,
    fuel: Host,
}

fn hosts() -> Hosts {
    let warm = Host::new(&Limits::new()).expect("default limits");
    let fresh = Host::new(Limits::new().warm_instances(0)).expect("fresh limits");
    let fuel = Host::new(Limits::new().fuel_per_decision(Some(10_000_000))).expect("fuel limits");
    Hosts { warm, fresh, fuel }
}

fn decider(host: &Host, path: &Path, config: &str) -> Decider {
    host.load_file(path)
        .expect("loads")
        .configure(config, TopicSettings::default())
        .expect("configures")
}

fn bench(c: &mut Criterion) {
    let paths = components();
    let hosts = hosts();
    for (case, path) in CASES.iter().zip(&paths) {
        let mut group = c.benchmark_group(format!("decide/{}", case.name));
        let nf = native_failure(case.kind);
        let native = (case.native)(case.config);
        group.bench_function("native", |b| b.iter(|| native(black_box(&nf))));
        let hf = host_failure(case.kind);
        let warm = decider(&hosts.warm, path, case.config);
        group.bench_function("wasm-reused", |b| b.iter(|| warm.decide(black_box(&hf))));
        let fuel = decider(&hosts.fuel, path, case.config);
        group.bench_function("wasm-reused-fuel", |b| {
            b.iter(|| fuel.decide(black_box(&hf)));
        });
        let fresh = decider(&hosts.fresh, path, case.config);
        group.bench_function("wasm-fresh-instance", |b| {
            b.iter(|| fresh.decide(black_box(&hf)));
        });
        group.finish();
    }
}

/// The boundary alone: the hostile guest in `ok` mode returns a constant verdict, so its
/// time is the host's per-call floor (lowering, call, lifting, guardrails).
fn floor(hosts: &Hosts) {
    let path = common::component("tests/guests/hostile");
    let warm = decider(&hosts.warm, &path, r#"{"mode": "ok"}"#);
    let hf = host_failure("db.timeout");
    let (p50, p99) = percentiles(500, 200, || {
        black_box(warm.decide(black_box(&hf)));
    });
    println!(
        "{:<10} {:>10} {:>10} {:>10}   (constant verdict: the per-call floor)",
        "floor",
        "-",
        ns(p50),
        ns(p99)
    );
}

fn summary() {
    let paths = components();
    let hosts = hosts();
    println!(
        "\nsummary (same run; p50 per decision unless marked 99 = p99, over 200 batches; ratio = wasm / native):"
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>7} {:>10} {:>7} {:>10} {:>7}",
        "policy", "native", "reused", "reused99", "ratio", "fuel", "ratio", "fresh", "ratio"
    );
    for (case, path) in CASES.iter().zip(&paths) {
        let nf = native_failure(case.kind);
        let native = (case.native)(case.config);
        let hf = host_failure(case.kind);
        let warm = decider(&hosts.warm, path, case.config);
        let fuel = decider(&hosts.fuel, path, case.config);
        let fresh = decider(&hosts.fresh, path, case.config);
        let (n50, _) = percentiles(2_000, 200, || {
            black_box(native(black_box(&nf)));
        });
        let (w50, w99) = percentiles(500, 200, || {
            black_box(warm.decide(black_box(&hf)));
        });
        let (f50, _) = percentiles(500, 200, || {
            black_box(fuel.decide(black_box(&hf)));
        });
        let (x50, _) = percentiles(10, 200, || {
            black_box(fresh.decide(black_box(&hf)));
        });
        let ratio = |d: Duration| d.as_secs_f64() / n50.as_secs_f64().max(1e-12);
        println!(
            "{:<10} {:>10} {:>10} {:>10} {:>6.1}x {:>10} {:>6.1}x {:>10} {:>6.0}x",
            case.name,
            ns(n50),
            ns(w50),
            ns(w99),
            ratio(w50),
            ns(f50),
            ratio(f50),
            ns(x50),
            ratio(x50)
        );
    }
    floor(&hosts);
    contracts(&hosts);
}

/// Failures a batch carries in the contracts table.
const BATCH: usize = 32;

/// `rules` on each contract: one decision per call on 0.1 and on 0.2, and 0.2's
/// `decide-batch` with 32 failures per call (per decision), against the native call.
fn contracts(hosts: &Hosts) {
    let case = &CASES[0];
    let nf = native_failure(case.kind);
    let native = (case.native)(case.config);
    let hf = host_failure(case.kind);
    let current = decider(
        &hosts.warm,
        &common::component("policies/rules"),
        case.config,
    );
    let previous = decider(
        &hosts.warm,
        &common::component("tests/guests/rules-v0-1"),
        case.config,
    );
    let batch: Vec<Failure> = (0..BATCH).map(|_| hf.clone()).collect();
    let (n50, _) = percentiles(2_000, 200, || {
        black_box(native(black_box(&nf)));
    });
    let (old50, old99) = percentiles(500, 200, || {
        black_box(previous.decide(black_box(&hf)));
    });
    let (new50, new99) = percentiles(500, 200, || {
        black_box(current.decide(black_box(&hf)));
    });
    let (b50, b99) = percentiles(20, 200, || {
        black_box(current.decide_batch(black_box(&batch)));
    });
    // The same with the constant-verdict guest: what a decision costs the boundary alone,
    // one per call and in a batch.
    let floor = decider(
        &hosts.warm,
        &common::component("tests/guests/hostile"),
        r#"{"mode": "ok"}"#,
    );
    let (f50, f99) = percentiles(500, 200, || {
        black_box(floor.decide(black_box(&hf)));
    });
    let (fb50, fb99) = percentiles(20, 200, || {
        black_box(floor.decide_batch(black_box(&batch)));
    });
    let per = |d: Duration| d / u32::try_from(BATCH).unwrap_or(1);
    let ratio = |d: Duration| d.as_secs_f64() / n50.as_secs_f64().max(1e-12);
    println!(
        "\ncontracts (rules, same run; p50 and p99 per decision; ratio = wasm / native {}):",
        ns(n50)
    );
    println!("{:<22} {:>10} {:>10} {:>7}", "", "p50", "p99", "ratio");
    for (name, p50, p99) in [
        ("0.1 one per call", old50, old99),
        ("0.2 one per call", new50, new99),
        ("0.2 batch of 32", per(b50), per(b99)),
        ("floor, one per call", f50, f99),
        ("floor, batch of 32", per(fb50), per(fb99)),
    ] {
        println!(
            "{:<22} {:>10} {:>10} {:>6.1}x",
            name,
            ns(p50),
            ns(p99),
            ratio(p50)
        );
    }
    // For a profiler: keep making one of the calls above for a while (`perf record` on the
    // bench with `-- NOMATCH`), so that call is most of the samples.
    // `VERDICT_BENCH_PROFILE=<row>:<seconds>`, the row one of `0.1`, `0.2`, `batch`,
    // `floor`, `floor-batch`.
    if let Some((row, seconds)) = std::env::var("VERDICT_BENCH_PROFILE").ok().and_then(|v| {
        let (row, seconds) = v.split_once(':')?;
        Some((row.to_owned(), seconds.parse::<u64>().ok()?))
    }) {
        let until = std::time::Instant::now() + Duration::from_secs(seconds);
        while std::time::Instant::now() < until {
            for _ in 0..100 {
                match row.as_str() {
                    "0.1" => drop(black_box(previous.decide(black_box(&hf)))),
                    "0.2" => drop(black_box(current.decide(black_box(&hf)))),
                    "batch" => drop(black_box(current.decide_batch(black_box(&batch)))),
                    "floor" => drop(black_box(floor.decide(black_box(&hf)))),
                    "floor-batch" => drop(black_box(floor.decide_batch(black_box(&batch)))),
                    other => panic!(
                        "VERDICT_BENCH_PROFILE: no row {other:?} (0.1, 0.2, batch, floor, floor-batch)"
                    ),
                }
            }
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
