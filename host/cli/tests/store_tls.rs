//! The shared store over TLS, through the real binary against the machine's PostgreSQL
//! (Debian's server runs with `ssl = on` and its own certificate): libpq's `sslmode` and
//! `sslrootcert` in the store URL, the connection seen encrypted from the server's side, and
//! a certificate from the wrong CA stopping the start with the setting named.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{spawn, text, wait_until};
use verdict_tls::test_pki::Pki;

/// A database of the test's own, dropped at the end.
struct Database(String);

impl Database {
    fn new(name: &str) -> Database {
        let name = format!("verdict_{name}_{}", std::process::id());
        sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        sql(&format!("CREATE DATABASE {name}"));
        Database(name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        sql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

fn client() -> postgres::Client {
    let url = "postgres://postgres@127.0.0.1:5432/postgres";
    postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} (.ci/run starts it): {e}"))
}

fn sql(sql: &str) {
    client()
        .batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// (encrypted, plain) connections of `application` as the server sees them.
fn connections_of(application: &str) -> (i64, i64) {
    let row = client()
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&application],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

fn write_config(dir: &Path, store: &str, consumer_url: &str) -> std::path::PathBuf {
    std::fs::copy(common::rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    let config = format!(
        r#"[admin]
listen = "127.0.0.1:0"
token_file = "token"
[gateway]
store = "{store}"
poll_ms = 20
lease_ms = 5000
[policies.rules]
path = "rules.wasm"
[[routes]]
topic = "orders"
policy = "rules"
consumer = {{ url = "{consumer_url}/", timeout_ms = 2000 }}
config = {{ max_attempts = 3 }}
"#
    );
    let path = dir.join("verdict.toml");
    std::fs::write(&path, config).unwrap();
    path
}

#[test]
fn the_postgres_store_speaks_tls_as_sslmode_says_and_a_wrong_ca_stops_the_start() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-tls");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = Database::new("store_tls");
    let consumer = spawn(
        env!("CARGO_BIN_EXE_verdict-demo-consumer"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--transient",
            "0",
            "--permanent",
            "0",
        ],
    );
    let base = format!("postgres://postgres@127.0.0.1:5432/{}", db.0);

    for (mode, encrypted) in [("require", true), ("disable", false)] {
        let application = format!("verdict-tls-{mode}-{}", std::process::id());
        let store = format!("{base}?sslmode={mode}&application_name={application}");
        let config = write_config(&dir, &store, &consumer.url);
        let gw = spawn(
            env!("CARGO_BIN_EXE_verdict"),
            &["run", "-c", config.to_str().unwrap()],
        );
        let before = common::accepted(&consumer);
        let batch = dir.join("batch.jsonl");
        let lines: Vec<String> = (0..50)
            .map(|i| format!(r#"{{"id": "{mode}-{i}", "payload": {{"n": {i}}}}}"#))
            .collect();
        std::fs::write(&batch, lines.join("\n")).unwrap();
        let out = common::verdict(
            &[
                "publish",
                "--admin",
                &gw.url,
                "--token-file",
                dir.join("token").to_str().unwrap(),
                "--topic",
                "orders",
                "--batch",
                batch.to_str().unwrap(),
            ],
            None,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            wait_until(Duration::from_secs(60), || common::accepted(&consumer)
                >= before + 50),
            "{mode}: 50 delivered"
        );
        let out = common::verdict(&["check", "-c", config.to_str().unwrap(), "--probe"], None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let store_probe = summary["probe"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["peer"] == "gateway.store")
            .cloned()
            .unwrap_or_else(|| panic!("{summary:#}"));
        let detail = store_probe["detail"].as_str().unwrap_or_default();
        assert!(
            detail.starts_with("PostgreSQL ") && detail.contains(", TLS (") == encrypted,
            "{mode}: {store_probe:#}"
        );
        let (tls, plain) = connections_of(&application);
        if encrypted {
            assert!(
                tls >= 1 && plain == 0,
                "{mode}: {tls} encrypted, {plain} plain"
            );
        } else {
            assert!(
                tls == 0 && plain >= 1,
                "{mode}: {tls} encrypted, {plain} plain"
            );
        }
        drop(gw);
    }

    // verify-full against a CA that did not issue the server's certificate: the start
    // stops, naming the setting.
    let stranger = Pki::new("store-tls-stranger");
    let store = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        stranger.ca_file().display()
    );
    let config = write_config(&dir, &store, &consumer.url);
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["run", "-c", config.to_str().unwrap()])
        .env_remove("VERDICT_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "started with a certificate nobody trusts"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tls.certificate") && stderr.contains("gateway.store sslmode"),
        "{stderr}"
    );
    // A file that is not there is named before any connection.
    let store = format!("{base}?sslmode=verify-ca&sslrootcert=no-such-ca.pem");
    let config = write_config(&dir, &store, &consumer.url);
    let out = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["run", "-c", config.to_str().unwrap()])
        .env_remove("VERDICT_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("gateway.store sslrootcert") && stderr.contains("no-such-ca.pem"),
        "{stderr}"
    );
}
