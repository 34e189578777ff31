//! TLS to consumers through the real binaries: `verdict-demo-consumer` serving HTTPS with
//! certificates from a throwaway CA made here, `verdict run` delivering to it. A certificate
//! the gateway refuses (or that the consumer refuses) is configuration: the messages are
//! kept - no attempt spent, nothing dead-lettered - the route is named on `/readyz` and in a
//! metric, and once the configuration is fixed every message arrives.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Proc, metric_at, rules, spawn, text, verdict, wait_until};
use verdict_gateway::store::Store;
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tls::test_pki::{Leaf, Pki};

/// A demo consumer that accepts everything, over HTTPS with `leaf`; with `clients_of`,
/// only clients presenting a certificate that CA issued.
fn https_consumer(leaf: &Leaf, clients_of: Option<&Pki>) -> Proc {
    let mut args = vec![
        "--listen".to_string(),
        "127.0.0.1:0".into(),
        "--transient".into(),
        "0".into(),
        "--permanent".into(),
        "0".into(),
        "--tls-cert".into(),
        leaf.cert.display().to_string(),
        "--tls-key".into(),
        leaf.key.display().to_string(),
    ];
    if let Some(pki) = clients_of {
        args.extend(["--client-ca".into(), pki.ca_file().display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    spawn(env!("CARGO_BIN_EXE_verdict-demo-consumer"), &args)
}

/// What an HTTPS demo consumer accepted, asked over TLS with `curl` (trusting `ca`,
/// presenting `client` when given).
fn accepted_over_tls(consumer: &Proc, ca: &Path, client: Option<&Leaf>) -> u64 {
    accepted_as(consumer, ca, client, None)
}

/// [`accepted_over_tls`], reaching the consumer by `name` (what its certificate carries)
/// instead of its IP address.
fn accepted_as(consumer: &Proc, ca: &Path, client: Option<&Leaf>, name: Option<&str>) -> u64 {
    let mut curl = std::process::Command::new("curl");
    curl.args(["-sS", "--max-time", "5", "--cacert"]).arg(ca);
    if let Some(client) = client {
        curl.arg("--cert")
            .arg(&client.cert)
            .arg("--key")
            .arg(&client.key);
    }
    let mut url = consumer.url.clone();
    if let Some(name) = name {
        let port = url.rsplit(':').next().unwrap().to_string();
        curl.args(["--resolve", &format!("{name}:{port}:127.0.0.1")]);
        url = format!("https://{name}:{port}");
    }
    let out = curl
        .arg(format!("{url}/stats"))
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    stats["accepted"].as_u64().unwrap()
}

/// A fresh directory with the rules component and an operator token.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    dir
}

/// A config whose routes are `routes` (each `(topic, consumer table)`); every failure the
/// policy sees is dead-lettered at once, so a message the policy judged would show.
fn config(routes: &[(&str, String)]) -> TestConfig {
    let config = TestConfig::new()
        .set("gateway.lease_ms", 5000)
        .policy("rules", "rules.wasm");
    routes.iter().fold(config, |config, (topic, consumer)| {
        config.route(
            Route::new(topic, "rules")
                .merge(&format!("consumer = {consumer}"))
                .set("config.max_attempts", 1),
        )
    })
}

/// [`config`] written to `dir`; its path.
fn write_config(dir: &Path, routes: &[(&str, String)]) -> PathBuf {
    config(routes).write_toml(dir)
}

fn publish(gw: &Proc, dir: &Path, topic: &str, count: usize) {
    common::publish_batch(&gw.url, dir, topic, topic, count);
}

fn readyz(gw: &Proc) -> String {
    ureq::get(&format!("{}/readyz", gw.url))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

fn tls_failures(gw: &Proc, route: &str, kind: &str) -> u64 {
    metric_at(
        &gw.url,
        &format!("verdict_consumer_tls_failures_total{{kind=\"{kind}\",topic=\"{route}\"}}"),
    ) + metric_at(
        &gw.url,
        &format!("verdict_consumer_tls_failures_total{{topic=\"{route}\",kind=\"{kind}\"}}"),
    )
}

/// 200 messages to a consumer that verifies clients: refused while the gateway presents no
/// certificate (kept, reported, nothing dead-lettered), all delivered once the config
/// gains the client certificate.
#[test]
fn an_https_consumer_verifying_clients_gets_every_message_once_the_gateway_presents_its_certificate()
 {
    let dir = scratch("tls-mtls");
    let pki = Pki::new("tls-mtls");
    let served = pki.server("consumer", &["127.0.0.1", "localhost"]);
    let me = pki.client("gateway");
    let consumer = https_consumer(&served, Some(&pki));
    assert!(consumer.url.starts_with("https://"), "{}", consumer.url);
    let ca = pki.ca_file().display().to_string();
    let without_cert = format!(
        "{{ url = \"{}/\", timeout_ms = 2000, tls = {{ ca_file = \"{ca}\" }} }}",
        consumer.url
    );
    let config = write_config(&dir, &[("orders", without_cert)]);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    publish(&gw, &dir, "orders", 200);

    assert!(
        wait_until(Duration::from_secs(30), || tls_failures(
            &gw,
            "orders",
            "tls.certificate"
        ) >= 200),
        "every delivery refused as tls.certificate; /metrics:\n{}",
        readyz(&gw)
    );
    let ready = readyz(&gw);
    assert!(
        ready.starts_with("ready\n")
            && ready.contains("warning: consumer: route `orders`")
            && ready.contains("tls.certificate"),
        "{ready}"
    );
    let store = Store::open(&dir.join(".verdict/verdict.db")).unwrap();
    let counts = store.counts().unwrap();
    assert_eq!(
        (counts.dead, counts.delivered),
        (0, 0),
        "kept, not dead-lettered: {counts:?}"
    );
    assert_eq!(accepted_over_tls(&consumer, pki.ca_file(), Some(&me)), 0);

    // The operator adds the client certificate; the reload takes it, the kept messages
    // arrive.
    let with_cert = format!(
        "{{ url = \"{}/\", timeout_ms = 2000, tls = {{ ca_file = \"{ca}\", client_cert = \"{}\", client_key = \"{}\" }} }}",
        consumer.url,
        me.cert.display(),
        me.key.display()
    );
    write_config(&dir, &[("orders", with_cert)]);
    assert!(
        wait_until(Duration::from_secs(60), || accepted_over_tls(
            &consumer,
            pki.ca_file(),
            Some(&me)
        ) >= 200),
        "accepted {}",
        accepted_over_tls(&consumer, pki.ca_file(), Some(&me))
    );
    assert!(wait_until(Duration::from_secs(10), || {
        store.counts().unwrap().pending() == 0
    }));
    let counts = store.counts().unwrap();
    assert_eq!((counts.delivered, counts.dead), (200, 0), "{counts:?}");
    assert_eq!(
        accepted_over_tls(&consumer, pki.ca_file(), Some(&me)),
        200,
        "each once"
    );
    let ready = readyz(&gw);
    assert!(!ready.contains("warning: consumer"), "fixed: {ready}");
}

/// A CA that did not issue the consumer's certificate, an expired certificate, a
/// certificate for another name, and plain HTTP behind an `https://` URL: each is named by
/// kind for its route, and none of their messages reaches the policy or the DLQ. The same
/// consumer reached with `server_name` set to the name its certificate carries works.
#[test]
fn refused_certificates_and_handshakes_are_named_per_route_and_never_fill_the_dlq() {
    let dir = scratch("tls-refused");
    let pki = Pki::new("tls-refused");
    let stranger = Pki::new("tls-refused-stranger");
    let good = https_consumer(&pki.server("good", &["127.0.0.1"]), None);
    let expired = https_consumer(&pki.expired_server("expired", &["127.0.0.1"]), None);
    let named = https_consumer(&pki.server("named", &["consumer.internal"]), None);
    let plain = common::consumer("127.0.0.1:0", 0);
    let consumer = |url: &str, tls: &str| {
        format!("{{ url = \"{url}/\", timeout_ms = 2000, tls = {{ {tls} }} }}")
    };
    let ca = format!("ca_file = \"{}\"", pki.ca_file().display());
    let stranger_ca = format!("ca_file = \"{}\"", stranger.ca_file().display());
    let https_plain = plain.url.replace("http://", "https://");
    let config = write_config(
        &dir,
        &[
            ("wrong-ca", consumer(&good.url, &stranger_ca)),
            ("expired", consumer(&expired.url, &ca)),
            ("misnamed", consumer(&named.url, &ca)),
            (
                "renamed",
                consumer(
                    &named.url,
                    &format!("{ca}, server_name = \"consumer.internal\""),
                ),
            ),
            ("plaintext", consumer(&https_plain, &ca)),
        ],
    );
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    for topic in ["wrong-ca", "expired", "misnamed", "renamed", "plaintext"] {
        publish(&gw, &dir, topic, 5);
    }
    for (route, kind) in [
        ("wrong-ca", "tls.certificate"),
        ("expired", "tls.certificate"),
        ("misnamed", "tls.certificate"),
        ("plaintext", "tls.handshake"),
    ] {
        assert!(
            wait_until(Duration::from_secs(30), || tls_failures(&gw, route, kind)
                >= 5),
            "{route}: {kind} x5; /readyz:\n{}",
            readyz(&gw)
        );
    }
    let named_accepted = || accepted_as(&named, pki.ca_file(), None, Some("consumer.internal"));
    assert!(wait_until(Duration::from_secs(30), || named_accepted() >= 5));
    let ready = readyz(&gw);
    for route in ["wrong-ca", "expired", "misnamed", "plaintext"] {
        assert!(
            ready.contains(&format!("route `{route}`")),
            "{route}: {ready}"
        );
    }
    assert!(!ready.contains("route `renamed`"), "{ready}");
    // The consumer answers before the gateway records the delivery: wait for the store.
    let store = Store::open(&dir.join(".verdict/verdict.db")).unwrap();
    wait_until(Duration::from_secs(10), || {
        store.counts().unwrap().delivered >= 5
    });
    let counts = store.counts().unwrap();
    assert_eq!(
        (counts.delivered, counts.dead),
        (5, 0),
        "only `renamed` delivered; nothing dead-lettered: {counts:?}"
    );
    assert_eq!(accepted_over_tls(&good, pki.ca_file(), None), 0);
    assert_eq!(common::accepted(&plain), 0, "TLS never reached its handler");
    assert_eq!(
        metric_at(&gw.url, "verdict_verdicts_applied"),
        0,
        "no policy judged a TLS failure"
    );
}

/// `verdict check` reads every TLS file and names the setting that cannot be used.
#[test]
fn check_names_the_tls_setting_that_cannot_be_used() {
    let dir = scratch("tls-check");
    let pki = Pki::new("tls-check");
    let me = pki.client("gateway");
    let check = |consumer: String, extra: &str| {
        let config = config(&[("orders", consumer)])
            .merge("", extra)
            .write_toml(&dir);
        let out = verdict(&["check", "-c", config.to_str().unwrap()], None);
        (out.status.success(), text(&out.stderr))
    };
    let (ok, stderr) = check(
        "{ url = \"https://127.0.0.1:1/\", timeout_ms = 2000, tls = { ca_file = \"missing-ca.pem\" } }".into(),
        "",
    );
    assert!(!ok);
    assert!(
        stderr.contains("routes[0].consumer.tls.ca_file")
            && stderr.contains("missing-ca.pem")
            && stderr.contains("cannot be read"),
        "{stderr}"
    );
    let (ok, stderr) = check(
        format!(
            "{{ url = \"https://127.0.0.1:1/\", timeout_ms = 2000, tls = {{ client_cert = \"{}\" }} }}",
            me.cert.display()
        ),
        "",
    );
    assert!(!ok);
    assert!(
        stderr.contains("routes[0].consumer.tls.client_cert")
            && stderr.contains("needs client_key"),
        "{stderr}"
    );
    let (ok, stderr) = check(
        format!(
            "{{ url = \"http://127.0.0.1:1/\", timeout_ms = 2000, tls = {{ ca_file = \"{}\" }} }}",
            pki.ca_file().display()
        ),
        "",
    );
    assert!(!ok);
    assert!(
        stderr.contains("routes[0].consumer.tls") && stderr.contains("not an https:// URL"),
        "{stderr}"
    );
    let (ok, stderr) = check(
        "{ url = \"ftp://127.0.0.1:1/\", timeout_ms = 2000 }".into(),
        "",
    );
    assert!(!ok);
    assert!(stderr.contains("routes[0].consumer.url"), "{stderr}");
    // `[defaults] consumer_tls` is checked where it is written, and a key that is not a
    // key is named.
    let (ok, stderr) = check(
        "{ url = \"https://127.0.0.1:1/\", timeout_ms = 2000 }".into(),
        &format!(
            "[defaults.consumer_tls]\nclient_cert = \"{}\"\nclient_key = \"{}\"",
            me.cert.display(),
            me.cert.display()
        ),
    );
    assert!(!ok);
    assert!(
        stderr.contains("defaults.consumer_tls.client_key")
            && stderr.contains("no PEM private key"),
        "{stderr}"
    );
    let (ok, stderr) = check(
        "{ url = \"https://127.0.0.1:1/\", timeout_ms = 2000 }".into(),
        &format!(
            "[defaults.consumer_tls]\nca_file = \"{}\"",
            pki.ca_file().display()
        ),
    );
    assert!(ok, "{stderr}");
}

/// `verdict check --probe` connects to each consumer without sending anything: the TLS
/// version and certificate it saw, or the setting to fix (and exit status 1).
#[test]
fn check_probe_shows_each_consumers_certificate_and_names_a_refused_one() {
    let dir = scratch("tls-probe");
    let pki = Pki::new("tls-probe");
    let good = https_consumer(&pki.server("good", &["127.0.0.1"]), None);
    let expired = https_consumer(&pki.expired_server("expired", &["127.0.0.1"]), None);
    let ca = format!("ca_file = \"{}\"", pki.ca_file().display());
    let consumer =
        |url: &str| format!("{{ url = \"{url}/\", timeout_ms = 2000, tls = {{ {ca} }} }}");
    let config = write_config(
        &dir,
        &[
            ("good", consumer(&good.url)),
            ("expired", consumer(&expired.url)),
        ],
    );
    let out = verdict(&["check", "-c", config.to_str().unwrap(), "--probe"], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let probes = summary["probe"].as_array().unwrap();
    assert_eq!(probes.len(), 2, "{summary:#}");
    let seen = &probes[0];
    assert_eq!(seen["peer"], "routes[0].consumer");
    assert_eq!(seen["ok"], true, "{seen:#}");
    assert_eq!(seen["tls_version"], "TLSv1_3", "{seen:#}");
    assert_eq!(seen["certificate"]["subject"], "CN=good", "{seen:#}");
    assert!(
        seen["certificate"]["days_left"].as_i64().unwrap() > 365,
        "{seen:#}"
    );
    let refused = &probes[1];
    assert_eq!(refused["ok"], false, "{refused:#}");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.starts_with("routes[1].consumer.tls: tls.certificate:") && error.contains("expired"),
        "{error}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("error: routes[1].consumer: routes[1].consumer.tls"),
        "{stderr}"
    );
    // Nothing reached either consumer's handler: a probe sends no request.
    assert_eq!(accepted_over_tls(&good, pki.ca_file(), None), 0);
}

/// The `verdict` client commands reach an admin listener that speaks HTTPS with a
/// certificate from a private CA: with `--ca-file` (or `VERDICT_ADMIN_CA_FILE`) they work,
/// without it the certificate is refused and said so.
#[test]
fn client_commands_reach_an_https_admin_listener_with_ca_file() {
    let dir = scratch("tls-admin-client");
    let pki = Pki::new("tls-admin-client");
    let served = pki.server("admin", &["127.0.0.1", "localhost"]);
    let config = config(&[])
        .set("admin.tls_cert", served.cert.display().to_string())
        .set("admin.tls_key", served.key.display().to_string())
        .write_toml(&dir);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(gw.url.starts_with("https://"), "{}", gw.url);
    let token = dir.join("token");
    let list = |extra: &[&str]| {
        let mut args = vec![
            "policy",
            "list",
            "--admin",
            gw.url.as_str(),
            "--token-file",
            token.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        verdict(&args, None)
    };
    let ca = pki.ca_file().display().to_string();
    let out = list(&["--ca-file", &ca]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("rules"), "{}", text(&out.stdout));
    let out = list(&[]);
    assert!(!out.status.success(), "a private CA without --ca-file");
    let stderr = text(&out.stderr);
    assert!(
        stderr.to_ascii_lowercase().contains("certificate"),
        "{stderr}"
    );
    let out = list(&["--ca-file", "/nonexistent/ca.pem"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--ca-file: /nonexistent/ca.pem: cannot be read"),
        "{}",
        text(&out.stderr)
    );
}
