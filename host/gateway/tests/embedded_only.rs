//! A gateway on the embedded store alone: what an embedder gets from
//! `verdict-gateway --no-default-features` (no NATS or RabbitMQ client, no PostgreSQL or
//! MariaDB driver linked). `.ci/run` runs this file in that build as well as in the full one.

use std::path::PathBuf;

use verdict_gateway::Gateway;

/// A directory of the test's own, removed with it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "verdict-embedded-only-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("making the test's directory");
        Scratch(dir)
    }

    fn config(&self, text: &str) -> PathBuf {
        let path = self.0.join("verdict.toml");
        std::fs::write(&path, text).expect("writing the config");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `GET path` on the admin API at `base` (`http://127.0.0.1:port`): its status and body.
/// Plain HTTP/1.1 over a socket, so the test needs no client (nor a TLS provider).
async fn get(base: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let host = base
        .strip_prefix("http://")
        .expect("a plain-HTTP admin API");
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .expect("the admin API accepts");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("sending");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("reading");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

const NO_ROUTES: &str = "[admin]\nlisten = \"127.0.0.1:0\"\n\n[policies]\n";

#[tokio::test]
async fn a_gateway_starts_serves_and_stops_on_the_embedded_store() {
    let dir = Scratch::new("starts");
    let config = dir.config(NO_ROUTES);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let gateway = Gateway::start(&config, async move {
        let _ = stopped.await;
    })
    .await
    .expect("the gateway starts on the embedded store");
    assert!(
        dir.0.join(".verdict/verdict.db").is_file(),
        "its store is made in the state directory beside the config"
    );
    let (status, body) = get(&gateway.admin_url, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = get(&gateway.admin_url, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("verdict_messages{state=\"ready\"} 0"),
        "the store's counts are served: {metrics}"
    );
    let _ = stop.send(());
    gateway.wait().await.expect("the gateway stops cleanly");
}

/// A build without the NATS source names the route that wants it instead of starting
/// without it (run with `--no-default-features`).
#[cfg(not(feature = "nats"))]
#[tokio::test]
async fn a_route_on_a_source_this_build_left_out_stops_the_start_by_name() {
    let dir = Scratch::new("left-out");
    let config = dir.config(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[policies.rules]\npath = \"rules.wasm\"\n\n\
         [[routes]]\ntopic = \"orders.eu\"\npolicy = \"rules\"\nsource = \"nats\"\n\
         consumer = { url = \"http://127.0.0.1:9/\" }\n",
    );
    let e = Gateway::start(&config, std::future::pending())
        .await
        .err()
        .expect("the start is refused");
    let said = e.to_string();
    assert!(
        said.contains("route `orders.eu`")
            && said.contains("source = \"nats\"")
            && said.contains("without the `nats` feature"),
        "{said}"
    );
}

/// A build without the PostgreSQL store refuses a `postgres://` store by name.
#[cfg(not(feature = "postgres"))]
#[tokio::test]
async fn a_store_this_build_left_out_is_refused_by_name() {
    let dir = Scratch::new("no-postgres");
    let config = dir.config(
        "[gateway]\nstore = \"postgres://verdict@127.0.0.1:5432/verdict\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n[policies]\n",
    );
    let e = Gateway::start(&config, std::future::pending())
        .await
        .err()
        .expect("the start is refused");
    let said = format!("{e:#}");
    assert!(
        said.contains("no PostgreSQL store") && said.contains("`postgres` feature"),
        "{said}"
    );
}
