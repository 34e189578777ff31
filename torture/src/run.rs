//! One run on one source: start the gateway, publish the plan while injecting the faults,
//! wait until every message is terminal, then check the invariants against what the
//! consumer saw and what the DLQ holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use verdict_host::admin::AdminClient;

use crate::broker;
use crate::check::{self, Dead, Excuse, Window};
use crate::consumer::Consumer;
use crate::gateway::Gateway;
use crate::plan::{self, MAX_ATTEMPTS, key_of};
use crate::rng::Rng;
use crate::sources::{Source, SourceName};

/// The NATS config's `ack_wait_ms`: a redelivery after a broker restart comes this late.
const ACK_WAIT_MS: u64 = 3_000;
/// The gateway's `lease_ms` (the embedded store's leases): twice the route's timeout.
const LEASE_MS: u64 = 2_000;
/// Messages published at once (and at most this many between two faults' checks).
const BATCH: usize = 256;
/// The RabbitMQ config's `prefetch`.
const PREFETCH: u64 = 32;

/// How hostile a run is, and the route that faces it.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The route's consumer timeout (ms): slow answers take longer.
    pub timeout_ms: u64,
    /// The route's concurrency.
    pub concurrency: u64,
    /// Rare slow answers and big payloads, so a million messages pass in minutes (the
    /// soak); otherwise every hostile shape is common.
    pub gentle: bool,
}

impl Profile {
    /// Every hostile shape, often.
    pub fn torture() -> Profile {
        Profile {
            timeout_ms: 800,
            concurrency: 8,
            gentle: false,
        }
    }

    /// Volume: the same shapes, the slow and the big ones rare.
    pub fn soak() -> Profile {
        Profile {
            timeout_ms: 500,
            concurrency: 64,
            gentle: true,
        }
    }
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct Options {
    /// Everything random derives from it.
    pub seed: u64,
    /// Messages to publish.
    pub messages: usize,
    /// Faults to inject while publishing (of every kind in turn).
    pub faults: usize,
    /// Exactly these faults instead (the soak's), where the source allows them.
    pub fault_kinds: Option<Vec<Fault>>,
    /// Restart the broker among the faults (NATS and RabbitMQ).
    pub broker_restarts: bool,
    /// The consumer's and the route's shape.
    pub profile: Profile,
    /// How long to wait, after publishing, for every message to become terminal.
    pub settle: Duration,
    /// The `verdict` binary.
    pub bin: PathBuf,
    /// The `rules` policy component.
    pub component: PathBuf,
    /// Where each run gets its directory (kept when the run fails).
    pub workdir: PathBuf,
    /// Print progress to stderr.
    pub progress: bool,
    /// Publish no further while this many messages are not terminal yet: a producer at the
    /// gateway's pace, so the faults strike all through the run instead of into a backlog.
    pub max_backlog: Option<usize>,
}

/// The faults a run injected.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Faults {
    /// `kill -9` of the gateway, then a restart.
    pub gateway_kills: u32,
    /// Broker stops and starts.
    pub broker_restarts: u32,
    /// Windows in which the consumer reset every connection.
    pub consumer_outages: u32,
    /// Config edits the gateway reloaded.
    pub reloads: u32,
    /// Rollbacks through the admin API.
    pub rollbacks: u32,
}

/// What a run found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// The source.
    pub source: String,
    /// The seed.
    pub seed: u64,
    /// Messages planned.
    pub messages: usize,
    /// Messages the source refused at publish (never expected anywhere).
    pub refused: usize,
    /// Messages the consumer accepted.
    pub delivered: usize,
    /// Messages in the DLQ.
    pub dead_lettered: usize,
    /// Consumer requests in all.
    pub requests: usize,
    /// Accepted deliveries beyond the first of a message, all inside a fault's window.
    pub duplicates: u64,
    /// The most duplicates the faults can explain: what was in flight or prefetched at
    /// each gateway kill and broker restart.
    pub duplicates_allowed: u64,
    /// The faults injected.
    pub faults: Faults,
    /// Longest time from publish to a terminal state (ms).
    pub max_publish_to_terminal_ms: u64,
    /// The gateway's resident memory after its first start (kB).
    pub rss_start_kb: Option<u64>,
    /// At the end.
    pub rss_end_kb: Option<u64>,
    /// How long the run took (ms).
    pub elapsed_ms: u64,
    /// Broken invariants, one line each: empty when the run passed.
    pub violations: Vec<String>,
    /// The run's directory, kept when it failed.
    pub dir: Option<String>,
}

/// A fault at a point of the publishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of the gateway, then a restart.
    Kill,
    /// The broker stopped and started.
    BrokerRestart,
    /// The consumer resets every connection for a while.
    ConsumerDown,
    /// The config edited (the route's retry delay), for the gateway to reload.
    Reload,
    /// A rollback to the previous generation through the admin API.
    Rollback,
}

/// The faults of a run and where in the publishing they strike: `kinds` placed at seeded
/// points of `messages` publishes.
fn schedule(rng: &mut Rng, messages: usize, kinds: &[Fault]) -> BTreeMap<usize, Vec<Fault>> {
    let mut points: BTreeMap<usize, Vec<Fault>> = BTreeMap::new();
    for kind in kinds {
        // Not before the first publish: a fault needs something in flight to hurt.
        let at = 1 + rng.below(messages.saturating_sub(1).max(1) as u64) as usize;
        points.entry(at).or_default().push(*kind);
    }
    points
}

/// `n` faults of every kind the source allows, in turn from a seeded start, so a few
/// faults already cover every kind.
pub fn fault_kinds(rng: &mut Rng, n: usize, broker: bool) -> Vec<Fault> {
    let mut kinds = vec![
        Fault::Kill,
        Fault::ConsumerDown,
        Fault::Reload,
        Fault::Rollback,
    ];
    if broker {
        kinds.insert(1, Fault::BrokerRestart);
    }
    let start = rng.below(kinds.len() as u64) as usize;
    (0..n).map(|i| kinds[(start + i) % kinds.len()]).collect()
}

fn config(
    source: &Source,
    port: u16,
    component: &str,
    consumer: &str,
    delay_ms: u64,
    p: &Profile,
) -> String {
    let (pattern, _) = source.topics();
    format!(
        r#"# Written by verdict-torture; edited by its reload faults.
[sandbox]
decide_timeout_ms = 1000
[admin]
listen = "127.0.0.1:{port}"
token_file = "token"
[gateway]
instance = "torture-{name}"
consumer_group = "torture-{name}"
# Short leases (the store's): a delivery slower than the route's timeout, or a message
# claimed ahead of a free slot, outlives one unless the gateway keeps extending it.
lease_ms = {LEASE_MS}
{section}
[policies.rules]
path = "{component}"
[[routes]]
topic = "{pattern}"
source = "{name}"
policy = "rules"
settings = {{ guardrails = {{ max_delay_ms = 1500 }} }}
consumer = {{ url = "{consumer}", timeout_ms = {timeout}, concurrency = {concurrency} }}
config = {{ max_attempts = {MAX_ATTEMPTS}, honor_retry_after = false, rules = [
    {{ match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" }},
    {{ match = ["http.429", "http.5*", "transport.*"], retry = {{ strategy = "fixed", delay_ms = {delay_ms} }} }},
    {{ match = ["http.4*", "torture.*"], dead_letter = "poison" }},
], default = {{ retry = {{ strategy = "fixed", delay_ms = {delay_ms} }} }} }}
"#,
        name = source.name.as_str(),
        section = source.section(),
        timeout = p.timeout_ms,
        concurrency = p.concurrency,
    )
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Run `source` as `o` says.
pub fn run(name: SourceName, o: &Options) -> Result<Report> {
    let started = Instant::now();
    let p = &o.profile;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let prefix = format!("tt{}s{}", std::process::id(), o.seed % 1_000_000);
    let source = runtime.block_on(Source::connect(name, &prefix))?;
    let consumer = runtime.block_on(Consumer::start(o.seed, p.timeout_ms, p.gentle))?;
    let dir = o.workdir.join(format!("{}-{}", name.as_str(), o.seed));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let token = format!("torture-{}", o.seed);
    std::fs::write(dir.join("token"), &token)?;
    let port = free_port()?;
    let component = o.component.display().to_string();
    let write_config = |delay_ms| {
        let text = config(&source, port, &component, consumer.url(), delay_ms, p);
        // Written whole, then renamed: the reload sees one file or the other.
        let tmp = dir.join("verdict.toml.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join("verdict.toml"))
    };
    // Every edit names a delay no earlier generation had: an edit that restores the active
    // routes (after a rollback, say) changes no route, so it is rightly no reload.
    let mut delay_ms = 200;
    write_config(delay_ms)?;
    let mut gw = Gateway::new(&o.bin, &dir, port);
    gw.start(Duration::from_secs(60))?;
    let mut report = Report {
        source: name.as_str().into(),
        seed: o.seed,
        messages: o.messages,
        rss_start_kb: gw.rss_kb(),
        ..Report::default()
    };
    let admin = AdminClient::new(&gw.admin_url, Some(token.clone()));

    let (_, topics) = source.topics();
    let planned = plan::messages(o.seed, o.messages, &topics, source.abilities(), p.gentle);
    let mut rng = Rng::new(o.seed, 0x4641_554c);
    let kinds = match &o.fault_kinds {
        Some(kinds) => kinds
            .iter()
            .copied()
            .filter(|k| *k != Fault::BrokerRestart || name != SourceName::Embedded)
            .collect(),
        None => fault_kinds(
            &mut rng,
            o.faults,
            name != SourceName::Embedded && o.broker_restarts,
        ),
    };
    let points = schedule(&mut rng, o.messages, &kinds);
    let mut windows: Vec<Window> = Vec::new();
    let mut published_at: BTreeMap<String, u64> = BTreeMap::new();
    let mut refused = BTreeSet::new();
    let mut resent = BTreeSet::new();
    let progress = Progress::new(o.progress, name.as_str());
    // Published in batches, concurrently within one (a real producer keeps many publishes
    // in flight); a fault strikes between two batches, at its seeded message.
    let mut i = 0;
    while i < planned.len() {
        for fault in points.get(&i).into_iter().flatten() {
            progress.note(&format!("fault at message {i}: {fault:?}"));
            match fault {
                Fault::Kill => {
                    let from_ms = now_ms();
                    gw.kill();
                    std::thread::sleep(Duration::from_millis(rng.below(300)));
                    gw.start(Duration::from_secs(60))?;
                    windows.push(Window {
                        from_ms,
                        to_ms: now_ms(),
                        excuse: Excuse::Redelivery,
                    });
                    report.faults.gateway_kills += 1;
                }
                Fault::BrokerRestart => {
                    let from_ms = now_ms();
                    broker::restart(name, Duration::from_millis(200 + rng.below(1_500)))?;
                    // Until the gateway has its consumers back: a redelivery is excused
                    // until the broker's ack wait after that.
                    gw.wait_ready(Duration::from_secs(120))?;
                    windows.push(Window {
                        from_ms,
                        to_ms: now_ms() + ACK_WAIT_MS,
                        excuse: Excuse::Redelivery,
                    });
                    report.faults.broker_restarts += 1;
                }
                Fault::ConsumerDown => {
                    let from_ms = now_ms();
                    consumer.set_down(true);
                    let up = consumer.clone();
                    let for_ms = 300 + rng.below(1_000);
                    runtime.spawn(async move {
                        tokio::time::sleep(Duration::from_millis(for_ms)).await;
                        up.set_down(false);
                    });
                    windows.push(Window {
                        from_ms,
                        to_ms: from_ms + for_ms + 100,
                        excuse: Excuse::Attempts,
                    });
                    report.faults.consumer_outages += 1;
                }
                Fault::Reload => {
                    delay_ms += 10;
                    reload(&admin, || write_config(delay_ms), &mut report)?;
                }
                Fault::Rollback => {
                    // A rollback needs an earlier generation: a fresh gateway gets one first.
                    if generation(&admin)? < 2 {
                        delay_ms += 10;
                        reload(&admin, || write_config(delay_ms), &mut report)?;
                    }
                    match admin.post::<serde_json::Value>("/v1/rollback", &serde_json::json!({})) {
                        Ok(_) => report.faults.rollbacks += 1,
                        Err(e) => report
                            .violations
                            .push(format!("a rollback to the previous generation failed: {e}")),
                    }
                }
            }
        }
        let end = points
            .range(i + 1..)
            .next()
            .map_or(planned.len(), |(at, _)| *at)
            .min(i + BATCH);
        if let Some(max) = o.max_backlog {
            wait_for_backlog(max, &consumer, &admin, name, published_at.len(), &progress)?;
        }
        let batch = &planned[i..end];
        let sent = publish_batch(&runtime, &source, batch, &admin)?;
        for (m, sent) in batch.iter().zip(sent) {
            if sent.taken {
                published_at.insert(m.key.clone(), sent.at_ms);
            } else {
                refused.insert(m.key.clone());
            }
            if sent.resent {
                resent.insert(m.key.clone());
            }
        }
        i = end;
        progress.show(&format!("published {i}/{}", planned.len()));
    }
    report.refused = refused.len();

    // Settle: wait until every message taken is accepted or dead-lettered (counted by the
    // DLQ's depth; the DLQ itself is read once, at the end).
    let deadline = Instant::now() + o.settle;
    loop {
        let accepted = consumer.accepted_keys();
        let dead = dlq_depth(&admin, name)?;
        let open = published_at.len().saturating_sub(accepted + dead as usize);
        progress.show(&format!(
            "settling: {open} of {} not terminal yet",
            published_at.len()
        ));
        if open == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    // A last look a moment later: whatever arrives after "all terminal" is a violation.
    std::thread::sleep(Duration::from_millis(1_500));
    let by_digest: HashMap<String, String> = planned
        .iter()
        .filter(|m| m.payload.len() > 100_000)
        .map(|m| (sha256_hex(&m.payload), m.key.clone()))
        .collect();
    let dead = dead_letters(&admin, name, &by_digest)?;
    report.rss_end_kb = gw.rss_kb();
    progress.done();
    let log = consumer.log();
    let found = check::check(&check::Inputs {
        name,
        seed: o.seed,
        planned: &planned,
        published_at: &published_at,
        refused: &refused,
        resent: &resent,
        dead: &dead,
        log: &log,
        windows: &windows,
    });
    report.violations.extend(found.violations);
    report.duplicates = found.duplicates;
    report.delivered = found.delivered;
    report.max_publish_to_terminal_ms = found.max_publish_to_terminal_ms;
    // The store counts what it may deliver twice (leases recovered at a start, outcomes
    // fenced off); a broker redelivers what was unacknowledged at a kill or a restart: at
    // most the route's concurrency, and on a restart the prefetch window too.
    report.duplicates_allowed = if name == SourceName::Embedded {
        gw.counted_redeliveries()
    } else {
        u64::from(report.faults.gateway_kills) * p.concurrency
            + u64::from(report.faults.broker_restarts) * (p.concurrency + PREFETCH)
    };
    if report.duplicates > report.duplicates_allowed {
        report.violations.push(format!(
            "{} duplicate deliveries; the faults explain at most {}",
            report.duplicates, report.duplicates_allowed
        ));
    }
    report.violations.extend(
        gw.panics()
            .into_iter()
            .map(|l| format!("the gateway panicked: {l}")),
    );
    report.requests = log.len();
    report.dead_lettered = dead.len();
    gw.kill();
    runtime.block_on(source.clean());
    if report.violations.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        // What the consumer saw and the faults' windows, for the post-mortem.
        let mut lines = String::new();
        for r in &log {
            lines += &serde_json::to_string(r).unwrap_or_default();
            lines.push('\n');
        }
        let _ = std::fs::write(dir.join("consumer.jsonl"), lines);
        let _ = std::fs::write(dir.join("faults.txt"), format!("{windows:#?}\n"));
        report.dir = Some(dir.display().to_string());
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn now_ms() -> u64 {
    verdict_host::pipeline::now_ms()
}

/// The active generation.
fn generation(admin: &AdminClient) -> Result<u64> {
    let status: serde_json::Value = admin.get("/v1/status").context("reading /v1/status")?;
    Ok(status["generation"].as_u64().unwrap_or(0))
}

/// Edit the config (`write`) and wait for the gateway to reload it: a hot reload that does
/// not happen within 10 s is a violation of its own.
fn reload(
    admin: &AdminClient,
    write: impl Fn() -> std::io::Result<()>,
    report: &mut Report,
) -> Result<()> {
    let before = generation(admin)?;
    write().context("writing the config")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while generation(admin)? <= before {
        if Instant::now() > deadline {
            report.violations.push(format!(
                "a config edit was not reloaded within 10 s (generation {before} throughout)"
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    report.faults.reloads += 1;
    Ok(())
}

fn source_query(name: SourceName) -> String {
    match name {
        SourceName::Embedded => String::new(),
        other => format!("source={}", other.as_str()),
    }
}

/// Dead letters waiting, over every DLQ of the source.
fn dlq_depth(admin: &AdminClient, name: SourceName) -> Result<u64> {
    let path = format!("/v1/dlq/stats?{}", source_query(name));
    let stats: Vec<serde_json::Value> = admin
        .get(&path)
        .with_context(|| format!("reading the DLQ's stats ({path})"))?;
    Ok(stats.iter().filter_map(|s| s["depth"].as_u64()).sum())
}

/// The DLQ, page by page through the admin API, by key.
fn dead_letters(
    admin: &AdminClient,
    name: SourceName,
    by_digest: &HashMap<String, String>,
) -> Result<BTreeMap<String, Dead>> {
    let mut out: BTreeMap<String, Dead> = BTreeMap::new();
    let source = source_query(name);
    let mut after = String::new();
    loop {
        let path = format!("/v1/dlq?limit=1000&{source}{after}");
        let (page, next): (Vec<serde_json::Value>, _) = admin
            .get_page(&path)
            .with_context(|| format!("reading the DLQ ({path})"))?;
        for e in &page {
            let original = &e["envelope"]["original"];
            let payload = verdict_host::envelope::payload_bytes(original);
            // A letter too big for its broker keeps its payload's digest instead.
            let key = key_of(&payload)
                .or_else(|| {
                    let omitted = e["envelope"]["original"]["payloadOmitted"]["sha256"].as_str()?;
                    by_digest.get(omitted).cloned()
                })
                .unwrap_or_else(|| check::NO_KEY.into());
            let d = out.entry(key).or_insert(Dead {
                count: 0,
                at_ms: u64::MAX,
                policy: String::new(),
            });
            d.count += 1;
            d.at_ms = d.at_ms.min(e["created_at_ms"].as_u64().unwrap_or(0));
            d.policy = e["envelope"]["policy"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        match next {
            Some(n) => after = format!("&after={n}"),
            None => return Ok(out),
        }
    }
}

/// A progress line on stderr: rewritten in place on a terminal, every 10 s otherwise.
struct Progress {
    on: bool,
    tty: bool,
    name: &'static str,
    last: std::cell::Cell<Option<Instant>>,
}

impl Progress {
    fn new(on: bool, name: &'static str) -> Progress {
        Progress {
            on,
            tty: std::io::stderr().is_terminal(),
            name,
            last: std::cell::Cell::new(None),
        }
    }

    fn show(&self, what: &str) {
        if !self.on {
            return;
        }
        if self.tty {
            eprint!("\r\x1b[2K[{}] {what}", self.name);
        } else if self
            .last
            .get()
            .is_none_or(|t| t.elapsed() > Duration::from_secs(10))
        {
            eprintln!("[{}] {what}", self.name);
            self.last.set(Some(Instant::now()));
        }
    }

    /// A line of its own (a fault struck), kept on screen.
    fn note(&self, what: &str) {
        if self.on {
            if self.tty {
                eprint!("\r\x1b[2K");
            }
            eprintln!("[{}] {what}", self.name);
        }
    }

    fn done(&self) {
        if self.on && self.tty {
            eprintln!();
        }
    }
}

/// Wait until at most `max` of the `published` messages are not terminal yet: ten minutes at
/// most, after which publishing goes on and the settle phase reports what is stuck.
fn wait_for_backlog(
    max: usize,
    consumer: &Consumer,
    admin: &AdminClient,
    name: SourceName,
    published: usize,
    progress: &Progress,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let terminal = consumer.accepted_keys() + dlq_depth(admin, name)? as usize;
        let open = published.saturating_sub(terminal);
        if open <= max || Instant::now() > deadline {
            return Ok(());
        }
        progress.show(&format!("waiting: {open} not terminal yet (at most {max})"));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Publish `batch`, many at once; what each came to, in `batch`'s order.
fn publish_batch(
    runtime: &tokio::runtime::Runtime,
    source: &Source,
    batch: &[plan::Planned],
    admin: &AdminClient,
) -> Result<Vec<crate::sources::Published>> {
    use futures_util::StreamExt as _;
    let publish = |m: &plan::Planned| -> Result<crate::sources::Published> {
        runtime
            .block_on(source.publish(m, admin))
            .with_context(|| format!("publishing message {}", m.key))
    };
    if source.name == SourceName::Embedded {
        // The admin API is plain blocking HTTP: a few threads keep it busy.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let out: Vec<std::sync::Mutex<Option<Result<crate::sources::Published>>>> =
            batch.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|scope| {
            for _ in 0..EMBEDDED_PUBLISHERS {
                scope.spawn(|| {
                    loop {
                        let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(m) = batch.get(at) else { break };
                        let sent = publish(m);
                        *out[at]
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sent);
                    }
                });
            }
        });
        return out
            .into_iter()
            .map(|slot| {
                slot.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .unwrap_or_else(|| Err(anyhow::anyhow!("a publisher thread died")))
            })
            .collect();
    }
    let results: Vec<(usize, Result<crate::sources::Published>)> = runtime.block_on(
        futures_util::stream::iter(batch.iter().enumerate().map(|(at, m)| async move {
            let sent = source
                .publish(m, admin)
                .await
                .with_context(|| format!("publishing message {}", m.key));
            (at, sent)
        }))
        .buffer_unordered(BROKER_PUBLISHES_IN_FLIGHT)
        .collect(),
    );
    let mut results = results;
    results.sort_by_key(|(at, _)| *at);
    results.into_iter().map(|(_, sent)| sent).collect()
}

/// Threads publishing to the embedded store's admin API.
const EMBEDDED_PUBLISHERS: usize = 4;
/// Publishes awaiting their broker's confirmation at once.
const BROKER_PUBLISHES_IN_FLIGHT: usize = 64;
