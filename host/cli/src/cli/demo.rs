//! `verdict demo`: the quickstart in one command. It builds the `rules` policy, starts the
//! demo consumer (which fails some orders for a while and some for good) and a gateway on
//! the embedded store in a directory of its own, publishes the orders through the admin
//! API, follows them until each is delivered or dead-lettered, and says what became of
//! them - delivered, dead-lettered by cause - and where the console is. Then it runs until
//! Ctrl-C (or stops at once with `exit`), and removes what it made.
//!
//! The routing is the quickstart's own file (`examples/quickstart.toml`), with the paths,
//! addresses and token of this run put in.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use verdict_gateway::Gateway;
use verdict_gateway::dlq::Fingerprint;
use verdict_gateway::store::{DlqFilter, Store};

use crate::client::AdminClient;
use crate::demo::{DemoConsumer, by_percent};

/// The quickstart's gateway config: the routing the demo runs.
const QUICKSTART: &str = include_str!("../../../../examples/quickstart.toml");

/// How long the orders may take to settle before the demo says so and stops waiting.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// What `verdict demo` runs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The policy: a component, or a policy crate directory (built first).
    pub policy: PathBuf,
    /// How many orders to publish.
    pub orders: u32,
    /// Where the demo consumer listens (port 0: any free port).
    pub consumer: SocketAddr,
    /// Where the gateway's admin API and console listen (port 0: any free port).
    pub admin: SocketAddr,
    /// Percent of orders the consumer fails 1-3 times before taking them.
    pub transient_pct: u32,
    /// Percent of orders the consumer refuses for good.
    pub permanent_pct: u32,
    /// Stop once the orders are settled instead of running until Ctrl-C.
    pub exit: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            policy: PathBuf::from("policies/rules"),
            orders: 200,
            consumer: SocketAddr::from(([127, 0, 0, 1], 8081)),
            admin: SocketAddr::from(([127, 0, 0, 1], 9474)),
            transient_pct: 20,
            permanent_pct: 5,
            exit: false,
        }
    }
}

/// What became of the orders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemoSummary {
    /// Orders published.
    pub published: u64,
    /// Delivered: the consumer took them (some after retries).
    pub delivered: u64,
    /// Dead-lettered, in all.
    pub dead: u64,
    /// Neither yet when the demo stopped waiting.
    pub pending: u64,
    /// Deliveries the consumer saw, retries included.
    pub deliveries: u64,
    /// Dead letters by cause: `(class, kind, reason, count)`, largest first.
    pub causes: Vec<(String, String, String, u64)>,
}

/// Run the demo, saying what happens through `say`, one line at a time.
///
/// Ctrl-C (or SIGTERM) at any point stops it cleanly: the gateway lets its deliveries
/// finish, what settled so far is summarised, the directory is removed. A second Ctrl-C
/// stops it at once.
pub fn demo(options: &DemoOptions, say: &mut dyn FnMut(&str)) -> Result<DemoSummary> {
    let runtime = tokio::runtime::Runtime::new()?;
    let stopping = Arc::new(AtomicBool::new(false));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let made: Arc<std::sync::Mutex<Option<PathBuf>>> = Arc::default();
    runtime.spawn(signals(stop.clone(), stopping.clone(), made.clone()));
    say(&format!(
        "building the policy {} (the first build takes a minute)",
        options.policy.display()
    ));
    let component = std::path::absolute(super::bench_policy(&options.policy)?)?;
    if stopping.load(Ordering::SeqCst) {
        bail!("stopped before the gateway started");
    }
    let dir = DemoDir::new()?;
    *made
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(dir.path().into());
    let token = verdict_gateway::admin::identity::new_token().context("making an admin token")?;
    std::fs::write(dir.path().join("admin.token"), &token)?;

    let consumer = DemoConsumer::new(by_percent(options.transient_pct, options.permanent_pct));
    let consumer_at =
        runtime.block_on(serve_consumer(&consumer, options.consumer, stopped.clone()))?;
    say(&format!(
        "demo consumer on http://{consumer_at}/ ({}% of orders fail 1-3 times first, {}% for good)",
        options.transient_pct, options.permanent_pct
    ));

    let config = dir.path().join("verdict.toml");
    std::fs::write(
        &config,
        config_text(&component, consumer_at, options.admin)?,
    )?;
    let shutdown = {
        let mut stopped = stopped;
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    let gateway = runtime
        .block_on(Gateway::start(&config, shutdown))
        .context("starting the gateway")?;
    say(&format!(
        "gateway on the embedded store in {}; admin API on {}",
        dir.path().display(),
        gateway.admin_url
    ));
    let client = AdminClient::new(&gateway.admin_url, Some(token.clone()));

    let summary = publish_and_follow(options, &client, &gateway, &consumer, &stopping, say);
    let summary = match summary {
        Ok(summary) => summary,
        Err(e) => {
            let _ = stop.send(true);
            let _ = runtime.block_on(gateway.wait());
            return Err(e);
        }
    };
    say(&report(&summary));
    if !options.exit && !stopping.load(Ordering::SeqCst) {
        say(&format!(
            "console: {}/console (token: {token}); try `verdict dlq groups --admin {} \
             --token-file {}`. Ctrl-C stops the demo and removes its directory.",
            gateway.admin_url,
            gateway.admin_url,
            dir.path().join("admin.token").display()
        ));
    } else {
        let _ = stop.send(true);
    }
    runtime
        .block_on(gateway.wait())
        .context("stopping the gateway")?;
    let _ = stop.send(true);
    say("stopped");
    Ok(summary)
}

/// The first Ctrl-C or SIGTERM stops the demo (`stop`, and `stopping` for the loops that
/// poll); a second one stops the process at once, removing the directory `made` names.
async fn signals(
    stop: tokio::sync::watch::Sender<bool>,
    stopping: Arc<AtomicBool>,
    made: Arc<std::sync::Mutex<Option<PathBuf>>>,
) {
    super::shutdown_signal().await;
    stopping.store(true, Ordering::SeqCst);
    let _ = stop.send(true);
    if tokio::signal::ctrl_c().await.is_ok() {
        if let Some(dir) = made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            let _ = std::fs::remove_dir_all(dir);
        }
        eprintln!("verdict demo: stopped at once");
        std::process::exit(130);
    }
}

/// Serve `consumer` on `at` until `stopped` says so; the address it listens on.
async fn serve_consumer(
    consumer: &DemoConsumer,
    at: SocketAddr,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .with_context(|| format!("the demo consumer's address {at} (another demo running?)"))?;
    let address = listener.local_addr()?;
    let router = consumer.router();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
            .await;
    });
    Ok(address)
}

/// The quickstart's config with this run's policy, consumer, admin address and token.
fn config_text(component: &Path, consumer: SocketAddr, admin: SocketAddr) -> Result<String> {
    let mut config: toml::Table = toml::from_str(QUICKSTART).context("examples/quickstart.toml")?;
    let policy = config
        .get_mut("policies")
        .and_then(|p| p.get_mut("rules"))
        .and_then(toml::Value::as_table_mut)
        .context("examples/quickstart.toml: no [policies.rules]")?;
    policy.insert(
        "path".into(),
        toml::Value::String(component.display().to_string()),
    );
    // The vector files are the checkout's; the demo needs only the policy.
    policy.remove("vectors");
    let routes = config
        .get_mut("routes")
        .and_then(toml::Value::as_array_mut)
        .context("examples/quickstart.toml: no [[routes]]")?;
    for route in routes.iter_mut().filter_map(toml::Value::as_table_mut) {
        if let Some(consumer_table) = route
            .get_mut("consumer")
            .and_then(toml::Value::as_table_mut)
        {
            consumer_table.insert(
                "url".into(),
                toml::Value::String(format!("http://{consumer}/")),
            );
        }
    }
    let mut admin_table = toml::Table::new();
    admin_table.insert("listen".into(), toml::Value::String(admin.to_string()));
    // The token is this run's own, in its directory: never one from the environment.
    admin_table.insert(
        "token_env".into(),
        toml::Value::String("VERDICT_DEMO_UNSET_TOKEN_VARIABLE".into()),
    );
    admin_table.insert(
        "token_file".into(),
        toml::Value::String("admin.token".into()),
    );
    config.insert("admin".into(), toml::Value::Table(admin_table));
    Ok(toml::to_string(&config)?)
}

/// Publish the orders through the admin API and follow the store until every one is
/// delivered or dead-lettered (or the demo is stopped, or [`SETTLE_LIMIT`] passes).
fn publish_and_follow(
    options: &DemoOptions,
    client: &AdminClient,
    gateway: &Gateway,
    consumer: &DemoConsumer,
    stopping: &AtomicBool,
    say: &mut dyn FnMut(&str),
) -> Result<DemoSummary> {
    let orders: Vec<Value> = (1..=options.orders)
        .map(|n| json!({"id": format!("order-{n}"), "payload": {"order": n}}))
        .collect();
    for batch in orders.chunks(500) {
        let published: Result<Value, _> = client.post("/v1/topics/orders/messages", &batch);
        if let Err(e) = published {
            // Stopped while publishing: the summary says what the store holds.
            if stopping.load(Ordering::SeqCst) {
                break;
            }
            return Err(e).context("publishing the orders");
        }
    }
    say(&format!(
        "published {} orders on `orders`; following them",
        options.orders
    ));
    let started = Instant::now();
    let mut last_said = Instant::now();
    loop {
        let counts = gateway.store.counts()?;
        let settled = counts.pending() == 0 && counts.total() >= u64::from(options.orders);
        let late = started.elapsed() > SETTLE_LIMIT;
        if settled || late || stopping.load(Ordering::SeqCst) {
            if late && !settled {
                say(&format!(
                    "{} orders still pending after {}s; summarising what settled",
                    counts.pending(),
                    SETTLE_LIMIT.as_secs()
                ));
            }
            // From the store, not the admin API: a Ctrl-C may be stopping that already.
            let causes = causes(&gateway.store)?;
            let seen = consumer.seen();
            return Ok(DemoSummary {
                published: u64::from(options.orders),
                delivered: counts.delivered,
                dead: counts.dead,
                pending: counts.pending(),
                deliveries: seen.deliveries.values().map(|&n| u64::from(n)).sum(),
                causes,
            });
        }
        if last_said.elapsed() >= Duration::from_secs(1) {
            say(&format!(
                "  {} delivered, {} dead-lettered, {} retrying or in flight",
                counts.delivered,
                counts.dead,
                counts.pending()
            ));
            last_said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The dead letters by cause - class, kind, reason as the DLQ groups normalise it -
/// largest first.
fn causes(store: &Store) -> Result<Vec<(String, String, String, u64)>> {
    let mut counted: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for entry in store.dlq_list(&DlqFilter::default(), store.now_ms())? {
        let f = Fingerprint::of(&entry);
        *counted.entry((f.class, f.kind, f.reason)).or_default() += 1;
    }
    let mut causes: Vec<(String, String, String, u64)> = counted
        .into_iter()
        .map(|((class, kind, reason), n)| (class, kind, reason, n))
        .collect();
    causes.sort_by(|a, b| b.3.cmp(&a.3).then_with(|| a.cmp(b)));
    Ok(causes)
}

/// The summary as the demo prints it.
fn report(s: &DemoSummary) -> String {
    let mut out = format!(
        "of {} orders: {} delivered, {} dead-lettered{} - {} deliveries in all (the retries \
         of transient failures included)",
        s.published,
        s.delivered,
        s.dead,
        if s.pending > 0 {
            format!(", {} not settled yet", s.pending)
        } else {
            String::new()
        },
        s.deliveries
    );
    for (class, kind, reason, count) in &s.causes {
        out.push_str(&format!(
            "\n  dead-lettered: {count} x {class} ({kind}): {reason}"
        ));
    }
    out
}

/// A private directory of the demo's own (the config, the token, the store), removed when
/// the demo ends.
struct DemoDir(PathBuf);

impl DemoDir {
    fn new() -> Result<DemoDir> {
        let dir = std::env::temp_dir().join(format!("verdict-demo-{}", std::process::id()));
        if dir.exists() {
            bail!(
                "{} exists already: another demo of this process?",
                dir.display()
            );
        }
        verdict_runtime::fsutil::private_state_dir(&dir)
            .with_context(|| format!("making {}", dir.display()))?;
        Ok(DemoDir(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quickstart_config_gets_this_runs_policy_consumer_and_admin() {
        let text = config_text(
            Path::new("/opt/rules.component.wasm"),
            "127.0.0.1:18081".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
        let config: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(
            config["policies"]["rules"]["path"].as_str(),
            Some("/opt/rules.component.wasm")
        );
        assert!(config["policies"]["rules"].get("vectors").is_none());
        assert_eq!(
            config["routes"][0]["consumer"]["url"].as_str(),
            Some("http://127.0.0.1:18081/")
        );
        assert_eq!(config["admin"]["listen"].as_str(), Some("127.0.0.1:0"));
        assert_eq!(config["admin"]["token_file"].as_str(), Some("admin.token"));
        // The routing itself is the quickstart's.
        assert_eq!(config["routes"][0]["topic"].as_str(), Some("orders"));
        assert!(config["routes"][0]["config"]["rules"].is_array());
    }

    #[test]
    fn the_report_names_each_cause_and_what_is_not_settled() {
        let summary = DemoSummary {
            published: 10,
            delivered: 7,
            dead: 2,
            pending: 1,
            deliveries: 14,
            causes: vec![(
                "poison".into(),
                "schema.unknown-version".into(),
                "unknown schema".into(),
                2,
            )],
        };
        let text = report(&summary);
        assert!(text.contains("of 10 orders: 7 delivered, 2 dead-lettered, 1 not settled yet"));
        assert!(text.contains("2 x poison (schema.unknown-version): unknown schema"));
    }
}
