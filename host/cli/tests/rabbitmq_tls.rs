//! RabbitMQ over TLS, through the real binary: `amqps://` to a TLS front of the test's own
//! (a throwaway CA's certificate, client certificates required) that passes the bytes to
//! the machine's RabbitMQ. The gateway consumes, delivers and acknowledges through it; a CA
//! that did not issue the server's certificate, a missing client certificate and a wrong
//! password each stop `verdict run` at once, naming the setting.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{spawn, wait_until};
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
    runtime: tokio::runtime::Runtime,
}

impl Queues {
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

fn write_config(dir: &Path, port: u16, prefix: &str, rabbitmq: &str, consumer: &str) -> PathBuf {
    std::fs::copy(common::rules(), dir.join("rules.wasm")).unwrap();
    let config = format!(
        r#"[admin]
listen = "127.0.0.1:0"
[gateway]
instance = "gw-rabbit-tls"
[rabbitmq]
url = "amqps://guest@127.0.0.1:{port}/%2f"
delay_prefix = "{prefix}.delay"
audit_queue = "{prefix}.audit"
{rabbitmq}
[policies.rules]
path = "rules.wasm"
[[routes]]
topic = "{prefix}.orders"
source = "rabbitmq"
policy = "rules"
config = {{ max_attempts = 3 }}
consumer = {{ url = "{consumer}/", timeout_ms = 2000 }}
"#
    );
    let path = dir.join("verdict.toml");
    std::fs::write(&path, config).unwrap();
    path
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
        runtime: tokio::runtime::Runtime::new().unwrap(),
    };
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
    let config = write_config(&dir, front.port, &queues.prefix, &good, &consumer.url);
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
    let cases: [(&str, String, &[&str]); 3] = [
        (
            "a CA that did not issue the server's certificate",
            format!(
                "{}\npassword = {{ file = \"password\" }}",
                tls(stranger.ca_file(), Some(&me))
            ),
            &["rabbitmq.tls", "tls.certificate", "UnknownIssuer"],
        ),
        (
            "no client certificate for a server that wants one",
            format!(
                "{}\npassword = {{ file = \"password\" }}",
                tls(pki.ca_file(), None)
            ),
            &["rabbitmq.tls"],
        ),
        (
            "a wrong password",
            format!(
                "{}\npassword = {{ env = \"VERDICT_TEST_RABBIT_PASSWORD\" }}",
                tls(pki.ca_file(), Some(&me))
            ),
            &["rabbitmq.password", "refused the login"],
        ),
    ];
    for (what, rabbitmq, expected) in cases {
        let config = write_config(&dir, front.port, &queues.prefix, &rabbitmq, &consumer.url);
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
