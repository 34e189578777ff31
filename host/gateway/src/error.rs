//! Why a gateway did not start or did not stop cleanly. Each variant names the file,
//! setting or address at fault; the underlying error is its `source()`, so `{:#}` through
//! `anyhow` prints the whole chain on one line.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::store::StoreError;
use verdict_registry::{GatewayConfigError, RegistryError, WatchError};

/// What [`Gateway::start`](crate::Gateway::start) and [`Gateway::wait`](crate::Gateway::wait)
/// return on failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The config file's path could not be made absolute.
    #[error("resolving {}", path.display())]
    ConfigPath {
        /// The path as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config file is missing, unreadable or invalid.
    #[error(transparent)]
    Config(#[from] GatewayConfigError),
    /// The state directory could not be created, or is not private (0700).
    #[error("storage.dir = {}", path.display())]
    StateDir {
        /// `storage.dir` as configured.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `admin.token_file` could not be read.
    #[error("admin.token_file = {}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `admin.tokens_file` could not be read or parsed, or collides with the admin token.
    #[error(transparent)]
    Credentials(#[from] crate::admin::credentials::CredentialsError),
    /// NATS refused the gateway's TLS or credentials at start (a server merely down is
    /// waited for instead).
    #[cfg(feature = "nats")]
    #[error(transparent)]
    NatsAccess(#[from] crate::sources::nats::NatsAccessError),
    /// RabbitMQ refused the gateway's TLS or credentials at start.
    #[cfg(feature = "rabbitmq")]
    #[error(transparent)]
    RabbitAccess(#[from] crate::sources::rabbitmq::RabbitAccessError),
    /// `[telemetry]` or the `OTEL_*` variables name settings that cannot be used.
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::StartError),
    /// A route consumes from a source this build left out.
    #[error(
        "route `{topic}` has source = \"{source_name}\", and this gateway was built without \
         the `{source_name}` feature of verdict-gateway (the `verdict` binary has every source)"
    )]
    LeftOut {
        /// The source's name (and its feature's).
        source_name: &'static str,
        /// The first route on it.
        topic: String,
    },
    /// The admin listener's certificate or key could not be used.
    #[error(transparent)]
    AdminTls(#[from] verdict_tls::TlsError),
    /// The first generation was refused (a policy that does not load or pass the gate, a
    /// route that does not resolve).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The task building the first generation stopped (it panicked).
    #[error("building the first generation")]
    RegistryTask(#[source] tokio::task::JoinError),
    /// The task opening the store stopped (it panicked).
    #[error("opening the store")]
    StoreTask(#[source] tokio::task::JoinError),
    /// The config file and the files it names could not be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The embedded store could not be opened or its leases recovered.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The HTTP client that delivers to consumers could not be built.
    #[error("building the consumers' HTTP client")]
    HttpClient(#[source] reqwest::Error),
    /// The key signing RabbitMQ history headers could not be read or created.
    #[error("rabbitmq.history_key_file: {}", path.display())]
    HistoryKey {
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The admin API could not listen.
    #[error("admin.listen = {address}")]
    Listen {
        /// `admin.listen`.
        address: SocketAddr,
        /// Why (in use, not permitted).
        #[source]
        source: std::io::Error,
    },
    /// The admin server failed while serving.
    #[error("the admin server")]
    Serve(#[source] std::io::Error),
    /// A task of the gateway (the admin server, a source) panicked.
    #[error("{what} stopped abnormally")]
    Task {
        /// Which task.
        what: &'static str,
        /// Its panic.
        #[source]
        source: tokio::task::JoinError,
    },
}
