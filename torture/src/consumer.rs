//! The hostile consumer: a raw HTTP/1.1 server (so it can answer in ways no HTTP library
//! would: resets mid-body, informational answers with no final one, invalid UTF-8, unknown
//! status codes) that treats each message as its [`Fate`] says and logs every request;
//! over HTTPS in a `--tls` run, with every shape the same inside TLS.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::plan::{Fate, fate, key_of};
use crate::rng::{Rng, hash};

/// One request, as the consumer saw and answered it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Request {
    /// The run's key (from the payload), if the payload carried one.
    pub key: Option<String>,
    /// What it answered (`accept`, `503-garbage-retry-after`, `reset-mid-body`, ...).
    pub reply: &'static str,
    /// When it came (ms since the epoch).
    pub at_ms: u64,
    /// It accepted the message (a 2xx went out whole).
    pub accepted: bool,
}

struct State {
    seed: u64,
    timeout_ms: u64,
    gentle: bool,
    down: AtomicBool,
    log: Mutex<Log>,
}

/// Every request, and per key what the answers so far were (so an answer is chosen without
/// reading the whole log: a soak sees millions).
#[derive(Default)]
struct Log {
    requests: Vec<Request>,
    /// Per key: failing answers chosen so far, accepted yet.
    keys: HashMap<String, (u32, bool)>,
    /// Keys accepted at least once.
    accepted: usize,
}

impl Log {
    fn push(&mut self, r: Request) {
        if let Some(key) = &r.key {
            let seen = &mut self.keys.entry(key.clone()).or_default().1;
            if r.accepted && !*seen {
                *seen = true;
                self.accepted += 1;
            }
        }
        self.requests.push(r);
    }

    /// Count a failing answer of `key` - when it is chosen, not when it is written: a slow
    /// answer is still being written when the gateway, past its timeout, delivers again.
    fn failed(&mut self, key: &str) {
        self.keys.entry(key.to_string()).or_default().0 += 1;
    }
}

/// A running consumer.
#[derive(Clone)]
pub struct Consumer {
    url: String,
    state: Arc<State>,
}

/// What one answer is.
enum Reply {
    Accept(u16),
    Raw(Vec<u8>),
    Slow,
    Never,
    ResetMidBody,
    Reset,
    Informational,
}

impl Consumer {
    /// Listen on a free loopback port (HTTPS with `tls`); `timeout_ms` is the route's, so
    /// slow answers are slower than it. A `gentle` consumer answers slowly (or never) rarely.
    pub async fn start(
        seed: u64,
        timeout_ms: u64,
        gentle: bool,
        tls: Option<Arc<verdict_tls::rustls::ServerConfig>>,
    ) -> std::io::Result<Consumer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}/", listener.local_addr()?);
        let state = Arc::new(State {
            seed,
            timeout_ms,
            gentle,
            down: AtomicBool::new(false),
            log: Mutex::new(Log::default()),
        });
        let serving = state.clone();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = serving.clone();
                match acceptor.clone() {
                    Some(acceptor) => {
                        tokio::spawn(async move {
                            // A handshake the gateway gave up on is no request.
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(state, stream).await;
                            }
                        });
                    }
                    None => {
                        tokio::spawn(serve(state, stream));
                    }
                }
            }
        });
        Ok(Consumer { url, state })
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Down: every request is cut off unanswered (the connection reset).
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::Relaxed);
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Request> {
        self.state
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            .clone()
    }

    /// Messages accepted at least once so far.
    pub fn accepted_keys(&self) -> usize {
        self.state
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .accepted
    }
}

fn now_ms() -> u64 {
    verdict_gateway::pipeline::now_ms()
}

/// A connection the consumer answers on: plain TCP, or TLS over it.
trait Connection: AsyncRead + AsyncWrite + Unpin + Send {
    /// The TCP stream under it (to reset).
    fn tcp(&self) -> &TcpStream;
}

impl Connection for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Connection for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

async fn serve(state: Arc<State>, mut stream: impl Connection) {
    let Some(body) = read_request(&mut stream).await else {
        return;
    };
    // When the request came: the checks compare deliveries with dead letters by it.
    let at_ms = now_ms();
    let key = key_of(&body);
    if state.down.load(Ordering::Relaxed) {
        // Down: the request is cut off unanswered (and counts as a failed delivery).
        reset(stream.tcp());
        let mut log = state.log.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = &key {
            log.failed(key);
        }
        log.push(Request {
            key,
            reply: "down",
            at_ms,
            accepted: false,
        });
        return;
    }
    let (reply, name, accepted) = choose(&state, key.as_deref());
    let wrote = answer(&mut stream, reply, state.timeout_ms).await;
    let mut log = state.log.lock().unwrap_or_else(PoisonError::into_inner);
    log.push(Request {
        key,
        reply: name,
        at_ms,
        accepted: accepted && wrote,
    });
}

/// The request's body (after its head), or none when the request is cut short.
async fn read_request(stream: &mut impl Connection) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > 512 * 1024 {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf[head_end..head_end + length].to_vec())
}

/// The answer to this delivery of `key`: by its fate, and by how many failing answers it
/// had already.
fn choose(state: &State, key: Option<&str>) -> (Reply, &'static str, bool) {
    let Some(key) = key else {
        return (Reply::Accept(200), "accept-unkeyed", true);
    };
    let mut log = state.log.lock().unwrap_or_else(PoisonError::into_inner);
    let (failed_before, accepted_before) = log.keys.get(key).copied().unwrap_or_default();
    let mut rng = Rng::new(state.seed, hash(key) ^ u64::from(failed_before) << 32);
    let fails = match fate(state.seed, key) {
        // A redelivery of an accepted message is accepted again (the consumer is
        // idempotent); the checker counts it.
        _ if accepted_before => false,
        Fate::Ok => false,
        Fate::FailThenOk(k) => failed_before < k,
        Fate::Poison => {
            log.failed(key);
            return poison(&mut rng);
        }
        Fate::Exhaust => true,
    };
    if !fails {
        let status = *rng.pick(&[200, 201, 202, 204, 299]);
        return (Reply::Accept(status), "accept", true);
    }
    log.failed(key);
    transient(&mut rng, state.gentle)
}

/// A failure the route's rules retry, in one of many hostile shapes.
fn transient(rng: &mut Rng, gentle: bool) -> (Reply, &'static str, bool) {
    let retry_after = *rng.pick(&[
        "soon",
        "-5",
        "99999999999999999999999",
        "Wed, 21 Oct 2015 07:28:00 GMT",
        "Fri, 31 Dec 9999 23:59:59 GMT",
        "1",
        "\u{1}",
    ]);
    // The answers that take a timeout (7 and up) and the 1 MB body (5): one in a hundred
    // when gentle.
    let shape = if gentle && !rng.percent(1) {
        *rng.pick(&[0, 1, 2, 3, 4, 6])
    } else {
        rng.below(11)
    };
    let (reply, name) = match shape {
        0 => (
            raw(
                503,
                &[("retry-after", retry_after.as_bytes())],
                b"busy\r\n\0",
            ),
            "503-garbage-retry-after",
        ),
        1 => (
            raw(500, &[], &[0xff, 0xfe, b'\r', b'\n', 0x80, 0]),
            "500-invalid-utf8-body",
        ),
        2 => {
            let kind = "k".repeat(10_000);
            let body = format!(r#"{{"error": {{"kind": "{kind}", "message": "long"}}}}"#);
            (raw(502, &[], body.as_bytes()), "502-10kb-kind")
        }
        3 => (
            raw(*rng.pick(&[599, 999, 600]), &[], b"?"),
            "unknown-status",
        ),
        4 => (raw(429, &[("retry-after", b"1")], b""), "429"),
        5 => (raw(503, &[], &vec![b'x'; 1 << 20]), "503-1mb-body"),
        6 => (
            raw(
                500,
                &[],
                br#"{"error": {"kind": "db.\r\ntime\u0000out", "message": "a\r\nb"}}"#,
            ),
            "500-control-chars-in-kind",
        ),
        7 => (Reply::Slow, "slower-than-timeout"),
        8 => (Reply::ResetMidBody, "reset-mid-body"),
        9 => (Reply::Reset, "reset"),
        _ => {
            if rng.percent(50) {
                (Reply::Never, "never-answers")
            } else {
                (Reply::Informational, "informational-only")
            }
        }
    };
    (reply, name, false)
}

/// An answer the route's rules dead-letter at once.
fn poison(rng: &mut Rng) -> (Reply, &'static str, bool) {
    let (reply, name) = match rng.below(4) {
        0 => (raw(400, &[], b"{not json"), "400-invalid-json"),
        1 => (
            raw(
                422,
                &[],
                br#"{"error": {"kind": "torture.bad-schema", "message": "line1\r\nline2\u0000"}}"#,
            ),
            "422-torture-kind",
        ),
        2 => {
            let body = format!(r#"{{"error": {{"kind": "{}"}}}}"#, "p".repeat(10_000));
            (raw(422, &[], body.as_bytes()), "422-10kb-kind")
        }
        _ => (
            raw(409, &[("x-verdict-reject", &[0xff, b'd', b'u', b'p'])], b""),
            "409-reject-invalid-utf8",
        ),
    };
    (reply, name, false)
}

fn raw(status: u16, headers: &[(&str, &[u8])], body: &[u8]) -> Reply {
    let mut out = format!("HTTP/1.1 {status} X\r\nconnection: close\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    Reply::Raw(out)
}

/// Write `reply`; whether all of it went out.
async fn answer(stream: &mut impl Connection, reply: Reply, timeout_ms: u64) -> bool {
    match reply {
        Reply::Accept(status) => {
            let text =
                format!("HTTP/1.1 {status} OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
            stream.write_all(text.as_bytes()).await.is_ok() && stream.flush().await.is_ok()
        }
        Reply::Raw(bytes) => stream.write_all(&bytes).await.is_ok() && stream.flush().await.is_ok(),
        Reply::Slow => {
            tokio::time::sleep(Duration::from_millis(timeout_ms + 300)).await;
            let late = b"HTTP/1.1 503 Late\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
            stream.write_all(late).await.is_ok() && stream.flush().await.is_ok()
        }
        Reply::Never => {
            // Until the gateway gives up and closes the connection.
            let mut sink = [0u8; 64];
            let _ = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut sink)).await;
            false
        }
        Reply::ResetMidBody => {
            let head = b"HTTP/1.1 503 X\r\ncontent-length: 1000\r\n\r\npartial";
            let _ = stream.write_all(head).await;
            let _ = stream.flush().await;
            reset(stream.tcp());
            false
        }
        Reply::Reset => {
            reset(stream.tcp());
            false
        }
        Reply::Informational => {
            let _ = stream.write_all(b"HTTP/1.1 102 Processing\r\n\r\n").await;
            let _ = stream.flush().await;
            let mut sink = [0u8; 64];
            let _ = tokio::time::timeout(
                Duration::from_millis(timeout_ms + 2_000),
                stream.read(&mut sink),
            )
            .await;
            false
        }
    }
}

/// Make closing `stream` send a reset instead of a graceful close. A zero linger does not
/// block on drop (it is the blocking of a non-zero linger the deprecation warns about).
#[allow(deprecated)]
fn reset(stream: &TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
}
