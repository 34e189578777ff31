//! A route its policy pauses: `adaptive`'s circuit opens after three failures in a row and
//! answers `pause`; from then until the consumer is back, the consumer sees nothing but one
//! probe delivery per pause, the pause shows in `/metrics` and `/v1/routes`, and once a
//! probe succeeds the route resumes and every message is delivered once, none lost or
//! dead-lettered. Run here on the embedded store and, through `brokers`, on every broker.
//! And a policy that pauses on every failure, forever: the guardrails' deferral bound ends
//! each message in the DLQ, and the route resumes.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, wait_for};

/// How long the circuit pauses the route.
pub(crate) const PAUSE_MS: u64 = 1_500;

/// `adaptive` with its circuit opening after three failures in a row and pausing for
/// [`PAUSE_MS`]; quick retries before that, and room for many pauses per message.
pub(crate) const ADAPTIVE_CONFIG: &str = r#"{ circuit_after = 3, circuit_open_ms = 1500,
    circuit_max_deferrals = 90, max_attempts = 30, base_ms = 20, cap_ms = 50 }"#;

const MESSAGES: u32 = 10;

/// The consumer's deliveries as they happened: a sampler reads its count every 5 ms, so
/// each delivery's time is known to within that.
struct CallWatch {
    calls: Arc<Mutex<Vec<Instant>>>,
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl CallWatch {
    fn start(consumer: Consumer) -> CallWatch {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (calls, done) = (calls.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = 0u32;
                while !done.load(Ordering::Relaxed) {
                    let now: u32 = consumer.snapshot().0.values().sum();
                    let at = Instant::now();
                    // Two deliveries inside one sample are two calls at the same moment.
                    for _ in seen..now {
                        calls.lock().unwrap().push(at);
                    }
                    seen = now;
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        CallWatch {
            calls,
            done,
            thread,
        }
    }

    fn calls(&self) -> Vec<Instant> {
        self.calls.lock().unwrap().clone()
    }

    fn stop(self) -> Vec<Instant> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.calls.lock().unwrap().clone()
    }
}

/// The `verdict_route_paused` sample of `topic` in `/metrics`.
fn paused_gauge(gw: &Gateway, topic: &str) -> Option<String> {
    let text = gw.admin.get_text("/metrics").expect("/metrics");
    let prefix = format!("verdict_route_paused{{topic=\"{topic}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

/// The route `topic`'s `paused` field in `/v1/routes`.
fn paused_view(gw: &Gateway, topic: &str) -> Value {
    let routes: Value = gw.admin.get("/v1/routes").expect("/v1/routes");
    routes
        .as_array()
        .and_then(|all| all.iter().find(|r| r["topic"] == topic))
        .map_or(Value::Null, |r| r["paused"].clone())
}

/// The scenario, on a started gateway whose one route `topic` runs `adaptive` with
/// [`ADAPTIVE_CONFIG`] at `concurrency`, delivering to `consumer` (down when this starts).
/// `publish` publishes `m-<i>` for each `i`; `dead_letters` counts the route's DLQ.
pub(crate) fn a_paused_route_calls_nothing_but_its_probes(
    gw: &Gateway,
    topic: &str,
    consumer: &Consumer,
    concurrency: usize,
    publish: &dyn Fn(Range<u32>),
    dead_letters: &dyn Fn() -> u64,
) {
    let watch = CallWatch::start(consumer.clone());
    publish(0..MESSAGES);
    // Three failures open the circuit; then probes, one per pause. Wait for two probes.
    assert!(
        wait_for(Duration::from_secs(30), || {
            paused_gauge(gw, topic).as_deref() == Some("1")
        }),
        "the route never paused: {} calls",
        watch.calls().len()
    );
    let at_pause = watch.calls().len();
    assert!(
        wait_for(Duration::from_secs(30), || watch.calls().len()
            >= at_pause + 2),
        "{} calls, {at_pause} when the route paused",
        watch.calls().len()
    );
    let view = paused_view(gw, topic);
    assert!(view["until_ms"].as_u64().is_some(), "{view}");
    // A while longer down, then the consumer is back: the next probe succeeds.
    std::thread::sleep(Duration::from_millis(PAUSE_MS));
    consumer.demo.set_down(false);
    let back = Instant::now();
    assert!(
        wait_for(Duration::from_secs(30), || {
            consumer.snapshot().1.len() == MESSAGES as usize
        }),
        "{:?}",
        consumer.snapshot()
    );
    let calls = watch.stop();
    let down: Vec<Instant> = calls.iter().copied().filter(|at| *at < back).collect();
    // Before the pause: the three failures that opened the circuit and what was in flight
    // beside the third. From then on, while the consumer was down, every call is a probe:
    // at least most of a pause after the one before (the margin is for the sampler).
    let least = Duration::from_millis(PAUSE_MS * 2 / 3);
    let timeline: Vec<u128> = down.iter().map(|at| (*at - down[0]).as_millis()).collect();
    let before_pause = down
        .windows(2)
        .position(|pair| pair[1] - pair[0] >= least)
        .map_or(down.len(), |i| i + 1);
    assert!(
        (3..=2 + concurrency).contains(&before_pause),
        "{before_pause} calls before the first pause (calls at {timeline:?} ms)"
    );
    for pair in down[before_pause - 1..].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= least,
            "a call {gap:?} after the one before while the route was paused (calls at \
             {timeline:?} ms)"
        );
    }
    assert!(
        down.len() >= before_pause + 2,
        "two probes at least: calls at {timeline:?} ms"
    );
    // Resumed: every message delivered once, none dead-lettered, the pause over.
    let (_, accepted) = consumer.snapshot();
    assert!(accepted.values().all(|n| *n == 1), "{accepted:?}");
    assert_eq!(dead_letters(), 0);
    assert!(wait_for(Duration::from_secs(5), || {
        paused_gauge(gw, topic).as_deref() == Some("0")
    }));
    assert_eq!(paused_view(gw, topic), Value::Null);
    let text = gw.admin.get_text("/metrics").unwrap();
    let pauses = format!("verdict_route_pauses_total{{topic=\"{topic}\"}} ");
    let begun: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&pauses)?.parse().ok())
        .expect("verdict_route_pauses_total");
    assert!(
        begun >= 2,
        "{begun} pauses: the first and one after a failed probe"
    );
}

/// A consumer that answers 503 to everything until it is told otherwise.
pub(crate) fn down_consumer(runtime: &tokio::runtime::Runtime) -> Consumer {
    let consumer = Consumer::start(runtime, |_| Behaviour::Ok);
    consumer.demo.set_down(true);
    consumer
}

#[test]
fn on_the_embedded_store_a_paused_route_calls_nothing_but_its_probes() {
    on_the_embedded_store(1);
}

/// Four deliveries at a time: what is in flight when the pause begins finishes, nothing
/// starts after it, and only the probe decides.
#[test]
fn on_the_embedded_store_a_paused_route_calls_nothing_but_its_probes_at_concurrency_4() {
    on_the_embedded_store(4);
}

fn on_the_embedded_store(concurrency: usize) {
    let dir = scratch_dir(&format!("pause-store-{concurrency}"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = down_consumer(&runtime);
    let gw = TestConfig::new()
        .policy("adaptive", fixtures::ADAPTIVE)
        .route(
            Route::new("orders", "adaptive")
                .config(ADAPTIVE_CONFIG)
                .consumer(&consumer.url())
                .set("consumer.concurrency", concurrency as i64),
        )
        .start_on(runtime, &dir, "pause-token");
    let publish = |ids: Range<u32>| {
        let batch: Vec<Value> = ids
            .map(|i| json!({"id": format!("m-{i}"), "payload": {"n": i}}))
            .collect();
        let _: Value = gw
            .admin
            .post("/v1/topics/orders/messages", &batch)
            .expect("publish");
    };
    let dead = || {
        gw.store
            .dlq_list(&verdict_gateway::store::DlqFilter::default(), u64::MAX)
            .expect("dlq list")
            .len() as u64
    };
    a_paused_route_calls_nothing_but_its_probes(
        &gw,
        "orders",
        &consumer,
        concurrency,
        &publish,
        &dead,
    );
}

#[test]
fn a_policy_that_always_pauses_ends_each_message_at_the_deferral_bound() {
    let dir = scratch_dir("pause-forever");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = down_consumer(&runtime);
    let gw = TestConfig::new()
        // A policy that never lets a message go is what the admission gate refuses; this
        // one is let in to show the host ends what the gate would have caught.
        .set("admission.properties", false)
        .policy("hostile", fixtures::HOSTILE)
        .route(
            Route::new("orders", "hostile")
                .config(r#"{ mode = "pause" }"#)
                .consumer(&consumer.url())
                .set("consumer.concurrency", 1)
                .merge("settings = { guardrails = { max_deferrals = 2 } }"),
        )
        .start_on(runtime, &dir, "pause-token");
    let batch: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("m-{i}"), "payload": {"n": i}}))
        .collect();
    let _: Value = gw
        .admin
        .post("/v1/topics/orders/messages", &batch)
        .expect("publish");
    let letters = || {
        gw.store
            .dlq_list(&verdict_gateway::store::DlqFilter::default(), u64::MAX)
            .expect("dlq list")
    };
    assert!(
        wait_for(Duration::from_secs(30), || letters().len() == 3),
        "{} dead letters, {:?}",
        letters().len(),
        consumer.snapshot()
    );
    // Two pauses each (one deferral apiece), then the bound: three deliveries a message.
    let (deliveries, _) = consumer.snapshot();
    assert!(deliveries.values().all(|n| *n == 3), "{deliveries:?}");
    for letter in letters() {
        let e = serde_json::to_value(&letter.envelope).unwrap();
        assert_eq!(e["verdict"]["class"], "exhausted", "{e}");
    }
    // The last verdict was a dead letter, not a pause: the route is open again.
    assert!(wait_for(Duration::from_secs(5), || {
        paused_gauge(&gw, "orders").as_deref() == Some("0")
    }));
    assert_eq!(paused_view(&gw, "orders"), Value::Null);
}
