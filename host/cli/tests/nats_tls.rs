//! NATS over TLS with real credentials, through the real binaries: a `nats-server` of the
//! test's own on a free loopback port, with a certificate from a throwaway CA, client
//! certificates required, and users logging in by NKey and by password; and one in
//! operator mode, where the gateway logs in with a credentials file (JWTs made here). The gateway
//! delivers through it; each broken setting stops `verdict run` at once with an error
//! naming the setting - no reconnect loop.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{spawn, wait_until};
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tls::TlsConfig;
use verdict_tls::test_pki::{Leaf, Pki};

/// A `nats-server` with JetStream and TLS (client certificates verified), users `nkey`
/// (an NKey public key) and `svc` / `svc-password`; killed and its store removed at the
/// end.
struct TlsNats {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for TlsNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TlsNats {
    fn start(name: &str, pki: &Pki, nkey: &str) -> TlsNats {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nats-tls-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = pki.server("nats", &["127.0.0.1", "localhost"]);
        let config = format!(
            r#"listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{store}", max_memory_store: 64MB, max_file_store: 256MB }}
tls {{
  cert_file: "{cert}"
  key_file: "{key}"
  ca_file: "{ca}"
  verify: true
  timeout: 2
}}
authorization {{
  users = [
    {{ nkey: "{nkey}" }}
    {{ user: "svc", password: "svc-password" }}
  ]
}}
"#,
            store = dir.join("js").display(),
            cert = server.cert.display(),
            key = server.key.display(),
            ca = pki.ca_file().display(),
        );
        std::fs::write(dir.join("nats.conf"), config).unwrap();
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(dir.join("nats.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server (Debian's package) starts");
        assert!(
            wait_until(Duration::from_secs(10), || std::net::TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "nats-server listening on {port}"
        );
        TlsNats { child, port, dir }
    }

    fn url(&self) -> String {
        format!("tls://127.0.0.1:{}", self.port)
    }
}

/// A config delivering `orders.>` from the NATS server at `url` to `consumer_url`, as the
/// gateway `instance` of the consumer group `group`, without an admin token.
fn orders_from(url: &str, instance: &str, group: &str, consumer_url: &str) -> TestConfig {
    TestConfig::new()
        .unset("admin.token_file")
        .set("gateway.instance", instance)
        .set("gateway.consumer_group", group)
        .set("nats.url", url)
        .set("nats.ack_wait_ms", 5000)
        .policy("rules", "rules.wasm")
        .route(
            Route::new("orders.>", "rules")
                .set("source", "nats")
                .consumer(&format!("{consumer_url}/"))
                .config("{ max_attempts = 3 }"),
        )
}

/// [`orders_from`] the TLS server, with `nats` the `[nats]` lines beyond the URL.
fn write_config(dir: &Path, server: &TlsNats, nats: &str, consumer_url: &str) -> PathBuf {
    std::fs::copy(common::rules(), dir.join("rules.wasm")).unwrap();
    orders_from(&server.url(), "gw-tls", "tlsgroup", consumer_url)
        .merge("nats", nats)
        .write_toml(dir)
}

fn client_tls(pki: &Pki, me: &Leaf) -> String {
    format!(
        "tls = {{ ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
        pki.ca_file().display(),
        me.cert.display(),
        me.key.display()
    )
}

#[test]
fn the_gateway_consumes_over_tls_with_an_nkey_and_names_every_setting_the_server_refuses() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nats-tls-gw");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki = Pki::new("nats-tls");
    let user = nkeys::KeyPair::new_user();
    let server = TlsNats::start("gw", &pki, &user.public_key());
    let me = pki.client("gateway");
    std::fs::write(dir.join("seed"), user.seed().unwrap() + "\n").unwrap();
    let healthy = common::healthy_consumer();

    // TLS with a client certificate, NKey login: 200 messages delivered.
    let good = format!(
        "{}\nnkey_seed = {{ file = \"seed\" }}",
        client_tls(&pki, &me)
    );
    let config = write_config(&dir, &server, &good, &healthy.url);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let tls = TlsConfig {
            ca_file: Some(pki.ca_file().to_path_buf()),
            client_cert: Some(me.cert.clone()),
            client_key: Some(me.key.clone()),
            server_name: None,
        }
        .client_config("test")
        .unwrap();
        let client = async_nats::ConnectOptions::new()
            .tls_client_config(verdict_tls::rustls::ClientConfig::clone(&tls))
            .require_tls(true)
            .user_and_password("svc".into(), "svc-password".into())
            .connect(server.url())
            .await
            .unwrap();
        publish_once_set_up(client, 200, "the gateway set up its stream over TLS").await;
    });
    assert!(
        wait_until(Duration::from_secs(60), || common::accepted(&healthy)
            >= 200),
        "accepted {}",
        common::accepted(&healthy)
    );
    drop(gw);
    assert_eq!(common::accepted(&healthy), 200);

    // The probe says what it found on the server, and sends nothing.
    let nats = common::probe_of(&config, "nats");
    let detail = nats["detail"].as_str().unwrap_or_default();
    assert!(
        nats["ok"] == true && detail.contains("TLS") && detail.contains("JetStream available"),
        "{nats:#}"
    );

    // Each broken setting stops the start, naming it.
    let stranger = Pki::new("nats-tls-stranger");
    let cases: [(&str, String, &[&str]); 5] = [
        (
            "a CA that did not issue the server's certificate",
            format!(
                "tls = {{ ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}\nnkey_seed = {{ file = \"seed\" }}",
                stranger.ca_file().display(),
                me.cert.display(),
                me.key.display()
            ),
            &["nats.tls", "UnknownIssuer"],
        ),
        (
            "no TLS settings against a server that asks for TLS",
            "nkey_seed = { file = \"seed\" }".to_string(),
            &["nats.tls: not set", "UnknownIssuer", "nats.tls.ca_file"],
        ),
        (
            "a wrong password",
            format!(
                "{}\nuser = \"svc\"\npassword = {{ env = \"VERDICT_TEST_NATS_PASSWORD\" }}",
                client_tls(&pki, &me)
            ),
            &["nats.password", "refused the credentials"],
        ),
        (
            "no credentials",
            client_tls(&pki, &me),
            &["nats.url", "requires credentials and none is set"],
        ),
        (
            "a seed file that is missing",
            format!(
                "{}\nnkey_seed = {{ file = \"no-such-seed\" }}",
                client_tls(&pki, &me)
            ),
            &["nats.nkey_seed", "no-such-seed"],
        ),
    ];
    for (what, nats, expected) in cases {
        let config = write_config(&dir, &server, &nats, &healthy.url);
        let stderr = common::refused_start(
            &config,
            what,
            &[("VERDICT_TEST_NATS_PASSWORD", "not-the-password")],
        );
        for needle in expected {
            assert!(stderr.contains(needle), "{what}: `{needle}` in:\n{stderr}");
        }
        assert!(
            !stderr.contains("not-the-password"),
            "{what}: the password is never shown:\n{stderr}"
        );
        assert!(
            !stderr.contains("reconnecting"),
            "{what}: stopped, not retried:\n{stderr}"
        );
    }
}

/// Wait (up to 10 s) for the stream the gateway sets up (`what` says how, in a failure),
/// then publish `count` messages to `orders.<i>`, each acknowledged by JetStream.
async fn publish_once_set_up(client: async_nats::Client, count: usize, what: &str) {
    let js = async_nats::jetstream::new(client);
    let mut found = false;
    for _ in 0..100 {
        if js.get_stream("VERDICT").await.is_ok() {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "{what}");
    for i in 0..count {
        publish_acked(&js, format!("orders.{i}"), format!("{{\"n\": {i}}}")).await;
    }
}

/// Publish one message and wait for JetStream's ack. A server that has just created the
/// stream may still answer "no responders" for a moment (seen in operator mode, where the
/// account's JetStream is set up as its JWT loads): a producer retries that, as the NATS
/// clients' own publish retry does, for up to 5 s.
async fn publish_acked(js: &async_nats::jetstream::Context, subject: String, payload: String) {
    use async_nats::jetstream::context::PublishErrorKind;
    for attempt in 0.. {
        let outcome = match js.publish(subject.clone(), payload.clone().into()).await {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(_) => return,
            Err(e) if e.kind() == PublishErrorKind::StreamNotFound && attempt < 50 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("publishing to {subject}: {e}"),
        }
    }
}

/// A JWT as `nsc` writes one: `claims` signed by `issuer` (ed25519-nkey).
fn jwt(issuer: &nkeys::KeyPair, claims: serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let body = b64(claims.to_string().as_bytes());
    let signature = issuer.sign(format!("{header}.{body}").as_bytes()).unwrap();
    format!("{header}.{body}.{}", b64(&signature))
}

/// The claims every JWT here carries: who issued it about whom, now.
fn claims(
    issuer: &nkeys::KeyPair,
    subject: &str,
    name: &str,
    nats: serde_json::Value,
) -> serde_json::Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    serde_json::json!({
        "jti": format!("{name}{now}"),
        "iat": now,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    })
}

/// A credentials file for a new user of `account`.
fn creds(account: &nkeys::KeyPair) -> String {
    let user = nkeys::KeyPair::new_user();
    let user_jwt = jwt(
        account,
        claims(
            account,
            &user.public_key(),
            "gateway",
            serde_json::json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}),
        ),
    );
    format!(
        "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        user.seed().unwrap()
    )
}

/// Operator mode (JWTs made here, a memory resolver): the gateway logs in with a
/// credentials file and consumes; a credentials file of an account the server does not know
/// stops the start, naming `nats.creds_file`.
#[test]
fn the_gateway_logs_in_with_a_credentials_file_in_operator_mode() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nats-creds");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    let operator_jwt = jwt(
        &operator,
        claims(
            &operator,
            &operator.public_key(),
            "operator",
            serde_json::json!({"type": "operator", "version": 2}),
        ),
    );
    let unlimited = serde_json::json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1
    });
    let account_jwt = jwt(
        &operator,
        claims(
            &operator,
            &account.public_key(),
            "verdict",
            serde_json::json!({"limits": unlimited, "default_permissions": {"pub": {}, "sub": {}}, "type": "account", "version": 2}),
        ),
    );
    // JetStream in operator mode needs a system account.
    let system = nkeys::KeyPair::new_account();
    let system_jwt = jwt(
        &operator,
        claims(
            &operator,
            &system.public_key(),
            "SYS",
            serde_json::json!({"limits": {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true, "conn": -1, "leaf": -1}, "type": "account", "version": 2}),
        ),
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        dir.join("nats.conf"),
        format!(
            "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: \"{}\", max_memory_store: 64MB, max_file_store: 256MB }}\n\
             operator: \"{operator_jwt}\"\nsystem_account: {sys}\nresolver: MEMORY\n\
             resolver_preload: {{\n  {}: \"{account_jwt}\"\n  {sys}: \"{system_jwt}\"\n}}\n",
            dir.join("js").display(),
            account.public_key(),
            sys = system.public_key(),
        ),
    )
    .unwrap();
    let mut server = Command::new("nats-server")
        .arg("-c")
        .arg(dir.join("nats.conf"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("nats.log")).unwrap())
        .spawn()
        .expect("nats-server starts");
    let _kill = KillOnDrop(&mut server);
    assert!(
        wait_until(Duration::from_secs(10), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "nats-server in operator mode on {port}: {}",
        std::fs::read_to_string(dir.join("nats.log")).unwrap_or_default()
    );
    std::fs::write(dir.join("gateway.creds"), creds(&account)).unwrap();
    let healthy = common::healthy_consumer();
    let write = |creds_file: &str| {
        std::fs::copy(common::rules(), dir.join("rules.wasm")).unwrap();
        let url = format!("nats://127.0.0.1:{port}");
        orders_from(&url, "gw-creds", "credsgroup", &healthy.url)
            .set("nats.creds_file", creds_file)
            .write_toml(&dir)
    };
    let config = write("gateway.creds");
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = async_nats::ConnectOptions::with_credentials_file(dir.join("gateway.creds"))
            .await
            .unwrap()
            .connect(format!("nats://127.0.0.1:{port}"))
            .await
            .unwrap();
        publish_once_set_up(
            client,
            20,
            "the gateway set up its stream with its credentials",
        )
        .await;
    });
    assert!(
        wait_until(Duration::from_secs(60), || common::accepted(&healthy) >= 20),
        "accepted {}",
        common::accepted(&healthy)
    );
    drop(gw);

    // A user of an account the server was never told about.
    std::fs::write(
        dir.join("stranger.creds"),
        creds(&nkeys::KeyPair::new_account()),
    )
    .unwrap();
    let stderr = common::refused_start(&write("stranger.creds"), "an unknown account", &[]);
    assert!(
        stderr.contains("nats.creds_file") && stderr.contains("refused the credentials"),
        "{stderr}"
    );
}

/// Kills the server when the test ends, however it ends.
struct KillOnDrop<'a>(&'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
