//! The simulator against reality: one scaled-down outage run twice - through the real
//! gateway (embedded store, the demo consumer down for eight seconds) and through
//! `verdict-simulate` with the same component, config, publish rate and outage - and the
//! two agree on deliveries, dead letters and the drain after recovery within the stated
//! tolerances. Both runs' figures are written to `$VERDICT_TEST_OUTPUT/simulate/
//! validation.json` (by default `test-output/` in the target directory).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_runtime::{Guardrails, Host, Limits, RetryBudget, TopicSettings};
use verdict_simulate::{Scenario, simulate};
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::Gateway;
use verdict_tests::{fixtures, scratch_dir, wait_for};

/// No jitter, so both runs retry on the same schedule: 200, 400, 800, 1600, 1600 ms.
const CONFIG: &str = r#"{"max_attempts": 6, "rules": [
    {"match": ["json.*", "schema.*", "format.*", "auth.*"], "dead_letter": "poison"},
    {"match": ["http.5*"],
     "retry": {"strategy": "exponential", "base_ms": 200, "cap_ms": 1600, "jitter": "none"}}]}"#;

const RATE_PER_S: u64 = 50;
const OUTAGE_FROM_S: u64 = 3;
const RECOVERY_S: u64 = 11;

/// Deliveries may differ by this share (the real gateway polls, its clock is not virtual).
const DELIVERIES_TOLERANCE: f64 = 0.10;
/// Dead letters may differ by this share, plus [`DEAD_SLACK`]: a message failing at the
/// edge of its last retry lands on either side.
const DEAD_TOLERANCE: f64 = 0.15;
const DEAD_SLACK: f64 = 5.0;
/// The drain after recovery may differ by this many seconds.
const DRAIN_TOLERANCE_S: f64 = 1.5;

fn scenario() -> Scenario {
    Scenario::parse(
        &format!(
            r#"name = "validation"
duration_s = {RECOVERY_S}
max_drain_s = 60
[publish]
phases = [{{ from_s = 0, rate_per_s = {RATE_PER_S} }}]
[consumer]
capacity_per_s = 5000
latency_ms = 2
phases = [
    {{ from_s = {OUTAGE_FROM_S}, answers = [{{ kind = "http.503", pct = 100 }}] }},
    {{ from_s = {RECOVERY_S} }},
]
"#
        ),
        "validation.toml",
    )
    .unwrap()
}

/// The real run: deliveries the consumer saw, dead letters, seconds from recovery until
/// every message had ended.
fn real_run(budget: Option<&RetryBudget>) -> (u64, u64, f64) {
    let dir = scratch_dir(if budget.is_some() {
        "simulate-validation-budget"
    } else {
        "simulate-validation"
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Ok);
    let config = format!(
        r#"
[admin]
listen = "127.0.0.1:0"
token_env = "VERDICT_TEST_UNSET_TOKEN_VARIABLE"
token_file = "token"
[gateway]
poll_ms = 5
[policies.rules]
path = "{rules}"
[[routes]]
topic = "orders"
policy = "rules"
config = {config}
{settings}
consumer = {{ url = "{url}", timeout_ms = 2000, concurrency = 16 }}
"#,
        rules = fixtures::RULES,
        config = toml_inline(CONFIG),
        url = consumer.url(),
        settings = budget.map_or(String::new(), |b| format!(
            "settings = {{ guardrails = {{ retry_budget = {{ percent = {}, window_s = {}, \
             min_per_s = {} }} }} }}",
            b.percent, b.window_s, b.min_per_s
        )),
    );
    let gw = Gateway::start_on(runtime, &dir, &config, "validation-token");

    // Publish 5 messages every 100 ms until recovery; the consumer is down from
    // OUTAGE_FROM_S to RECOVERY_S.
    let start = Instant::now();
    let total = RATE_PER_S * RECOVERY_S;
    let per_tick = RATE_PER_S / 10;
    let mut published = 0u64;
    let mut down = false;
    while published < total {
        let tick = Duration::from_millis(published / per_tick * 100);
        if let Some(wait) = tick.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let now_s = start.elapsed().as_secs_f64();
        if !down && now_s >= OUTAGE_FROM_S as f64 {
            consumer.demo.set_down(true);
            down = true;
        }
        let batch: Vec<Value> = (published..published + per_tick)
            .map(|i| json!({"id": format!("v-{i}"), "payload": {"n": i}}))
            .collect();
        let _: Value = gw.admin.post("/v1/topics/orders/messages", &batch).unwrap();
        published += per_tick;
    }
    if let Some(wait) = Duration::from_secs(RECOVERY_S).checked_sub(start.elapsed()) {
        std::thread::sleep(wait);
    }
    consumer.demo.set_down(false);
    let recovered = Instant::now();
    let mut ended_at = recovered;
    assert!(
        wait_for(Duration::from_secs(60), || {
            let c = gw.store.counts().unwrap();
            ended_at = Instant::now();
            c.delivered + c.dead + c.discarded == total
        }),
        "the real run did not end: {:?}",
        gw.store.counts().unwrap()
    );
    let counts = gw.store.counts().unwrap();
    let deliveries: u32 = consumer.snapshot().0.values().sum();
    (
        u64::from(deliveries),
        counts.dead,
        ended_at.duration_since(recovered).as_secs_f64(),
    )
}

/// `{"a": 1}` as a TOML inline table (JSON objects and arrays are close enough for this
/// config: keys quoted, `:` as `=`).
fn toml_inline(json: &str) -> String {
    fn value(v: &Value) -> String {
        match v {
            Value::Object(m) => format!(
                "{{ {} }}",
                m.iter()
                    .map(|(k, v)| format!("{k} = {}", value(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Value::Array(a) => format!("[{}]", a.iter().map(value).collect::<Vec<_>>().join(", ")),
            other => other.to_string(),
        }
    }
    value(&serde_json::from_str(json).unwrap())
}

/// A budget the outage runs into: 5 retries a second and 20% of the first attempts over a
/// 2 s window, about 15 retries a second at 50 published.
const BUDGET: RetryBudget = RetryBudget {
    percent: 20,
    window_s: 2,
    min_per_s: 5,
};

/// Both runs with `budget` (or none): their figures, written to `file` in the test output,
/// and held to the tolerances.
fn validate(file: &str, budget: Option<RetryBudget>) {
    let host = Host::new(&Limits::new()).unwrap();
    let policy = verdict_tests::load(&host, fixtures::RULES);
    let settings = TopicSettings {
        guardrails: Guardrails {
            retry_budget: budget,
            ..Guardrails::default()
        },
        ..TopicSettings::default()
    };
    let decider = policy.configure(CONFIG, settings).unwrap();
    let sim = simulate(&scenario(), &decider.settings().guardrails, &|f| {
        decider.decide(f)
    });
    let sim_deliveries = sim.first_attempts + sim.retries;
    let sim_drain = sim.drain_s.expect("the simulated backlog drains");

    let (real_deliveries, real_dead, real_drain) = real_run(budget.as_ref());

    // Holds are jittered by each run's own draws and the drain ends with the last one, up to
    // three windows after recovery: with a budget the drains may differ by two windows more
    // (measured in four runs: the real drain 8.6 to 11.2 s, the simulated 8.7 s).
    let drain_tolerance_s = DRAIN_TOLERANCE_S + budget.map_or(0.0, |b| 2.0 * f64::from(b.window_s));
    let figures = json!({
        "scenario": "50 msg/s for 11 s; the consumer down (503) from 3 s to 11 s",
        "config": serde_json::from_str::<Value>(CONFIG).unwrap(),
        "retry_budget": budget,
        "simulated": {"deliveries": sim_deliveries, "dead": sim.dead, "drain_s": sim_drain,
                      "held": sim.held},
        "real": {"deliveries": real_deliveries, "dead": real_dead, "drain_s": real_drain},
        "tolerance": {
            "deliveries": DELIVERIES_TOLERANCE,
            "dead": DEAD_TOLERANCE, "dead_slack": DEAD_SLACK,
            "drain_s": drain_tolerance_s,
        },
    });
    let out = std::env::var_os("VERDICT_TEST_OUTPUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../test-output"))
        .join("simulate");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join(file),
        serde_json::to_string_pretty(&figures).unwrap(),
    )
    .unwrap();
    eprintln!("{figures}");

    if budget.is_some() {
        assert!(sim.held > 0, "the outage runs into the budget: {figures}");
    } else {
        assert!(sim.dead > 0, "the outage exhausts some messages: {figures}");
    }
    let off = |a: f64, b: f64| (a - b).abs();
    assert!(
        off(real_deliveries as f64, sim_deliveries as f64)
            <= DELIVERIES_TOLERANCE * real_deliveries as f64,
        "deliveries: {figures}"
    );
    assert!(
        off(real_dead as f64, sim.dead as f64) <= DEAD_TOLERANCE * real_dead as f64 + DEAD_SLACK,
        "dead letters: {figures}"
    );
    assert!(
        off(real_drain, sim_drain) <= drain_tolerance_s,
        "drain after recovery: {figures}"
    );
}

/// One test for both, so the two real runs never overlap.
#[test]
fn the_simulator_agrees_with_the_real_gateway_on_an_outage_with_and_without_a_retry_budget() {
    validate("validation.json", None);
    validate("validation-budget.json", Some(BUDGET));
}
