//! The command line, as clap structs. Every command is a function in
//! [`verdict_cli::cli`]; these only name the arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use verdict_cli::cli;

/// Programmable retry and dead-letter policies for message gateways.
#[derive(Parser)]
#[command(name = "verdict", version, about)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Start a policy project (Rust, Python or JavaScript) that passes the admission gate
    /// as generated: a typed config, `decide` with one marked place for your rules, unit
    /// tests, a vector file, a gateway config for `verdict check` and a README with a CI job.
    New {
        /// The project's directory; its last component names the policy (`orders`).
        path: PathBuf,
        /// The `guest-sdk` directory of the Verdict checkout to depend on (default: the one
        /// beside this binary's sources); Python and JavaScript take its `python` and `js`.
        #[arg(long, conflicts_with = "sdk_version")]
        sdk_path: Option<PathBuf>,
        /// Depend on the Rust SDK from a registry at this version instead (Rust only: the
        /// Python and JavaScript SDKs are not published).
        #[arg(long)]
        sdk_version: Option<String>,
        /// The policy's language: `rust` (a crate, built with cargo), `python` (a
        /// pyproject.toml project, built with componentize-py) or `javascript` (a
        /// package.json project, built with ComponentizeJS).
        #[arg(long, default_value = "rust", value_parser = ["rust", "python", "javascript"])]
        lang: String,
    },
    /// Build policies into WebAssembly components and print each component's path: a Rust
    /// crate (Cargo.toml) with cargo, a Python project (pyproject.toml) with
    /// componentize-py, a JavaScript project (package.json) with ComponentizeJS.
    Build {
        /// Directories of policy projects.
        #[arg(required = true)]
        crates: Vec<PathBuf>,
        /// Build directory (default: the project's own `target/`).
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
    /// Check a component against the contract and print its name, version, sha256,
    /// imports and exports as JSON.
    Inspect {
        /// The component.
        policy: PathBuf,
    },
    /// Run vector files (and property checks) against a policy. Exit code 0: all passed;
    /// 1: some case or property failed; 2: the input itself is invalid.
    Test {
        /// The policy component, or its project's directory (built first, as `verdict
        /// build` would).
        policy: PathBuf,
        /// Vector files (JSON). With none, the property checks run.
        vectors: Vec<PathBuf>,
        /// Config replacing each suite's default: inline JSON or a file.
        #[arg(long)]
        config: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "human")]
        format: cli::Format,
        /// Also run the property checks.
        #[arg(long)]
        properties: bool,
        /// Fuel budget per decision (deterministic cost ceiling).
        #[arg(long, default_value_t = 10_000_000)]
        fuel: u64,
        /// The policy's delays are monotone: check that later attempts never wait less
        /// (implies --properties).
        #[arg(long)]
        monotone: bool,
        /// Keep watching: build the project again and re-run the checks each time one of
        /// its files or a vector file is saved (`policy` is the project's directory).
        #[arg(long)]
        watch: bool,
    },
    /// Validate a gateway config and run its admission gate (policies load, pins match,
    /// vectors pass, every route's config is accepted); print the routes as JSON.
    Check {
        /// The gateway config (`verdict.toml`).
        #[arg(short, long)]
        config: PathBuf,
        /// Also connect once to each consumer and broker the config names and report what
        /// was there (TLS version, certificate subject and expiry, whether the credentials
        /// were taken); nothing is sent or created. Exits 1 when one cannot be reached.
        #[arg(long)]
        probe: bool,
    },
    /// Show which route a topic takes under a gateway config and, with a failure, the
    /// decision it would get.
    Route {
        /// The gateway config (`verdict.toml`).
        #[arg(short, long)]
        config: PathBuf,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// A failure (JSON file, or `-` for stdin) to decide.
        #[arg(long)]
        failure: Option<String>,
    },
    /// Run the gateway: build the registry from the config (behind the admission gate),
    /// reload it when the config or its files change, and serve the admin API and
    /// `/metrics` until Ctrl-C or SIGTERM.
    Run {
        /// The gateway config (`verdict.toml`).
        #[arg(short, long)]
        config: PathBuf,
    },
    /// The quickstart in one command: build the `rules` policy, start the demo consumer
    /// and a gateway on the embedded store (in a directory of its own, removed at the
    /// end), publish the orders, and print what became of them - delivered, dead-lettered
    /// by cause - and the console's address; then run until Ctrl-C.
    Demo {
        /// The policy: a component, or a policy crate directory (built first).
        #[arg(long, default_value = "policies/rules")]
        policy: PathBuf,
        /// How many orders to publish.
        #[arg(long, default_value_t = 200)]
        orders: u32,
        /// Where the demo consumer listens (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:8081")]
        consumer: std::net::SocketAddr,
        /// Where the admin API and the console listen (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:9474")]
        admin: std::net::SocketAddr,
        /// Percent of orders the consumer fails 1-3 times before taking them.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
        transient: u32,
        /// Percent of orders the consumer refuses for good.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=100))]
        permanent: u32,
        /// Stop once the orders are settled instead of running until Ctrl-C.
        #[arg(long)]
        exit: bool,
    },
    /// Inspect and change the policies of a running gateway (a client of its admin API).
    Policy {
        #[command(flatten)]
        admin: AdminArgs,
        /// Print the API's JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: cli::PolicyCommand,
    },
    /// DLQ jobs of a running gateway (a client of its admin API): replay, discard or
    /// dry-run a group of dead letters (from `verdict dlq groups`), follow, list, cancel.
    Jobs {
        #[command(flatten)]
        admin: AdminArgs,
        /// Print the API's JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: cli::JobsCommand,
    },
    /// The gateway's store: `migrate` brings a shared database's schema up to date before
    /// gateways start on it (a starting gateway does the same if its user may).
    Store {
        /// The gateway config (`verdict.toml`).
        #[arg(short, long, global = true, default_value = "verdict.toml")]
        config: PathBuf,
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Identities of the admin API and the console: `verdict admin token new NAME --role
    /// ROLE` makes a token and the line for `[admin] tokens_file`.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// The dead-letter queues of a gateway (in its store, or on its broker with --source).
    Dlq {
        /// The gateway config (`verdict.toml`).
        #[arg(short, long, global = true, default_value = "verdict.toml")]
        config: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        /// Where the DLQs live: the gateway's store, or the broker its config names.
        #[arg(long, global = true, default_value = "embedded", value_parser = cli::dlq::parse_source)]
        source: verdict_registry::SourceKind,
        #[command(subcommand)]
        command: crate::dlq::DlqArgs,
    },
    /// Publish a message (or a JSONL batch) to a running gateway.
    Publish {
        #[command(flatten)]
        admin: AdminArgs,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The payload: JSON, or text (default: read stdin).
        payload: Option<String>,
        /// The message id (default: one is made).
        #[arg(long)]
        id: Option<String>,
        /// A header, `name=value` (repeatable).
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// A file of messages, one JSON object per line (`{"id", "headers", "payload"}`),
        /// published as one batch.
        #[arg(long, conflicts_with_all = ["payload", "id", "headers"])]
        batch: Option<PathBuf>,
    },
    /// Measure the gateway end to end against NATS's own redelivery, in one run: messages/s,
    /// delivery-to-verdict latency, CPU per message and its share in policy evaluation.
    /// Needs a NATS server for the nats targets (`--targets embedded` runs without one).
    Bench(BenchArgs),
    /// Ask a policy for one decision and print it as JSON.
    /// Run a policy against a scenario (an outage, a brown-out, a poison burst) in virtual
    /// time and report what it does: the retry load, the backlog, dead letters by class,
    /// time to drain, publish-to-end times, amplification.
    Simulate {
        /// The scenario (TOML; see `host/simulate/scenarios/`).
        #[arg(long)]
        scenario: PathBuf,
        /// The policy component (or `-c verdict.toml` for a route's policy and settings).
        #[arg(long, required_unless_present = "gateway", conflicts_with = "gateway")]
        policy: Option<PathBuf>,
        /// The policy's config: inline JSON or a file.
        #[arg(long, requires = "policy")]
        config: Option<String>,
        /// Guardrails and fallback (inline JSON or a file: {"guardrails": {...},
        /// "fallback": {...}}).
        #[arg(long, requires = "policy")]
        settings: Option<String>,
        /// A gateway config: the route of the scenario's topic decides.
        #[arg(short = 'c', long = "gateway")]
        gateway: Option<PathBuf>,
        /// The topic to route (the scenario's `topic` by default); with `-c`.
        #[arg(long, requires = "gateway")]
        topic: Option<String>,
        /// A second config for the policy, run on the same scenario and shown beside.
        #[arg(long)]
        compare: Option<String>,
        /// A second component to compare (with `--compare` as its config).
        #[arg(long)]
        compare_policy: Option<PathBuf>,
        /// Other guardrails and fallback for the second run, e.g. a retry budget:
        /// '{"guardrails": {"retry_budget": {"percent": 20}}}' (inline JSON or a file).
        #[arg(long, requires = "policy")]
        compare_settings: Option<String>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Exit 1 when this holds, e.g. `dead > 0`, `drain_s > 120`,
        /// `peak_retry_rate > 2x publish_rate` (repeatable).
        #[arg(long = "fail-if")]
        fail_if: Vec<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Rows of the timeline table.
        #[arg(long, default_value_t = 20)]
        rows: usize,
        /// Also write an HTML report with plots (SVG, no script) to this file.
        #[arg(long)]
        html: Option<PathBuf>,
    },
    Decide {
        /// The policy component.
        #[arg(long)]
        policy: PathBuf,
        /// The topic's config: inline JSON or a file.
        #[arg(long)]
        config: Option<String>,
        /// The failure as JSON (contract field names): a file, or `-` for stdin.
        #[arg(long)]
        failure: String,
        /// Guardrails and fallback (JSON: {"guardrails": {...}, "fallback": {...}}).
        #[arg(long)]
        settings: Option<String>,
    },
}

/// Where the admin API is and how to authorise changes.
#[derive(clap::Args)]
pub struct AdminArgs {
    /// The admin API's base URL.
    #[arg(
        long,
        env = "VERDICT_ADMIN_URL",
        default_value = "http://127.0.0.1:9474",
        global = true
    )]
    pub admin: String,
    /// File holding the admin token (default: the VERDICT_ADMIN_TOKEN variable).
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// PEM file of the CA that issued an `https://` admin listener's certificate (default:
    /// Mozilla's public roots).
    #[arg(long, env = "VERDICT_ADMIN_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
}

impl AdminArgs {
    /// A client for the admin API that sends the token (from `--token-file`, else the
    /// `VERDICT_ADMIN_TOKEN` variable; none: read-only calls only).
    pub fn client(&self) -> anyhow::Result<verdict_cli::client::AdminClient> {
        let token = match &self.token_file {
            Some(file) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| anyhow::anyhow!("--token-file {}: {e}", file.display()))?
                    .trim()
                    .to_string(),
            ),
            None => std::env::var("VERDICT_ADMIN_TOKEN").ok(),
        };
        match &self.ca_file {
            Some(ca) => Ok(verdict_cli::client::AdminClient::with_ca_file(
                &self.admin,
                token,
                ca,
            )?),
            None => Ok(verdict_cli::client::AdminClient::new(&self.admin, token)),
        }
    }
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The policy: a component, or a policy crate directory (built first, in release).
    #[arg(long, default_value = "policies/rules")]
    pub policy: PathBuf,
    /// The policy's config, inline JSON or a file (default: `rules` sending json/schema/
    /// format/auth failures to the DLQ and retrying 5xx and transport failures every
    /// --retry-delay-ms, at most --max-attempts deliveries).
    #[arg(long)]
    pub policy_config: Option<String>,
    /// Messages per target.
    #[arg(long, default_value_t = 5_000)]
    pub messages: usize,
    /// Percent of messages the consumer fails 1 to 3 times before taking them.
    #[arg(long, default_value_t = 20)]
    pub transient_percent: u32,
    /// Percent of messages the consumer always refuses (`schema.unknown-version`).
    #[arg(long, default_value_t = 5)]
    pub permanent_percent: u32,
    /// Deliveries in flight at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Delay between attempts, for the policy and for NATS's native redelivery.
    #[arg(long, default_value_t = 10)]
    pub retry_delay_ms: u64,
    /// Deliveries at most (the policy's max_attempts, NATS's MaxDeliver).
    #[arg(long, default_value_t = 5)]
    pub max_attempts: u32,
    /// The `embedded-traced` target's `[telemetry] sample_ratio` (0 to 1): the share of its
    /// traces that are recorded and exported.
    #[arg(long, default_value_t = 1.0)]
    pub trace_sample_ratio: f64,
    /// Run the targets this many times, alternating; the report adds each target's median
    /// ratio to nats-native over the rounds.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// What to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "embedded,nats,nats-native"
    )]
    pub targets: Vec<verdict_cli::bench::Target>,
    /// The NATS server.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// The PostgreSQL server for the `postgres` targets (a scratch database is made on it).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432")]
    pub postgres_url: String,
    /// The MariaDB/MySQL server for the `mysql` targets.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306")]
    pub mysql_url: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
    /// Give up on a target that settles no message for this long.
    #[arg(long, default_value_t = 30_000)]
    pub stall_timeout_ms: u64,
}

impl BenchArgs {
    /// The library's options (building the policy crate when given one).
    pub fn into_options(self) -> anyhow::Result<verdict_cli::bench::BenchOptions> {
        let policy = cli::bench_policy(&self.policy)?;
        let mut options = verdict_cli::bench::BenchOptions::new(policy);
        options.policy_config = match &self.policy_config {
            Some(arg) => cli::json_value_arg(arg, "--policy-config")?,
            None => {
                verdict_cli::bench::default_policy_config(self.retry_delay_ms, self.max_attempts)
            }
        };
        options.messages = self.messages;
        options.transient_percent = self.transient_percent;
        options.permanent_percent = self.permanent_percent;
        options.concurrency = self.concurrency;
        options.retry_delay_ms = self.retry_delay_ms;
        options.max_attempts = self.max_attempts;
        options.trace_sample_ratio = self.trace_sample_ratio;
        options.targets = self.targets;
        options.rounds = self.rounds;
        options.nats_url = self.nats_url;
        options.postgres_url = self.postgres_url;
        options.mysql_url = self.mysql_url;
        options.progress = !self.no_progress;
        options.stall_timeout = std::time::Duration::from_millis(self.stall_timeout_ms);
        Ok(options)
    }
}

/// `verdict admin` subcommands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Tokens of named identities.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

/// `verdict admin token` subcommands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a fresh token for NAME and print it once (stdout), with the line to add to the
    /// file `[admin] tokens_file` names (stderr explains). The token is not kept anywhere:
    /// give it to its holder now.
    New {
        /// The identity's name: letters, digits, `.`, `_`, `-` (audit notes and the console
        /// show it).
        name: String,
        /// What it may do: `read` (message content), `operate` (replay, discard, jobs,
        /// rollback, shadow), `edit` (repair), `admin` (everything). Each includes the
        /// ones before it.
        #[arg(long, value_parser = ["read", "operate", "edit", "admin"])]
        role: String,
    },
}

/// `verdict store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Create or migrate the schema of the store the config names; print the backend, the
    /// schema version and the messages by state (JSON).
    Migrate,
}
