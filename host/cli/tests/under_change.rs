//! The delivery invariants under change, through the real binary (`verdict run`):
//!
//! - reloads that remove, narrow and widen routes while messages wait for a retry (the
//!   config file edited under a running gateway): every waiting retry is handed to the route
//!   that takes its topic now, or dead-lettered with kind `route.removed` when none does -
//!   never acknowledged unseen, never held forever - and what one route delivered is not
//!   delivered again by the route that replaces it;
//! - several gateways on one RabbitMQ queue: attempts are counted across them, never reset;
//!   gateways set up with different history keys are named (`/readyz`, metric, log).
//!
//! (Gateways whose clocks differ on a shared SQL store: `shared_store.rs`.)

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::nats::Nats;
use common::{Proc, rules, spawn, wait_until};
use verdict_cli::demo::{Behaviour, DemoConsumer};
use verdict_tests::gateway::{Route, TestConfig};

/// A consumer in this process: the test reads what it saw directly.
struct App {
    consumer: DemoConsumer,
    url: String,
}

fn app(runtime: &tokio::runtime::Runtime, behaviour: Behaviour) -> App {
    app_by_id(runtime, move |_| behaviour)
}

/// A consumer in this process treating each id by `rule`.
fn app_by_id(
    runtime: &tokio::runtime::Runtime,
    rule: impl Fn(&str) -> Behaviour + Send + Sync + 'static,
) -> App {
    let consumer = DemoConsumer::new(rule);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let router = consumer.router();
    runtime.spawn(async move { axum::serve(listener, router).await });
    App { consumer, url }
}

impl App {
    fn deliveries(&self) -> BTreeMap<String, u32> {
        self.consumer.seen().deliveries.into_iter().collect()
    }

    fn accepted(&self) -> BTreeMap<String, u32> {
        self.consumer.seen().accepted.into_iter().collect()
    }
}

/// 503 is retried after `delay_ms`, at most 4 attempts.
fn route(topic: &str, source: &str, app: &App, delay_ms: u64) -> Route {
    Route::new(topic, "rules")
        .set("source", source)
        .consumer(&app.url)
        .config(&format!(
            r#"{{ max_attempts = 4, rules = [
    {{ match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" }},
    {{ match = ["http.5*", "transport.*"], retry = {{ strategy = "fixed", delay_ms = {delay_ms}, jitter = "none" }} }},
] }}"#
        ))
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    dir
}

/// What every gateway here is configured with before its source and routes: `rules.wasm` and
/// the token file [`scratch`] writes.
fn base_config() -> TestConfig {
    TestConfig::new().policy("rules", "rules.wasm")
}

fn generation(gw: &Proc) -> u64 {
    let status: serde_json::Value = ureq::get(&format!("{}/v1/status", gw.url))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    status["generation"].as_u64().unwrap_or(0)
}

/// Write the new config (the running gateway reloads it by itself) and wait until the
/// gateway runs it.
fn reload(gw: &Proc, dir: &Path, config: &TestConfig) {
    let before = generation(gw);
    config.write_toml(dir);
    assert!(
        wait_until(Duration::from_secs(20), || generation(gw) > before),
        "the gateway did not reload"
    );
}

/// `verdict run` with `config`.
fn run(config: &Path) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    )
}

/// Once the vip route's consumer exists, `n` messages `v-<i>` on `orders.vip`, each
/// delivered once to `vip` (which fails them: they wait for a retry). Their ids.
fn vip_retries_waiting(nats: &Nats, vip: &App, n: usize) -> Vec<String> {
    assert!(wait_until(Duration::from_secs(20), || nats
        .has_consumer_of("orders.vip")));
    let waiting = ids("v", n);
    nats.publish("orders.vip", &waiting);
    assert!(
        wait_until(Duration::from_secs(20), || vip.deliveries().len() == n),
        "{:?}",
        vip.deliveries()
    );
    waiting
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn each_once(ids: &[String]) -> BTreeMap<String, u32> {
    ids.iter().map(|id| (id.clone(), 1)).collect()
}

/// Routes `orders.>` (a healthy consumer) and `orders.vip` (always 503, retried after 6 s).
/// Five vip messages are delivered once and wait out their retry; then the vip route is
/// removed. The wide route now takes them: each is delivered to its consumer once, none is
/// dead-lettered or acknowledged unseen, and the vip route's consumer is deleted once it
/// has handed everything on. Messages published after the reload go to the wide route.
#[test]
fn removing_an_overlapping_nats_route_hands_its_waiting_retries_to_the_wider_route() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (healthy, down) = (
        app(&runtime, Behaviour::Ok),
        app(&runtime, Behaviour::FailsFirst(u32::MAX)),
    );
    let nats = Nats::new("remove");
    let dir = scratch("reload-nats-remove");
    let wide = route(&nats.subject("orders.>"), "nats", &healthy, 200);
    let vip = route(&nats.subject("orders.vip"), "nats", &down, 6_000);
    let on_nats = nats.configure(base_config());
    let config = on_nats
        .clone()
        .route(wide.clone())
        .route(vip)
        .write_toml(&dir);
    let gw = run(&config);
    let waiting = vip_retries_waiting(&nats, &down, 5);
    reload(&gw, &dir, &on_nats.route(wide));

    assert!(
        wait_until(Duration::from_secs(40), || healthy.accepted().len() == 5),
        "the retries the removed route held never reached the route that takes them now: \
         healthy {:?}, down {:?}, dead letters {:?}, consumers {:?}",
        healthy.accepted(),
        down.deliveries(),
        nats.dead_letters(),
        nats.consumers()
    );
    assert_eq!(healthy.accepted(), each_once(&waiting));
    assert_eq!(
        down.deliveries(),
        each_once(&waiting),
        "not delivered again on the old route"
    );
    assert_eq!(nats.dead_letters(), Vec::new());

    let after = ids("n", 3);
    nats.publish("orders.vip", &after);
    assert!(wait_until(Duration::from_secs(20), || healthy
        .accepted()
        .len()
        == 8));
    assert!(
        wait_until(Duration::from_secs(20), || !nats
            .has_consumer_of("orders.vip")),
        "the removed route's consumer is deleted once drained: {:?}",
        nats.consumers()
    );
    assert!(
        wait_until(Duration::from_secs(20), || nats
            .consumers()
            .iter()
            .all(|(_, pending, acks)| (*pending, *acks) == (0, 0))),
        "{:?}",
        nats.consumers()
    );
    // Once the retired consumer is gone, the wide route still takes vip messages (its
    // session still knows the deleted consumer, which delivers nothing).
    let late = ids("late", 3);
    nats.publish("orders.vip", &late);
    let mut all = waiting.clone();
    all.extend(after);
    all.extend(late);
    assert!(
        wait_until(Duration::from_secs(20), || healthy.accepted().len() == 11),
        "{:?}",
        healthy.accepted()
    );
    assert_eq!(healthy.accepted(), each_once(&all), "nothing twice");
}

/// A fleet part-way through removing a route: gateways A and B run `orders.>` and
/// `orders.vip`, each to a consumer of its own (the vip one fails the first messages
/// always, retried after 20 s, so the vip consumer holds retries and is not deleted at
/// once). A reloads without the vip route; B does not, and its session still consumes the
/// vip consumer as its own. Each message published on `orders.vip` now is delivered once -
/// by whichever gateway fetches it, on the route its own config gives the subject - never
/// once on the vip consumer and again on the wide one: B checks the lives the server has
/// before delivering what it fetched on the vip consumer.
#[test]
fn a_fleet_part_way_through_removing_a_nats_route_delivers_each_message_once() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let healthy = app(&runtime, Behaviour::Ok);
    let vip_app = app_by_id(&runtime, |id| {
        if id.starts_with("v-") {
            Behaviour::FailsFirst(u32::MAX)
        } else {
            Behaviour::Ok
        }
    });
    let nats = Nats::new("fleet-remove");
    let wide = route(&nats.subject("orders.>"), "nats", &healthy, 200);
    let vip = route(&nats.subject("orders.vip"), "nats", &vip_app, 20_000);
    let on_nats = nats.configure(base_config());
    let both = on_nats.clone().route(wide.clone()).route(vip);
    let (dir_a, dir_b) = (
        scratch("reload-nats-fleet-a"),
        scratch("reload-nats-fleet-b"),
    );
    let a = run(&both.write_toml(&dir_a));
    let _b = run(&both.write_toml(&dir_b));
    vip_retries_waiting(&nats, &vip_app, 3);

    reload(&a, &dir_a, &on_nats.route(wide));
    assert!(
        wait_until(Duration::from_secs(20), || nats
            .description_of("orders.vip")
            .is_some_and(|d| d.contains("route removed"))),
        "A retires the vip consumer with a boundary: {:?}",
        nats.description_of("orders.vip")
    );
    let after = ids("n", 40);
    nats.publish("orders.vip", &after);
    let total = |id: &str| {
        let seen = |a: &App| a.deliveries().get(id).copied().unwrap_or(0);
        seen(&healthy) + seen(&vip_app)
    };
    assert!(
        wait_until(Duration::from_secs(30), || after
            .iter()
            .all(|id| total(id) > 0)),
        "healthy {:?}, vip {:?}, consumers {:?}",
        healthy.deliveries(),
        vip_app.deliveries(),
        nats.consumers(),
    );
    // Long enough for a second copy to show up.
    std::thread::sleep(Duration::from_secs(2));
    let twice: Vec<_> = after.iter().filter(|id| total(id) != 1).collect();
    assert!(
        twice.is_empty(),
        "delivered more than once: {twice:?}; healthy {:?}, vip {:?}",
        healthy.deliveries(),
        vip_app.deliveries()
    );
    assert!(
        nats.has_consumer_of("orders.vip"),
        "still holding its retries, the vip consumer was not deleted under B"
    );
}

/// Routes `orders.>` and `orders.vip`, both healthy, on one gateway. Another gateway
/// removing the vip route stopped between its two writes: the vip consumer is marked
/// `boundary=pending` (written here as that gateway would have left it) and no boundary
/// follows. Messages on `orders.vip`, covered by both routes, wait for it - until the
/// running gateway, which still consumes the vip route, finds the mark stale and settles it
/// as its config says: each message is delivered once, by the vip route, and the mark is
/// gone.
#[test]
fn a_boundary_left_pending_by_a_stopped_gateway_is_settled_and_nothing_waits_forever() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let healthy = app(&runtime, Behaviour::Ok);
    let vip_app = app(&runtime, Behaviour::Ok);
    let nats = Nats::new("stale-pending");
    let both = nats
        .configure(base_config())
        .route(route(&nats.subject("orders.>"), "nats", &healthy, 200))
        .route(route(&nats.subject("orders.vip"), "nats", &vip_app, 200));
    let dir = scratch("reload-nats-stale-pending");
    let _gw = run(&both.write_toml(&dir));
    assert!(wait_until(Duration::from_secs(20), || nats
        .has_consumer_of("orders.vip")));
    let open = nats.description_of("orders.vip").unwrap();
    nats.set_description_of("orders.vip", &format!("{open} boundary=pending"));

    let waiting = ids("p", 10);
    nats.publish("orders.vip", &waiting);
    assert!(
        wait_until(Duration::from_secs(60), || vip_app.accepted().len()
            == waiting.len()),
        "vip {:?}, healthy {:?}, vip consumer: {:?}",
        vip_app.deliveries(),
        healthy.deliveries(),
        nats.description_of("orders.vip"),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(vip_app.deliveries(), each_once(&waiting));
    assert!(
        healthy.deliveries().is_empty(),
        "{:?}",
        healthy.deliveries()
    );
    let settled = nats.description_of("orders.vip").unwrap();
    assert!(
        !settled.contains("boundary=pending") && !settled.contains("route removed"),
        "its life goes on, the mark gone: {settled}"
    );
}

/// Route `orders.>` only (503 once, retried after 6 s). Five messages on `orders.vip` are
/// delivered once and wait out their retry; meanwhile a reload adds route `orders.vip`
/// (always 503, retried after 6 s: one message published now waits in it too) and another
/// removes it again. The five were the wide route's before the vip route existed and stay
/// its own: each comes back and is accepted there, none is acknowledged unseen by the
/// removed route's consumer (which still holds its own message, and hands that on).
#[test]
fn a_route_added_and_removed_while_a_wider_one_waits_leaves_its_retries_with_it() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (once, down) = (
        app(&runtime, Behaviour::FailsFirst(1)),
        app(&runtime, Behaviour::FailsFirst(u32::MAX)),
    );
    let nats = Nats::new("flap");
    let dir = scratch("reload-nats-flap");
    let wide = route(&nats.subject("orders.>"), "nats", &once, 6_000);
    let vip = route(&nats.subject("orders.vip"), "nats", &down, 6_000);
    let on_nats = nats.configure(base_config());
    let config = on_nats.clone().route(wide.clone()).write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(wait_until(Duration::from_secs(20), || nats.has_consumer_of("orders.>")));
    let waiting = ids("w", 5);
    nats.publish("orders.vip", &waiting);
    assert!(
        wait_until(Duration::from_secs(20), || once.deliveries().len() == 5),
        "{:?}",
        once.deliveries()
    );
    reload(&gw, &dir, &on_nats.clone().route(wide.clone()).route(vip));
    assert!(wait_until(Duration::from_secs(20), || nats
        .has_consumer_of("orders.vip")));
    let own = ids("x", 1);
    nats.publish("orders.vip", &own);
    // The vip route's consumer starts where the wide one's acknowledgements stand: it sees
    // the five, skips them (published before its route existed) and delivers its own.
    let vip_durable =
        verdict_gateway::sources::nats::route_durable(&nats.prefix, &nats.subject("orders.vip"));
    assert!(
        wait_until(Duration::from_secs(20), || {
            down.deliveries().len() == 1
                && nats
                    .consumers()
                    .iter()
                    .any(|(name, pending, _)| *name == vip_durable && *pending == 0)
        }),
        "{:?} {:?}",
        down.deliveries(),
        nats.consumers()
    );
    std::thread::sleep(Duration::from_millis(500));
    reload(&gw, &dir, &on_nats.route(wide));

    let mut all = waiting.clone();
    all.extend(own.clone());
    assert!(
        wait_until(Duration::from_secs(40), || once.accepted().len() == 6),
        "retries never came back to the route that takes them: accepted {:?}, \
         deliveries {:?}, vip {:?}, dead letters {:?}, consumers {:?}",
        once.accepted(),
        once.deliveries(),
        down.deliveries(),
        nats.dead_letters(),
        nats.consumers()
    );
    assert_eq!(once.accepted(), each_once(&all));
    assert_eq!(
        down.deliveries(),
        each_once(&own),
        "the vip route's own, once"
    );
    assert_eq!(nats.dead_letters(), Vec::new());
}

/// A route's durable consumer made earlier with other settings (`ack_wait` 1 s, JetStream
/// giving up after 3 deliveries) is brought to the configured ones when the gateway starts,
/// not silently reused: `max_deliver` 3 would make JetStream drop a message the gateway
/// still means to retry.
#[test]
fn an_existing_durable_is_brought_to_the_configured_settings() {
    use async_nats::jetstream::consumer;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let healthy = app(&runtime, Behaviour::Ok);
    let nats = Nats::new("reconcile");
    let subject = nats.subject("orders");
    let durable = verdict_gateway::sources::nats::route_durable(&nats.prefix, &subject);
    let info = |nats: &Nats| {
        nats.runtime.block_on(async {
            let stream = nats.js.get_stream(&nats.prefix).await.unwrap();
            stream.consumer_info(&durable).await.unwrap()
        })
    };
    nats.runtime.block_on(async {
        let stream = nats
            .js
            .create_stream(async_nats::jetstream::stream::Config {
                name: nats.prefix.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(durable.clone()),
                filter_subject: subject.clone(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(1),
                max_deliver: 3,
                ..Default::default()
            })
            .await
            .unwrap();
    });
    let dir = scratch("reload-nats-reconcile");
    let config = nats
        .configure(base_config())
        .route(route(&subject, "nats", &healthy, 200))
        .write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(
        wait_until(Duration::from_secs(20), || {
            let c = info(&nats).config;
            c.ack_wait == Duration::from_secs(5) && c.max_deliver == -1
        }),
        "{:?}",
        info(&nats).config
    );
    nats.publish("orders", &ids("m", 3));
    assert!(wait_until(Duration::from_secs(20), || healthy
        .accepted()
        .len()
        == 3));
    drop(gw);
}

/// `orders.>` (always 503, retried after 6 s) holds retries on `orders.us` and
/// `orders.eu.fr`; it is narrowed to `orders.eu.>` (healthy): the eu retries are delivered
/// there once, the us ones - which no route takes now - are dead-lettered with kind
/// `route.removed`. Then it is widened back to `orders.>` (healthy): nothing the eu route
/// delivered comes again, and new messages on any `orders.` subject are delivered once.
#[test]
fn narrowing_and_widening_a_nats_route_lose_nothing_and_replay_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (healthy, down) = (
        app(&runtime, Behaviour::Ok),
        app(&runtime, Behaviour::FailsFirst(u32::MAX)),
    );
    let nats = Nats::new("narrow");
    let dir = scratch("reload-nats-narrow");
    let on_nats = nats.configure(base_config());
    let config = on_nats
        .clone()
        .route(route(&nats.subject("orders.>"), "nats", &down, 6_000))
        .write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(wait_until(Duration::from_secs(20), || nats.has_consumer_of("orders.>")));
    let (us, eu) = (ids("us", 3), ids("eu", 3));
    nats.publish("orders.us", &us);
    nats.publish("orders.eu.fr", &eu);
    assert!(wait_until(Duration::from_secs(20), || down
        .deliveries()
        .len()
        == 6));

    // Narrow.
    let eu_route = route(&nats.subject("orders.eu.>"), "nats", &healthy, 200);
    reload(&gw, &dir, &on_nats.clone().route(eu_route));
    assert!(
        wait_until(Duration::from_secs(40), || healthy.accepted().len() == 3
            && nats.dead_letters().len() == 3),
        "healthy {:?}, dead letters {:?}, consumers {:?}",
        healthy.accepted(),
        nats.dead_letters(),
        nats.consumers()
    );
    assert_eq!(healthy.accepted(), each_once(&eu));
    let removed: Vec<(String, String)> = us
        .iter()
        .map(|id| ("route.removed".to_string(), id.clone()))
        .collect();
    assert_eq!(nats.dead_letters(), removed);
    assert_eq!(
        down.deliveries(),
        each_once(&[us.clone(), eu.clone()].concat())
    );
    assert!(
        wait_until(Duration::from_secs(20), || !nats
            .has_consumer_of("orders.>")),
        "the narrowed route's old consumer is deleted once drained: {:?}",
        nats.consumers()
    );

    // Widen back: a new consumer for `orders.>`, the eu one retired.
    let wide = route(&nats.subject("orders.>"), "nats", &healthy, 200);
    reload(&gw, &dir, &on_nats.route(wide));
    assert!(wait_until(Duration::from_secs(20), || nats.has_consumer_of("orders.>")));
    let fresh = [ids("us-new", 2), ids("eu-new", 2)];
    nats.publish("orders.us", &fresh[0]);
    nats.publish("orders.eu.de", &fresh[1]);
    assert!(wait_until(Duration::from_secs(20), || healthy
        .accepted()
        .len()
        == 7));
    // Past a few pulls: a replay of what the eu route delivered would have come by now.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        healthy.accepted(),
        each_once(&[eu, fresh[0].clone(), fresh[1].clone()].concat()),
        "each once: nothing the eu route delivered came again"
    );
    assert_eq!(nats.dead_letters().len(), 3);
}

/// On the embedded store: `orders.>` (healthy) and `orders.vip` (always 503, retried after
/// 3 s), and `payments` (always 503, retried after 3 s). A reload removes `orders.vip` and
/// `payments` while their messages wait: the vip ones are delivered on `orders.>`, the
/// payments ones - no route takes them now - are dead-lettered with kind `route.removed`
/// instead of being claimed and put back every few seconds forever.
#[test]
fn removing_routes_on_the_embedded_store_hands_their_retries_on_or_dead_letters_them() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (healthy, down) = (
        app(&runtime, Behaviour::Ok),
        app(&runtime, Behaviour::FailsFirst(u32::MAX)),
    );
    let dir = scratch("reload-embedded");
    let wide = route("orders.>", "embedded", &healthy, 200);
    let vip = route("orders.vip", "embedded", &down, 3_000);
    let payments = route("payments", "embedded", &down, 3_000);
    let embedded = base_config().set("gateway.instance", "gw-reload");
    let config = embedded
        .clone()
        .route(wide.clone())
        .route(vip)
        .route(payments)
        .write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let token = dir.join("token");
    for (topic, prefix) in [("orders.vip", "v"), ("payments", "p")] {
        let batch = dir.join(format!("{prefix}.jsonl"));
        let lines: Vec<String> = ids(prefix, 4)
            .iter()
            .map(|id| format!(r#"{{"id": "{id}", "payload": {{}}}}"#))
            .collect();
        std::fs::write(&batch, lines.join("\n")).unwrap();
        let out = common::verdict(
            &[
                "publish",
                "--admin",
                &gw.url,
                "--token-file",
                token.to_str().unwrap(),
                "--topic",
                topic,
                "--batch",
                batch.to_str().unwrap(),
            ],
            None,
        );
        assert!(out.status.success(), "{}", common::text(&out.stderr));
    }
    assert!(wait_until(Duration::from_secs(20), || down
        .deliveries()
        .len()
        == 8));
    reload(&gw, &dir, &embedded.route(wide));

    let store = verdict_gateway::store::Store::open(&dir.join(".verdict/verdict.db")).unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || store
            .counts()
            .is_ok_and(|c| c.pending() == 0)),
        "{:?}",
        store.counts()
    );
    let letters = store
        .dlq_list(
            &verdict_gateway::store::DlqFilter::default(),
            store.now_ms(),
        )
        .unwrap();
    let mut dead: Vec<(String, String)> = letters
        .iter()
        .map(|e| (e.kind.clone(), e.message_id.clone()))
        .collect();
    dead.sort();
    let expected: Vec<(String, String)> = ids("p", 4)
        .into_iter()
        .map(|id| ("route.removed".to_string(), id))
        .collect();
    assert_eq!(dead, expected);
    assert_eq!(healthy.accepted(), each_once(&ids("v", 4)));
    assert_eq!(
        down.deliveries(),
        each_once(&[ids("v", 4), ids("p", 4)].concat())
    );
}

// ------------------------------------------------------------ several gateways, RabbitMQ

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// This test's RabbitMQ names (`<prefix>.orders`, its DLQ, the audit queue, the delay
/// buckets), deleted at the end.
struct Rabbit {
    prefix: String,
    runtime: tokio::runtime::Runtime,
}

impl Rabbit {
    fn new(name: &str) -> Rabbit {
        Rabbit {
            prefix: format!("uc{}{name}", std::process::id()),
            runtime: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    fn queue(&self) -> String {
        format!("{}.orders", self.prefix)
    }

    fn channel(&self) -> (lapin::Connection, lapin::Channel) {
        self.runtime.block_on(async {
            let conn = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
                .await
                .expect("RabbitMQ on 127.0.0.1:5672 (.ci/run starts it)");
            let channel = conn.create_channel().await.unwrap();
            (conn, channel)
        })
    }

    /// Publish `ids` to the route queue, each confirmed.
    fn publish(&self, ids: &[String]) {
        let properties = ids.iter().map(|id| {
            lapin::BasicProperties::default()
                .with_message_id(id.as_str().into())
                .with_delivery_mode(2)
        });
        self.publish_each(properties.collect());
    }

    /// Publish one `{}` message per entry of `properties` to the route queue, confirmed.
    fn publish_each(&self, properties: Vec<lapin::BasicProperties>) {
        use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
        let (_conn, channel) = self.channel();
        let queue = self.queue();
        self.runtime.block_on(async {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .unwrap();
            for p in properties {
                let confirm = channel
                    .basic_publish(
                        "".into(),
                        queue.as_str().into(),
                        BasicPublishOptions::default(),
                        b"{}",
                        p,
                    )
                    .await
                    .unwrap();
                assert!(confirm.await.unwrap().is_ack());
            }
        });
    }

    /// Messages waiting in `queue` (0 when it does not exist).
    fn depth(&self, queue: &str) -> u32 {
        use lapin::options::QueueDeclareOptions;
        let (_conn, channel) = self.channel();
        self.runtime.block_on(async {
            channel
                .queue_declare(
                    queue.into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    lapin::types::FieldTable::default(),
                )
                .await
                .map_or(0, |q| q.message_count())
        })
    }

    /// `config` for a gateway on these names: the `[rabbitmq]` section.
    fn configure(&self, config: TestConfig) -> TestConfig {
        let p = &self.prefix;
        config
            .set("rabbitmq.url", AMQP)
            .set("rabbitmq.delay_prefix", format!("{p}.delay"))
            .set("rabbitmq.audit_queue", format!("{p}.audit"))
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        use verdict_gateway::sources::rabbitmq::topology::delay_names;
        let (conn, _channel) = self.channel();
        let p = self.prefix.clone();
        let queue = self.queue();
        self.runtime.block_on(async move {
            let buckets = delay_names(&format!("{p}.delay"));
            let queues = [queue.clone(), format!("{queue}.DLQ"), format!("{p}.audit")];
            // A failed delete closes its channel: one channel each.
            for q in queues.iter().chain(&buckets) {
                if let Ok(ch) = conn.create_channel().await {
                    let _ = ch.queue_delete(q.as_str().into(), Default::default()).await;
                }
            }
            for e in &buckets {
                if let Ok(ch) = conn.create_channel().await {
                    let _ = ch
                        .exchange_delete(e.as_str().into(), Default::default())
                        .await;
                }
            }
        });
    }
}

fn readyz(gw: &Proc) -> String {
    ureq::get(&format!("{}/readyz", gw.url))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default()
}

fn metric(gw: &Proc, name: &str) -> u64 {
    let text = ureq::get(&format!("{}/metrics", gw.url))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Two running gateways and their queues: the gateways stop before the queues are deleted
/// (fields drop in order), so none declares them again.
struct TwoGateways {
    gateways: [Proc; 2],
    _rabbit: Rabbit,
}

/// Two gateways on one RabbitMQ queue, a consumer that always fails, three attempts:
/// `shared_key` gives both the same `history_key_file` (the documented setup), otherwise
/// each makes its own in its state directory. Returns the deliveries per message and the
/// two gateways.
fn two_gateways_on_one_queue(name: &str, shared_key: bool) -> (BTreeMap<String, u32>, TwoGateways) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let down = app(&runtime, Behaviour::FailsFirst(u32::MAX));
    let rabbit = Rabbit::new(name);
    let root = scratch(&format!("two-gateways-{name}"));
    std::fs::write(root.join("shared.key"), b"0123456789abcdef0123456789abcdef").unwrap();
    let gateways = [1, 2].map(|n| {
        let dir = root.join(format!("gw-{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
        std::fs::write(dir.join("token"), "operator-token\n").unwrap();
        let mut config = rabbit
            .configure(base_config())
            .set("gateway.instance", format!("gw-{n}"))
            .route(route(&rabbit.queue(), "rabbitmq", &down, 100).set("config.max_attempts", 3));
        if shared_key {
            config = config.set("rabbitmq.history_key_file", "../shared.key");
        }
        let config = config.write_toml(&dir);
        spawn(
            env!("CARGO_BIN_EXE_verdict"),
            &["run", "-c", config.to_str().unwrap()],
        )
    });
    assert!(wait_until(Duration::from_secs(30), || gateways
        .iter()
        .all(|gw| readyz(gw).starts_with("ready"))));
    let messages = ids("m", 20);
    rabbit.publish(&messages);
    let dlq = format!("{}.DLQ", rabbit.queue());
    assert!(
        wait_until(Duration::from_secs(60), || rabbit.depth(&dlq) == 20),
        "dead-lettered {} of 20; deliveries {:?}",
        rabbit.depth(&dlq),
        down.deliveries()
    );
    // Past a few retry delays: a message whose count was reset would still be coming.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(rabbit.depth(&dlq), 20);
    (
        down.deliveries(),
        TwoGateways {
            gateways,
            _rabbit: rabbit,
        },
    )
}

#[test]
fn two_rabbitmq_gateways_with_their_own_keys_never_reset_attempts_and_say_what_is_wrong() {
    let (deliveries, run) = two_gateways_on_one_queue("ownkeys", false);
    let gateways = &run.gateways;
    assert_eq!(deliveries.len(), 20);
    assert!(
        deliveries.values().all(|n| *n <= 3),
        "a message was delivered more than max_attempts (3) times: {deliveries:?}"
    );
    let warned: Vec<String> = gateways.iter().map(readyz).collect();
    assert!(
        warned.iter().any(|r| r.starts_with("ready\n")
            && r.contains("warning: rabbitmq:")
            && r.contains("history_key_file")),
        "/readyz names the mismatch: {warned:?}"
    );
    assert!(
        gateways
            .iter()
            .map(|gw| metric(gw, "verdict_history_key_mismatches_total"))
            .sum::<u64>()
            > 0
    );
}

#[test]
fn two_rabbitmq_gateways_sharing_a_key_file_count_attempts_together() {
    let (deliveries, run) = two_gateways_on_one_queue("sharedkey", true);
    assert_eq!(
        deliveries,
        ids("m", 20).into_iter().map(|id| (id, 3)).collect()
    );
    for gw in &run.gateways {
        assert_eq!(readyz(gw), "ready\n");
        assert_eq!(metric(gw, "verdict_history_key_mismatches_total"), 0);
    }
}

// ------------------------------------------------- an operator's hand on RabbitMQ

/// One gateway on a RabbitMQ queue whose consumer always fails (retried after 1 s, three
/// attempts); returns it with the consumer, once every message was delivered once.
fn one_rabbit_gateway(
    rabbit: &Rabbit,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    messages: &[String],
) -> (Proc, App) {
    let down = app(runtime, Behaviour::FailsFirst(u32::MAX));
    let dir = scratch(&format!("operator-{name}"));
    let config = rabbit
        .configure(base_config())
        .set("gateway.instance", "gw-operator")
        .route(route(&rabbit.queue(), "rabbitmq", &down, 1_000).set("config.max_attempts", 3))
        .write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(wait_until(Duration::from_secs(30), || readyz(&gw).starts_with("ready")));
    rabbit.publish(messages);
    assert!(wait_until(Duration::from_secs(20), || down
        .deliveries()
        .len()
        == messages.len()));
    (gw, down)
}

fn rabbitmqctl(args: &[&str]) {
    let out = std::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs beside the server");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}",
        common::text(&out.stderr)
    );
}

/// A RabbitMQ policy named `policy` (cleared when dropped).
struct Policy(String);

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["clear_policy", &self.0])
            .output();
    }
}

/// An operator's `reject-publish` length limit of 0 on the queues `pattern` matches: every
/// write to them refused until the returned policy is dropped.
fn refuse_writes(policy: String, pattern: &str) -> Policy {
    rabbitmqctl(&[
        "set_policy",
        "--apply-to",
        "queues",
        &policy,
        pattern,
        r#"{"max-length": 0, "overflow": "reject-publish"}"#,
    ]);
    Policy(policy)
}

/// An operator deletes the delay bucket's exchange while retries wait in it: the next
/// retry's publish closes the gateway's channel; the session is rebuilt (the exchange
/// declared again) and every message still ends in the DLQ after its three attempts - at
/// most one more delivery each for the settlement the closed channel lost.
#[test]
fn a_deleted_delay_exchange_is_declared_again_and_loses_nothing() {
    use verdict_gateway::sources::rabbitmq::headers::bucket_ms;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = Rabbit::new("exchange");
    let messages = ids("m", 5);
    let (gw, down) = one_rabbit_gateway(&rabbit, &runtime, "exchange", &messages);
    let exchange = format!("{}.delay.wait.{}", rabbit.prefix, bucket_ms(1_000));
    let (_conn, channel) = rabbit.channel();
    rabbit
        .runtime
        .block_on(channel.exchange_delete(exchange.as_str().into(), Default::default()))
        .unwrap();
    let dlq = format!("{}.DLQ", rabbit.queue());
    assert!(
        wait_until(Duration::from_secs(60), || rabbit.depth(&dlq) == 5),
        "dead-lettered {} of 5; deliveries {:?}; /readyz {:?}",
        rabbit.depth(&dlq),
        down.deliveries(),
        readyz(&gw)
    );
    let deliveries = down.deliveries();
    assert!(
        deliveries.values().all(|n| (3..=4).contains(n)),
        "{deliveries:?}"
    );
    assert!(wait_until(Duration::from_secs(20), || readyz(&gw) == "ready\n"));
    drop(gw);
}

/// An operator sets a `reject-publish` length limit of 0 on the delay buckets and the DLQ:
/// no retry, dead letter or release can be written. Each message is given back to be
/// delivered again at the bounded rate (three times at once, then 5 s doubling), never in
/// a requeue loop that calls the consumer without end.
#[test]
fn a_broker_refusing_every_write_gets_no_hot_loop() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = Rabbit::new("refuse");
    let messages = ids("m", 3);
    let (gw, down) = one_rabbit_gateway(&rabbit, &runtime, "refuse", &messages);
    let policy = format!("{}-refuse", rabbit.prefix);
    let pattern = format!(r"^{}\.(delay\..*|orders\.DLQ)$", rabbit.prefix);
    let _clear = refuse_writes(policy, &pattern);
    std::thread::sleep(Duration::from_secs(25));
    let deliveries = down.deliveries();
    eprintln!("deliveries in 25 s of refused writes: {deliveries:?}");
    // Three attempts, three give-backs at once, then 5 s, 10 s, ...: about ten each in
    // 25 s; a requeue loop makes thousands.
    assert!(
        deliveries.values().all(|n| *n <= 12),
        "the consumer was called without bound: {deliveries:?}"
    );
    drop(gw);
}

/// Five identical messages published without a `message_id`, a consumer that fails each id
/// once: each message gets an id of its own, kept by its retry - so each is delivered twice
/// and accepted once. (Ids made from the content alone gave all five one id: the consumer
/// saw one message accepted five times, as a consumer deduplicating by id would drop four.)
#[test]
fn identical_messages_without_an_id_get_ids_of_their_own() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = Rabbit::new("noid");
    let flaky = app(&runtime, Behaviour::FailsFirst(1));
    let dir = scratch("operator-noid");
    let config = rabbit
        .configure(base_config())
        .set("gateway.instance", "gw-noid")
        .route(route(&rabbit.queue(), "rabbitmq", &flaky, 100))
        .write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(wait_until(Duration::from_secs(30), || readyz(&gw).starts_with("ready")));
    let no_id = lapin::BasicProperties::default().with_delivery_mode(2);
    rabbit.publish_each(vec![no_id; 5]);
    assert!(
        wait_until(Duration::from_secs(30), || flaky.accepted().len() == 5),
        "accepted {:?}; deliveries {:?}",
        flaky.accepted(),
        flaky.deliveries()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        flaky.accepted().values().all(|n| *n == 1),
        "{:?}",
        flaky.accepted()
    );
    assert!(
        flaky.deliveries().values().all(|n| *n == 2),
        "{:?}",
        flaky.deliveries()
    );
    let ids: Vec<String> = flaky.deliveries().into_keys().collect();
    assert!(
        ids.iter().all(|id| id.starts_with(&rabbit.queue())),
        "{ids:?}"
    );
    drop(gw);
}

/// Retries wait in their bucket; the gateway is stopped and an operator deletes the route
/// queue (so nothing declares it again), and the retries expire while it is gone - they
/// are kept, not dropped. Once a gateway declares the queue again every one arrives and is
/// accepted once. `delay_queues` is the kind of bucket (`None`: the default); returns how
/// long the kept retries took to arrive after the gateway came back.
fn route_queue_gone_while_retries_expire(name: &str, delay_queues: Option<&str>) -> Duration {
    use lapin::options::QueueDeleteOptions;
    use verdict_gateway::sources::rabbitmq::headers::bucket_ms;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = Rabbit::new(name);
    let flaky = app(&runtime, Behaviour::FailsFirst(1));
    let dir = scratch(&format!("operator-{name}"));
    let mut settings = rabbit
        .configure(base_config())
        .set("gateway.instance", format!("gw-{name}"))
        .route(route(&rabbit.queue(), "rabbitmq", &flaky, 2_000));
    if let Some(kind) = delay_queues {
        settings = settings.set("rabbitmq.delay_queues", kind);
    }
    let config = settings.write_toml(&dir);
    let start = || {
        let gw = spawn(
            env!("CARGO_BIN_EXE_verdict"),
            &["run", "-c", config.to_str().unwrap()],
        );
        assert!(wait_until(Duration::from_secs(30), || readyz(&gw).starts_with("ready")));
        gw
    };
    let gw = start();
    let messages = ids("m", 5);
    rabbit.publish(&messages);
    let infix = if delay_queues == Some("quorum") {
        "qq"
    } else {
        "wait"
    };
    let bucket = format!("{}.delay.{infix}.{}", rabbit.prefix, bucket_ms(2_000));
    assert!(
        wait_until(Duration::from_secs(20), || rabbit.depth(&bucket) == 5),
        "five retries wait in `{bucket}`: {}; deliveries {:?}",
        rabbit.depth(&bucket),
        flaky.deliveries()
    );
    drop(gw);
    let (_conn, channel) = rabbit.channel();
    rabbit
        .runtime
        .block_on(channel.queue_delete(
            rabbit.queue().as_str().into(),
            QueueDeleteOptions::default(),
        ))
        .unwrap();
    // Past the retry delay: each retry expires while its route queue does not exist.
    std::thread::sleep(Duration::from_secs(4));
    let gw = start();
    let waited = std::time::Instant::now();
    assert!(
        wait_until(Duration::from_secs(300), || flaky.accepted().len() == 5),
        "accepted {:?} of 5 after {:?}; deliveries {:?}",
        flaky.accepted(),
        waited.elapsed(),
        flaky.deliveries()
    );
    let arrived = waited.elapsed();
    eprintln!("the kept retries arrived {arrived:?} after the route queue came back");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(flaky.accepted(), each_once(&messages));
    drop(gw);
    arrived
}

/// Classic buckets (the default) expire into the due queue, and a gateway moves each retry
/// on with a confirm: the retries that expired while their route queue was gone wait in
/// the due queue and arrive as soon as a gateway is back. (When classic buckets
/// dead-lettered straight into the route queue, at most once, all five were dropped.)
#[test]
fn retries_expiring_while_their_route_queue_is_gone_are_kept_not_dropped() {
    let arrived = route_queue_gone_while_retries_expire("hop", None);
    assert!(
        arrived < Duration::from_secs(30),
        "moved by the gateway as soon as it is back, not on the broker's timer: {arrived:?}"
    );
}

/// With `delay_queues = "quorum"` the broker moves expired retries itself, with
/// at-least-once dead-lettering: they stay in their bucket and arrive when the broker next
/// tries, about three minutes later.
#[test]
fn quorum_buckets_keep_retries_whose_route_queue_is_gone() {
    route_queue_gone_while_retries_expire("hopqq", Some("quorum"));
}

/// An operator sets a `reject-publish` length limit of 0 on the route queue while five
/// retries wait in their bucket, the gateway running: the retries expire into the due queue
/// and the route queue refuses each move. They go back to a bucket to wait (1 s doubling),
/// `/readyz` names the queue, and the consumer is not called meanwhile; once the limit is
/// cleared every retry arrives and is accepted once.
#[test]
fn a_route_queue_refusing_moves_keeps_its_retries_waiting() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rabbit = Rabbit::new("refusemove");
    let flaky = app(&runtime, Behaviour::FailsFirst(1));
    let dir = scratch("operator-refusemove");
    let config = rabbit
        .configure(base_config())
        .set("gateway.instance", "gw-refusemove")
        .route(route(&rabbit.queue(), "rabbitmq", &flaky, 2_000))
        .write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(wait_until(Duration::from_secs(30), || readyz(&gw).starts_with("ready")));
    let messages = ids("m", 5);
    rabbit.publish(&messages);
    assert!(wait_until(Duration::from_secs(20), || flaky
        .deliveries()
        .len()
        == 5));
    let policy = format!("{}-refusemove", rabbit.prefix);
    let pattern = format!(r"^{}\.orders$", rabbit.prefix);
    let clear = refuse_writes(policy, &pattern);
    assert!(
        wait_until(Duration::from_secs(20), || readyz(&gw)
            .contains("retries cannot go back to queue")),
        "/readyz: {:?}",
        readyz(&gw)
    );
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        flaky.deliveries(),
        each_once(&messages),
        "no retry reaches the consumer while its queue refuses it"
    );
    drop(clear);
    assert!(
        wait_until(Duration::from_secs(60), || flaky.accepted().len() == 5),
        "accepted {:?}; deliveries {:?}; /readyz {:?}",
        flaky.accepted(),
        flaky.deliveries(),
        readyz(&gw)
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(flaky.accepted(), each_once(&messages));
    assert!(
        flaky.deliveries().values().all(|n| *n == 2),
        "{:?}",
        flaky.deliveries()
    );
    drop(gw);
}
