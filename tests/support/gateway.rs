//! A gateway (`verdict run` as a library) on an ephemeral loopback port, for tests. The
//! tests call its admin API through its router in-process ([`Api`]): a connection adds
//! nothing an API test asserts, only ways for a loaded machine to fail it. The listener
//! still runs for what needs a socket (the `verdict` binary, a browser's session).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use verdict_gateway::store::Store;
use verdict_registry::Registry;

use crate::api::Api;

/// A running gateway; stops when dropped.
pub struct Gateway {
    /// Its registry.
    pub registry: Arc<Registry>,
    /// Its store.
    pub store: Arc<Store>,
    /// A client of its admin API, in-process, that sends the token.
    pub admin: Api,
    /// A client of its admin API, in-process, that sends no token.
    pub anonymous: Api,
    /// The admin listener's base URL: for a client that must cross a real socket (the
    /// `verdict` binary, a browser's cookies and origin), and the `Host` the in-process
    /// clients send, so the listener's `Host` check passes them as it would over the wire.
    pub url: String,
    /// The directory of its config.
    pub dir: PathBuf,
    /// What its admin listener serves, for requests in-process.
    router: axum::Router,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The runtime it runs on (also usable for helpers such as a test consumer).
    pub runtime: tokio::runtime::Runtime,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Gateway {
    /// Write `config` to `dir/verdict.toml` (and `token` to `dir/token`, for a config with
    /// `token_file = "token"`) and start a gateway on the file, watched as `verdict run`
    /// watches it; `token` is what the `admin` client sends. For a config built in code,
    /// see [`TestConfig`].
    pub fn start(dir: &Path, config: &str, token: &str) -> Gateway {
        Self::start_on(tokio::runtime::Runtime::new().unwrap(), dir, config, token)
    }

    /// The same on a given runtime (one that already runs a test consumer, say).
    pub fn start_on(
        runtime: tokio::runtime::Runtime,
        dir: &Path,
        config: &str,
        token: &str,
    ) -> Gateway {
        std::fs::write(dir.join("verdict.toml"), config).unwrap();
        // For configs that name `token_file = "token"`.
        std::fs::write(dir.join("token"), token).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = runtime
            .block_on(verdict_gateway::Gateway::start(
                &dir.join("verdict.toml"),
                async {
                    let _ = stopped.await;
                },
            ))
            .expect("the gateway starts");
        Gateway::running(runtime, running, dir, token, stop)
    }

    /// A started gateway, stopped by `stop`, as the tests hold it.
    fn running(
        runtime: tokio::runtime::Runtime,
        running: verdict_gateway::Gateway,
        dir: &Path,
        token: &str,
        stop: tokio::sync::oneshot::Sender<()>,
    ) -> Gateway {
        let url = format!("http://{}", running.admin);
        let registry = running.registry.clone();
        let store = running.store.clone();
        let router = running.router();
        runtime.spawn(running.wait());
        let client = |token: Option<&str>| {
            Api::new(
                router.clone(),
                runtime.handle().clone(),
                &url,
                token.map(String::from),
            )
        };
        let (admin, anonymous) = (client(Some(token)), client(None));
        Gateway {
            registry,
            store,
            admin,
            anonymous,
            url,
            dir: dir.to_path_buf(),
            router,
            stop: Some(stop),
            runtime,
        }
    }

    /// A client of the admin API, in-process, that sends `token` (a wrong one, another
    /// identity's) instead of the gateway's.
    pub fn client(&self, token: Option<&str>) -> Api {
        Api::new(
            self.router.clone(),
            self.runtime.handle().clone(),
            &self.url,
            token.map(String::from),
        )
    }

    /// `method path` with `headers` and `body` and no token, answered by the gateway's admin
    /// router in this process - no port, no HTTP client - with the `Host` the listener
    /// answers to: the status, the headers and the body as text.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, axum::http::HeaderMap, String) {
        self.anonymous.call(method, path, headers, body)
    }

    /// Wait until `/readyz` says ready (a broker source has connected and set up its
    /// streams or queues); panics with the last answer if it does not within 20 s.
    pub fn wait_ready(&self) {
        let ready = crate::wait_for(std::time::Duration::from_secs(20), || {
            self.anonymous
                .get_text("/readyz")
                .is_ok_and(|t| t == "ready\n")
        });
        assert!(ready, "{:?}", self.anonymous.get_text("/readyz"));
    }

    /// Deliveries this gateway made that the consumer accepted (`/metrics`).
    pub fn delivered(&self) -> u64 {
        let metrics = self.anonymous.get_text("/metrics").unwrap();
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("verdict_deliveries_total{") && l.contains("outcome=\"delivered\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

/// A gateway config for tests, built in code: the test defaults (the admin API on an
/// ephemeral loopback port without an environment token, 10 ms polls, a 1 s decide
/// deadline) and what a test sets on top. [`TestConfig::start`] starts a gateway on it
/// without a file ([`verdict_gateway::Gateway::start_with`]); [`TestConfig::write_toml`]
/// writes it for the tests that need a file - the command line, reloads.
///
/// ```no_run
/// use verdict_tests::gateway::{Route, TestConfig};
///
/// # let dir = std::path::Path::new("/tmp");
/// let gw = TestConfig::new()
///     .set("gateway.instance", "gw-orders")
///     .policy("rules", verdict_tests::fixtures::RULES)
///     .route(Route::new("orders", "rules").consumer("http://127.0.0.1:8081/"))
///     .start(dir, "a-token");
/// ```
#[derive(Debug, Clone)]
pub struct TestConfig {
    table: toml::Table,
}

impl Default for TestConfig {
    fn default() -> Self {
        TestConfig::new()
    }
}

impl TestConfig {
    /// The test defaults.
    pub fn new() -> TestConfig {
        TestConfig {
            table: toml::Table::new(),
        }
        .set("sandbox.decide_timeout_ms", 1000)
        .set("admin.listen", "127.0.0.1:0")
        .set("admin.token_env", "VERDICT_TEST_UNSET_TOKEN_VARIABLE")
        .set("admin.token_file", "token")
        .set("gateway.poll_ms", 10)
    }

    /// Set `path` (dotted: `gateway.instance`, `storage.retention_ms`) to `value`.
    pub fn set(mut self, path: &str, value: impl Into<toml::Value>) -> TestConfig {
        set_in(&mut self.table, path, value.into());
        self
    }

    /// Remove `path` (dotted), for a test of what its absence does.
    pub fn unset(mut self, path: &str) -> TestConfig {
        let (parent, key) = match path.rsplit_once('.') {
            Some((parent, key)) => (table_at(&mut self.table, parent), key),
            None => (&mut self.table, path),
        };
        parent.remove(key);
        self
    }

    /// Merge TOML `lines` into `section` (dotted; `""` for the top level): `key = value`
    /// lines belong to the section, a `[table]` or `[[array]]` header after them starts
    /// one of the top level, as in a file. Tables merge key by key, arrays (`[[routes]]`)
    /// are appended to: for settings a test shares as text, such as a broker fixture's
    /// `[nats]` section.
    pub fn merge(mut self, section: &str, lines: &str) -> TestConfig {
        let document = if section.is_empty() {
            lines.to_string()
        } else {
            format!("[{section}]\n{lines}")
        };
        let parsed: toml::Table = toml::from_str(&document)
            .unwrap_or_else(|e| panic!("merging into [{section}]: {e}\n{lines}"));
        merge_into(&mut self.table, parsed);
        self
    }

    /// A policy component named `name`.
    pub fn policy(self, name: &str, path: &str) -> TestConfig {
        self.set(&format!("policies.{name}.path"), path)
    }

    /// A route, after those added before.
    pub fn route(mut self, route: Route) -> TestConfig {
        let routes = self
            .table
            .entry("routes")
            .or_insert_with(|| toml::Value::Array(Vec::new()));
        if let toml::Value::Array(routes) = routes {
            routes.push(toml::Value::Table(route.0));
        }
        self
    }

    /// Every route so far, changed by `change`.
    pub fn map_routes(mut self, change: impl Fn(Route) -> Route) -> TestConfig {
        if let Some(toml::Value::Array(routes)) = self.table.get_mut("routes") {
            for route in routes.iter_mut() {
                if let toml::Value::Table(table) = route {
                    let changed = change(Route(std::mem::take(table)));
                    *table = changed.0;
                }
            }
        }
        self
    }

    /// The config as a `verdict.toml`.
    pub fn text(&self) -> String {
        toml::to_string(&self.table).expect("a test config serialises")
    }

    /// Write it to `dir/verdict.toml`; its path. The token file the defaults name
    /// (`token_file = "token"`) is the caller's to write ([`Gateway::start`] writes it).
    pub fn write_toml(&self, dir: &Path) -> PathBuf {
        let path = dir.join("verdict.toml");
        std::fs::write(&path, self.text()).unwrap();
        path
    }

    /// Start a gateway on it in `dir` (its state directory and relative paths), with
    /// `token` as the admin token - none when the config names no `[admin] token_file`, as a
    /// gateway from such a file would have none (the `admin` client still sends `token`);
    /// no file is written or watched.
    pub fn start(&self, dir: &Path, token: &str) -> Gateway {
        self.start_on(tokio::runtime::Runtime::new().unwrap(), dir, token)
    }

    /// The same on a given runtime (one that already runs a test consumer, say).
    pub fn start_on(&self, runtime: tokio::runtime::Runtime, dir: &Path, token: &str) -> Gateway {
        // Named as the file it would be, so that what parsing resolves is taken from `dir`.
        let file = dir.join("verdict.toml").display().to_string();
        let config = verdict_registry::GatewayConfig::parse(&self.text(), &file)
            .unwrap_or_else(|e| panic!("the test config is refused: {e}\n{}", self.text()));
        let has_token = self
            .table
            .get("admin")
            .and_then(|admin| admin.get("token_file"))
            .is_some();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = runtime
            .block_on(verdict_gateway::Gateway::start_with(
                config,
                dir,
                has_token.then(|| token.to_string()),
                async {
                    let _ = stopped.await;
                },
            ))
            .expect("the gateway starts");
        Gateway::running(runtime, running, dir, token, stop)
    }
}

/// A route of a [`TestConfig`].
#[derive(Debug, Clone)]
pub struct Route(toml::Table);

impl Route {
    /// Messages on `topic` decided by the policy named `policy`.
    pub fn new(topic: &str, policy: &str) -> Route {
        let mut table = toml::Table::new();
        table.insert("topic".into(), topic.into());
        table.insert("policy".into(), policy.into());
        Route(table)
    }

    /// Delivered to `url` (2 s timeout, 16 at a time).
    pub fn consumer(self, url: &str) -> Route {
        self.set("consumer.url", url)
            .set("consumer.timeout_ms", 2000)
            .set("consumer.concurrency", 16)
    }

    /// Set `path` (dotted: `consumer.concurrency`, `source`) to `value`.
    pub fn set(mut self, path: &str, value: impl Into<toml::Value>) -> Route {
        set_in(&mut self.0, path, value.into());
        self
    }

    /// The policy's config for this route, as a TOML inline value (`{ max_attempts = 3 }`).
    pub fn config(self, inline: &str) -> Route {
        self.merge(&format!("config = {inline}"))
    }

    /// Merge TOML `lines` (`key = value`, inline tables allowed: `settings = { ... }`).
    pub fn merge(mut self, lines: &str) -> Route {
        let parsed: toml::Table =
            toml::from_str(lines).unwrap_or_else(|e| panic!("merging into a route: {e}\n{lines}"));
        self.0.extend(parsed);
        self
    }
}

/// `from` merged into `into`: tables key by key, arrays appended, anything else replaced.
fn merge_into(into: &mut toml::Table, from: toml::Table) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(old)), toml::Value::Table(new)) => merge_into(old, new),
            (Some(toml::Value::Array(old)), toml::Value::Array(new)) => old.extend(new),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// The table at dotted `path` in `table`, made where missing.
fn table_at<'t>(table: &'t mut toml::Table, path: &str) -> &'t mut toml::Table {
    path.split('.').fold(table, |t, key| {
        let entry = t
            .entry(key)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        entry.as_table_mut().expect("made a table above")
    })
}

fn set_in(table: &mut toml::Table, path: &str, value: toml::Value) {
    match path.rsplit_once('.') {
        Some((parent, key)) => table_at(table, parent).insert(key.into(), value),
        None => table.insert(path.into(), value),
    };
}
