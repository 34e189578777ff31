//! One run on one source: start the gateway, publish the plan while injecting the faults,
//! wait until every message is terminal, then check the invariants against what the
//! consumer saw and what the DLQ holds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use verdict_cli::client::AdminClient;

use crate::check::{self, Excuse, Window};
use crate::consumer::{Consumer, Request};
pub use crate::faults::{Fault, Faults};
use crate::faults::{fault_kinds, schedule};
use crate::gateway::Gateway;
use crate::language::Language;
use crate::letters;
use crate::plan::{self, MAX_ATTEMPTS};
use crate::progress::Progress;
use crate::rng::Rng;
use crate::sources::{CENSUS_FAILED, Source, SourceName};
use crate::{admin, broker, operator, producer};

/// The NATS config's `ack_wait_ms`: a redelivery after a broker restart comes this late.
const ACK_WAIT_MS: u64 = 3_000;
/// How long a gateway's NATS source takes at most to follow a change of its routes (it
/// looks twice a second, then sets its consumers up again; longer in a debug build).
const ROUTES_FOLLOWED_MS: u64 = 2_000;
/// The gateway's `lease_ms` (the embedded store's leases): twice the route's timeout.
const LEASE_MS: u64 = 2_000;
/// Messages published at once (and at most this many between two faults' checks).
const BATCH: usize = 256;
/// The RabbitMQ config's `prefetch`.
const PREFETCH: u64 = 32;
/// How often the Kafka source commits the offsets it settled (its `COMMIT_EVERY`).
const KAFKA_COMMIT_MS: u64 = 1_000;
/// librdkafka's `heartbeat.interval.ms`: a gateway learns of a rebalance this late.
const KAFKA_HEARTBEAT_MS: u64 = 3_000;
/// librdkafka's `session.timeout.ms` (the gateway sets none): a killed gateway's member
/// holds its partitions this long, and the group gives none to the one started again
/// before the broker evicts it.
const KAFKA_SESSION_MS: u64 = 45_000;

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
    /// Restart the broker among the faults (NATS and RabbitMQ; never Kafka's).
    pub broker_restarts: bool,
    /// An operator's hand may also refuse writes to the delay buckets (RabbitMQ).
    pub refuse_writes: bool,
    /// On the SQL stores, restart the machine's database server instead of cutting the
    /// run's connections.
    pub restart_databases: bool,
    /// The consumer's and the route's shape.
    pub profile: Profile,
    /// After publishing, how long to wait with no message becoming terminal before judging.
    pub settle: Duration,
    /// The `verdict` binary.
    pub bin: PathBuf,
    /// The `rules` policy component.
    pub component: PathBuf,
    /// The language `component` was written in.
    pub language: Language,
    /// Where each run gets its directory (kept when the run fails).
    pub workdir: PathBuf,
    /// Print progress to stderr.
    pub progress: bool,
    /// Publish no further while this many messages are not terminal yet: a producer at the
    /// gateway's pace, so the faults strike all through the run instead of into a backlog.
    pub max_backlog: Option<usize>,
    /// The consumer over HTTPS and NATS over TLS, certificates from a CA made for the run.
    pub tls: bool,
    /// Gateways sharing the source (more than one on NATS, RabbitMQ, Kafka and the SQL
    /// stores; the embedded store is one gateway's own).
    pub gateways: usize,
    /// Clock offsets (`faketime` specs such as `+30s`) for the gateways after the first, in
    /// turn: the first gateway keeps the true clock.
    pub skew: Vec<String>,
}

/// What a run found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// The source.
    pub source: String,
    /// The seed.
    pub seed: u64,
    /// The language of the run's `rules` policy.
    pub language: Language,
    /// The consumer and NATS were reached over TLS (`--tls`).
    pub tls: bool,
    /// Gateways sharing the source.
    pub gateways: usize,
    /// The clock offsets of the gateways after the first.
    pub skew: Vec<String>,
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
    /// On a store: the deliveries the gateways and the store themselves counted as possible
    /// duplicates (leases recovered at a start, taken over after they expired), reported
    /// beside the harness's own allowance, never used for it.
    pub store_counted_redeliveries: Option<u64>,
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
    /// Where the source still held messages when the run was judged (a census: the store's
    /// rows by state, each NATS consumer's pending and unacknowledged messages, RabbitMQ's
    /// route queue and delay buckets, Kafka's route and retry topics past the group's
    /// commit): a message found nowhere is lost, one still held is only not terminal in
    /// time.
    pub still_held: Vec<(String, u64)>,
    /// Messages neither delivered nor dead-lettered while the source still held some: not
    /// terminal in time (a separate verdict from lost).
    pub not_terminal: usize,
}

#[allow(clippy::too_many_arguments)]
fn config(
    source: &Source,
    instance: usize,
    port: u16,
    component: &str,
    consumer: &str,
    delay_ms: u64,
    narrow: bool,
    p: &Profile,
) -> String {
    let (pattern, topics) = source.topics();
    let route = |topic: &str| route(source, topic, consumer, delay_ms, p);
    // A narrower route beside the main one takes a share of the messages; the reload
    // faults add and remove it, handing its waiting retries back and forth.
    let narrower = match topics.first() {
        Some(topic) if narrow => route(topic),
        _ => String::new(),
    };
    format!(
        r#"# Written by verdict-torture; edited by its reload faults.
[sandbox]
decide_timeout_ms = 1000
[admin]
listen = "127.0.0.1:{port}"
token_file = "token"
[gateway]
instance = "torture-{name}-{instance}"
consumer_group = "torture-{name}"
# Short leases (the store's): a delivery slower than the route's timeout, or a message
# claimed ahead of a free slot, outlives one unless the gateway keeps extending it.
lease_ms = {LEASE_MS}
# A message a consumer has seen holds one of these until its outcome is written: what a
# kill can deliver twice is bounded by it, and the check allows that many per kill.
max_in_flight = {max_in_flight}
{section}
[policies.rules]
path = "{component}"
{main}{narrower}"#,
        name = source.name.as_str(),
        section = source.section(),
        max_in_flight = in_flight(source.name, p),
        main = route(&pattern),
    )
}

/// A gateway's `max_in_flight`: its routes' concurrency together (two routes where the
/// reloads add a narrower one). A route's slot is free again once its consumer has
/// answered, while the message's outcome is still being written; the message keeps its
/// `max_in_flight` slot until then, so this is what a kill can deliver twice.
fn in_flight(source: SourceName, p: &Profile) -> u64 {
    let routes = if source.exact_topic() { 1 } else { 2 };
    p.concurrency * routes
}

/// A route of the run's policy and consumer on `topic`.
fn route(source: &Source, topic: &str, consumer: &str, delay_ms: u64, p: &Profile) -> String {
    format!(
        r#"[[routes]]
topic = "{topic}"
source = "{name}"
policy = "rules"
# A retry budget, so its holds (a message given back untouched to wait) meet the kills,
# restarts and reloads too; generous enough that a run still ends in time.
settings = {{ guardrails = {{ max_delay_ms = 1500, retry_budget = {{ percent = 50, window_s = 2, min_per_s = 20 }} }} }}
consumer = {{ url = "{consumer}", timeout_ms = {timeout}, concurrency = {concurrency}{consumer_tls} }}
config = {{ max_attempts = {MAX_ATTEMPTS}, honor_retry_after = false, rules = [
    {{ match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" }},
    {{ match = ["http.429", "http.5*", "transport.*"], retry = {{ strategy = "fixed", delay_ms = {delay_ms} }} }},
    {{ match = ["http.4*", "torture.*"], dead_letter = "poison" }},
], default = {{ retry = {{ strategy = "fixed", delay_ms = {delay_ms} }} }} }}
"#,
        name = source.name.route_source(),
        timeout = p.timeout_ms,
        concurrency = p.concurrency,
        consumer_tls = source.consumer_tls_table(),
    )
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Run `source` as `o` says. Whatever happens, the gateway is killed and the run's streams,
/// queues and buckets are deleted at the end.
pub fn run(name: SourceName, o: &Options) -> Result<Report> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let prefix = format!("tt{}s{}", std::process::id(), o.seed % 1_000_000);
    let source = runtime.block_on(Source::connect(name, &prefix, o.tls, &o.workdir))?;
    let outcome = Run::start(name, o, &runtime, &source).and_then(Run::drive);
    runtime.block_on(source.clean());
    let mut report = outcome?;
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// One run under way.
struct Run<'a> {
    name: SourceName,
    o: &'a Options,
    runtime: &'a tokio::runtime::Runtime,
    source: &'a Source,
    consumer: Consumer,
    /// The gateways sharing the source; the first keeps the true clock.
    gws: Vec<Gateway>,
    /// The first gateway's admin API: publishing (on a store), the DLQ, the census.
    admin: AdminClient,
    /// Every gateway's, first included: reloads and rollbacks go to each.
    admins: Vec<AdminClient>,
    dir: PathBuf,
    /// The retry delay of the config as last written: every edit names one no earlier
    /// generation had, since an edit that restores the active routes (after a rollback,
    /// say) changes no route and is rightly no reload.
    delay_ms: u64,
    /// Whether the config has the narrower route (NATS and the store: a RabbitMQ route is
    /// one queue, a Kafka route one topic).
    narrow: bool,
    /// When each gateway kill struck, and when the gateway killed was ready again (ms since
    /// the epoch): on Kafka, what a kill may deliver again is counted from the consumer's
    /// log between the two.
    kills_at: Vec<(u64, u64)>,
    rng: Rng,
    windows: Vec<Window>,
    report: Report,
    progress: Progress,
}

impl<'a> Run<'a> {
    /// The consumer up, the config written, the gateway started and ready.
    fn start(
        name: SourceName,
        o: &'a Options,
        runtime: &'a tokio::runtime::Runtime,
        source: &'a Source,
    ) -> Result<Run<'a>> {
        let p = &o.profile;
        let consumer = runtime.block_on(Consumer::start(
            o.seed,
            p.timeout_ms,
            p.gentle,
            source.consumer_tls()?,
        ))?;
        let dir = o.workdir.join(format!("{}-{}", name.as_str(), o.seed));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        let token = format!("torture-{}", o.seed);
        if o.gateways > 1 && !name.is_shared() {
            anyhow::bail!(
                "--gateways {}: the embedded store is one gateway's own; several gateways \
                 share postgres, mysql, nats, rabbitmq or kafka",
                o.gateways
            );
        }
        if !o.skew.is_empty() {
            crate::gateway::libfaketime()?;
        }
        let mut gws = Vec::new();
        let mut admins = Vec::new();
        for k in 0..o.gateways.max(1) {
            let gw_dir = dir.join(format!("gw-{k}"));
            std::fs::create_dir_all(&gw_dir)?;
            std::fs::write(gw_dir.join("token"), &token)?;
            let skew = match k {
                0 => None,
                k => o.skew.get((k - 1) % o.skew.len().max(1)).cloned(),
            };
            let gw = Gateway::new(&o.bin, &gw_dir, free_port()?, skew);
            admins.push(AdminClient::new(&gw.admin_url, Some(token.clone())));
            gws.push(gw);
        }
        let admin = AdminClient::new(&gws[0].admin_url, Some(token));
        let mut run = Run {
            name,
            o,
            runtime,
            source,
            consumer,
            gws,
            admin,
            admins,
            dir,
            delay_ms: 200,
            narrow: false,
            kills_at: Vec::new(),
            rng: Rng::new(o.seed, 0x4641_554c),
            windows: Vec::new(),
            report: Report {
                source: name.as_str().into(),
                seed: o.seed,
                language: o.language,
                tls: o.tls,
                gateways: o.gateways.max(1),
                skew: o.skew.clone(),
                messages: o.messages,
                ..Report::default()
            },
            progress: Progress::new(o.progress, name.as_str()),
        };
        run.write_config()?;
        // A first start compiles the policy; an interpreter's component takes longer.
        let first_start = Duration::from_secs(if o.language.compiles_slowly() {
            180
        } else {
            60
        });
        for gw in &mut run.gws {
            gw.start(first_start)?;
        }
        run.report.rss_start_kb = run.gws[0].rss_kb();
        Ok(run)
    }

    /// Publish, settle, check.
    fn drive(mut self) -> Result<Report> {
        let (_, topics) = self.source.topics();
        let o = self.o;
        let planned = plan::messages(
            o.seed,
            o.messages,
            &topics,
            self.source.abilities(),
            o.profile.gentle,
        );
        // No broker restart on Kafka (its test broker keeps its records in memory: a
        // restart would lose them all), as no operator's hand but on RabbitMQ.
        let kinds = match &o.fault_kinds {
            Some(kinds) => kinds
                .iter()
                .copied()
                .filter(|k| *k != Fault::BrokerRestart || self.name.broker_fault())
                .filter(|k| *k != Fault::Operator || self.name == SourceName::Rabbitmq)
                .collect(),
            None => fault_kinds(
                &mut self.rng,
                o.faults,
                // A shared store's "restart" cuts the connections to the run's own
                // database, which disturbs nobody else: always on.
                self.name.broker_fault() && (o.broker_restarts || self.name.is_store()),
                self.name == SourceName::Rabbitmq,
            ),
        };
        let points = schedule(&mut self.rng, o.messages, &kinds);
        let published = self.publish(&planned, &points)?;
        self.settle(&published)?;
        self.judge(&planned, &published)
    }

    /// Every gateway's config with the current retry delay, each written whole and then
    /// renamed: a reload sees one file or the other.
    fn write_config(&self) -> std::io::Result<()> {
        for (k, gw) in self.gws.iter().enumerate() {
            self.write_config_of(k, gw)?;
        }
        Ok(())
    }

    fn write_config_of(&self, k: usize, gw: &Gateway) -> std::io::Result<()> {
        let component = self.o.component.display().to_string();
        let text = config(
            self.source,
            k,
            gw.admin_port(),
            &component,
            self.consumer.url(),
            self.delay_ms,
            self.narrow,
            &self.o.profile,
        );
        // Refused writes need quorum buckets: a length limit drops what a classic queue holds.
        let text = if self.o.refuse_writes {
            text.replace("[rabbitmq]\n", "[rabbitmq]\ndelay_queues = \"quorum\"\n")
        } else {
            text
        };
        let path = gw.config_path();
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)
    }

    /// Publish `planned` in batches, concurrently within one; a fault strikes between two
    /// batches, at its seeded message.
    fn publish(
        &mut self,
        planned: &[plan::Planned],
        points: &BTreeMap<usize, Vec<Fault>>,
    ) -> Result<Published> {
        let mut out = Published::default();
        let mut i = 0;
        while i < planned.len() {
            for fault in points.get(&i).into_iter().flatten() {
                self.progress
                    .note(&format!("fault at message {i}: {fault:?}"));
                self.strike(*fault)?;
            }
            let end = points
                .range(i + 1..)
                .next()
                .map_or(planned.len(), |(at, _)| *at)
                .min(i + BATCH);
            if let Some(max) = self.o.max_backlog {
                admin::wait_for_backlog(
                    max,
                    &self.consumer,
                    || self.dlq_depth(),
                    out.at.len(),
                    &self.progress,
                )?;
            }
            let batch = &planned[i..end];
            let sent = producer::publish_batch(self.runtime, self.source, batch, &self.admin)?;
            for (m, sent) in batch.iter().zip(sent) {
                if sent.taken {
                    out.at.insert(m.key.clone(), sent.at_ms);
                } else {
                    out.refused.insert(m.key.clone());
                }
                if sent.resent {
                    out.resent.insert(m.key.clone());
                }
            }
            i = end;
            self.progress
                .show(&format!("published {i}/{}", planned.len()));
        }
        self.report.refused = out.refused.len();
        Ok(out)
    }

    /// Inject `fault`, and record the window in which it may excuse what.
    fn strike(&mut self, fault: Fault) -> Result<()> {
        let from_ms = now_ms();
        match fault {
            Fault::Kill => {
                let k = self.rng.below(self.gws.len() as u64) as usize;
                self.gws[k].kill();
                std::thread::sleep(Duration::from_millis(self.rng.below(300)));
                // On Kafka the dead gateway's member keeps its partitions until its session
                // expires: the one started again is given partitions (is ready) only then.
                let limit = if self.name == SourceName::Kafka {
                    Duration::from_millis(60_000 + KAFKA_SESSION_MS)
                } else {
                    Duration::from_secs(60)
                };
                self.gws[k].start(limit)?;
                self.kills_at.push((from_ms, now_ms()));
                // On a shared store another gateway may take the dead one's leases over when
                // they expire, a lease later. On Kafka the rebalance that gave the restarted
                // gateway its partitions took the others' too: what they had in flight then
                // is read again by the partitions' next owners, and ends up to a heartbeat
                // and a consumer timeout later.
                let takeover = if self.name == SourceName::Kafka {
                    KAFKA_HEARTBEAT_MS + self.o.profile.timeout_ms
                } else if self.gws.len() > 1 {
                    2 * LEASE_MS
                } else {
                    0
                };
                self.excuse(from_ms, now_ms() + takeover, Excuse::Redelivery);
                self.report.faults.gateway_kills += 1;
            }
            Fault::BrokerRestart => {
                let down = Duration::from_millis(200 + self.rng.below(1_500));
                broker::restart(self.source, down, self.o.restart_databases)?;
                // Until the gateway has its consumers back, and the broker's ack wait after
                // that: what was unacknowledged comes again that late.
                for gw in &mut self.gws {
                    gw.wait_ready(Duration::from_secs(120))?;
                }
                // On a shared store a settlement cut off may leave its lease to expire and
                // another gateway to take the message over.
                let late = if self.name.is_store() {
                    2 * LEASE_MS
                } else {
                    ACK_WAIT_MS
                };
                self.excuse(from_ms, now_ms() + late, Excuse::Redelivery);
                self.report.faults.broker_restarts += 1;
            }
            Fault::ConsumerDown => {
                self.consumer.set_down(true);
                let up = self.consumer.clone();
                let for_ms = 300 + self.rng.below(1_000);
                self.runtime.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(for_ms)).await;
                    up.set_down(false);
                });
                self.excuse(from_ms, from_ms + for_ms + 100, Excuse::Attempts);
                self.report.faults.consumer_outages += 1;
            }
            Fault::Reload => self.reload()?,
            Fault::Operator => {
                let act = operator::strike(
                    self.runtime,
                    self.source,
                    self.delay_ms,
                    self.o.refuse_writes,
                    &mut self.rng,
                )?;
                self.progress.note(&format!("operator: {act:?}"));
                // A deleted exchange closes the gateway's channel under a settlement (that
                // message comes again); a refused write gives its message back, to come
                // again at the bounded rate (at once three times, then after 5 s, 10 s),
                // and past the bound the gateway dead-letters it itself.
                match act {
                    operator::Act::DeleteExchange => {
                        self.excuse(from_ms, now_ms() + ACK_WAIT_MS, Excuse::Redelivery);
                    }
                    operator::Act::RefuseWrites(_) => {
                        self.excuse(from_ms, now_ms() + 16_000, Excuse::Refused);
                    }
                }
                self.report.faults.operator_acts += 1;
            }
            Fault::Rollback => {
                // A rollback needs an earlier generation: a fresh gateway gets one first.
                // Every gateway is rolled back, as an operator of a fleet would.
                let mut fresh = false;
                for admin in &self.admins {
                    fresh |= admin::generation(admin)? < 2;
                }
                if fresh {
                    self.reload()?;
                }
                // The generation before had the narrower route when this one has not:
                // rolling back adds it again.
                let adds = !fresh && !self.narrow;
                let from_ms = now_ms();
                let mut failed = Vec::new();
                for admin in &self.admins {
                    if let Err(e) =
                        admin.post::<serde_json::Value>("/v1/rollback", &serde_json::json!({}))
                    {
                        failed.push(format!("a rollback to the previous generation failed: {e}"));
                    }
                }
                if adds {
                    self.rolling_addition(from_ms);
                }
                if failed.is_empty() {
                    self.report.faults.rollbacks += 1;
                }
                self.report.violations.extend(failed);
            }
        }
        Ok(())
    }

    /// The dead letters waiting: the gateway's `verdict_dlq_depth` gauges, or on Kafka the
    /// DLQ topic's records as the broker counts them (the Kafka source's gauge counts only
    /// what its own process wrote: a killed gateway starts again from 0, and the first
    /// gateway's misses the others').
    fn dlq_depth(&self) -> Result<u64> {
        match self.name {
            SourceName::Kafka => self.runtime.block_on(self.source.kafka_dlq_depth()),
            _ => admin::dlq_depth(&self.admin),
        }
    }

    fn excuse(&mut self, from_ms: u64, to_ms: u64, excuse: Excuse) {
        self.windows.push(Window {
            from_ms,
            to_ms,
            excuse,
        });
    }

    /// A config edit (the next retry delay) the gateway must reload.
    fn reload(&mut self) -> Result<()> {
        self.delay_ms += 10;
        // On NATS and the store the routes change shape too: a narrower route added or
        // removed while messages of its subject wait for a retry (a RabbitMQ or Kafka route
        // names its one queue or topic exactly).
        self.narrow = !self.narrow && !self.name.exact_topic();
        let from_ms = now_ms();
        match admin::reload(&self.admins, || self.write_config())? {
            Ok(()) => self.report.faults.reloads += 1,
            Err(violation) => self.report.violations.push(violation),
        }
        if self.narrow {
            self.rolling_addition(from_ms);
        }
        Ok(())
    }

    /// A narrower NATS route added to a fleet one gateway after the other: until every
    /// gateway's session runs it, one that has not yet does not know the new consumer and
    /// delivers on its wider route what the new route delivers too - a duplicate the gateway
    /// documents (`docs/src/guarantees.md`), excused up to an ack wait after the last
    /// gateway follows. A rolling *removal* gets no such window: it must deliver once.
    fn rolling_addition(&mut self, from_ms: u64) {
        if self.name == SourceName::Nats && self.gws.len() > 1 {
            self.excuse(
                from_ms,
                now_ms() + ROUTES_FOLLOWED_MS + ACK_WAIT_MS,
                Excuse::Redelivery,
            );
        }
    }

    /// Wait until every message taken is accepted or dead-lettered (counted by the DLQ's
    /// depth; the DLQ itself is read once, at the end). A backlog that drains is waited for
    /// however long it takes: the window closes only when no message became terminal for
    /// `settle` (a stuck run, or one whose retries wait longer than that).
    fn settle(&self, published: &Published) -> Result<()> {
        let mut moved = Instant::now();
        let mut most_terminal = 0;
        let mut least_held = u64::MAX;
        let started = Instant::now();
        // Looks in a row at which a store held nothing waiting.
        let mut store_empty = 0;
        loop {
            let accepted = self.consumer.accepted_keys();
            let dead = self.dlq_depth()?;
            let terminal = accepted + dead as usize;
            let open = published.at.len().saturating_sub(terminal);
            let drained = published.at.len().saturating_sub(open) as f64;
            self.progress.show(&format!(
                "settling: {open} of {} not terminal yet ({:.0} terminal/s so far)",
                published.at.len(),
                drained / started.elapsed().as_secs_f64().max(1.0)
            ));
            // The counts can say "all terminal" while a broker still holds copies (a DLQ
            // letter counted twice after a fault); on RabbitMQ the route queue and delay
            // buckets must be empty too, on Kafka the route and retry topics committed to
            // their ends, or the judge would call waiting messages lost. A look that fails
            // is no answer: the run waits on.
            let broker = matches!(self.name, SourceName::Rabbitmq | SourceName::Kafka);
            // Asked only once the counts say "all terminal": a look a second while a soak
            // drains would be load of the harness's own on the broker.
            let held = match (broker, open) {
                (true, 0) => match self.runtime.block_on(self.source.still_queued()) {
                    Ok(queued) => Some(queued.iter().map(|(_, n)| n).sum::<u64>()),
                    Err(e) => {
                        self.progress
                            .note(&format!("settling: counting what the broker holds: {e:#}"));
                        None
                    }
                },
                (true, _) => None,
                (false, _) => Some(0),
            };
            // Progress is a message becoming terminal, or the broker holding fewer: after
            // a fault the counts can reach "all terminal" early (a message dead-lettered
            // twice counts twice) while retries still drain.
            if terminal > most_terminal || (broker && held.is_some_and(|h| h < least_held)) {
                moved = Instant::now();
            }
            most_terminal = most_terminal.max(terminal);
            least_held = least_held.min(held.unwrap_or(u64::MAX));
            let settled = open == 0 && held == Some(0);
            // A store that holds nothing ready, scheduled or leased twice in a row has
            // nothing left to make terminal, whatever the counts say (they count a message
            // both delivered and dead-lettered after a fault twice, and can lag the store):
            // waiting on would only stretch the run by the whole `settle` window. The judge
            // reads the DLQ and the consumer's log and decides.
            store_empty = match self.name.is_store() && open > 0 {
                true if admin::store_waiting(&self.admin).is_ok_and(|w| w.is_empty()) => {
                    store_empty + 1
                }
                _ => 0,
            };
            if store_empty >= 2 {
                self.progress.note(&format!(
                    "settling: the store holds nothing waiting while {open} message(s) are \
                     counted neither accepted nor in the DLQ's depth; judging now"
                ));
                break;
            }
            if settled || moved.elapsed() > self.o.settle {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        // A last look a moment later: whatever arrives after "all terminal" is a violation.
        std::thread::sleep(Duration::from_millis(1_500));
        Ok(())
    }

    /// Read the DLQ, check the invariants, and make the report (keeping the run's files
    /// when it failed).
    fn judge(mut self, planned: &[plan::Planned], published: &Published) -> Result<Report> {
        // A letter too big for its broker keeps only its payload's digest.
        let by_digest: HashMap<String, String> = planned
            .iter()
            .filter(|m| m.payload.len() > 100_000)
            .map(|m| (sha256_hex(&m.payload), m.key.clone()))
            .collect();
        self.report.still_held = match self.name {
            store if store.is_store() => admin::store_census(&self.admin),
            _ => self.runtime.block_on(self.source.census()),
        };
        let letters = match self.name {
            SourceName::Rabbitmq => self.runtime.block_on(self.source.drain_rabbitmq_dlq())?,
            SourceName::Kafka => self.runtime.block_on(self.source.drain_kafka_dlq())?,
            _ => admin::dead_letters(&self.admin, self.name)?,
        };
        let dead = letters::tally(&letters, &by_digest);
        self.progress.done();
        let report = &mut self.report;
        report.rss_end_kb = self.gws[0].rss_kb();
        let log = self.consumer.log();
        let found = check::check(&check::Inputs {
            name: self.name,
            seed: self.o.seed,
            planned,
            published_at: &published.at,
            refused: &published.refused,
            resent: &published.resent,
            dead: &dead,
            log: &log,
            windows: &self.windows,
            // A shared store stamps dead letters with the database's clock; a broker's carry
            // the gateway's, early by as much as its clock runs behind.
            late_ms: check::LATE_MARGIN_MS
                + if self.name.is_store() {
                    0
                } else {
                    crate::skew::most_behind_ms(&self.o.skew)
                },
        });
        report.violations.extend(found.violations);
        report
            .violations
            .extend(unfinished(&found.unfinished, &report.still_held));
        let held: u64 = report.still_held.iter().map(|(_, n)| n).sum();
        report.not_terminal = if held > 0 { found.unfinished.len() } else { 0 };
        report.duplicates = found.duplicates;
        report.delivered = found.delivered;
        report.max_publish_to_terminal_ms = found.max_publish_to_terminal_ms;
        // What the faults can explain, from the harness's own record of them (never from
        // what the gateway or the store say about themselves): a kill re-delivers what the
        // gateway had in flight - at most its `max_in_flight`, set to its routes' concurrency
        // together ([`in_flight`]); a broker restart, a channel an operator's hand closed, or a shared store's
        // connections cut, what every gateway had in flight, and on RabbitMQ the prefetch
        // window too. On Kafka a kill re-delivers more: every record past the committed
        // offsets, counted from the consumer's log ([`kafka_uncommitted`]). The store's own
        // count of leases taken over is reported beside it.
        let in_flight = in_flight(self.name, &self.o.profile);
        let gateways = self.gws.len() as u64;
        // Kafka has no prefetch window of unacknowledged records: what a gateway fetched
        // and has not delivered yet is only read again, never delivered twice.
        let prefetch = if self.name == SourceName::Rabbitmq {
            PREFETCH
        } else {
            0
        };
        let uncommitted = if self.name == SourceName::Kafka {
            kafka_uncommitted(&log, &self.kills_at, self.o.profile.timeout_ms)
        } else {
            0
        };
        report.duplicates_allowed = u64::from(report.faults.gateway_kills) * in_flight
            + uncommitted
            + u64::from(report.faults.broker_restarts + report.faults.operator_acts)
                * gateways
                * (in_flight + prefetch);
        if self.name.is_store() {
            report.store_counted_redeliveries = Some(
                self.gws
                    .iter()
                    .map(Gateway::counted_redeliveries)
                    .sum::<u64>()
                    + self.runtime.block_on(self.source.store_redeliveries())?,
            );
        }
        if report.duplicates > report.duplicates_allowed {
            report.violations.push(format!(
                "{} duplicate deliveries; the faults explain at most {}",
                report.duplicates, report.duplicates_allowed
            ));
        }
        for (k, gw) in self.gws.iter().enumerate() {
            report.violations.extend(
                gw.panics()
                    .into_iter()
                    .map(|l| format!("gateway {k} panicked: {l}")),
            );
        }
        report.requests = log.len();
        report.dead_lettered = dead.len();
        for gw in &mut self.gws {
            gw.kill();
        }
        if report.violations.is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            // What the consumer saw and the faults' windows, for the post-mortem.
            let mut lines = String::new();
            for r in &log {
                lines += &serde_json::to_string(r).unwrap_or_default();
                lines.push('\n');
            }
            let _ = std::fs::write(self.dir.join("consumer.jsonl"), lines);
            let _ = std::fs::write(
                self.dir.join("faults.txt"),
                format!("{:#?}\n", self.windows),
            );
            report.dir = Some(self.dir.display().to_string());
        }
        Ok(self.report)
    }
}

/// The verdict on messages neither delivered nor dead-lettered: lost when the source's
/// census finds nothing waiting (one line each), else not terminal in time, with where the
/// source holds messages - and the rest lost when it holds fewer than are missing.
fn unfinished(missing: &[(String, usize)], held: &[(String, u64)]) -> Vec<String> {
    let total: u64 = held.iter().map(|(_, n)| n).sum();
    if missing.is_empty() {
        return Vec::new();
    }
    if let Some((failed, _)) = held.iter().find(|(w, _)| w.starts_with(CENSUS_FAILED)) {
        return vec![format!(
            "{} message(s) neither delivered nor dead-lettered, and the source's census \
             failed ({failed}): lost or still waiting, the run cannot tell",
            missing.len()
        )];
    }
    if total == 0 {
        return missing
            .iter()
            .map(|(key, requests)| {
                format!(
                    "message {key} is lost: neither delivered nor dead-lettered, and the \
                     source holds nothing ({requests} request(s))"
                )
            })
            .collect();
    }
    let missing_n = missing.len() as u64;
    let wher: Vec<String> = held.iter().map(|(w, n)| format!("{w}: {n}")).collect();
    let first: Vec<&str> = missing.iter().take(5).map(|(k, _)| k.as_str()).collect();
    let mut out = vec![format!(
        "{missing_n} message(s) not terminal in time (e.g. {}): the source still holds {total} ({})",
        first.join(", "),
        wher.join(", ")
    )];
    if total < missing_n {
        out.push(format!(
            "at least {} message(s) lost: {missing_n} are neither delivered nor dead-lettered, \
             the source holds only {total}",
            missing_n - total
        ));
    }
    out
}

/// On Kafka, the deliveries the gateway kills may repeat, each kill given as when it struck
/// and when the gateway killed was ready again (the rest of the allowance, what each
/// gateway had in flight, is counted beside it). A kill leaves every record past its
/// partitions' committed offsets to be read again by their next owner: each one it
/// delivered since its last commit - made every second, and held back by the oldest record
/// still unsettled in a partition, up to a consumer timeout. The restarted gateway's
/// joining takes every other gateway's partitions away too (a heartbeat later), with what
/// each delivered since its own last commit; and the group delivers nothing more until the
/// dead member's session expires and the restarted gateway is given partitions, ready.
/// Counted from the consumer's log: the messages it saw from that long before the kill
/// until the others' deliveries begun before they learnt of the rebalance have ended.
fn kafka_uncommitted(log: &[Request], kills: &[(u64, u64)], timeout_ms: u64) -> u64 {
    let before = 2 * (KAFKA_COMMIT_MS + timeout_ms);
    let after = KAFKA_HEARTBEAT_MS + timeout_ms;
    kills
        .iter()
        .map(|&(struck, ready)| {
            let window = struck.saturating_sub(before)..=ready.saturating_add(after);
            let seen: HashSet<&str> = log
                .iter()
                .filter(|r| window.contains(&r.at_ms))
                .filter_map(|r| r.key.as_deref())
                .collect();
            seen.len() as u64
        })
        .sum()
}

/// What the publishing came to, by key.
#[derive(Default)]
struct Published {
    /// When each message the source took was first published.
    at: BTreeMap<String, u64>,
    /// Messages the source refused.
    refused: BTreeSet<String>,
    /// Messages a producer had to publish again.
    resent: BTreeSet<String>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn now_ms() -> u64 {
    verdict_gateway::pipeline::now_ms()
}

#[cfg(test)]
mod tests {
    use super::{CENSUS_FAILED, KAFKA_COMMIT_MS, kafka_uncommitted, unfinished};
    use crate::consumer::Request;

    #[test]
    fn a_kafka_kill_may_repeat_each_message_seen_since_the_last_commit_once() {
        let request = |key: &str, at_ms: u64| Request {
            key: Some(key.into()),
            reply: "accept",
            at_ms,
            accepted: true,
        };
        let (struck, ready) = (100_000, 146_000);
        let log = [
            // Long before the kill: committed.
            request("a", struck - 60_000),
            // Since the last commit, twice: one message.
            request("b", struck - KAFKA_COMMIT_MS),
            request("b", struck - 10),
            // Delivered elsewhere before the rebalance took the partitions.
            request("c", struck + 1_000),
            // Long after: delivered by the partitions' new owners.
            request("d", ready + 60_000),
        ];
        assert_eq!(kafka_uncommitted(&log, &[], 800), 0);
        assert_eq!(kafka_uncommitted(&log, &[(struck, ready)], 800), 2);
        // Each kill may repeat them again.
        let twice = [(struck, ready), (struck + 5, ready + 5)];
        assert_eq!(kafka_uncommitted(&log, &twice, 800), 4);
    }

    #[test]
    fn a_message_found_nowhere_is_lost_and_one_still_held_is_only_late() {
        let missing = vec![("000001".to_string(), 2), ("000002".to_string(), 0)];
        assert!(unfinished(&[], &[]).is_empty());
        let lost = unfinished(&missing, &[]);
        assert_eq!(lost.len(), 2);
        assert!(lost[0].starts_with("message 000001 is lost"), "{lost:?}");
        let held = vec![("delay.8669".to_string(), 5)];
        let late = unfinished(&missing, &held);
        assert_eq!(late.len(), 1, "{late:?}");
        assert!(
            late[0].contains("2 message(s) not terminal in time")
                && late[0].contains("delay.8669: 5"),
            "{late:?}"
        );
        // The source holds fewer than are missing: the rest are lost.
        let some = unfinished(&missing, &[("store rows ready".to_string(), 1)]);
        assert!(
            some[1].starts_with("at least 1 message(s) lost"),
            "{some:?}"
        );
        // A census that failed says so: neither "lost" nor "only late".
        let failed = vec![(format!("{CENSUS_FAILED}: timed out"), 0)];
        let unknown = unfinished(&missing, &failed);
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert!(
            unknown[0].contains("census failed") && unknown[0].contains("timed out"),
            "{unknown:?}"
        );
    }
}
