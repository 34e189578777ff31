//! Several gateways on one PostgreSQL or MariaDB database, through the real binaries: they share the
//! work without delivering a message twice, a `kill -9`'d one's messages are delivered by
//! the others once its leases expire, and a database lost mid-run (every connection cut,
//! new ones refused, as in a restart) makes `/readyz` answer 503 naming the store until it
//! is back - nothing lost, nothing settled twice.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{Proc, accepted, consumer, ordered_consumer, rules, spawn, text, verdict, wait_until};
use verdict_cli::demo::{Behaviour, by_percent};
use verdict_gateway::store::Store;
use verdict_tests::gateway::{Route, TestConfig};

/// The database servers a shared store runs on, on loopback.
#[derive(Clone, Copy, Debug)]
enum Server {
    Postgres,
    Mariadb,
}

impl Server {
    fn url(self) -> String {
        match self {
            Server::Postgres => std::env::var("VERDICT_TEST_POSTGRES")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_string()),
            Server::Mariadb => std::env::var("VERDICT_TEST_MYSQL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_string()),
        }
    }

    fn admin_sql(self, sql: &str) {
        use mysql::prelude::Queryable as _;
        match self {
            Server::Postgres => {
                let url = format!("{}/postgres", self.url());
                postgres::Client::connect(&url, postgres::NoTls)
                    .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"))
                    .batch_execute(sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            Server::Mariadb => {
                let url = self.url();
                mysql::Conn::new(mysql::Opts::from_url(&url).unwrap())
                    .unwrap_or_else(|e| panic!("MariaDB at {url}: {e}"))
                    .query_drop(sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }
    }
}

/// A database of the test's own on `server`, dropped at the end.
struct Database(String, Server);

impl Database {
    fn new(server: Server) -> Database {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "verdict_gw_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        server.admin_sql(&format!("CREATE DATABASE {name}"));
        Database(name, server)
    }

    fn url(&self) -> String {
        format!("{}/{}", self.1.url(), self.0)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let force = match self.1 {
            Server::Postgres => " WITH (FORCE)",
            Server::Mariadb => "",
        };
        self.1
            .admin_sql(&format!("DROP DATABASE IF EXISTS {}{force}", self.0));
    }
}

fn admin_sql(sql: &str) {
    Server::Postgres.admin_sql(sql);
}

/// Gateway `n`'s directory and config: its own admin port and state, the shared store.
fn gateway_config(dir: &Path, n: u32, store: &str, consumer_url: &str) -> PathBuf {
    gateway_config_leasing(dir, n, store, consumer_url, 3_000)
}

/// The same, with leases of `lease_ms`: short where a test waits for a dead gateway's
/// leases to expire, long where a machine busy with other tests must not expire any.
fn gateway_config_leasing(
    dir: &Path,
    n: u32,
    store: &str,
    consumer_url: &str,
    lease_ms: u64,
) -> PathBuf {
    write_in(dir, n, &gateway_settings(n, store, consumer_url, lease_ms))
}

/// What [`gateway_config_leasing`] writes.
fn gateway_settings(n: u32, store: &str, consumer_url: &str, lease_ms: u64) -> TestConfig {
    settings_routing(n, store, lease_ms, orders_route(consumer_url))
}

/// The route `orders` to the consumer at `consumer_url`, decided by `rules`.
fn orders_route(consumer_url: &str) -> Route {
    Route::new("orders", "rules")
        .consumer(&format!("{consumer_url}/"))
        .config(verdict_tests::fixtures::RULES_CONFIG)
}

/// Gateway `n` on `store`, leasing for `lease_ms`, with `route`.
fn settings_routing(n: u32, store: &str, lease_ms: u64, route: Route) -> TestConfig {
    TestConfig::new()
        .set("gateway.instance", format!("gw-{n}"))
        .set("gateway.store", store)
        .set("gateway.lease_ms", lease_ms as i64)
        .policy("rules", "rules.wasm")
        .route(route)
}

/// `config` in gateway `n`'s directory, beside the rules component and the token file; the
/// config's path.
fn write_in(dir: &Path, n: u32, config: &TestConfig) -> PathBuf {
    let dir = dir.join(format!("gw-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    config.write_toml(&dir)
}

fn gateway(config: &Path) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    )
}

fn publish(gw: &Proc, dir: &Path, n: u32) {
    let lines: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id": "m-{i}", "payload": {{"order": {i}}}}}"#))
        .collect();
    publish_lines(gw, dir, &lines);
}

/// `lines` (JSONL, one message each) published on `orders` with `verdict publish --batch`.
fn publish_lines(gw: &Proc, dir: &Path, lines: &[String]) {
    let batch = dir.join("batch.jsonl");
    std::fs::write(&batch, lines.join("\n")).unwrap();
    let token = dir.join("gw-1/token");
    let out = verdict(
        &[
            "publish",
            "--admin",
            &gw.url,
            "--token-file",
            token.to_str().unwrap(),
            "--topic",
            "orders",
            "--batch",
            batch.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn consumer_stats(consumer: &Proc) -> serde_json::Value {
    ureq::get(&format!("{}/stats", consumer.url))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every message delivered or dead, as the consumer's answers say it must be.
fn assert_settled(store: &Store, n: u32) {
    assert!(
        wait_until(Duration::from_secs(120 + u64::from(n) / 50), || store
            .counts()
            .is_ok_and(|c| c.pending() == 0 && c.total() == u64::from(n))),
        "{:?}",
        store.counts()
    );
    let rule = by_percent(20, 5);
    let permanent = (0..n)
        .filter(|i| rule(&format!("m-{i}")) == Behaviour::Permanent)
        .count() as u64;
    let counts = store.counts().unwrap();
    assert_eq!(
        (counts.delivered, counts.dead),
        (u64::from(n) - permanent, permanent),
        "{counts:?}"
    );
}

#[test]
fn three_gateways_share_one_postgres_database_and_a_killed_one_loses_nothing() {
    three_gateways_and_a_kill(Server::Postgres);
}

#[test]
fn three_gateways_share_one_mariadb_database_and_a_killed_one_loses_nothing() {
    three_gateways_and_a_kill(Server::Mariadb);
}

fn three_gateways_and_a_kill(server: Server) {
    let dir = scratch(&format!("shared-store-kill-{server:?}"));
    let db = Database::new(server);
    let app = consumer("127.0.0.1:0", 5);
    let configs: Vec<PathBuf> = (1..=3)
        .map(|n| gateway_config(&dir, n, &db.url(), &app.url))
        .collect();
    let first = gateway(&configs[0]);
    let mut second = gateway(&configs[1]);
    let _third = gateway(&configs[2]);
    // `VERDICT_SHARED_STORE_MESSAGES=10000` runs the full-size demonstration.
    let n: u32 = std::env::var("VERDICT_SHARED_STORE_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    publish(&first, &dir, n);
    assert!(wait_until(Duration::from_secs(600), || accepted(&app)
        >= u64::from(n / 5)));
    second.child.kill().unwrap();
    second.child.wait().unwrap();

    let store = Store::connect(&db.url(), &dir).unwrap();
    assert_settled(&store, n);
    // The killed gateway's leases expired and were claimed by the others: each such
    // redelivery is audited, and only those can have reached the consumer twice.
    let redelivered = store.audit_count("lease-expired").unwrap();
    let duplicates = consumer_stats(&app)["duplicates"].as_u64().unwrap();
    eprintln!(
        "{server:?}: kill -9 of one of three gateways: {duplicates} duplicate(s), {redelivered} lease(s) taken over"
    );
    assert!(duplicates <= redelivered, "{duplicates} > {redelivered}");
    // The DLQ tools read the shared store through any gateway's config.
    let stats = verdict(
        &["dlq", "stats", "--json", "-c", configs[2].to_str().unwrap()],
        None,
    );
    assert!(stats.status.success(), "{}", text(&stats.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(
        stats[0]["depth"].as_u64(),
        Some(store.counts().unwrap().dead)
    );
}

#[test]
fn ordered_keys_on_postgres_stay_in_publish_order_through_a_kill() {
    ordered_keys_through_a_kill(Server::Postgres);
}

#[test]
fn ordered_keys_on_mariadb_stay_in_publish_order_through_a_kill() {
    ordered_keys_through_a_kill(Server::Mariadb);
}

/// Ten keys of 100 messages each, published interleaved on a route ordered by key, shared
/// by three gateways on one database at concurrency 8 each; a fifth of the messages fail
/// one to three times first, one in twenty is refused for good (dead-lettered at once, which
/// lets its key go on); one gateway is killed (`kill -9`) part-way. The consumer checks every
/// delivery as it arrives: none may come before its key's previous message was finished.
/// The killed gateway's messages stay leased - holding their keys back - until their leases
/// expire and another gateway takes them over; then every message ends delivered or
/// dead-lettered, no key stalled.
fn ordered_keys_through_a_kill(server: Server) {
    const KEYS: u32 = 10;
    const PER_KEY: u32 = 100;
    let dir = scratch(&format!("shared-store-ordered-{server:?}"));
    let db = Database::new(server);
    let app = ordered_consumer(5);
    let route = orders_route(&app.url)
        .set("ordering", "key")
        .set("key_header", "order-id")
        .set("consumer.concurrency", 8);
    let configs: Vec<PathBuf> = (1..=3)
        .map(|n| {
            write_in(
                &dir,
                n,
                &settings_routing(n, &db.url(), 3_000, route.clone()),
            )
        })
        .collect();
    let first = gateway(&configs[0]);
    let mut second = gateway(&configs[1]);
    let _third = gateway(&configs[2]);
    let lines: Vec<String> = (0..PER_KEY)
        .flat_map(|n| {
            (0..KEYS).map(move |k| {
                format!(
                    r#"{{"id": "m-{}", "payload": {{"key": {k}, "n": {n}}}, "headers": {{"Order-Id": "key-{k}", "Order-Seq": "{n}"}}}}"#,
                    n * KEYS + k
                )
            })
        })
        .collect();
    publish_lines(&first, &dir, &lines);
    let total = KEYS * PER_KEY;
    assert!(wait_until(Duration::from_secs(600), || accepted(&app)
        >= u64::from(total / 5)));
    second.child.kill().unwrap();
    second.child.wait().unwrap();

    let store = Store::connect(&db.url(), &dir).unwrap();
    assert_settled(&store, total);
    let stats = consumer_stats(&app);
    let redelivered = store.audit_count("lease-expired").unwrap();
    eprintln!(
        "{server:?}: {total} ordered messages, kill -9 of one of three gateways: {} \
         overtaken, {} duplicate(s), {redelivered} lease(s) taken over",
        stats["overtaken"], stats["duplicates"]
    );
    assert_eq!(stats["overtaken"], 0, "{}", stats["overtakes"]);
    assert_eq!(
        stats["ordered"], stats["deliveries"],
        "every delivery checked: {stats}"
    );
    assert!(
        stats["duplicates"].as_u64().unwrap() <= redelivered,
        "{stats}"
    );
}

#[test]
fn competing_gateways_on_postgres_without_a_fault_deliver_each_message_once() {
    competing_without_a_fault(Server::Postgres);
}

#[test]
fn competing_gateways_on_mariadb_without_a_fault_deliver_each_message_once() {
    competing_without_a_fault(Server::Mariadb);
}

fn competing_without_a_fault(server: Server) {
    let dir = scratch(&format!("shared-store-clean-{server:?}"));
    let db = Database::new(server);
    let app = consumer("127.0.0.1:0", 5);
    let gateways: Vec<Proc> = (1..=3)
        .map(|n| {
            gateway(&gateway_config_leasing(
                &dir,
                n,
                &db.url(),
                &app.url,
                60_000,
            ))
        })
        .collect();
    publish(&gateways[0], &dir, 500);
    let store = Store::connect(&db.url(), &dir).unwrap();
    assert_settled(&store, 500);
    let duplicates = consumer_stats(&app)["duplicates"].clone();
    let expired = store.audit_count("lease-expired").unwrap();
    assert_eq!((duplicates.as_u64(), expired), (Some(0), 0));
    // Each gateway took a share: the work was shared, not serialised on one.
    for gw in &gateways {
        let metrics = ureq::get(&format!("{}/metrics", gw.url))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        let delivered: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("verdict_deliveries_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(delivered > 0.0, "{} delivered nothing:\n{metrics}", gw.url);
    }
    // Each stops cleanly on SIGTERM: letting go of the database must not panic the
    // gateway (the PostgreSQL driver cannot close a connection on an async worker).
    for mut gw in gateways {
        let pid = gw.child.id().to_string();
        assert!(
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = gw.child.wait().unwrap();
        assert!(
            status.success(),
            "{server:?}: the gateway exited with {status}"
        );
    }
}

#[test]
fn a_postgres_database_lost_mid_run_is_named_by_readyz_and_nothing_is_lost() {
    database_lost_mid_run(Server::Postgres);
}

#[test]
fn a_mariadb_database_lost_mid_run_is_named_by_readyz_and_nothing_is_lost() {
    database_lost_mid_run(Server::Mariadb);
}

/// The database drops every connection of the gateway's and refuses new ones while
/// deliveries run, as it does when it restarts; then it is back - and nothing was
/// delivered twice.
fn database_lost_mid_run(server: Server) {
    let dir = scratch(&format!("shared-store-down-{server:?}"));
    let db = Database::new(server);
    let outage = Outage::new(&db);
    let app = consumer("127.0.0.1:0", 5);
    // Leases longer than the outage: what the consumer answered meanwhile is written once
    // the database is back, under the lease its delivery still holds.
    let gw = gateway(&gateway_config_leasing(
        &dir,
        1,
        &outage.url(),
        &app.url,
        20_000,
    ));
    let ready = || ureq::get(&format!("{}/readyz", gw.url)).call().is_ok();
    assert!(wait_until(Duration::from_secs(10), ready));
    let n = 1_000;
    publish(&gw, &dir, n);
    assert!(wait_until(Duration::from_secs(60), || accepted(&app) >= 50));

    outage.begin();
    let readyz = || {
        let mut answer = ureq::get(&format!("{}/readyz", gw.url))
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap();
        (
            answer.status().as_u16(),
            answer.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    // The answer that says not ready is the one read: a store call already under way on a
    // connection not yet cut may still succeed and say ready for a moment after it.
    let mut body = String::new();
    assert!(wait_until(Duration::from_secs(10), || {
        let (status, said) = readyz();
        body = said;
        status == 503
    }));
    assert!(body.contains(&format!("/{}", db.0)), "{body}");
    assert!(
        !body.contains("://"),
        "never the URL, which may hold a password: {body}"
    );
    let during = accepted(&app);
    std::thread::sleep(Duration::from_secs(1));

    outage.end();
    assert!(wait_until(Duration::from_secs(30), ready));
    let store = Store::connect(&db.url(), &dir).unwrap();
    assert_settled(&store, n);
    // Deliveries that were under way when the database went are settled once it is back,
    // under the leases they held: their outcomes are written again while the leases last,
    // never given up to a redelivery. (Before, each outcome that met the outage was
    // released - "not recorded" below - and its message delivered again.)
    let duplicates = consumer_stats(&app)["duplicates"].as_u64().unwrap();
    let redelivered = store.audit_count("lease-expired").unwrap();
    let unrecorded = common::metric_at(
        &gw.url,
        "verdict_settlement_faults_total{source=\"embedded\",reason=\"released\"}",
    );
    eprintln!(
        "{server:?}: database lost after {during} of {n} accepted: {duplicates} duplicate(s), \
         {redelivered} lease(s) expired, {unrecorded} outcome(s) not recorded"
    );
    // Leases may still expire without a duplicate: a claim that committed as its
    // connection was cut never reached the gateway, and its messages are delivered (for
    // the first time) once those leases run out.
    assert_eq!(
        (duplicates, unrecorded),
        (0, 0),
        "duplicates, outcomes not recorded"
    );
}

/// Takes the database away from the gateway and gives it back: on PostgreSQL the database
/// refuses connections; on MariaDB the gateway's own user is locked. Either way every
/// connection the gateway holds is cut.
struct Outage<'a> {
    db: &'a Database,
    /// MariaDB: the gateway's user, dropped at the end.
    user: Option<String>,
}

impl<'a> Outage<'a> {
    fn new(db: &'a Database) -> Outage<'a> {
        let user = match db.1 {
            Server::Postgres => None,
            Server::Mariadb => {
                let user = format!("{}_gw", db.0);
                db.1.admin_sql(&format!(
                    "CREATE USER '{user}'@'%'; GRANT ALL ON {}.* TO '{user}'@'%'",
                    db.0
                ));
                Some(user)
            }
        };
        Outage { db, user }
    }

    /// The URL the gateway connects with.
    fn url(&self) -> String {
        match &self.user {
            None => self.db.url(),
            Some(user) => format!("mysql://{user}@127.0.0.1:3306/{}", self.db.0),
        }
    }

    fn begin(&self) {
        match &self.user {
            None => admin_sql(&format!(
                "ALTER DATABASE {0} ALLOW_CONNECTIONS false;
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{0}'",
                self.db.0
            )),
            Some(user) => {
                use mysql::prelude::Queryable as _;
                self.db
                    .1
                    .admin_sql(&format!("ALTER USER '{user}'@'%' ACCOUNT LOCK"));
                let url = self.db.1.url();
                let mut admin = mysql::Conn::new(mysql::Opts::from_url(&url).unwrap()).unwrap();
                let ids: Vec<u64> = admin
                    .exec(
                        "SELECT id FROM information_schema.processlist WHERE user = ?",
                        (user,),
                    )
                    .unwrap();
                for id in ids {
                    // A connection that ended meanwhile is not an error here.
                    let _ = admin.query_drop(format!("KILL CONNECTION {id}"));
                }
            }
        }
    }

    fn end(&self) {
        match &self.user {
            None => admin_sql(&format!(
                "ALTER DATABASE {} ALLOW_CONNECTIONS true",
                self.db.0
            )),
            Some(user) => self
                .db
                .1
                .admin_sql(&format!("ALTER USER '{user}'@'%' ACCOUNT UNLOCK")),
        }
    }
}

impl Drop for Outage<'_> {
    fn drop(&mut self) {
        if let Some(user) = &self.user {
            self.db
                .1
                .admin_sql(&format!("DROP USER IF EXISTS '{user}'@'%'"));
        }
    }
}

#[test]
fn connections_cut_under_a_postgres_gateway_are_made_again_and_the_call_runs_once_more() {
    connections_cut(Server::Postgres);
}

#[test]
fn connections_cut_under_a_mariadb_gateway_are_made_again_and_the_call_runs_once_more() {
    connections_cut(Server::Mariadb);
}

/// Every connection to the gateway's database cut (`pg_terminate_backend`, `KILL`) right
/// before each of five publishes: the call that meets a dead session reconnects and runs
/// once more, so every publish is taken (no 503) and every message is delivered once.
fn connections_cut(server: Server) {
    let dir = scratch(&format!("shared-store-cut-{server:?}"));
    let db = Database::new(server);
    let consumer = common::healthy_consumer();
    let gw = gateway(&gateway_config(&dir, 1, &db.url(), &consumer.url));
    let cut = || match server {
        Server::Postgres => server.admin_sql(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{}' AND pid <> pg_backend_pid()",
            db.0
        )),
        Server::Mariadb => {
            use mysql::prelude::Queryable as _;
            let mut conn = mysql::Conn::new(mysql::Opts::from_url(&server.url()).unwrap()).unwrap();
            let ids: Vec<u64> = conn
                .exec(
                    "SELECT id FROM information_schema.processlist WHERE db = ?",
                    (&db.0,),
                )
                .unwrap();
            for id in ids {
                let _ = conn.query_drop(format!("KILL {id}"));
            }
        }
    };
    for round in 0..5 {
        cut();
        common::publish_batch(
            &gw.url,
            &dir.join("gw-1"),
            "orders",
            &format!("r{round}"),
            10,
        );
    }
    assert!(
        wait_until(Duration::from_secs(60), || accepted(&consumer) >= 50),
        "accepted {}",
        accepted(&consumer)
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(accepted(&consumer), 50, "each once");
}

#[test]
fn a_gateway_polling_every_ten_minutes_still_delivers_at_once_and_retries_on_time() {
    let dir = scratch("shared-store-wake");
    let db = Database::new(Server::Postgres);
    let app = consumer("127.0.0.1:0", 5);
    let slow = gateway_settings(1, &db.url(), &app.url, 3_000).set("gateway.poll_ms", 600_000);
    let gw = gateway(&write_in(&dir, 1, &slow));
    assert!(wait_until(Duration::from_secs(10), || ureq::get(&format!(
        "{}/readyz",
        gw.url
    ))
    .call()
    .is_ok()));
    // Published by another process (not through this gateway, which would wake itself):
    // only the database's notification can wake it before ten minutes are up; the retries
    // (20 ms apart) are claimed on time only if it sleeps until the next one falls due.
    std::thread::sleep(Duration::from_millis(300));
    let store = Store::connect(&db.url(), &dir).unwrap();
    let messages: Vec<verdict_gateway::store::NewMessage> = (0..200)
        .map(|i| verdict_gateway::store::NewMessage {
            id: format!("m-{i}"),
            topic: "orders".into(),
            payload: format!("{{\"order\": {i}}}").into_bytes(),
            ..Default::default()
        })
        .collect();
    store
        .publish(&messages, verdict_gateway::pipeline::now_ms())
        .unwrap();
    let started = std::time::Instant::now();
    assert_settled(&store, 200);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "settled only after {:?}: the poll found the work, nothing woke the gateway",
        started.elapsed()
    );
}

#[test]
fn verdict_store_migrate_on_postgres_creates_the_schema_and_hides_the_password() {
    store_migrate(Server::Postgres);
}

#[test]
fn verdict_store_migrate_on_mariadb_creates_the_schema_and_hides_the_password() {
    store_migrate(Server::Mariadb);
}

fn store_migrate(server: Server) {
    let dir = scratch(&format!("shared-store-migrate-{server:?}"));
    let db = Database::new(server);
    // A password in the URL must not be shown (PostgreSQL trusts loopback and ignores it;
    // MariaDB's root has none, so there the URL keeps none).
    let url = match server {
        Server::Postgres => db.url().replace("postgres@", "postgres:s3cret@"),
        Server::Mariadb => db.url(),
    };
    let config = gateway_config(&dir, 1, &url, "http://127.0.0.1:9");
    let out = verdict(&["store", "migrate", "-c", config.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let latest = match server {
        Server::Postgres => verdict_gateway::store::postgres::MIGRATIONS.len(),
        Server::Mariadb => verdict_gateway::store::mysql::MIGRATIONS.len(),
    };
    assert_eq!(status["schema_version"], latest, "{status}");
    let expected = match server {
        Server::Postgres => format!("postgres 127.0.0.1:5432/{}", db.0),
        Server::Mariadb => format!("mysql 127.0.0.1:3306/{}", db.0),
    };
    assert_eq!(status["store"], expected);
    assert_eq!(status["messages"]["ready"], 0);
    assert!(!text(&out.stdout).contains("s3cret"));
    if let Server::Postgres = server {
        // A server that does not vacuum on its own is named: the store's tables would
        // bloat and its claims slow down. (This machine's CI server runs without it.)
        let off = postgres::Client::connect(&db.url(), postgres::NoTls)
            .unwrap()
            .query_one("SELECT current_setting('autovacuum') = 'off'", &[])
            .unwrap()
            .get::<_, bool>(0);
        assert_eq!(
            text(&out.stderr).contains("autovacuum is off"),
            off,
            "{}",
            text(&out.stderr)
        );
    }
    // The operator's views are there to look with SQL.
    for view in ["pending", "scheduled", "dead"] {
        let sql = format!("SELECT * FROM {view}");
        match server {
            Server::Postgres => {
                postgres::Client::connect(&db.url(), postgres::NoTls)
                    .unwrap()
                    .batch_execute(&sql)
                    .unwrap_or_else(|e| panic!("view {view}: {e}"));
            }
            Server::Mariadb => server.admin_sql(&format!("SELECT * FROM {}.{view}", db.0)),
        }
    }
    // A second run finds it current; an unknown scheme is refused naming the setting.
    let again = verdict(&["store", "migrate", "-c", config.to_str().unwrap()], None);
    assert!(again.status.success(), "{}", text(&again.stderr));
    if let Server::Mariadb = server {
        // DDL is not transactional on MariaDB: a migration cut off part-way (here: nothing
        // recorded, a view and a column of earlier migrations and the last one's index
        // missing, everything else made) runs again whole and completes - before, it
        // stopped at "Table 'messages' already exists" on every start from then on.
        server.admin_sql(&format!(
            "DELETE FROM {0}.verdict_schema; DROP VIEW {0}.dead; \
             ALTER TABLE {0}.dlq DROP COLUMN repeats; \
             ALTER TABLE {0}.messages DROP KEY messages_keyed",
            db.0
        ));
        let resumed = verdict(&["store", "migrate", "-c", config.to_str().unwrap()], None);
        assert!(resumed.status.success(), "{}", text(&resumed.stderr));
        let status: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
        assert_eq!(status["schema_version"], latest, "{status}");
        server.admin_sql(&format!(
            "SELECT repeats FROM {0}.dlq; SELECT * FROM {0}.dead; \
             SELECT `key` FROM {0}.messages FORCE INDEX (messages_keyed)",
            db.0
        ));
    }
    let bad = gateway_config(&dir, 2, "oracle://db/x", "http://127.0.0.1:9");
    let out = verdict(&["store", "migrate", "-c", bad.to_str().unwrap()], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("[gateway] store") && text(&out.stderr).contains("postgres://"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn gateways_whose_clocks_are_30s_apart_on_postgres_neither_duplicate_nor_retry_early() {
    skewed_clocks(Server::Postgres);
}

#[test]
fn gateways_whose_clocks_are_30s_apart_on_mariadb_neither_duplicate_nor_retry_early() {
    skewed_clocks(Server::Mariadb);
}

/// Three gateways on one database, one on the true clock, one 30 s ahead and one 30 s
/// behind (Debian's `faketime`). A healthy consumer taking 2 s per message must see each
/// message once (a gateway whose clock is ahead must not take its peers' live leases for
/// expired), and a consumer that always fails must see no retry before its 5 s delay (a
/// retry scheduled by a gateway whose clock is behind must not fall due early). The store
/// measures every instant on the database's clock.
fn skewed_clocks(server: Server) {
    use verdict_cli::demo::DemoConsumer;
    // libfaketime preloaded into the gateway itself: the `faketime` command runs its
    // program as a child, which the test's kill at the end would leave running.
    let libfaketime = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|lib| lib.is_file())
        .expect("this test runs gateways with Debian's libfaketime (apt-get install faketime)");
    let dir = scratch(&format!("shared-store-skew-{server:?}"));
    let db = Database::new(server);
    // `slow-*` take 1 s and succeed; `fail-*` are answered 503 every time.
    let app = DemoConsumer::new(|id: &str| {
        if id.starts_with("fail-") {
            Behaviour::FailsFirst(u32::MAX)
        } else {
            Behaviour::Slow(2_000)
        }
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let consumer_url = format!("http://{}", listener.local_addr().unwrap());
    let router = app.router();
    runtime.spawn(async move { axum::serve(listener, router).await });

    // The gateway on the true clock starts alone and takes the work; the skewed ones
    // join while it holds leases on deliveries still running.
    let verdict_bin = env!("CARGO_BIN_EXE_verdict");
    let config = |n: u32| skew_config(&dir, n, &db.url(), &consumer_url);
    let first = spawn(verdict_bin, &["run", "-c", config(1).to_str().unwrap()]);
    let batch = dir.join("batch.jsonl");
    let mut lines: Vec<String> = (0..20)
        .map(|i| format!(r#"{{"id": "slow-{i}", "payload": {{"order": {i}}}}}"#))
        .collect();
    lines.extend((0..10).map(|i| format!(r#"{{"id": "fail-{i}", "payload": {{"order": {i}}}}}"#)));
    std::fs::write(&batch, lines.join("\n")).unwrap();
    let token = dir.join("gw-1/token");
    let out = verdict(
        &[
            "publish",
            "--admin",
            &first.url,
            "--token-file",
            token.to_str().unwrap(),
            "--topic",
            "orders",
            "--batch",
            batch.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(wait_until(Duration::from_secs(20), || app
        .seen()
        .deliveries
        .len()
        >= 10));
    let _skewed: Vec<Proc> = ["+30s", "-30s"]
        .into_iter()
        .zip(2..)
        .map(|(skew, n)| {
            let config = config(n);
            common::spawn_with_env(
                verdict_bin,
                &["run", "-c", config.to_str().unwrap()],
                &[
                    ("LD_PRELOAD", libfaketime.to_str().unwrap()),
                    ("FAKETIME", skew),
                ],
            )
        })
        .collect();

    let store = Store::connect(&db.url(), &dir).unwrap();
    assert!(
        wait_until(Duration::from_secs(120), || store
            .counts()
            .is_ok_and(|c| c.pending() == 0 && c.total() == 30)),
        "{:?}",
        store.counts()
    );
    let counts = store.counts().unwrap();
    assert_eq!((counts.delivered, counts.dead), (20, 10), "{counts:?}");
    let seen = app.seen();
    assert_eq!(
        (
            seen.duplicates(),
            store.audit_count("lease-expired").unwrap()
        ),
        (0, 0),
        "{server:?}: no fault, yet a message was delivered twice: {:?}",
        seen.accepted
    );
    // Each failing message was delivered 3 times (max_attempts), 5 s apart at least.
    for i in 0..10 {
        assert_eq!(
            seen.deliveries.get(&format!("fail-{i}")),
            Some(&3),
            "{seen:?}"
        );
    }
    let (id, gap) = app.shortest_redelivery_gap().unwrap();
    assert!(
        gap >= Duration::from_millis(4_500),
        "{server:?}: a retry of {id} came {gap:?} after the delivery before it; its delay is 5 s"
    );
}

/// Gateway `n`: route `orders` retries 503s every 5 s, three attempts in all; leases of
/// 10 s, kept alive while a delivery runs. The policy has a second per decision: under the
/// default 10 ms a loaded machine times decisions out, and the fallback's retries (full
/// jitter from 1 s) come sooner than the policy's 5 s - a policy fault, not a clock.
fn skew_config(dir: &Path, n: u32, store: &str, consumer_url: &str) -> PathBuf {
    let config = TestConfig::new()
        .set("sandbox.decide_timeout_ms", 1000)
        .set("gateway.instance", format!("gw-{n}"))
        .set("gateway.store", store)
        .set("gateway.lease_ms", 10_000)
        .policy("rules", "rules.wasm")
        .route(
            Route::new("orders", "rules")
                .set("consumer.url", format!("{consumer_url}/"))
                .set("consumer.timeout_ms", 5000)
                .config(
                    r#"{ max_attempts = 3, rules = [
    { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
    { match = ["http.5*", "transport.*"], retry = { strategy = "fixed", delay_ms = 5000, jitter = "none" } },
] }"#,
                ),
        );
    write_in(dir, n, &config)
}

/// A database the server refuses (here: one that does not exist) is said once, in the
/// server's words, on one line - not again as the driver's "db error" and the server's raw
/// `FATAL:` lines behind it - and the password in the URL never.
#[test]
fn a_refused_database_is_said_once_on_one_line() {
    let dir = scratch("shared-store-refused");
    let url = "postgres://postgres:s3cret@127.0.0.1:5432/verdict_no_such_database";
    let config = gateway_config(&dir, 1, url, "http://127.0.0.1:9");
    let out = verdict(&["store", "migrate", "-c", config.to_str().unwrap()], None);
    assert!(!out.status.success());
    let said = text(&out.stderr);
    let error: Vec<&str> = said.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error.len(), 1, "{said}");
    assert!(error[0].contains("verdict_no_such_database"), "{said}");
    assert_eq!(
        error[0].matches("does not exist").count(),
        1,
        "said once: {said}"
    );
    assert!(
        !said.contains("db error") && !said.contains("FATAL"),
        "{said}"
    );
    assert!(!said.contains("s3cret"), "{said}");
}
