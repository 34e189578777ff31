//! Python and JavaScript policies in the host and the gateway: the deterministic WASI seen
//! from inside a Python policy (the failure's clock, seeded randomness, no environment, no
//! files, no sockets, no exit), WASI outside the catalogue refused at load by name, and one
//! gateway routing a topic to each language's `rules` beside the Rust one, with the same
//! outcome on all three.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_gateway::store::DlqFilter;
use verdict_runtime::{Decision, Failure};
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{failure, fixtures, host, scratch_dir};

use crate::gateway::RULES_CONFIG;

fn built(component: Result<&'static str, &'static str>) -> &'static str {
    component.unwrap_or_else(|why| panic!("a language fixture was not built: {why}"))
}

fn probe_failure(now_ms: u64, seed: u64, kind: &str) -> Failure {
    failure(
        json!({"message-id": "m-1", "attempt": 1, "now-ms": now_ms, "jitter-seed": seed, "error": {"kind": kind}}),
    )
}

/// The probe's report, split into its `key=value` fields.
fn report(d: &Decision) -> BTreeMap<String, String> {
    assert!(d.fallback.is_none(), "the probe faulted: {:?}", d.fallback);
    let mut fields = BTreeMap::new();
    let mut key = String::new();
    for word in d.verdict.reason.split(' ') {
        match word.split_once('=') {
            Some((k, v)) => {
                key = k.to_string();
                fields.insert(key.clone(), v.to_string());
            }
            None => {
                if let Some(v) = fields.get_mut(&key) {
                    v.push(' ');
                    v.push_str(word);
                }
            }
        }
    }
    fields
}

#[test]
fn a_python_policy_sees_the_failures_clock_seeded_randomness_and_nothing_else() {
    let host = host();
    let probe = host
        .load_file(built(fixtures::WASI_PROBE_PY).as_ref())
        .unwrap();
    let decider = probe.configure("{}", Default::default()).unwrap();
    let now = 1_800_000_000_123;
    let first = report(&decider.decide(&probe_failure(now, 7, "probe.report")));
    // Both clocks start at the failure's now-ms and move a microsecond per read.
    for clock in ["wall", "mono"] {
        let ns: u64 = first[clock].parse().unwrap();
        let start = now * 1_000_000;
        assert!(
            (start..start + 1_000_000).contains(&ns),
            "{clock}={ns}: {first:?}"
        );
    }
    assert_eq!(first["env"], "0", "{first:?}");
    assert_ne!(first["files"], "readable", "{first:?}");
    // The same failure, on a warm instance or a fresh one: the same draws.
    let again = report(&decider.decide(&probe_failure(now, 7, "probe.report")));
    assert_eq!(first, again);
    let fresh = probe.configure("{}", Default::default()).unwrap();
    assert_eq!(
        first,
        report(&fresh.decide(&probe_failure(now, 7, "probe.report")))
    );
    // Another jitter seed draws other numbers; another now reads another time.
    let reseeded = report(&decider.decide(&probe_failure(now, 8, "probe.report")));
    assert_ne!(
        (&first["random"], &first["urandom"]),
        (&reseeded["random"], &reseeded["urandom"])
    );
    let later = report(&decider.decide(&probe_failure(now + 1_000, 7, "probe.report")));
    assert_ne!(first["wall"], later["wall"]);
    // Reaching for a socket, a file or exit ends the call: the fallback decides, and the
    // next decision on the same route is served as before.
    for kind in ["probe.socket", "probe.file", "probe.exit"] {
        let d = decider.decide(&probe_failure(now, 7, kind));
        assert!(d.fallback.is_some(), "{kind}: {d:?}");
        assert!(
            d.verdict.reason.len() < 1_024,
            "{kind}: a bounded reason: {}",
            d.verdict.reason
        );
        assert_eq!(
            report(&decider.decide(&probe_failure(now, 7, "probe.report"))),
            first
        );
    }
}

#[test]
fn a_python_policys_warm_instance_serves_decision_after_decision() {
    // An interpreter starts with megabytes of memory; only growth past
    // `instance_recycle_bytes` retires an instance, not its size, so the same instance (its
    // module state counting) serves each decision instead of a fresh one per call.
    let probe = host()
        .load_file(built(fixtures::WASI_PROBE_PY).as_ref())
        .unwrap();
    let decider = probe.configure("{}", Default::default()).unwrap();
    let counts: Vec<String> = (0..3)
        .map(|_| {
            decider
                .decide(&probe_failure(1, 1, "probe.count"))
                .verdict
                .reason
        })
        .collect();
    assert_eq!(counts, ["decisions=1", "decisions=2", "decisions=3"]);
}

/// A Python policy reads a failure's on-demand parts through the `details` handle its SDK
/// makes once: decision after decision on one warm instance, and for each failure of a
/// batch at its own position.
#[test]
fn a_python_policy_reads_each_failures_details_through_one_handle() {
    let probe = host()
        .load_file(built(fixtures::WASI_PROBE_PY).as_ref())
        .unwrap();
    let decider = probe.configure("{}", Default::default()).unwrap();
    let failures: Vec<Failure> = (0..4)
        .map(|i| {
            failure(json!({
                "topic": format!("orders.{i}"),
                "message-id": format!("m-{i}"),
                "error": {"kind": "probe.details"},
                "extensions": {"source": format!("src-{i}")},
            }))
        })
        .collect();
    let want: Vec<String> = (0..4)
        .map(|i| format!("orders.{i} m-{i} src-{i}"))
        .collect();
    let alone: Vec<String> = failures
        .iter()
        .map(|f| decider.decide(f))
        .map(|d| {
            assert!(d.fallback.is_none(), "{d:?}");
            d.verdict.reason
        })
        .collect();
    assert_eq!(alone, want);
    let batched: Vec<String> = decider
        .decide_batch(&failures)
        .into_iter()
        .map(|d| {
            assert!(d.fallback.is_none(), "{d:?}");
            d.verdict.reason
        })
        .collect();
    assert_eq!(batched, want);
}

#[test]
fn wasi_outside_the_catalogue_or_its_version_is_refused_by_name() {
    let host = host();
    let component = |import: &str| {
        wat::parse_str(format!("(component (import \"{import}\" (instance)))")).unwrap()
    };
    let http = host
        .load_bytes(&component("wasi:http/outgoing-handler@0.2.0"), "http.wasm")
        .unwrap_err()
        .to_string();
    assert!(
        http.contains("http.wasm")
            && http.contains("`wasi:http/outgoing-handler@0.2.0`")
            && http.contains("deterministic stubs"),
        "{http}"
    );
    let newer = host
        .load_bytes(&component("wasi:clocks/wall-clock@0.3.0"), "next.wasm")
        .unwrap_err()
        .to_string();
    assert!(
        newer.contains("`wasi:clocks/wall-clock@0.3.0`") && newer.contains("0.2.x"),
        "{newer}"
    );
}

/// Message `<prefix>-<i>`: 5% permanent, 20% transient (1-3 failures first), the rest fine.
pub(crate) fn behaviour(id: &str) -> Behaviour {
    let i: u32 = id
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match i % 100 {
        0..5 => Behaviour::Permanent,
        5..25 => Behaviour::FailsFirst(1 + i % 3),
        _ => Behaviour::Ok,
    }
}

/// Publish `n` messages (ids `<suffix>-<i>`) to `orders.<suffix>` for each suffix, then wait
/// (up to 2 minutes) until the store holds none of them pending: every one settled.
pub fn publish_and_settle(gw: &Gateway, suffixes: &[&str], n: u32) {
    for suffix in suffixes {
        let batch: Vec<Value> = (0..n)
            .map(|i| json!({"id": format!("{suffix}-{i}"), "payload": {"order": i}}))
            .collect();
        let published: Value = gw
            .admin
            .post(&format!("/v1/topics/orders.{suffix}/messages"), &batch)
            .expect("publish");
        assert_eq!(published["accepted"].as_array().unwrap().len(), n as usize);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while gw.store.counts().unwrap().pending() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        gw.store.counts().unwrap().pending(),
        0,
        "every message settled"
    );
}

#[test]
fn one_gateway_routes_a_topic_to_each_language_with_the_same_outcome() {
    let dir = scratch_dir("gateway-languages");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, behaviour);
    let vectors = fixtures::rules_vectors("limits.json");
    let vectors = vectors.display().to_string();
    let (py, js) = (built(fixtures::RULES_PY), built(fixtures::RULES_JS));
    // Three routes, `orders.py` to `py_policy`; the Rust route shadowed by the Python port:
    // every verdict compared.
    let config = |py_policy: &str| {
        let mut config = TestConfig::new()
            .set("gateway.instance", "gw-languages")
            .policy("rules", fixtures::RULES)
            .policy("rules_py", py)
            .set("policies.rules_py.vectors", vec![vectors.as_str()])
            .policy("rules_js", js)
            .set("policies.rules_js.vectors", vec![vectors.as_str()]);
        for (topic, policy) in [
            ("orders.rs", "rules"),
            ("orders.py", py_policy),
            ("orders.js", "rules_js"),
        ] {
            let mut route = Route::new(topic, policy)
                .config(RULES_CONFIG)
                .consumer(&consumer.url());
            if topic == "orders.rs" {
                route = route.merge(&format!(
                    "shadow = {{ policy = \"rules_py\", config = {RULES_CONFIG} }}"
                ));
            }
            config = config.route(route);
        }
        config
    };
    // From a file: the test reloads it.
    let gw = Gateway::start_on(runtime, &dir, &config("rules_py").text(), "unused");
    const N: u32 = 60;
    publish_and_settle(&gw, &["rs", "py", "js"], N);
    let dead = gw.store.dlq_list(&DlqFilter::default(), u64::MAX).unwrap();
    let (deliveries, accepted) = consumer.snapshot();
    let outcome = |lang: &str| {
        let letters: Vec<(String, String, u32)> = dead
            .iter()
            .filter(|e| e.topic == format!("orders.{lang}"))
            .map(|e| (e.message_id[3..].to_string(), e.class.clone(), e.attempts))
            .collect();
        let delivered: Vec<(u32, u32, u32)> = (0..N)
            .map(|i| {
                let id = format!("{lang}-{i}");
                (
                    i,
                    deliveries.get(&id).copied().unwrap_or(0),
                    accepted.get(&id).copied().unwrap_or(0),
                )
            })
            .collect();
        let mut letters = letters;
        letters.sort();
        (letters, delivered)
    };
    let rust = outcome("rs");
    assert!(
        !rust.0.is_empty(),
        "the permanent failures are dead-lettered"
    );
    assert_eq!(outcome("py"), rust, "Python gives the Rust outcome");
    assert_eq!(outcome("js"), rust, "JavaScript gives the Rust outcome");
    for entry in &dead {
        assert_eq!(
            entry.envelope.policy.name, "rules",
            "{:?}",
            entry.envelope.policy
        );
        assert!(
            entry.envelope.policy.fallback.is_none(),
            "no fault: {:?}",
            entry.envelope.policy
        );
    }
    // Each dead letter came from its own language's component.
    let shas: std::collections::BTreeSet<&str> = dead
        .iter()
        .map(|e| e.envelope.policy.sha256.as_str())
        .collect();
    assert_eq!(shas.len(), 3, "{shas:?}");
    // The shadow compared every decision of the Rust route with the Python port's: no
    // disagreement.
    let shadow = gw.registry.shadow_report();
    assert_eq!(shadow.len(), 1, "{shadow:?}");
    assert!(shadow[0].compared > 0, "{shadow:?}");
    assert_eq!(shadow[0].disagreements, 0, "{shadow:?}");
    // A hot reload moves orders.py to the JavaScript port; its decisions name that component.
    let js_sha = dead
        .iter()
        .find(|e| e.topic == "orders.js")
        .map(|e| e.envelope.policy.sha256.clone())
        .unwrap();
    config("rules_js").write_toml(&dir);
    let reloaded: Value = gw.admin.post("/v1/reload", &json!({})).expect("reload");
    assert!(reloaded.to_string().contains("generation"), "{reloaded}");
    let later = failure(json!({"message-id": "x-1", "attempt": 1, "error": {"kind": "http.503"}}));
    let d = gw.registry.decide("orders.py", &later).unwrap();
    assert_eq!(d.provenance.sha256, js_sha, "{d:?}");
    assert!(d.fallback.is_none(), "{d:?}");
}
