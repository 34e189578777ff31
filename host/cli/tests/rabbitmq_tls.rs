//! RabbitMQ over TLS, through the real binary, two ways:
//! - against a RabbitMQ node of the test's own, started from the machine's installation with
//!   a TLS-only listener that wants a client certificate and the `EXTERNAL` login: the
//!   gateway logs in with its certificate and delivers 200 messages; a certificate for
//!   another name, a certificate of a user the server does not know and plaintext to the
//!   TLS port each stop `verdict run` at once, naming the setting;
//! - through a TLS front of the test's own before the machine's RabbitMQ (a password login
//!   over TLS): a CA that did not issue the server's certificate, an expired server
//!   certificate, a missing client certificate and a wrong password each stop it too.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{spawn, wait_until};
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tls::test_pki::{Leaf, Pki};

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A TLS listener on a free loopback port, each connection passed to RabbitMQ on 5672 once
/// its handshake (with a client certificate `clients_of` issued) is done.
struct TlsFront {
    port: u16,
    _runtime: tokio::runtime::Runtime,
}

impl TlsFront {
    fn start(leaf: &Leaf, clients_of: &Pki) -> TlsFront {
        let config: Arc<verdict_tls::rustls::ServerConfig> =
            verdict_tls::server_config("front", &leaf.cert, &leaf.key, Some(clients_of.ca_file()))
                .unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if let Ok(mut broker) = tokio::net::TcpStream::connect("127.0.0.1:5672").await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
                    }
                });
            }
        });
        TlsFront {
            port,
            _runtime: runtime,
        }
    }
}

/// This test's queues, removed at the end.
struct Queues {
    prefix: String,
    /// The plaintext URL the test publishes and cleans up through.
    url: String,
    runtime: tokio::runtime::Runtime,
}

impl Queues {
    fn queue(&self) -> String {
        format!("{}.orders", self.prefix)
    }

    fn channel(&self) -> (lapin::Connection, lapin::Channel) {
        self.runtime.block_on(async {
            let conn =
                lapin::Connection::connect(&self.url, lapin::ConnectionProperties::default())
                    .await
                    .unwrap_or_else(|e| panic!("RabbitMQ at {}: {e}", self.url));
            let channel = conn.create_channel().await.unwrap();
            (conn, channel)
        })
    }

    fn publish(&self, count: usize) {
        use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
        let (_conn, channel) = self.channel();
        let queue = self.queue();
        self.runtime.block_on(async {
            channel
                .queue_declare(
                    queue.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    lapin::types::FieldTable::default(),
                )
                .await
                .unwrap();
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await
                .unwrap();
            for i in 0..count {
                let properties = lapin::BasicProperties::default()
                    .with_message_id(format!("m-{i}").into())
                    .with_delivery_mode(2);
                let confirm = channel
                    .basic_publish(
                        "".into(),
                        queue.as_str().into(),
                        BasicPublishOptions::default(),
                        b"{}",
                        properties,
                    )
                    .await
                    .unwrap();
                assert!(confirm.await.unwrap().is_ack());
            }
        });
    }
}

impl Drop for Queues {
    fn drop(&mut self) {
        use lapin::options::QueueDeleteOptions;
        let (_conn, channel) = self.channel();
        let p = &self.prefix;
        let names = [
            format!("{p}.orders"),
            format!("{p}.orders.DLQ"),
            format!("{p}.audit"),
        ];
        self.runtime.block_on(async {
            for name in names {
                let _ = channel
                    .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                    .await;
            }
        });
    }
}

/// A config delivering `<prefix>.orders` from the RabbitMQ at `url` to `consumer`, without an
/// admin token, with `rabbitmq` the `[rabbitmq]` lines beyond the URL and the names.
fn write_config(dir: &Path, url: &str, prefix: &str, rabbitmq: &str, consumer: &str) -> PathBuf {
    std::fs::copy(common::rules(), dir.join("rules.wasm")).unwrap();
    TestConfig::new()
        .unset("admin.token_file")
        .set("gateway.instance", "gw-rabbit-tls")
        .set("rabbitmq.url", url)
        .set("rabbitmq.delay_prefix", format!("{prefix}.delay"))
        .set("rabbitmq.audit_queue", format!("{prefix}.audit"))
        .merge("rabbitmq", rabbitmq)
        .policy("rules", "rules.wasm")
        .route(
            Route::new(&format!("{prefix}.orders"), "rules")
                .set("source", "rabbitmq")
                .config("{ max_attempts = 3 }")
                .consumer(&format!("{consumer}/")),
        )
        .write_toml(dir)
}

#[test]
fn the_gateway_consumes_over_amqps_with_a_client_certificate_and_names_what_is_refused() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rabbitmq-tls");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("password"), "guest\n").unwrap();
    let pki = Pki::new("rabbitmq-tls");
    let front = TlsFront::start(&pki.server("rabbitmq", &["127.0.0.1"]), &pki);
    let me = pki.client("gateway");
    let queues = Queues {
        prefix: format!("rtls{}", std::process::id()),
        url: AMQP.to_string(),
        runtime: tokio::runtime::Runtime::new().unwrap(),
    };
    let url = |front: &TlsFront| format!("amqps://guest@127.0.0.1:{}/%2f", front.port);
    let consumer = common::healthy_consumer();
    let tls = |ca: &Path, client: Option<&Leaf>| match client {
        Some(c) => format!(
            "tls = {{ ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
            ca.display(),
            c.cert.display(),
            c.key.display()
        ),
        None => format!("tls = {{ ca_file = \"{}\" }}", ca.display()),
    };

    // TLS with a client certificate, the password from a file: 100 messages through.
    let good = format!(
        "{}\npassword = {{ file = \"password\" }}",
        tls(pki.ca_file(), Some(&me))
    );
    let config = write_config(&dir, &url(&front), &queues.prefix, &good, &consumer.url);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    queues.publish(100);
    assert!(
        wait_until(Duration::from_secs(60), || common::accepted(&consumer)
            >= 100),
        "accepted {}",
        common::accepted(&consumer)
    );
    let seen = common::probe_of(&config, "rabbitmq");
    assert!(
        seen["ok"] == true && seen["detail"].as_str().unwrap_or_default().contains("TLS"),
        "{seen:#}"
    );
    drop(gw);
    assert_eq!(common::accepted(&consumer), 100, "each once");

    let stranger = Pki::new("rabbitmq-tls-stranger");
    let expired = TlsFront::start(
        &pki.expired_server("rabbitmq-expired", &["127.0.0.1"]),
        &pki,
    );
    let cases: [(&str, &TlsFront, String, &[&str]); 4] = [
        (
            "a CA that did not issue the server's certificate",
            &front,
            format!(
                "{}\npassword = {{ file = \"password\" }}",
                tls(stranger.ca_file(), Some(&me))
            ),
            &["rabbitmq.tls", "tls.certificate", "UnknownIssuer"],
        ),
        (
            "a server certificate that expired",
            &expired,
            format!(
                "{}\npassword = {{ file = \"password\" }}",
                tls(pki.ca_file(), Some(&me))
            ),
            &["rabbitmq.tls", "tls.certificate", "certificate expired"],
        ),
        (
            "no client certificate for a server that wants one",
            &front,
            format!(
                "{}\npassword = {{ file = \"password\" }}",
                tls(pki.ca_file(), None)
            ),
            &["rabbitmq.tls"],
        ),
        (
            "a wrong password",
            &front,
            format!(
                "{}\npassword = {{ env = \"VERDICT_TEST_RABBIT_PASSWORD\" }}",
                tls(pki.ca_file(), Some(&me))
            ),
            &["rabbitmq.password", "refused the login"],
        ),
    ];
    for (what, server, rabbitmq, expected) in cases {
        let config = write_config(&dir, &url(server), &queues.prefix, &rabbitmq, &consumer.url);
        let stderr = common::refused_start(
            &config,
            what,
            &[("VERDICT_TEST_RABBIT_PASSWORD", "not-the-password")],
        );
        for needle in expected {
            assert!(stderr.contains(needle), "{what}: `{needle}` in:\n{stderr}");
        }
        assert!(!stderr.contains("not-the-password"), "{what}: {stderr}");
    }
}

/// A RabbitMQ node of the test's own, from the machine's installation: a TLS listener that
/// wants a client certificate from the test's CA, the `EXTERNAL` login (the certificate's
/// common name is the user) beside `PLAIN`, and a plaintext listener on loopback the test
/// publishes through. Users: `gateway` (no password: it logs in with its certificate) and
/// `publisher` (password `publisher`). Stopped, and its files removed, when dropped.
struct RabbitNode {
    child: Child,
    name: String,
    dir: PathBuf,
    tls_port: u16,
    plain_port: u16,
}

/// The node script itself: Debian's `/usr/sbin` wrapper would run it as the `rabbitmq`
/// user, who cannot read the test's files.
const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// RabbitMQ's stored form of `password` (`rabbit_password_hashing_sha256`): a salt and the
/// SHA-256 of salt and password, in base64.
fn password_hash(password: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let salt = [0x90u8, 0x8d, 0xc6, 0x0a];
    let mut digest = sha2::Sha256::new();
    digest.update(salt);
    digest.update(password.as_bytes());
    let mut stored = salt.to_vec();
    stored.extend_from_slice(&digest.finalize());
    base64::engine::general_purpose::STANDARD.encode(stored)
}

impl RabbitNode {
    fn start(server: &Leaf, pki: &Pki) -> RabbitNode {
        let name = format!("verdict-tls-{}", std::process::id());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (tls_port, plain_port, dist_port) = (free_port(), free_port(), free_port());
        let conf = format!(
            "listeners.tcp.default = 127.0.0.1:{plain_port}\n\
             listeners.ssl.default = 127.0.0.1:{tls_port}\n\
             ssl_options.cacertfile = {ca}\n\
             ssl_options.certfile = {cert}\n\
             ssl_options.keyfile = {key}\n\
             ssl_options.verify = verify_peer\n\
             ssl_options.fail_if_no_peer_cert = true\n\
             auth_mechanisms.1 = EXTERNAL\n\
             auth_mechanisms.2 = PLAIN\n\
             ssl_cert_login_from = common_name\n\
             load_definitions = {definitions}\n",
            ca = pki.ca_file().display(),
            cert = server.cert.display(),
            key = server.key.display(),
            definitions = dir.join("definitions.json").display(),
        );
        std::fs::write(dir.join("rabbitmq.conf"), conf).unwrap();
        std::fs::write(
            dir.join("enabled_plugins"),
            "[rabbitmq_auth_mechanism_ssl].\n",
        )
        .unwrap();
        let everything = |user: &str| {
            serde_json::json!({
                "user": user, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"
            })
        };
        let user = |name: &str, hash: String| {
            serde_json::json!({
                "name": name, "password_hash": hash, "tags": [],
                "hashing_algorithm": "rabbit_password_hashing_sha256"
            })
        };
        let definitions = serde_json::json!({
            "vhosts": [{"name": "/"}],
            "users": [user("gateway", String::new()), user("publisher", password_hash("publisher"))],
            "permissions": [everything("gateway"), everything("publisher")],
        });
        std::fs::write(dir.join("definitions.json"), definitions.to_string()).unwrap();
        let log = std::fs::File::create(dir.join("node.log")).unwrap();
        let child = Command::new(RABBITMQ_SERVER)
            .env("RABBITMQ_NODENAME", format!("{name}@localhost"))
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", dir.join("plugins"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{RABBITMQ_SERVER} (Debian's rabbitmq-server): {e}"));
        let mut node = RabbitNode {
            child,
            name,
            dir,
            tls_port,
            plain_port,
        };
        node.wait_ready();
        node
    }

    /// Until the publisher can log in on the plaintext listener (the TLS one opens with it).
    fn wait_ready(&mut self) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let log = || std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default();
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the RabbitMQ node exited ({status}) while starting:\n{}",
                    log()
                );
            }
            let connected = runtime.block_on(lapin::Connection::connect(
                &self.plain_url(),
                lapin::ConnectionProperties::default(),
            ));
            if let Ok(conn) = connected {
                let _ = runtime.block_on(conn.close(200, "ready".into()));
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the RabbitMQ node did not start in 120 s:\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn plain_url(&self) -> String {
        format!(
            "amqp://publisher:publisher@127.0.0.1:{}/%2f",
            self.plain_port
        )
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        // SIGTERM lets the script stop the node cleanly; one that outlives 30 s is killed,
        // the VM (which names the node on its command line) with it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let stopped = wait_until(Duration::from_secs(30), || {
            self.child.try_wait().ok().flatten().is_some()
        });
        if !stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = Command::new("pkill")
                .args(["-KILL", "-f", &format!("{}@localhost", self.name)])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_gateway_logs_in_to_rabbitmq_with_its_certificate_and_names_what_is_refused() {
    let pki = Pki::new("rabbitmq-node");
    let node = RabbitNode::start(
        &pki.server("rabbitmq-node", &["127.0.0.1", "localhost"]),
        &pki,
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rabbitmq-external");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let queues = Queues {
        prefix: "external".into(),
        url: node.plain_url(),
        runtime: tokio::runtime::Runtime::new().unwrap(),
    };
    let consumer = common::healthy_consumer();
    let tls_url = format!(
        "amqps://127.0.0.1:{}/%2f?auth_mechanism=external",
        node.tls_port
    );
    let certificate = |leaf: &Leaf, extra: &str| {
        format!(
            "tls = {{ ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\"{extra} }}",
            pki.ca_file().display(),
            leaf.cert.display(),
            leaf.key.display()
        )
    };
    let me = pki.client("gateway");

    // The certificate is the login: 200 messages through, each once.
    let config = write_config(
        &dir,
        &tls_url,
        &queues.prefix,
        &certificate(&me, ""),
        &consumer.url,
    );
    let seen = common::probe_of(&config, "rabbitmq");
    assert!(
        seen["ok"] == true && seen["detail"].as_str().unwrap_or_default().contains("TLS"),
        "{seen:#}"
    );
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    queues.publish(200);
    assert!(
        wait_until(Duration::from_secs(60), || common::accepted(&consumer)
            >= 200),
        "accepted {}",
        common::accepted(&consumer)
    );
    drop(gw);
    assert_eq!(common::accepted(&consumer), 200, "each once");

    let unknown = pki.client("stranger");
    let plain_url = format!("amqp://publisher@127.0.0.1:{}/%2f", node.tls_port);
    let cases: [(&str, &str, String, &[&str]); 3] = [
        (
            "a server name the server's certificate does not carry",
            &tls_url,
            certificate(&me, ", server_name = \"elsewhere.test\""),
            &["rabbitmq.tls", "tls.certificate", "not valid for name"],
        ),
        (
            "a certificate whose subject is no user of the server",
            &tls_url,
            certificate(&unknown, ""),
            &["rabbitmq.tls.client_cert", "refused the login"],
        ),
        (
            "plaintext to the TLS listener",
            &plain_url,
            "password = { env = \"VERDICT_TEST_RABBIT_PASSWORD\" }".to_string(),
            &[
                "rabbitmq.url",
                "reached a TLS listener in plaintext",
                "amqps://",
            ],
        ),
    ];
    for (what, url, rabbitmq, expected) in cases {
        let config = write_config(&dir, url, &queues.prefix, &rabbitmq, &consumer.url);
        let stderr = common::refused_start(
            &config,
            what,
            &[("VERDICT_TEST_RABBIT_PASSWORD", "publisher")],
        );
        for needle in expected {
            assert!(stderr.contains(needle), "{what}: `{needle}` in:\n{stderr}");
        }
        assert!(!stderr.contains("publisher:"), "{what}: {stderr}");
    }
}
