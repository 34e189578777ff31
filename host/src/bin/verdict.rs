//! `verdict`: build, inspect and run retry/dead-letter policies. A thin shell over
//! [`verdict_host::cli`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use verdict_host::{TopicSettings, cli};

/// Programmable retry and dead-letter policies for message gateways.
#[derive(Parser)]
#[command(name = "verdict", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile policy crates to WebAssembly components and print each component's path.
    Build {
        /// Directories of policy crates.
        #[arg(required = true)]
        crates: Vec<PathBuf>,
        /// Cargo target directory (default: the crate's own).
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
        /// The policy component.
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
    },
    /// Validate a gateway config and run its admission gate (policies load, pins match,
    /// vectors pass, every route's config is accepted); print the routes as JSON.
    Check {
        /// The gateway config (`verdict.toml`).
        #[arg(short, long)]
        config: PathBuf,
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
    /// Ask a policy for one decision and print it as JSON.
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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VERDICT_LOG")
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Build { crates, target_dir } => {
            for path in cli::build(&crates, target_dir.as_deref())? {
                emit(&format!("{}\n", path.display()))?;
            }
        }
        Command::Inspect { policy } => {
            emit(&(serde_json::to_string_pretty(&cli::inspect(&policy)?)? + "\n"))?;
        }
        Command::Test {
            policy,
            vectors,
            config,
            format,
            properties,
            fuel,
            monotone,
        } => {
            let request = cli::TestRequest {
                policy: &policy,
                vectors: &vectors,
                config: config.as_deref(),
                properties,
                fuel,
                monotone,
            };
            return Ok(match cli::test(&request, format) {
                Ok((report, passed)) => {
                    emit(&report)?;
                    if passed {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            });
        }
        Command::Check { config } => {
            emit(&(serde_json::to_string_pretty(&cli::check(&config)?)? + "\n"))?;
        }
        Command::Route {
            config,
            topic,
            failure,
        } => {
            let out = cli::route(&config, &topic, failure.as_deref())?;
            emit(&(serde_json::to_string_pretty(&out)? + "\n"))?;
        }
        Command::Decide {
            policy,
            config,
            failure,
            settings,
        } => {
            let settings: TopicSettings = match settings {
                Some(s) => {
                    serde_json::from_str(&s).map_err(|e| anyhow::anyhow!("--settings: {e}"))?
                }
                None => TopicSettings::default(),
            };
            let decision = cli::decide(&policy, config.as_deref(), &failure, settings)?;
            emit(&(serde_json::to_string_pretty(&decision)? + "\n"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Write to stdout; a closed pipe (`verdict ... | head`) is the reader's choice, not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
