//! The gateway assembled: the registry (hot reload on file changes), the embedded store and
//! every source a route consumes from, the delivery pipeline, retention, and the admin API
//! with publishing, `/v1/decide` and `/metrics`. `verdict run` is this and a signal handler.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::Metrics;
use crate::admin::{self, AdminState};
use crate::error::GatewayError;
use crate::pipeline::{Pipeline, now_ms};
use crate::sources::Source;
use crate::sources::embedded::EmbeddedSource;
use crate::store::{Store, StoreError};
use verdict_registry::SourceKind;
use verdict_registry::{AdminConfig, ConfigWatcher, GatewayConfig, Registry};

/// How long file changes are coalesced before a reload.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// How long deliveries in flight may finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A started gateway: its registry, store and pipeline, and where its admin API listens.
pub struct Gateway {
    /// The registry.
    pub registry: Arc<Registry>,
    /// The embedded store.
    pub store: Arc<Store>,
    /// The delivery pipeline (its metrics: what `verdict bench` reads).
    pub pipeline: Arc<Pipeline>,
    /// The admin API's address.
    pub admin: SocketAddr,
    /// The admin API's base URL: `https://` when `[admin]` has a certificate.
    pub admin_url: String,
    /// What the admin listener serves: the API and the console.
    router: axum::Router,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    deliveries: Vec<tokio::task::JoinHandle<()>>,
    /// Traces, when `[telemetry]` or the environment turned them on: flushed at the end.
    telemetry: Option<crate::telemetry::Telemetry>,
    /// The config file's watcher (none for a gateway started without a file).
    _watcher: Option<ConfigWatcher>,
}

impl Gateway {
    /// Load `config_path`, build the first generation (the whole admission gate), watch the
    /// files, start every source a route consumes from, and serve the admin API until
    /// `shutdown` completes. Needs a multi-threaded tokio runtime.
    pub async fn start(
        config_path: &Path,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Gateway, GatewayError> {
        // Every path in the config, the state directory, uploads and the watcher resolve
        // against the config file's directory - once, here, whatever the working directory
        // later is (`-c verdict.toml` has an empty parent; `-c conf/verdict.toml` must not
        // become `conf/conf/...` when joined again).
        let config_path =
            std::path::absolute(config_path).map_err(|source| GatewayError::ConfigPath {
                path: config_path.to_path_buf(),
                source,
            })?;
        let config = GatewayConfig::load(&config_path)?;
        let base = config_path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let token = admin_token(&config.admin, &base)?;
        launch(config, base, token, Some(config_path), shutdown).await
    }

    /// Start a gateway on `config`, as [`GatewayConfig::parse`] or [`GatewayConfig::load`]
    /// made and checked it, without a file: the policies, the state directory, the tokens
    /// file and the admin listener's certificate are taken relative to `base_dir`, and
    /// `admin_token` (if any) is the admin API's token - the environment and `[admin]
    /// token_file` are not read. (The consumers' and brokers' TLS and credential files are
    /// resolved, and read, when the config is parsed, relative to the file name `parse` was
    /// given: pass one in `base_dir`, as below, for all of them to be taken from there.) Nothing
    /// is watched: the routes and policies stay as given until `POST /v1/policies`
    /// changes them (`POST /v1/reload` answers 409). For embedders and tests; an operator's
    /// gateway runs from a file ([`Gateway::start`]).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use verdict_gateway::Gateway;
    /// use verdict_registry::GatewayConfig;
    ///
    /// let config = GatewayConfig::parse(
    ///     r#"
    ///     [admin]
    ///     listen = "127.0.0.1:0"
    ///     [policies.rules]
    ///     path = "rules.component.wasm"
    ///     [[routes]]
    ///     topic = "orders"
    ///     policy = "rules"
    ///     consumer = { url = "http://127.0.0.1:8081/" }
    ///     "#,
    ///     "/srv/verdict/verdict.toml",
    /// )?;
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let gateway = Gateway::start_with(
    ///     config,
    ///     std::path::Path::new("/srv/verdict"),
    ///     Some("an-admin-token".into()),
    ///     async {
    ///         let _ = stopped.await;
    ///     },
    /// )
    /// .await?;
    /// println!("admin API on {}", gateway.admin_url);
    /// let _ = stop.send(());
    /// gateway.wait().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start_with(
        config: GatewayConfig,
        base_dir: &Path,
        admin_token: Option<String>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Gateway, GatewayError> {
        let base = std::path::absolute(base_dir).map_err(|source| GatewayError::ConfigPath {
            path: base_dir.to_path_buf(),
            source,
        })?;
        config.remember_secrets();
        let token = admin_token
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        if let Some(token) = &token {
            verdict_runtime::redact::remember(token);
        }
        launch(config, base, token, None, shutdown).await
    }

    /// The admin API and the console as a service for a caller in this process (an
    /// embedder's own server, a test): the routes, checks and state the listener serves, no
    /// port in between. A request needs a `Host` the listener answers to (its address, or
    /// `localhost` / `127.0.0.1` with its port), as over the network.
    pub fn router(&self) -> axum::Router {
        self.router.clone()
    }

    /// Wait until the server stops (after `shutdown` completes).
    pub async fn wait(self) -> Result<(), GatewayError> {
        let stopped = Self::stopped(self.server, self.deliveries).await;
        if let Some(telemetry) = self.telemetry {
            // The last spans, exported before the process ends (whatever else went wrong);
            // the export itself runs on this runtime, so the wait must not hold one of its
            // workers.
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
        stopped
    }

    /// Until the admin server and every source have stopped.
    async fn stopped(
        server: tokio::task::JoinHandle<std::io::Result<()>>,
        deliveries: Vec<tokio::task::JoinHandle<()>>,
    ) -> Result<(), GatewayError> {
        server
            .await
            .map_err(|source| GatewayError::Task {
                what: "the admin server",
                source,
            })?
            .map_err(GatewayError::Serve)?;
        for task in deliveries {
            task.await.map_err(|source| GatewayError::Task {
                what: "a source",
                source,
            })?;
        }
        Ok(())
    }
}

/// Start a gateway on `config` (paths relative to `base`), its admin API accepting
/// `token`; `config_path` is the file it came from, watched and reloaded (none: fixed).
async fn launch(
    config: GatewayConfig,
    base: PathBuf,
    token: Option<String>,
    config_path: Option<PathBuf>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Gateway, GatewayError> {
    sources_built(&config)?;
    // Loading or parsing has refused a non-loopback admin.listen unless allow_remote is set.
    let state_dir = base.join(&config.storage.dir);
    verdict_runtime::fsutil::private_state_dir(&state_dir).map_err(|source| {
        GatewayError::StateDir {
            path: config.storage.dir.clone(),
            source,
        }
    })?;
    let credentials = admin::credentials::Credentials::load(
        token,
        config
            .admin
            .tokens_file
            .as_ref()
            .map(|file| base.join(file)),
    )?;
    if credentials.current().is_empty() {
        tracing::warn!(
            env = %config.admin.token_env,
            "no admin token and no tokens file: the admin API and the console show summaries \
             only and change nothing"
        );
    }
    let registry = {
        let (config, base) = (config.clone(), base.clone());
        tokio::task::spawn_blocking(move || Registry::new(&config, &base))
            .await
            .map_err(GatewayError::RegistryTask)??
    };
    let registry = Arc::new(registry);
    let watcher = match &config_path {
        Some(path) => Some(ConfigWatcher::start(registry.clone(), path, DEBOUNCE)?),
        None => None,
    };
    let store = {
        let (config, base) = (config.clone(), base.clone());
        // Connecting to a shared database blocks (and its driver must not run on an async
        // worker), so the store opens on a blocking thread like every call after.
        tokio::task::spawn_blocking(move || -> Result<(Arc<Store>, u64), StoreError> {
            let store = Arc::new(open_store(&config, &base)?);
            let recovered = store.recover_leases(store.now_ms())?;
            Ok((store, recovered))
        })
        .await
        .map_err(GatewayError::StoreTask)?
    };
    let (store, recovered) = store?;
    tracing::info!(store = %store.describe(), "store open");
    if recovered > 0 {
        tracing::warn!(
            recovered,
            "messages leased when the gateway stopped are delivered again (possible duplicates)"
        );
    }
    let telemetry = crate::telemetry::start(&config.telemetry, tokio::runtime::Handle::current())?;
    let tracing = telemetry
        .as_ref()
        .map_or_else(crate::telemetry::Tracing::off, |t| t.tracing());
    let pipeline = Arc::new(
        Pipeline::new(store.clone(), registry.clone(), config.gateway.clone())
            .map_err(GatewayError::HttpClient)?
            .with_tracing(tracing),
    );
    let mut metrics = Metrics::new(registry.clone()).with_gateway(
        registry.clone(),
        store.clone(),
        pipeline.metrics(),
        pipeline.broker_dlqs().clone(),
    );
    if let Some(telemetry) = &telemetry {
        metrics = metrics.with_telemetry(telemetry.counts().clone());
    }
    let metrics = Arc::new(metrics);
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    // Probed before the admin listener is bound; started once it is.
    let brokers = broker_sources(&config, &base, &state_dir).await?;
    // Read before binding, so a bad certificate stops the start with its file named.
    let tls = match (&config.admin.tls_cert, &config.admin.tls_key) {
        (Some(cert), Some(key)) => Some(verdict_tls::server_config(
            "admin",
            &base.join(cert),
            &base.join(key),
            None,
        )?),
        _ => None,
    };
    if config.admin.allow_remote_plaintext
        && tls.is_none()
        && !config.admin.listen.ip().is_loopback()
    {
        tracing::warn!(
            listen = %config.admin.listen,
            "the admin listener serves plain HTTP beyond loopback (allow_remote_plaintext): \
             only a TLS proxy on a private network may reach it"
        );
    }
    let listen = |source| GatewayError::Listen {
        address: config.admin.listen,
        source,
    };
    let listener = tokio::net::TcpListener::bind(config.admin.listen)
        .await
        .map_err(listen)?;
    let admin = listener.local_addr().map_err(listen)?;
    // Sources start once the admin listener is bound: a start that fails there leaves no
    // broker session to be torn down under its feet.
    let mut deliveries = Vec::new();
    let embedded: Box<dyn Source> = Box::new(EmbeddedSource::new(config.storage.retention_ms));
    for source in std::iter::once(embedded).chain(brokers) {
        if let Some(ready) = source.readiness() {
            pipeline.add_source(ready);
        }
        tracing::debug!(source = source.name(), "starting a source");
        deliveries.push(tokio::spawn(source.run(
            pipeline.clone(),
            stopped.clone(),
            SHUTDOWN_GRACE,
        )));
    }
    let fixed = config_path.is_none().then(|| Arc::new(config.clone()));
    let mut state = AdminState::new(registry.clone(), metrics, config_path, credentials);
    if let Some(config) = fixed {
        state = state.with_fixed_config(config);
    }
    let state = state
        .with_gateway(pipeline.clone())
        .with_dlq_history(sample_dlqs(store.clone(), stopped.clone()))
        .with_allowed_hosts(admin::host_check::AllowedHosts::new(
            admin,
            &config.admin.allowed_hosts,
        ));
    let (state, admin_url) = match tls {
        Some(_) => (state.with_tls(), format!("https://{admin}")),
        None => (state, format!("http://{admin}")),
    };
    let router = admin::router(state, config.admin.max_body_bytes);
    let mut stopped_admin = stopped;
    let server = tokio::spawn(admin::serve(listener, tls, router.clone(), async move {
        let _ = stopped_admin.wait_for(|stop| *stop).await;
    }));
    let generation = registry.current();
    tracing::info!(
        generation = generation.number,
        routes = generation.routes.len(),
        %admin,
        "verdict is running"
    );
    Ok(Gateway {
        registry,
        store,
        pipeline,
        admin,
        admin_url,
        router,
        server,
        deliveries,
        telemetry,
        _watcher: watcher,
    })
}

/// Every route's source is one this build has: a route on a source left out of it
/// (`--no-default-features`) stops the start before anything is opened, naming the route
/// and the feature.
fn sources_built(config: &GatewayConfig) -> Result<(), GatewayError> {
    for route in &config.routes {
        let (built, source_name) = match route.source {
            SourceKind::Embedded => (true, "embedded"),
            SourceKind::Nats => (cfg!(feature = "nats"), "nats"),
            SourceKind::Rabbitmq => (cfg!(feature = "rabbitmq"), "rabbitmq"),
            SourceKind::Kafka => (cfg!(feature = "kafka"), "kafka"),
        };
        if !built {
            return Err(GatewayError::LeftOut {
                source_name,
                topic: route.topic.clone(),
            });
        }
    }
    Ok(())
}

/// The broker sources the routes consume from, each broker probed first: the gateway's own
/// TLS or credentials refused stops the start now, naming the setting, rather than a
/// reconnect loop; a server that is only down is waited for.
async fn broker_sources(
    config: &GatewayConfig,
    base: &Path,
    state_dir: &Path,
) -> Result<Vec<Box<dyn Source>>, GatewayError> {
    let topics = |kind: SourceKind| -> Vec<String> {
        config
            .routes
            .iter()
            .filter(|r| r.source == kind)
            .map(|r| r.topic.clone())
            .collect()
    };
    // A source this build left out has no route: `sources_built` has seen to that.
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    #[cfg(feature = "nats")]
    if !topics(SourceKind::Nats).is_empty() {
        match crate::sources::nats::probe(&config.nats, &config.gateway.instance).await {
            Ok(seen) => tracing::debug!(?seen, "NATS reached"),
            Err(e) if e.configuration => return Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, "NATS is not reachable yet; the source keeps trying");
            }
        }
        let source = crate::sources::nats::NatsSource::new(config.nats.clone());
        sources.push(Box::new(source));
    }
    #[cfg(feature = "rabbitmq")]
    {
        let queues = topics(SourceKind::Rabbitmq);
        if !queues.is_empty() {
            let key = history_key(&config.rabbitmq.history_key_file, base, state_dir)?;
            match crate::sources::rabbitmq::probe(&config.rabbitmq, &config.gateway.instance).await
            {
                Ok(seen) => tracing::debug!(%seen, "RabbitMQ reached"),
                Err(e) if e.configuration => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(error = %e, "RabbitMQ is not reachable yet; the source keeps trying");
                }
            }
            let mut source =
                crate::sources::rabbitmq::RabbitmqSource::new(config.rabbitmq.clone(), queues, key);
            // Read at start, like the queues themselves: a reload that turns ordering on or
            // off takes effect at the next start.
            for route in config.routes.iter().filter(|r| {
                r.source == SourceKind::Rabbitmq
                    && r.ordering == verdict_registry::RouteOrdering::Key
            }) {
                if let Some(header) = &route.key_header {
                    source = source.ordered_by(&route.topic, header);
                }
            }
            sources.push(Box::new(source));
        }
    }
    #[cfg(feature = "kafka")]
    {
        let topics = topics(SourceKind::Kafka);
        if !topics.is_empty() {
            let key = history_key(&config.kafka.history_key_file, base, state_dir)?;
            let source = crate::sources::kafka::KafkaSource::new(config.kafka.clone(), topics, key);
            sources.push(Box::new(source));
        }
    }
    Ok(sources)
}

/// The key signing broker history headers: the source's `history_key_file`, or
/// `<state dir>/history.key`, created with 32 random bytes (mode 0600) when missing.
#[cfg(any(feature = "rabbitmq", feature = "kafka"))]
fn history_key(
    file: &Path,
    base: &Path,
    state_dir: &Path,
) -> Result<crate::sources::signed_history::HistoryKey, GatewayError> {
    let path = if file.as_os_str().is_empty() {
        state_dir.join("history.key")
    } else {
        base.join(file)
    };
    let key = verdict_runtime::fsutil::secret(&path)
        .map_err(|source| GatewayError::HistoryKey { path, source })?;
    Ok(crate::sources::signed_history::HistoryKey::new(key))
}

/// The admin token: from the environment variable, else the token file. The one redactor
/// learns it, so no answer or log line shows it.
fn admin_token(admin: &AdminConfig, base: &Path) -> Result<Option<String>, GatewayError> {
    let token = match std::env::var(&admin.token_env) {
        Ok(token) if !token.trim().is_empty() => Some(token.trim().to_string()),
        _ => match &admin.token_file {
            Some(file) => {
                let path = base.join(file);
                let token = std::fs::read_to_string(&path)
                    .map_err(|source| GatewayError::TokenFile { path, source })?;
                Some(token.trim().to_string()).filter(|t| !t.is_empty())
            }
            None => None,
        },
    };
    if let Some(token) = &token {
        verdict_runtime::redact::remember(token);
    }
    Ok(token)
}

/// The store `[gateway] store` names, or the SQLite file `[storage] dir`/`[gateway]
/// database` when it names none; relative paths are relative to the config file's `base`.
pub fn open_store(config: &GatewayConfig, base: &Path) -> Result<Store, StoreError> {
    match &config.gateway.store {
        Some(url) => Store::connect(url, base),
        None => Store::open(
            &base
                .join(&config.storage.dir)
                .join(&config.gateway.database),
        ),
    }
}

/// Sample the store's DLQs every [`crate::dlq::SAMPLE_EVERY`] until `stopped`, for the
/// console's charts; a sample the store cannot answer is skipped.
fn sample_dlqs(
    store: Arc<Store>,
    mut stopped: watch::Receiver<bool>,
) -> Arc<crate::dlq::DlqHistory> {
    let history = Arc::new(crate::dlq::DlqHistory::default());
    let filling = history.clone();
    tokio::spawn(async move {
        loop {
            let store = store.clone();
            if let Ok(Ok(stats)) = tokio::task::spawn_blocking(move || store.dlq_stats()).await {
                filling.record(now_ms(), &stats);
            }
            tokio::select! {
                () = tokio::time::sleep(crate::dlq::SAMPLE_EVERY) => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
        }
    });
    history
}
