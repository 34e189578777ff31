//! Kafka over TLS (and SASL over TLS), through the real binary built with the `kafka`
//! feature, against a Kafka-compatible broker of the test's own (nisshi, as `.ci/run`
//! installs it) whose only listener is TLS with a certificate from the test's CA:
//! - the gateway trusting that CA consumes 100 records, each delivered once, and
//!   `verdict check --probe` reports the cluster over TLS;
//! - a CA that did not issue the broker's certificate, and plaintext to the TLS listener,
//!   are refused, and the probe and `/readyz` name `[kafka] tls`;
//! - SCRAM-SHA-512 and SCRAM-SHA-256 logins over TLS, the password from a file, consume too
//!   (the broker then stores its users in a PostgreSQL database of the test's own), and a
//!   wrong password is refused, the probe and `/readyz` naming `[kafka] sasl`.
#![cfg(feature = "kafka")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{kafka, spawn, wait_until};
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tests::kafka::KafkaFixture;
use verdict_tls::test_pki::{Leaf, Pki};

/// A nisshi of this test's own: TLS only, killed when dropped. In memory; or, when it asks
/// clients to log in, on a PostgreSQL database of its own (where it keeps its SCRAM users),
/// dropped with it.
struct TlsKafka {
    port: u16,
    child: Child,
    database: Option<String>,
}

/// A SCRAM user the broker knows: name, password, `scram256` or `scram512`.
type User<'a> = (&'a str, &'a str, &'a str);

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

impl TlsKafka {
    /// A TLS-only broker with `leaf`'s certificate; with `users`, one that wants a SCRAM
    /// login and knows them.
    fn start(leaf: &Leaf, name: &str, users: &[User<'_>]) -> TlsKafka {
        let port = kafka::free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let database =
            (!users.is_empty()).then(|| format!("verdict_kafka_{name}_{}", std::process::id()));
        let storage = match &database {
            Some(db) => kafka::fresh_database(db),
            None => format!("memory://tls{port}/"),
        };
        let broker = |extra: &[String]| {
            let mut args = vec![
                "broker".to_string(),
                "--listener-url".into(),
                url.clone(),
                "--advertised-listener-url".into(),
                url.clone(),
                "--storage-engine".into(),
                storage.clone(),
                "--group-initial-rebalance-delay".into(),
                "0s".into(),
                "--silent".into(),
            ];
            args.extend_from_slice(extra);
            let child = Command::new(kafka::nisshi())
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{} (installed by .ci/run): {e}", kafka::nisshi()));
            assert!(
                wait_until(Duration::from_secs(30), || listening(port)),
                "nisshi listens on {port}"
            );
            child
        };
        if !users.is_empty() {
            // Users are made through the broker, before it asks for a login.
            let mut open = broker(&[]);
            for (user, password, mechanism) in users {
                let made = Command::new(kafka::nisshi())
                    .args(["user", "create", "--broker", &url, "--mechanism", mechanism])
                    .args([user, password])
                    .output()
                    .unwrap();
                assert!(
                    made.status.success(),
                    "nisshi user create {user}: {}",
                    String::from_utf8_lossy(&made.stderr)
                );
            }
            let _ = open.kill();
            let _ = open.wait();
            assert!(wait_until(Duration::from_secs(10), || !listening(port)));
        }
        let mut tls = vec![
            "--cert".to_string(),
            leaf.cert.display().to_string(),
            "--key".into(),
            leaf.key.display().to_string(),
        ];
        if !users.is_empty() {
            tls.push("--authentication".into());
        }
        let child = broker(&tls);
        TlsKafka {
            port,
            child,
            database,
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsKafka {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(db) = &self.database {
            kafka::drop_database(db);
        }
    }
}

/// The fixture's own clients speak TLS (and log in as `fixture` where the broker wants it)
/// with `pki`'s CA.
fn fixture(kafka: &TlsKafka, pki: &Pki, name: &str, sasl: bool) -> KafkaFixture {
    let ca = pki.ca_file().display().to_string();
    let mut settings = vec![("ssl.ca.location", ca.as_str())];
    if sasl {
        settings.extend([
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "fixture"),
            ("sasl.password", "fixture-pass"),
        ]);
    } else {
        settings.push(("security.protocol", "ssl"));
    }
    KafkaFixture::on_with(&kafka.bootstrap(), name, &settings)
}

/// A config of the fixture's `orders` route with `extra` lines in `[kafka]`.
fn write_config(dir: &Path, fixture: &KafkaFixture, extra: &str, consumer: &str) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(common::rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("kafka.pass"), "s3cret-kafka\n").unwrap();
    TestConfig::new()
        .unset("admin.token_file")
        .policy("rules", "rules.wasm")
        .merge("", &format!("{}{extra}\n", fixture.section()))
        .route(
            Route::new(&fixture.topic("orders"), "rules")
                .set("source", "kafka")
                .config(
                    r#"{ max_attempts = 8, rules = [
                        { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
                        { match = ["http.5*", "transport.*"], retry = { strategy = "fixed", delay_ms = 50 } },
                    ] }"#,
                )
                .consumer(&format!("{consumer}/")),
        )
        .write_toml(dir)
}

/// What `verdict check --probe` saw of Kafka when it failed (it exits non-zero, saying so).
fn failed_probe(config: &Path) -> serde_json::Value {
    let out = common::verdict(&["check", "-c", config.to_str().unwrap(), "--probe"], None);
    assert!(!out.status.success(), "{}", common::text(&out.stdout));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    summary["probe"]
        .as_array()
        .and_then(|probes| probes.iter().find(|p| p["peer"] == "kafka"))
        .cloned()
        .unwrap_or_else(|| panic!("no probe of kafka: {summary:#}"))
}

fn tls_line(ca: &Path) -> String {
    format!("tls = {{ ca_file = \"{}\" }}", ca.display())
}

#[test]
fn the_gateway_consumes_kafka_over_tls_and_names_what_is_refused() {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kafka-tls");
    let pki = Pki::new("kafka-tls");
    let kafka = TlsKafka::start(&pki.server("kafka", &["127.0.0.1"]), "tls", &[]);
    let broker = fixture(&kafka, &pki, "tls", false);
    let consumer = common::healthy_consumer();

    // Trusting the broker's CA: 100 records through, each once.
    let config = write_config(
        &base.join("good"),
        &broker,
        &tls_line(pki.ca_file()),
        &consumer.url,
    );
    let seen = common::probe_of(&config, "kafka");
    assert!(
        seen["ok"] == true && seen["detail"].as_str().unwrap_or_default().contains("TLS"),
        "{seen:#}"
    );
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    broker.publish("orders", 0..100);
    assert!(
        wait_until(Duration::from_secs(60), || common::accepted(&consumer)
            >= 100),
        "accepted {}",
        common::accepted(&consumer)
    );
    drop(gw);
    assert_eq!(common::accepted(&consumer), 100, "each once");

    // A CA that did not issue the broker's certificate: the probe says so, naming the
    // setting, and a running gateway is not ready, saying why.
    let stranger = Pki::new("kafka-tls-stranger");
    let config = write_config(
        &base.join("stranger"),
        &broker,
        &tls_line(stranger.ca_file()),
        &consumer.url,
    );
    let seen = failed_probe(&config);
    let error = seen["error"].as_str().unwrap_or_default().to_string();
    assert!(
        seen["ok"] == false && error.contains("certificate") && error.contains("[kafka] tls"),
        "{seen:#}"
    );
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let said = || kafka::readyz(&gw.url);
    assert!(
        wait_until(Duration::from_secs(30), || said().contains("[kafka] tls")),
        "/readyz: {}",
        said()
    );
    drop(gw);

    // Plaintext to the TLS listener: refused, and the probe says it failed.
    let config = write_config(&base.join("plain"), &broker, "", &consumer.url);
    let seen = failed_probe(&config);
    assert!(seen["ok"] == false, "{seen:#}");
}

#[test]
fn the_gateway_logs_in_to_kafka_with_scram_over_tls_and_a_wrong_password_is_refused() {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kafka-sasl");
    let pki = Pki::new("kafka-sasl");
    let users = [
        ("fixture", "fixture-pass", "scram512"),
        ("verdict", "s3cret-kafka", "scram512"),
        ("verdict256", "s3cret-kafka", "scram256"),
    ];
    let kafka = TlsKafka::start(&pki.server("kafka", &["127.0.0.1"]), "sasl", &users);
    let broker = fixture(&kafka, &pki, "sasl", true);
    let consumer = common::healthy_consumer();
    let login = |mechanism: &str, user: &str| {
        format!(
            "{}\nsasl = {{ mechanism = \"{mechanism}\", username = \"{user}\", password = {{ file = \"kafka.pass\" }} }}",
            tls_line(pki.ca_file())
        )
    };
    let mut published = 0;
    for (mechanism, user) in [
        ("SCRAM-SHA-512", "verdict"),
        ("SCRAM-SHA-256", "verdict256"),
    ] {
        let config = write_config(
            &base.join(user),
            &broker,
            &login(mechanism, user),
            &consumer.url,
        );
        let seen = common::probe_of(&config, "kafka");
        let detail = seen["detail"].as_str().unwrap_or_default();
        assert!(
            seen["ok"] == true && detail.contains(&format!("SASL {mechanism} as `{user}`")),
            "{seen:#}"
        );
        assert!(
            !seen.to_string().contains("s3cret-kafka"),
            "no password in the probe: {seen:#}"
        );
        let gw = spawn(
            env!("CARGO_BIN_EXE_verdict"),
            &["run", "-c", config.to_str().unwrap()],
        );
        broker.publish("orders", published..published + 50);
        published += 50;
        assert!(
            wait_until(Duration::from_secs(60), || common::accepted(&consumer)
                >= u64::from(published)),
            "{mechanism}: accepted {}",
            common::accepted(&consumer)
        );
        drop(gw);
    }
    assert_eq!(common::accepted(&consumer), 100, "each once");

    // A wrong password: the probe and a running gateway's /readyz say so, naming the
    // setting, and the password is in neither.
    let config = write_config(
        &base.join("wrong"),
        &broker,
        &login("SCRAM-SHA-512", "verdict"),
        &consumer.url,
    );
    std::fs::write(base.join("wrong").join("kafka.pass"), "not-the-password\n").unwrap();
    let seen = failed_probe(&config);
    let error = seen["error"].as_str().unwrap_or_default().to_string();
    assert!(
        seen["ok"] == false
            && error.contains("[kafka] sasl")
            && !error.contains("not-the-password"),
        "{seen:#}"
    );
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let said = || kafka::readyz(&gw.url);
    assert!(
        wait_until(Duration::from_secs(30), || said().contains("[kafka] sasl")),
        "/readyz: {}",
        said()
    );
    assert!(!said().contains("not-the-password"));
}
