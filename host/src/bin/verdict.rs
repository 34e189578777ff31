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
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Build { crates, target_dir } => {
            for path in cli::build(&crates, target_dir.as_deref())? {
                println!("{}", path.display());
            }
        }
        Command::Inspect { policy } => {
            println!("{}", serde_json::to_string_pretty(&cli::inspect(&policy)?)?);
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
            println!("{}", serde_json::to_string_pretty(&decision)?);
        }
    }
    Ok(())
}
