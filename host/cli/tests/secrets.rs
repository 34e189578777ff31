//! No configured secret leaves the gateway. A canary is planted in every place a secret can
//! be configured - the consumer URL's user information and query, the NATS URL's password,
//! the RabbitMQ URL's password (a user the broker does not know: its refusals are quoted
//! in errors), the PostgreSQL store URL's password (the server trusts loopback, so the store
//! works) and the admin token - and every answer of every endpoint, every console page,
//! every envelope on the store and on NATS, `verdict check` and the gateway's whole log at
//! `debug` are searched for them.

mod common;

use std::time::Duration;

use common::nats::Nats;
use common::wait_until;
use verdict_tests::gateway::{Route, TestConfig};

const CANARIES: [&str; 6] = [
    "CONSUMER-PASSWORD-CANARY",
    "CONSUMER-KEY-CANARY",
    "NATS-PASSWORD-CANARY",
    "RABBIT-PASSWORD-CANARY",
    "PG-PASSWORD-CANARY",
    "ADMIN-TOKEN-CANARY",
];

/// A PostgreSQL database of the test's own, dropped at the end.
struct Database(String);

impl Database {
    fn new() -> Database {
        let name = format!("verdict_secrets_{}", std::process::id());
        Self::sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        Self::sql(&format!("CREATE DATABASE {name}"));
        Database(name)
    }

    fn sql(sql: &str) {
        let url = "postgres://postgres@127.0.0.1:5432/postgres";
        postgres::Client::connect(url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("PostgreSQL at {url} (.ci/run starts it): {e}"))
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        Self::sql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

/// A GET with the admin token and the console login; (status, body).
fn get(url: &str, path: &str, token: &str, cookie: &str) -> (u16, String) {
    let mut response = ureq::get(&format!("{url}{path}"))
        .config()
        .http_status_as_error(false)
        .build()
        .header("Authorization", &format!("Bearer {token}"))
        .header("Cookie", cookie)
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

#[test]
fn no_configured_secret_reaches_an_answer_a_page_an_envelope_or_the_log() {
    let dir = common::scratch_with_rules("secrets-canary");
    let token = "ADMIN-TOKEN-CANARY-7f3a";
    std::fs::write(dir.join("token"), format!("{token}\n")).unwrap();
    let database = Database::new();
    let nats = Nats::new("secrets");
    let p = &nats.prefix;
    let consumer =
        "http://ops:CONSUMER-PASSWORD-CANARY@127.0.0.1:9/hook?api_key=CONSUMER-KEY-CANARY";
    let route = |topic: &str, source: &str| {
        Route::new(topic, "rules")
            .set("source", source)
            .set("consumer.url", consumer)
            .set("consumer.timeout_ms", 500)
            .set("config.max_attempts", 1)
    };
    let rabbit_at = |host: &str| format!("amqp://canary:RABBIT-PASSWORD-CANARY@{host}/%2f");
    let settings = nats
        .configure_at(
            TestConfig::new(),
            "nats://canary:NATS-PASSWORD-CANARY@127.0.0.1:4222",
        )
        .set(
            "gateway.store",
            format!(
                "postgres://postgres:PG-PASSWORD-CANARY@127.0.0.1:5432/{}",
                database.0
            ),
        )
        .set("rabbitmq.url", rabbit_at("127.0.0.1:9"))
        .set("rabbitmq.delay_prefix", format!("{p}.delay"))
        .set("rabbitmq.audit_queue", format!("{p}.audit"))
        .policy("rules", "rules.wasm")
        .route(route("secrets.orders", "embedded"))
        .route(route(&nats.subject("orders"), "nats"))
        .route(route(&format!("{p}.queue"), "rabbitmq"));
    let config = settings.write_toml(&dir);

    let mut said = Vec::new();
    let check = common::verdict(&["check", "-c", config.to_str().unwrap()], None);
    said.push(common::text(&check.stdout) + &common::text(&check.stderr));

    // The broker itself refusing the login stops the start; what it says names the setting,
    // not the password. (The run below reaches no broker on port 9: it starts and waits.)
    let refused = dir.join("refused.toml");
    std::fs::write(
        &refused,
        settings
            .set("rabbitmq.url", rabbit_at("127.0.0.1:5672"))
            .text(),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["run", "-c", refused.to_str().unwrap()])
        .env_remove("VERDICT_ADMIN_TOKEN")
        .output()
        .unwrap();
    let stderr = common::text(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("rabbitmq.url") && stderr.contains("refused"),
        "{stderr}"
    );
    said.push(stderr);

    let log = dir.join("gateway.log");
    let gw = common::run_logged(&config, &log);
    let cookie = common::log_in(&gw.url, token);
    let get = |path: &str| get(&gw.url, path, token, &cookie);

    // A dead letter on the store and one on NATS, each after a consumer that is down.
    ureq::post(&format!("{}/v1/topics/secrets.orders/messages", gw.url))
        .header("Authorization", &format!("Bearer {token}"))
        .send_json(serde_json::json!({"id": "store-1", "payload": {"n": 1}}))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || get("/v1/dlq")
            .1
            .contains("store-1")),
        "the store's letter: {}",
        get("/v1/dlq").1
    );
    assert!(
        wait_until(Duration::from_secs(30), || get("/readyz")
            .1
            .contains("rabbitmq")),
        "readyz names the broker it cannot reach: {}",
        get("/readyz").1
    );
    nats.publish("orders", &["nats-1".to_string()]);
    assert!(
        wait_until(Duration::from_secs(30), || get("/v1/dlq?source=nats")
            .1
            .contains("nats-1")),
        "the NATS letter: {}",
        get("/v1/dlq?source=nats").1
    );

    let (_, letters) = get("/v1/dlq");
    let letters: serde_json::Value = serde_json::from_str(&letters).unwrap();
    let seq = letters[0]["seq"].as_i64().unwrap();
    assert!(
        letters.to_string().contains("127.0.0.1:9/hook"),
        "the letter still says where the consumer was: {letters}"
    );
    let (_, groups) = get("/v1/dlq/groups");
    let groups: serde_json::Value = serde_json::from_str(&groups).unwrap();
    let group = groups[0]["id"].as_str().unwrap().to_string();
    for path in [
        "/v1/dlq".to_string(),
        "/v1/dlq?source=nats".into(),
        "/v1/dlq?source=rabbitmq".into(),
        "/v1/dlq/groups?source=all".into(),
        "/v1/dlq/stats".into(),
        "/v1/dlq/stats?source=nats".into(),
        "/v1/dlq/stats?source=rabbitmq".into(),
        "/v1/jobs".into(),
        "/v1/status".into(),
        "/v1/routes".into(),
        "/v1/policies".into(),
        "/v1/generations".into(),
        "/readyz".into(),
        "/metrics".into(),
        "/".into(),
        "/policies".into(),
        format!("/letters/{seq}"),
        format!("/groups/{group}"),
    ] {
        let (status, body) = get(&path);
        said.push(format!("GET {path} -> {status}\n{body}"));
    }
    drop(gw);
    said.push(std::fs::read_to_string(&log).unwrap());
    let log_text = said.last().unwrap();
    assert!(
        log_text.contains("rabbitmq"),
        "the log tells of the broker it could not reach"
    );
    for text in &said {
        for canary in CANARIES {
            assert!(!text.contains(canary), "{canary} in:\n{text}");
        }
    }
}

/// A database that refuses the configured password (MariaDB's root has none here): the
/// gateway does not start, and what it says names the store without the password.
#[test]
fn a_database_refusing_its_password_is_named_without_it() {
    let dir = common::scratch_with_rules("secrets-mariadb");
    let config = TestConfig::new()
        .unset("admin.token_file")
        .set(
            "gateway.store",
            "mysql://root:MARIA-PASSWORD-CANARY@127.0.0.1:3306/verdict_refused",
        )
        .policy("rules", "rules.wasm")
        .route(Route::new("orders", "rules"))
        .write_toml(&dir);
    for args in [
        vec!["run", "-c", config.to_str().unwrap()],
        vec!["store", "migrate", "-c", config.to_str().unwrap()],
    ] {
        let out = common::verdict(&args, None);
        let said = common::text(&out.stdout) + &common::text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(
            said.contains("127.0.0.1:3306"),
            "{args:?} names the store: {said}"
        );
        assert!(!said.contains("MARIA-PASSWORD-CANARY"), "{args:?}: {said}");
    }
}
