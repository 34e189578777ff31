//! A blocking client of the admin API: what `verdict policy ...` is built on, and a
//! library for scripts and tests.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answered.
    #[error(
        "{url}: {message} (is `verdict run` running there? pass --admin or set VERDICT_ADMIN_URL)"
    )]
    Unreachable {
        /// The URL called.
        url: String,
        /// What the transport said.
        message: String,
    },
    /// The API answered with an error.
    #[error("{status} {code}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The error code.
        code: String,
        /// The message.
        message: String,
    },
    /// The answer was not what this client understands.
    #[error("{url}: unexpected answer: {message}")]
    Decode {
        /// The URL called.
        url: String,
        /// Why.
        message: String,
    },
}

/// `--ca-file` could not be used (named, with the file and what was wrong).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CaFileError(String);

/// Calls one gateway's admin API.
#[derive(Debug, Clone)]
pub struct AdminClient {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl AdminClient {
    /// A client of the API at `base_url` (`http://127.0.0.1:9474`), sending `token` with
    /// every call.
    pub fn new(base_url: &str, token: Option<String>) -> Self {
        Self::build(base_url, token, ureq::tls::TlsConfig::default())
    }

    /// [`AdminClient::new`] for an `https://` API whose certificate `ca_file` (PEM) issued,
    /// instead of one a public CA issued.
    pub fn with_ca_file(
        base_url: &str,
        token: Option<String>,
        ca_file: &std::path::Path,
    ) -> Result<Self, CaFileError> {
        let certs = verdict_tls::pem::certificates("--ca-file", ca_file)
            .map_err(|e| CaFileError(e.to_string()))?;
        let roots: Vec<ureq::tls::Certificate<'static>> = certs
            .iter()
            .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .build();
        Ok(Self::build(base_url, token, tls))
    }

    fn build(base_url: &str, token: Option<String>, tls: ureq::tls::TlsConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            // Activation compiles and runs the admission gate: allow it minutes, not seconds.
            .timeout_global(Some(Duration::from_secs(600)))
            // A fresh connection per call: the API answers a refused upload before reading
            // its body and closes the connection, and a pooled connection reused after that
            // fails the next call with a reset. An operator's client makes few calls.
            .max_idle_connections(0)
            .build()
            .into();
        AdminClient {
            agent,
            base: base_url.trim_end_matches('/').to_string(),
            token,
        }
    }

    /// `GET path`.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = self.url(path);
        let request = self.authorise(self.agent.get(&url));
        finish(&url, request.call())
    }

    /// `GET path` of a paged listing (`/v1/dlq`): the page, and the `after` of the next one
    /// (none after the last).
    pub fn get_page<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<(T, Option<String>), ClientError> {
        let url = self.url(path);
        let response = self.authorise(self.agent.get(&url)).call();
        let next = response.as_ref().ok().and_then(|r| {
            r.headers()
                .get("x-verdict-next")
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        });
        Ok((finish(&url, response)?, next))
    }

    /// `GET path` as text (`/metrics`).
    pub fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let url = self.url(path);
        let mut response =
            self.authorise(self.agent.get(&url))
                .call()
                .map_err(|e| ClientError::Unreachable {
                    url: url.clone(),
                    message: e.to_string(),
                })?;
        response
            .body_mut()
            .read_to_string()
            .map_err(|e| ClientError::Decode {
                url,
                message: e.to_string(),
            })
    }

    /// `POST path` with a JSON body.
    pub fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let url = self.url(path);
        let request = self.authorise(self.agent.post(&url));
        finish(&url, request.send_json(body))
    }

    /// `PUT path` with raw bytes.
    pub fn put_bytes<T: DeserializeOwned>(
        &self,
        path: &str,
        bytes: &[u8],
    ) -> Result<T, ClientError> {
        let url = self.url(path);
        let request = self
            .authorise(self.agent.put(&url))
            .header("content-type", "application/wasm");
        finish(&url, request.send(bytes))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorise<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(token) => request.header("authorization", format!("Bearer {token}")),
            None => request,
        }
    }
}

/// The largest answer read: a DLQ page the API holds to 64 MiB, plus the one letter a page
/// always holds, however big.
const ANSWER_BYTES_MAX: u64 = 80 << 20;

fn finish<T: DeserializeOwned>(
    url: &str,
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<T, ClientError> {
    let mut response = response.map_err(|e| ClientError::Unreachable {
        url: url.into(),
        message: e.to_string(),
    })?;
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(ANSWER_BYTES_MAX)
        .read_to_string()
        .map_err(|e| ClientError::Decode {
            url: url.into(),
            message: e.to_string(),
        })?;
    decode_answer(url, status, text)
}

/// The admin API's answer `text` with `status` from `url`, as this client reads it: a 2xx
/// body decoded as `T`; any other status as [`ClientError::Api`] with the code and message
/// of the API's JSON error (`{"error": {"code", "message"}}`), or the whole body as the
/// message when it is no JSON.
pub fn decode_answer<T: DeserializeOwned>(
    url: &str,
    status: u16,
    text: String,
) -> Result<T, ClientError> {
    if (200..300).contains(&status) {
        return serde_json::from_str(&text).map_err(|e| ClientError::Decode {
            url: url.into(),
            message: e.to_string(),
        });
    }
    let error: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let field = |name: &str| {
        error["error"][name]
            .as_str()
            .map(String::from)
            .unwrap_or_default()
    };
    Err(ClientError::Api {
        status,
        code: field("code"),
        message: if error.is_null() {
            text
        } else {
            field("message")
        },
    })
}
