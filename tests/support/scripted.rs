//! A consumer whose every answer a test scripts - any status, headers, body and delay -
//! and that records what it received (headers included), for the hostile-consumer tests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Response, Uri};

/// One request the consumer received.
#[derive(Debug, Clone)]
pub struct Received {
    /// `x-verdict-message-id`.
    pub id: String,
    /// The request path.
    pub path: String,
    /// Every header, names lower-case, values in order.
    pub headers: HashMap<String, Vec<String>>,
    /// The body.
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

impl Received {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.first().map(String::as_str)
    }
}

/// What to answer.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    after: Duration,
}

impl Reply {
    /// 200, empty.
    pub fn ok() -> Reply {
        Reply::status(200)
    }

    /// This status, empty.
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            after: Duration::ZERO,
        }
    }

    /// With a header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// With a body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Reply {
        self.body = body.into();
        self
    }

    /// Answered only after `after` (a slow consumer).
    pub fn after(mut self, after: Duration) -> Reply {
        self.after = after;
        self
    }
}

type Script = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

/// A running scripted consumer.
#[derive(Clone)]
pub struct Scripted {
    /// Where it listens.
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Scripted {
    /// Start on an ephemeral port on `runtime`, answering each request as `script` says.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        script: impl Fn(&Received) -> Reply + Send + Sync + 'static,
    ) -> Scripted {
        let script: Script = Arc::new(script);
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("binding the consumer");
        let addr = listener.local_addr().unwrap();
        let log = received.clone();
        let router =
            axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let (script, log) = (script.clone(), log.clone());
                async move {
                    let mut all: HashMap<String, Vec<String>> = HashMap::new();
                    for (name, value) in &headers {
                        all.entry(name.as_str().to_string())
                            .or_default()
                            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
                    }
                    let request = Received {
                        id: headers
                            .get("x-verdict-message-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string(),
                        path: uri.path().to_string(),
                        headers: all,
                        body: body.to_vec(),
                        at: Instant::now(),
                    };
                    let reply = script(&request);
                    log.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(request);
                    tokio::time::sleep(reply.after).await;
                    let mut response = Response::builder().status(reply.status);
                    for (name, value) in &reply.headers {
                        response = response.header(name, value);
                    }
                    response.body(Body::from(reply.body)).unwrap()
                }
            });
        runtime.spawn(async move { axum::serve(listener, router).await });
        Scripted { addr, received }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests for message `id` so far.
    pub fn count(&self, id: &str) -> usize {
        self.received().iter().filter(|r| r.id == id).count()
    }

    /// Requests per message id.
    pub fn per_id(&self) -> HashMap<String, usize> {
        let mut out = HashMap::new();
        for r in self.received() {
            *out.entry(r.id).or_default() += 1;
        }
        out
    }
}
