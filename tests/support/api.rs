//! A client of a gateway's admin API that hands each request to the gateway's router in this
//! process. It has the methods and the errors of [`AdminClient`], so a test reads as it
//! would against a remote gateway, but no port, connection or client timeout stands between
//! the test and the handlers: a loaded machine cannot turn an assertion into a flake.
//!
//! [`AdminClient`]: verdict_cli::client::AdminClient

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, header};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::ServiceExt as _;
use verdict_cli::client::{ClientError, decode_answer};

/// The largest JSON answer read, as `AdminClient` bounds it: a DLQ page the API holds to 64
/// MiB, plus the one letter a page always holds.
const ANSWER_BYTES_MAX: usize = 80 << 20;

/// The largest text answer read: what `AdminClient`'s HTTP client reads by default.
const TEXT_BYTES_MAX: usize = 10 << 20;

/// Calls one gateway's admin API through its router, with or without a token.
#[derive(Clone)]
pub struct Api {
    router: axum::Router,
    runtime: tokio::runtime::Handle,
    /// The listener's base URL: its authority is the `Host` sent, the whole names the call
    /// in errors as `AdminClient`'s do.
    base: String,
    token: Option<String>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// An answer as the router gave it.
struct Answer {
    status: u16,
    headers: HeaderMap,
    /// The body, or why it could not be read whole (past the limit asked for).
    body: Result<Bytes, String>,
}

impl Api {
    /// A client of `router`, the admin router of the gateway listening at `base_url`
    /// (`http://127.0.0.1:9474`), run on `runtime` (the gateway's), sending `token` with
    /// every call. Call it from outside that runtime, as a test's own thread does.
    pub fn new(
        router: axum::Router,
        runtime: tokio::runtime::Handle,
        base_url: &str,
        token: Option<String>,
    ) -> Api {
        Api {
            router,
            runtime,
            base: base_url.trim_end_matches('/').to_string(),
            token,
        }
    }

    /// `GET path`.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        finish(
            &self.url(path),
            self.send("GET", path, &[], Vec::new(), ANSWER_BYTES_MAX),
        )
    }

    /// `GET path` of a paged listing (`/v1/dlq`): the page, and the `after` of the next one
    /// (none after the last).
    pub fn get_page<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<(T, Option<String>), ClientError> {
        let answer = self.send("GET", path, &[], Vec::new(), ANSWER_BYTES_MAX);
        let next = answer.as_ref().ok().and_then(|a| {
            a.headers
                .get("x-verdict-next")
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        });
        Ok((finish(&self.url(path), answer)?, next))
    }

    /// `GET path` as text (`/metrics`, `/readyz`), whatever the status.
    pub fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let answer = self.send("GET", path, &[], Vec::new(), TEXT_BYTES_MAX)?;
        let body = answer.body.map_err(|message| ClientError::Decode {
            url: self.url(path),
            message,
        })?;
        // As `AdminClient` reads text: a byte that is no UTF-8 becomes U+FFFD.
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// `POST path` with a JSON body.
    pub fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let url = self.url(path);
        let answer = serde_json::to_vec(body)
            .map_err(|e| ClientError::Unreachable {
                url: url.clone(),
                message: e.to_string(),
            })
            .and_then(|json| {
                let length = json.len().to_string();
                let headers = [
                    ("content-type", "application/json; charset=utf-8"),
                    ("content-length", length.as_str()),
                ];
                self.send("POST", path, &headers, json, ANSWER_BYTES_MAX)
            });
        finish(&url, answer)
    }

    /// `PUT path` with raw bytes.
    pub fn put_bytes<T: DeserializeOwned>(
        &self,
        path: &str,
        bytes: &[u8],
    ) -> Result<T, ClientError> {
        let length = bytes.len().to_string();
        let headers = [
            ("content-type", "application/wasm"),
            ("content-length", length.as_str()),
        ];
        let answer = self.send("PUT", path, &headers, bytes.to_vec(), ANSWER_BYTES_MAX);
        finish(&self.url(path), answer)
    }

    /// `method path` with `headers` (besides `Host` and this client's token) and `body`,
    /// for what the typed calls do not cover (a console page, a form): the status, the
    /// headers and the body as text.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, HeaderMap, String) {
        let answer = self
            .send(method, path, headers, body, usize::MAX)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let body = answer
            .body
            .unwrap_or_else(|e| panic!("{method} {path}: the body: {e}"));
        (
            answer.status,
            answer.headers,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The listener's `host:port`, which its `Host` check answers to.
    fn host(&self) -> &str {
        self.base
            .split_once("://")
            .map_or(self.base.as_str(), |(_, authority)| authority)
    }

    /// The request the router sees from an HTTP/1.1 client: an origin-form URI, `Host`, the
    /// token when there is one, then `headers`. The body is read up to `limit` bytes. A
    /// request that cannot be built is `Unreachable`, as `AdminClient` reports a URL or
    /// header it cannot send.
    fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        limit: usize,
    ) -> Result<Answer, ClientError> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, self.host());
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Body::from(body))
            .map_err(|e| ClientError::Unreachable {
                url: self.url(path),
                message: e.to_string(),
            })?;
        let router = self.router.clone();
        Ok(self.runtime.block_on(async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = axum::body::to_bytes(response.into_body(), limit)
                .await
                .map_err(|e| e.to_string());
            Answer {
                status,
                headers,
                body,
            }
        }))
    }
}

/// An answer as `AdminClient` reads it ([`decode_answer`]).
fn finish<T: DeserializeOwned>(
    url: &str,
    answer: Result<Answer, ClientError>,
) -> Result<T, ClientError> {
    let answer = answer?;
    let decode = |message: String| ClientError::Decode {
        url: url.into(),
        message,
    };
    let body = answer.body.map_err(decode)?;
    let text = String::from_utf8(body.to_vec()).map_err(|e| decode(e.to_string()))?;
    decode_answer(url, answer.status, text)
}
