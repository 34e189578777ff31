//! `verdict bench`: what the gateway costs end to end, measured against the broker doing its
//! own redelivery, in one run.
//!
//! Every *target* takes the same `messages` through the same kind of consumer - a
//! [`DemoConsumer`](crate::demo::DemoConsumer) failing a fixed share of message ids
//! transiently (1 to 3 times) and another share permanently - and runs until every message is
//! settled for good:
//!
//! | target | what runs |
//! |---|---|
//! | `embedded` | a gateway on its embedded store (messages published through the admin API) |
//! | `nats` | a gateway consuming a JetStream stream (the `nats` source) |
//! | `nats-native` | no gateway: a JetStream pull consumer POSTing to the same consumer, `ack` on success, `nak` with the retry delay on failure, `MaxDeliver` bounding the attempts - no classification, no history, no envelope, no DLQ |
//! | `embedded-https` | `embedded`, the consumer served over HTTPS (a CA made for the run, verified by the gateway) |
//! | `nats-tls` | `nats` against a `nats-server` of the bench's own that takes TLS only |
//! | `embedded-traced` | `embedded` exporting every span of every delivery (sampling 1.0) over OTLP/HTTP to a collector stand-in the bench runs, which decodes nothing and answers at once |
//!
//! For each: messages/s, the receipt-to-settlement latency (*delivery-to-verdict*: from the
//! message leaving its source to its settlement applied there - consumer call, verdict,
//! broker or store write), the CPU this process spent outside the load generator (whose
//! threads are counted apart: they stand in for producers and consumers living elsewhere),
//! the share of that CPU inside policy evaluation, and the broker server's CPU when it runs
//! on this machine.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

mod cpu;
mod database;
mod exact;
mod gateway;
mod load;
mod native;
mod report;

pub use exact::HandlingSummary;
pub use report::{Figures, Report};

use load::Load;

/// What can be benched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// A gateway on the embedded store.
    Embedded,
    /// A gateway on NATS JetStream.
    Nats,
    /// NATS JetStream's own redelivery, no gateway: the baseline.
    NatsNative,
    /// A gateway on a PostgreSQL store (a database of its own, dropped after).
    Postgres,
    /// Three gateways sharing one PostgreSQL store.
    #[value(name = "postgres-x3")]
    #[serde(rename = "postgres-x3")]
    PostgresX3,
    /// A gateway on a MariaDB/MySQL store.
    Mysql,
    /// Three gateways sharing one MariaDB/MySQL store.
    #[value(name = "mysql-x3")]
    #[serde(rename = "mysql-x3")]
    MysqlX3,
    /// `embedded` with the consumer served over HTTPS.
    EmbeddedHttps,
    /// `nats` against a TLS-only `nats-server` of the bench's own.
    NatsTls,
    /// `embedded` with traces on: every span exported over OTLP/HTTP.
    EmbeddedTraced,
}

impl Target {
    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Target::Embedded => "embedded",
            Target::Nats => "nats",
            Target::NatsNative => "nats-native",
            Target::Postgres => "postgres",
            Target::PostgresX3 => "postgres-x3",
            Target::Mysql => "mysql",
            Target::MysqlX3 => "mysql-x3",
            Target::EmbeddedHttps => "embedded-https",
            Target::NatsTls => "nats-tls",
            Target::EmbeddedTraced => "embedded-traced",
        }
    }

    /// The same target without TLS (or without traces), for a TLS (traced) target: what its
    /// throughput is compared with.
    pub fn plain_twin(self) -> Option<Target> {
        match self {
            Target::EmbeddedHttps | Target::EmbeddedTraced => Some(Target::Embedded),
            Target::NatsTls => Some(Target::Nats),
            _ => None,
        }
    }

    /// Whether the target's store is a shared SQL database (PostgreSQL or MariaDB/MySQL).
    pub fn shared_store(self) -> bool {
        matches!(
            self,
            Target::Postgres | Target::PostgresX3 | Target::Mysql | Target::MysqlX3
        )
    }

    /// The one-gateway target on the same store, for a target of three gateways.
    pub fn single_gateway_twin(self) -> Option<Target> {
        match self {
            Target::PostgresX3 => Some(Target::Postgres),
            Target::MysqlX3 => Some(Target::Mysql),
            _ => None,
        }
    }

    /// Whether the gateway consumes from NATS.
    pub(crate) fn on_nats(self) -> bool {
        matches!(self, Target::Nats | Target::NatsTls)
    }

    /// How many gateways share the target's store.
    pub fn gateways(self) -> usize {
        match self {
            Target::PostgresX3 | Target::MysqlX3 => 3,
            _ => 1,
        }
    }

    /// The server process whose CPU the report shows (the broker, or the database).
    pub(crate) fn server_process(self) -> &'static str {
        match self {
            Target::Postgres | Target::PostgresX3 => "postgres",
            Target::Mysql | Target::MysqlX3 => "mariadbd",
            _ => native::BROKER_PROCESS,
        }
    }
}

/// The policy config the bench gives the `rules` policy unless told otherwise: the
/// consumer's permanent failure (`schema.unknown-version`) goes to the DLQ at once, its 503s
/// are retried after [`BenchOptions::retry_delay_ms`].
pub fn default_policy_config(retry_delay_ms: u64, max_attempts: u32) -> serde_json::Value {
    serde_json::json!({
        "max_attempts": max_attempts,
        "rules": [
            {"match": ["json.*", "schema.*", "format.*", "auth.*"], "dead_letter": "poison"},
            {"match": ["http.5*", "transport.*"], "retry": {"strategy": "fixed", "delay_ms": retry_delay_ms}},
        ],
    })
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Messages per target.
    pub messages: usize,
    /// Percent of message ids the consumer fails 1 to 3 times before taking them.
    pub transient_percent: u32,
    /// Percent of message ids the consumer always refuses (`schema.unknown-version`).
    pub permanent_percent: u32,
    /// Deliveries in flight at once (the route's consumer concurrency; the native
    /// consumer's too).
    pub concurrency: usize,
    /// Delay between attempts (the policy's and the native consumer's).
    pub retry_delay_ms: u64,
    /// Deliveries at most (the policy's `max_attempts`, NATS's `MaxDeliver`).
    pub max_attempts: u32,
    /// The policy component.
    pub policy: PathBuf,
    /// Its config (JSON).
    pub policy_config: serde_json::Value,
    /// The NATS server, for the `nats` targets.
    pub nats_url: String,
    /// The PostgreSQL server for the `postgres` targets (a database is made per run).
    pub postgres_url: String,
    /// The MariaDB/MySQL server for the `mysql` targets.
    pub mysql_url: String,
    /// The targets, run one after the other in this order.
    pub targets: Vec<Target>,
    /// How many times to run the targets, alternating (ratios are taken within a round and
    /// their median reported: a shared machine drifts between rounds).
    pub rounds: usize,
    /// Draw a progress bar per target on stderr (when it is a terminal).
    pub progress: bool,
    /// Give up on a target that settles nothing for this long.
    pub stall_timeout: Duration,
    /// The share of the `embedded-traced` target's traces recorded and exported.
    pub trace_sample_ratio: f64,
}

impl BenchOptions {
    /// The defaults for `policy`: 5,000 messages, 20% transient and 5% permanent failures,
    /// concurrency 16, retries 10 ms apart, at most 5 deliveries, every target.
    pub fn new(policy: PathBuf) -> BenchOptions {
        BenchOptions {
            messages: 5_000,
            transient_percent: 20,
            permanent_percent: 5,
            concurrency: 16,
            retry_delay_ms: 10,
            max_attempts: 5,
            policy,
            policy_config: default_policy_config(10, 5),
            nats_url: "nats://127.0.0.1:4222".into(),
            postgres_url: "postgres://postgres@127.0.0.1:5432".into(),
            mysql_url: "mysql://root@127.0.0.1:3306".into(),
            targets: vec![Target::Embedded, Target::Nats, Target::NatsNative],
            rounds: 1,
            progress: true,
            stall_timeout: Duration::from_secs(30),
            trace_sample_ratio: 1.0,
        }
    }

    fn check(&self) -> Result<()> {
        if self.messages == 0 {
            bail!("--messages must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.trace_sample_ratio) {
            bail!(
                "--trace-sample-ratio {} is not between 0 and 1",
                self.trace_sample_ratio
            );
        }
        if self.transient_percent + self.permanent_percent > 100 {
            bail!(
                "--transient-percent ({}) + --permanent-percent ({}) is more than 100",
                self.transient_percent,
                self.permanent_percent
            );
        }
        if self.concurrency == 0 {
            bail!("--concurrency must be at least 1");
        }
        if self.max_attempts < 4 && self.transient_percent > 0 {
            // The consumer fails a transient id up to 3 times.
            bail!(
                "--max-attempts {} is too few: transient failures need up to 4 deliveries",
                self.max_attempts
            );
        }
        if self.rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        if self.targets.is_empty() {
            bail!("no --targets given");
        }
        if !self.policy.is_file() {
            bail!("--policy {}: no such component file", self.policy.display());
        }
        Ok(())
    }
}

/// Run every target in `options`, one after the other, in this process.
pub fn run(options: &BenchOptions) -> Result<Report> {
    options.check()?;
    let load = Load::new()?;
    let gateway = tokio::runtime::Runtime::new().context("starting the gateway's runtime")?;
    let mut report = Report::new(options);
    for round in 1..=options.rounds {
        for &target in &options.targets {
            match gateway.block_on(run_target(target, options, &load)) {
                Ok(figures) => report.targets.push(Figures { round, ..figures }),
                Err(e) => {
                    // A stalled target may have left tasks that never yield; do not wait.
                    gateway.shutdown_background();
                    return Err(e.context(format!("target {}", target.name())));
                }
            }
        }
    }
    Ok(report)
}

async fn run_target(target: Target, options: &BenchOptions, load: &Load) -> Result<Figures> {
    match target {
        Target::NatsNative => native::run(options, load).await,
        _ => gateway::run(target, options, load).await,
    }
}

/// A target's progress: a bar on stderr, and the stall guard.
pub(crate) struct Progress {
    bar: ProgressBar,
    total: u64,
    last: u64,
    moved: Instant,
    stall: Duration,
}

impl Progress {
    fn new(target: Target, options: &BenchOptions) -> Progress {
        let total = options.messages as u64;
        let bar = if options.progress {
            ProgressBar::new(total)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{msg:>12} [{bar:32}] {pos}/{len} settled, {per_sec}, {elapsed}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(target.name());
        Progress {
            bar,
            total,
            last: 0,
            moved: Instant::now(),
            stall: options.stall_timeout,
        }
    }

    /// Wait on the load generator's runtime until `settled()` reaches the total: the stall
    /// guard must keep time even when every gateway thread is stuck.
    async fn wait_on(self, load: &Load, settled: impl Fn() -> u64 + Send + 'static) -> Result<()> {
        load.handle()
            .spawn(self.wait(settled))
            .await
            .context("the progress task")?
    }

    /// Wait until `settled()` reaches the total, updating the bar; an error when nothing
    /// moves for the stall timeout.
    async fn wait(mut self, settled: impl Fn() -> u64) -> Result<()> {
        loop {
            let done = settled();
            self.bar.set_position(done.min(self.total));
            if done >= self.total {
                self.bar.finish();
                return Ok(());
            }
            if done != self.last {
                self.last = done;
                self.moved = Instant::now();
            } else if self.moved.elapsed() > self.stall {
                self.bar.abandon();
                bail!(
                    "stalled: {done} of {} messages settled and none for {:?} (is the broker up?)",
                    self.total,
                    self.stall
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
