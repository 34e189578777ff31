//! `verdict-torture`: drives the real `verdict` gateway - one, or several sharing a source,
//! some on skewed clocks - on each source (the embedded store, PostgreSQL and MariaDB
//! stores, NATS, RabbitMQ, Kafka) with a seeded hostile consumer, hostile producers and faults
//! (gateway `kill -9`, broker restarts, consumer
//! outages, hot reloads that reshape the routes, rollbacks, an operator deleting a RabbitMQ
//! delay exchange or refusing writes), then checks the delivery invariants: nothing lost, at most one dead
//! letter per message, no delivery after a terminal state, duplicates only as many as the
//! faults explain, no panic, every dead letter naming its policy. The policy is the `rules`
//! table, in Rust by default; `--languages rust,python,javascript` runs its Python and
//! JavaScript ports too, one language per run in turn.
//!
//! ```text
//! cargo build --release -p verdict-cli -p verdict-torture
//! target/release/verdict-torture --sources embedded,nats,rabbitmq --messages 500 --faults 6
//! target/release/verdict-torture --sources kafka --messages 500 --faults 6
//! ```
//!
//! Kafka's broker is never restarted: the one `.ci/run` starts (nisshi, on 127.0.0.1:9092,
//! or `VERDICT_TEST_KAFKA`) keeps its records in memory, and a restart would lose them all.
//!
//! A failing run prints its seed and the one command that replays it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;

mod admin;
mod broker;
mod check;
mod consumer;
mod database;
mod faults;
mod gateway;
mod kafka;
mod language;
mod letters;
mod operator;
mod plan;
mod producer;
mod progress;
mod rng;
mod run;
mod skew;
mod sources;

use language::Language;
use sources::SourceName;

/// The soak's backlog: enough to keep every delivery slot busy, few enough that a fault
/// late in the publishing meets a gateway still at work.
const SOAK_BACKLOG: usize = 20_000;

/// Torture the gateway and check its invariants.
#[derive(Debug, Parser)]
#[command(name = "verdict-torture", version)]
struct Args {
    /// Sources to run, one after the other: embedded, postgres, mysql, nats, rabbitmq,
    /// kafka (a broker on `VERDICT_TEST_KAFKA`, else 127.0.0.1:9092, where `.ci/run` starts
    /// nisshi).
    #[arg(long, value_delimiter = ',', default_value = "embedded,nats,rabbitmq")]
    sources: Vec<SourceName>,
    /// The seed (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Runs per source, seeds `seed`, `seed + 1`, ...
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Messages per run (default 500; 1,000,000 with --soak).
    #[arg(long)]
    messages: Option<usize>,
    /// Faults per run, of every kind in turn, at seeded points of the publishing.
    #[arg(long, default_value_t = 6)]
    faults: usize,
    /// Never restart a broker (the faults are then kills, consumer outages, reloads and
    /// rollbacks): for a machine whose NATS or RabbitMQ others are using. Kafka's broker is
    /// never restarted anyway: the test broker keeps its records in memory only.
    #[arg(long)]
    no_broker_restarts: bool,
    /// Let the operator's hand on RabbitMQ also refuse writes to the delay buckets for a
    /// moment (a `reject-publish` length limit of 0), besides deleting the delay exchange.
    /// Off by default: the broker re-elects a quorum bucket's leader when the policy
    /// changes, and retries that expire across it may wait out its dead-letter retry (about
    /// three minutes) - longer than a run settles.
    #[arg(long)]
    refuse_writes: bool,
    /// On PostgreSQL and MariaDB, the broker fault restarts the machine's database server
    /// itself (`pg_ctlcluster ... stop -m fast` and start; `mariadbd` stopped with SIGTERM
    /// and started again) instead of cutting the run's own connections. Off by default:
    /// everything else using the server sees the restart too.
    #[arg(long)]
    restart_databases: bool,
    /// Volume instead of variety: a million messages (unless --messages), every hostile
    /// shape but the slow answers and big payloads rare, 5 gateway kills and 2 broker
    /// restarts (none on Kafka), besides 2 consumer outages, 2 reloads, a rollback and, on
    /// RabbitMQ, an operator's hand, per run.
    #[arg(long)]
    soak: bool,
    /// Publish no further while this many messages are not terminal yet (default: no limit;
    /// 20,000 with --soak, so its faults strike all through the run).
    #[arg(long)]
    max_backlog: Option<usize>,
    /// After publishing, how long to wait with no message becoming terminal before the run
    /// is judged (seconds; default 120, 900 with --soak). A backlog that keeps draining is
    /// waited for however long it takes; messages the source still holds when the window
    /// closes are "not terminal in time", a verdict apart from lost.
    #[arg(long)]
    duration: Option<u64>,
    /// The `verdict` binary (default: next to this one).
    #[arg(long, env = "VERDICT_BIN")]
    verdict: Option<PathBuf>,
    /// The `rules` policy component (default: built with `verdict build policies/rules`).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The languages of the `rules` policy the runs use, in turn: `rust`
    /// (`policies/rules`, or `--policy`), `python` (`policies/rules-py`), `javascript`
    /// (`policies/rules-js`), each built with `verdict build`. The run of the `i`-th source
    /// with its `j`-th seed takes language `(i + j) mod n`, so two seeds and two languages
    /// give every source each of them.
    #[arg(long, value_delimiter = ',', default_value = "rust")]
    languages: Vec<Language>,
    /// Where runs keep their files (a failed run's directory is kept).
    #[arg(long, default_value = "target/torture")]
    workdir: PathBuf,
    /// Print the reports as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
    /// TLS on the hops that offer it: the consumer over HTTPS, and NATS through a TLS-only
    /// `nats-server` of the run's own (the one the broker faults restart), each certificate
    /// from a CA made for the run and verified by the gateway. RabbitMQ and Kafka are
    /// reached in plaintext still.
    #[arg(long)]
    tls: bool,
    /// Gateways sharing each source: several consume NATS's and RabbitMQ's queues, split
    /// Kafka's topics in one consumer group, claim from one PostgreSQL or MariaDB store, and
    /// meet each fault (a kill strikes one of them at random; reloads and rollbacks reach
    /// them all). The embedded store takes one.
    #[arg(long, default_value_t = 1)]
    gateways: usize,
    /// Clock offsets for the gateways after the first, in turn (`faketime` specs, e.g.
    /// `+30s,-30s`): on a shared store, leases, due times and pruning must follow the
    /// database's clock, not a gateway's.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = skew::parse)]
    skew: Vec<String>,
}

fn main() -> ExitCode {
    match real_main() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("verdict-torture: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<bool> {
    let args = Args::parse();
    let seed = args
        .seed
        .unwrap_or_else(|| verdict_gateway::pipeline::now_ms() % 1_000_000);
    eprintln!("verdict-torture: seed {seed}");
    let bin = match &args.verdict {
        Some(bin) => bin.clone(),
        None => sibling("verdict")?,
    };
    let mut components = Vec::new();
    for language in &args.languages {
        let component = match (language, &args.policy) {
            (Language::Rust, Some(p)) => p.clone(),
            _ => build_rules(&bin, language.project())?,
        };
        components.push((*language, component));
    }
    if components.is_empty() {
        bail!("--languages: name at least one of rust, python, javascript");
    }
    let messages = args
        .messages
        .unwrap_or(if args.soak { 1_000_000 } else { 500 });
    let (profile, fault_kinds) = if args.soak {
        use run::Fault::*;
        let soak = vec![
            Kill,
            BrokerRestart,
            ConsumerDown,
            Kill,
            Reload,
            Kill,
            BrokerRestart,
            Rollback,
            Kill,
            ConsumerDown,
            Reload,
            Kill,
            Operator,
        ];
        (run::Profile::soak(), Some(soak))
    } else {
        (run::Profile::torture(), None)
    };
    let mut reports = Vec::new();
    for (i, name) in args.sources.iter().enumerate() {
        for s in 0..args.seeds {
            let k = (i + usize::try_from(s).unwrap_or(0)) % components.len();
            let (language, component) = &components[k];
            let options = run::Options {
                seed: seed + s,
                messages,
                faults: args.faults,
                fault_kinds: fault_kinds.clone(),
                broker_restarts: !args.no_broker_restarts,
                refuse_writes: args.refuse_writes,
                restart_databases: args.restart_databases,
                profile: profile.clone(),
                settle: Duration::from_secs(args.duration.unwrap_or(if args.soak {
                    900
                } else {
                    120
                })),
                bin: bin.clone(),
                component: component.clone(),
                language: *language,
                workdir: std::path::absolute(&args.workdir)?,
                progress: !args.quiet,
                max_backlog: args.max_backlog.or(args.soak.then_some(SOAK_BACKLOG)),
                tls: args.tls,
                gateways: args.gateways,
                skew: args.skew.clone(),
            };
            let report = run::run(*name, &options).with_context(|| {
                format!(
                    "{} with seed {} ({} policy)",
                    name.as_str(),
                    seed + s,
                    language.name()
                )
            })?;
            reports.push(report);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", table(&reports));
    }
    let failed: Vec<&run::Report> = reports
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    for r in &failed {
        eprintln!(
            "\n{} seed {}: {} violation(s):",
            r.source,
            r.seed,
            r.violations.len()
        );
        for v in r.violations.iter().take(20) {
            eprintln!("  - {v}");
        }
        if !r.still_held.is_empty() {
            let held: Vec<String> = r
                .still_held
                .iter()
                .map(|(q, n)| format!("{q}: {n}"))
                .collect();
            eprintln!("  still held by the source: {}", held.join(", "));
        }
        if let Some(dir) = &r.dir {
            eprintln!("  files: {dir}");
        }
        eprintln!(
            "  replay: verdict-torture --sources {} --seed {} --messages {}{}{}{}{}{}{}{}{}",
            r.source,
            r.seed,
            messages,
            if r.language == Language::Rust {
                String::new()
            } else {
                format!(" --languages {}", r.language.name())
            },
            if args.soak {
                " --soak".to_string()
            } else {
                format!(" --faults {}", args.faults)
            },
            if args.no_broker_restarts {
                " --no-broker-restarts"
            } else {
                ""
            },
            if args.refuse_writes {
                " --refuse-writes"
            } else {
                ""
            },
            if args.restart_databases {
                " --restart-databases"
            } else {
                ""
            },
            if args.tls { " --tls" } else { "" },
            if r.gateways > 1 {
                format!(" --gateways {}", r.gateways)
            } else {
                String::new()
            },
            if r.skew.is_empty() {
                String::new()
            } else {
                format!(" --skew={}", r.skew.join(","))
            }
        );
    }
    Ok(failed.is_empty())
}

/// `name` next to this executable (both are built into the same target directory; a test
/// runs from its `deps/` subdirectory).
fn sibling(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    for dir in me.ancestors().skip(1).take(2) {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "no `{name}` binary next to {}: build it (`cargo build -p verdict-cli --bin verdict`) \
         or pass --verdict",
        me.display()
    )
}

/// Build the `rules` policy's `project` (a directory of this workspace) with `verdict build`.
fn build_rules(bin: &std::path::Path, project: &str) -> Result<PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = std::process::Command::new(bin);
    gateway::hermetic(&mut command);
    let out = command
        .arg("build")
        .arg(root.join(project))
        .current_dir(&root)
        .output()
        .with_context(|| format!("running {} build", bin.display()))?;
    if !out.status.success() {
        bail!(
            "`verdict build {project}` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with(".wasm"))
        .map(|l| PathBuf::from(l.trim()))
        .context("`verdict build` printed no component path")?;
    Ok(if path.is_absolute() {
        path
    } else {
        root.join(path)
    })
}

fn table(reports: &[run::Report]) -> String {
    let mut out = format!(
        "{:<11} {:<6} {:>7} {:>7} {:>7} {:>9} {:>6} {:>6}/{:<6} {:>5} {:>6} {:>6} {:>7} {:>8} {:>8} {:>9} {:>6}\n",
        "SOURCE",
        "POLICY",
        "SEED",
        "MSGS",
        "REFUSED",
        "DELIVERED",
        "DEAD",
        "DUPS",
        "ALLOW",
        "KILLS",
        "BROKER",
        "OUTAGE",
        "RELOADS",
        "ROLLBACK",
        "OPERATOR",
        "MAX-TERM",
        "RESULT"
    );
    for r in reports {
        out += &format!(
            "{:<11} {:<6} {:>7} {:>7} {:>7} {:>9} {:>6} {:>6}/{:<6} {:>5} {:>6} {:>6} {:>7} {:>8} {:>8} {:>7}ms {:>6}\n",
            if r.gateways > 1 {
                format!("{} x{}", r.source, r.gateways)
            } else {
                r.source.clone()
            },
            r.language.short(),
            r.seed,
            r.messages,
            r.refused,
            r.delivered,
            r.dead_lettered,
            r.duplicates,
            r.duplicates_allowed,
            r.faults.gateway_kills,
            r.faults.broker_restarts,
            r.faults.consumer_outages,
            r.faults.reloads,
            r.faults.rollbacks,
            r.faults.operator_acts,
            r.max_publish_to_terminal_ms,
            if r.violations.is_empty() {
                "ok"
            } else if r.not_terminal > 0 && r.violations.len() == 1 {
                // Nothing broken but the time: messages the source still holds.
                "LATE"
            } else {
                "FAIL"
            },
        );
    }
    out
}
