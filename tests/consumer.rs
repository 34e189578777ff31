//! A consumer for gateway tests: an HTTP server that fails some messages on purpose, by
//! message id, and counts what it was sent.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

/// How the consumer treats one message id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 at once.
    Ok,
    /// 503 for this many deliveries, then 200.
    FailsFirst(u32),
    /// 422 with `schema.unknown-version`, always.
    Permanent,
}

/// What the consumer has seen.
#[derive(Debug, Default)]
pub struct Seen {
    /// Deliveries per message id.
    pub deliveries: HashMap<String, u32>,
    /// 2xx answers per message id (more than one: a duplicate delivery).
    pub accepted: HashMap<String, u32>,
    /// Attempt header of the last delivery per id.
    pub last_attempt: HashMap<String, u32>,
}

/// A running consumer.
#[derive(Clone)]
pub struct Consumer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it has seen.
    pub seen: Arc<Mutex<Seen>>,
    /// While true, every delivery gets 503 (the consumer is "down" but answering) .
    pub down: Arc<std::sync::atomic::AtomicBool>,
}

impl Consumer {
    /// Start on an ephemeral port on `runtime`, treating each id by `behaviour`.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        behaviour: impl Fn(&str) -> Behaviour + Send + Sync + 'static,
    ) -> Consumer {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let behaviour = Arc::new(behaviour);
        let (s, d) = (seen.clone(), down.clone());
        let app = Router::new().route(
            "/",
            post(move |headers: HeaderMap| {
                let (seen, down, behaviour) = (s.clone(), d.clone(), behaviour.clone());
                async move { answer(&headers, &seen, &down, &*behaviour) }
            }),
        );
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("binding the consumer");
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await });
        Consumer { addr, seen, down }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> (HashMap<String, u32>, HashMap<String, u32>) {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        (seen.deliveries.clone(), seen.accepted.clone())
    }
}

fn answer(
    headers: &HeaderMap,
    seen: &Mutex<Seen>,
    down: &std::sync::atomic::AtomicBool,
    behaviour: &(dyn Fn(&str) -> Behaviour + Send + Sync),
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let id = header("x-verdict-message-id");
    let attempt: u32 = header("x-verdict-attempt").parse().unwrap_or(0);
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    let n = {
        let n = seen.deliveries.entry(id.clone()).or_default();
        *n += 1;
        *n
    };
    seen.last_attempt.insert(id.clone(), attempt);
    if down.load(std::sync::atomic::Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance").into_response();
    }
    match behaviour(&id) {
        Behaviour::FailsFirst(k) if n <= k => {
            (StatusCode::SERVICE_UNAVAILABLE, "warming up").into_response()
        }
        Behaviour::Permanent => (
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"error": {"kind": "schema.unknown-version", "message": "schema v9 is unknown"}}"#,
        )
            .into_response(),
        _ => {
            *seen.accepted.entry(id).or_default() += 1;
            StatusCode::OK.into_response()
        }
    }
}
