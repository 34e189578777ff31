//! The admin HTTP API: what operators (and `verdict policy ...`) use to see and change the
//! registry of a running gateway, and what consumers in any language use to ask for a
//! verdict (`POST /v1/decide`).
//!
//! | method | path | role | what |
//! |---|---|---|---|
//! | GET | `/healthz` | | liveness |
//! | GET | `/metrics` | | Prometheus (OpenMetrics text) |
//! | GET | `/readyz` | | 200 once the store answers and every broker source is connected (with `warning:` lines for what an operator must fix); 503 naming what is not |
//! | GET | `/v1/status` | summary | generation, changes applied/refused, artifact cache |
//! | GET | `/v1/routes` | summary | routes with component, config, counts, shadow |
//! | GET | `/v1/policies` | summary | policies with component, loaded-at, fault counts, uploads |
//! | GET | `/v1/generations` | summary | the active generation and those kept for rollback |
//! | GET | `/v1/shadow` | summary | shadow reports |
//! | POST | `/v1/decide` | summary | `{"topic", "failure"}` -> decision |
//! | GET | `/v1/dlq/stats` | summary (`read` for `?source=` a broker) | DLQ depths |
//! | GET | `/v1/dlq` | read | the dead letters, a page at a time (query: source, topic, dlq, class, kind, group, min_age_ms, dead_before_ms, max_repeats, limit, max_bytes, after, payloads; the next page's `after` in the `x-verdict-next` header; payloads past 64 KiB as their size and digest unless `payloads=full`) |
//! | GET | `/v1/dlq/{seq}` | read | one dead letter with its whole payload (`?source=`) |
//! | GET | `/v1/dlq/groups` | read | dead letters grouped by topic, class, kind and normalised reason (`?source=` one source or `all`): count, first/last seen, sources, policy versions, parked, a sample (no payload); largest first, 100 a page (`limit` up to 1,000, `after`; the next page's `after` in `x-verdict-next`) |
//! | GET | `/v1/jobs`, `/v1/jobs/{id}` | read | DLQ jobs, newest first: state, done/total, canary, dry-run decisions |
//! | POST | `/v1/topics/{topic}/messages` | operate | publish one message or a batch into the store |
//! | POST | `/v1/dlq/replay` | operate | `{"filter", "dry_run", "rate_per_s", "canary", "note"}` |
//! | POST | `/v1/dlq/discard` | operate | `{"filter", "reason"}` (reason required, audited) |
//! | POST | `/v1/dlq/groups/{id}/replay`, `.../discard`, `.../dry-run` | operate | a job on one group, cut off at its start (`{"source", "rate_per_s", "canary", "canary_timeout_ms", "note"}`; a discard needs `"reason"`); 202 with the job |
//! | POST | `/v1/jobs/{id}/cancel` | operate | stop a running job at its next step |
//! | POST | `/v1/rollback` | operate | `{"topic"?}`: previous generation, for one route or all |
//! | POST | `/v1/shadow` | operate | `{"topic", "policy"?, "config"?}`: shadow on (or off) |
//! | POST | `/v1/dlq/{seq}/repair` | edit | `{"payload" \| "payload_base64", "content_type", "headers", "note"}`: edit one dead letter of the store and put it back (only with `[console] allow_edit`; audited as `repaired` with who changed what) |
//! | PUT | `/v1/policies/{name}/component` | admin | upload a component (body: bytes) |
//! | POST | `/v1/policies/{name}/activate` | admin | `{"sha256"}`: activate an upload |
//! | POST | `/v1/reload` | admin | re-read the config file |
//!
//! "summary" is open with `[admin] open_reads = "summary"` (the default) and needs `read`
//! with `"none"`; every role includes the weaker ones (see [`identity`] and [`auth`]).
//! Audit notes of actions name the identity that asked.
//!
//! Before any of that, a request whose `Host` names no address the listener answers to gets
//! 421 (see [`host_check`]: DNS rebinding). Errors are JSON with a status a client can act
//! on (see [`ApiError`]). The same listener
//! serves the operator console (`/`, `/groups/{id}`, `/jobs/{id}`, `/letters/{seq}`,
//! `/policies`, `/login`): its pages need what the API's reads of the same data need, its
//! forms the role of the API's action, through a login with a token, a session cookie and
//! a CSRF token.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post, put};

use crate::Metrics;
use crate::pipeline::Pipeline;
use verdict_registry::Registry;

mod auth;
mod auth_limit;
pub(crate) mod bodies;
mod broker_connections;
mod console;
pub mod credentials;
mod dlq;
mod error;
mod groups;
mod handlers;
pub mod host_check;
pub mod identity;
mod jobs;
mod publish;
pub mod repair;
mod session;
pub mod tls;
mod views;

pub use error::ApiError;
pub use views::{
    CacheStatsView, DecisionStatsView, GenerationView, PausedView, PolicyView, ReloadStatusView,
    RouteView, StatusView,
};

/// What the handlers share.
#[derive(Clone)]
pub struct AdminState {
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    config_path: Option<PathBuf>,
    /// The config of a gateway started without a file (`Gateway::start_with`): what the
    /// broker DLQ tools read the brokers' settings from.
    fixed_config: Option<Arc<verdict_registry::GatewayConfig>>,
    credentials: Arc<credentials::Credentials>,
    gateway: Option<Arc<Pipeline>>,
    broker_connections: Arc<broker_connections::BrokerConnections>,
    jobs: Arc<crate::dlq::Jobs>,
    dlq_history: Arc<crate::dlq::DlqHistory>,
    sessions: Arc<session::Sessions>,
    hosts: Arc<host_check::AllowedHosts>,
    auth_failures: Arc<auth_limit::AuthFailures>,
    tls: bool,
}

impl AdminState {
    /// The API over `registry`. `config_path` is what `POST /v1/reload` re-reads (none: the
    /// endpoint answers 409); `credentials` are the identities it accepts (none: everything
    /// that needs a role gets 401).
    pub fn new(
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        config_path: Option<PathBuf>,
        credentials: credentials::Credentials,
    ) -> Self {
        let auth_failures = Arc::new(auth_limit::AuthFailures::new(
            metrics.admin().auth_failures.clone(),
        ));
        AdminState {
            registry,
            metrics,
            config_path,
            fixed_config: None,
            credentials: Arc::new(credentials),
            gateway: None,
            broker_connections: Arc::default(),
            jobs: Arc::default(),
            dlq_history: Arc::default(),
            sessions: Arc::default(),
            hosts: Arc::new(host_check::AllowedHosts::loopback()),
            auth_failures,
            tls: false,
        }
    }

    /// The config of a gateway started without a file: the broker DLQ tools read the
    /// brokers' settings from it (a gateway started from a file reads the file again, so
    /// they follow its reloads).
    pub fn with_fixed_config(mut self, config: Arc<verdict_registry::GatewayConfig>) -> Self {
        self.fixed_config = Some(config);
        self
    }

    /// The listener serves HTTPS: the session cookie is `Secure`, answers carry HSTS.
    pub fn with_tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Answer only to `hosts` (by default: loopback names on any port); see
    /// [`host_check`].
    pub fn with_allowed_hosts(mut self, hosts: host_check::AllowedHosts) -> Self {
        self.hosts = Arc::new(hosts);
        self
    }

    /// The names the listener answers to.
    pub(crate) fn allowed_hosts(&self) -> &host_check::AllowedHosts {
        &self.hosts
    }

    /// Serve the gateway's endpoints too: publishing into the store.
    pub fn with_gateway(mut self, pipeline: Arc<Pipeline>) -> Self {
        self.gateway = Some(pipeline);
        self
    }

    /// Draw the store's DLQs over time from `history` (which the gateway samples).
    pub fn with_dlq_history(mut self, history: Arc<crate::dlq::DlqHistory>) -> Self {
        self.dlq_history = history;
        self
    }

    /// Who sent `headers`: a logged-in operator of the console (with the role their
    /// identity has now), or not.
    pub(crate) fn viewer(&self, headers: &axum::http::HeaderMap) -> session::Viewer {
        self.sessions
            .viewer(headers, self.session_idle(), &self.credentials.current())
    }

    /// What is open without a credential (`[admin] open_reads`, as the config is now).
    pub(crate) fn open_reads(&self) -> verdict_registry::OpenReads {
        self.registry.current().config().admin.open_reads
    }

    /// How long a console login lasts without use (`[console] session_idle_s`).
    pub(crate) fn session_idle(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.registry.current().config().console.session_idle_s)
    }
}

/// The API's routes. `max_body_bytes` bounds every request body (an upload is one). Every
/// request is checked for a `Host` the listener answers to before it is routed.
pub fn router(state: AdminState, max_body_bytes: usize) -> Router {
    let tls = state.tls;
    let host_check = host_check::HostCheck {
        hosts: state.hosts.clone(),
        counters: state.metrics.admin().clone(),
    };
    let summaries = Router::new()
        .route("/v1/dlq/stats", get(dlq::stats))
        .route("/v1/status", get(handlers::status))
        .route("/v1/routes", get(handlers::routes))
        .route("/v1/policies", get(handlers::policies))
        .route("/v1/generations", get(handlers::generations))
        .route("/v1/shadow", get(handlers::shadow_report))
        .route("/v1/decide", post(handlers::decide))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_summary,
        ));
    let reads = Router::new()
        .route("/v1/dlq", get(dlq::list))
        .route("/v1/dlq/groups", get(groups::list))
        .route("/v1/dlq/{seq}", get(dlq::show))
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route_layer(middleware::from_fn_with_state(
            (state.clone(), identity::Role::Read),
            auth::require_role,
        ));
    let operations = Router::new()
        .route("/v1/rollback", post(handlers::rollback))
        .route("/v1/shadow", post(handlers::shadow))
        .route("/v1/dlq/replay", post(dlq::replay))
        .route("/v1/dlq/discard", post(dlq::discard))
        .route("/v1/dlq/groups/{group}/{action}", post(groups::act))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/v1/topics/{topic}/messages", post(publish::publish))
        .route_layer(middleware::from_fn_with_state(
            (state.clone(), identity::Role::Operate),
            auth::require_role,
        ));
    let edits = Router::new()
        .route("/v1/dlq/{seq}/repair", post(repair::repair))
        .route_layer(middleware::from_fn_with_state(
            (state.clone(), identity::Role::Edit),
            auth::require_role,
        ));
    let administration = Router::new()
        .route("/v1/policies/{name}/component", put(handlers::upload))
        .route("/v1/policies/{name}/activate", post(handlers::activate))
        .route("/v1/reload", post(handlers::reload))
        .route_layer(middleware::from_fn_with_state(
            (state.clone(), identity::Role::Admin),
            auth::require_role,
        ));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(dlq::ready))
        .route("/metrics", get(handlers::metrics))
        .merge(summaries)
        .merge(reads)
        .merge(operations)
        .merge(edits)
        .merge(administration)
        .merge(console::router())
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::map_response(
            move |mut response: axum::response::Response| async move {
                if tls {
                    // A browser that reached the console over HTTPS never tries plain HTTP
                    // for it again (a year; no subdomains: the name may be shared).
                    response.headers_mut().insert(
                        axum::http::header::STRICT_TRANSPORT_SECURITY,
                        axum::http::HeaderValue::from_static("max-age=31536000"),
                    );
                }
                response
            },
        ))
        .layer(middleware::from_fn_with_state(
            host_check,
            host_check::require_known_host,
        ))
        .with_state(state)
}

/// Who is at the other end of a connection (for the warning a burst of wrong credentials
/// logs), over plain TCP or TLS alike.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub std::net::SocketAddr);

impl
    axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>>
    for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, tls::TlsListener>>
    for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, tls::TlsListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// Serve the API on `listener` until `shutdown` completes: HTTPS with `tls`, plain HTTP
/// without. Each request knows its peer.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router.into_make_service_with_connect_info::<Peer>();
    match tls {
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(config) => {
            axum::serve(tls::TlsListener::new(listener, config)?, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}
