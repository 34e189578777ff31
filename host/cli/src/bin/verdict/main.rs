//! `verdict`: build, inspect and run retry/dead-letter policies. A thin shell over
//! [`verdict_cli::cli`].

use std::process::ExitCode;

use clap::Parser;
use verdict_cli::cli;
use verdict_gateway::Gateway;
use verdict_runtime::TopicSettings;

mod args;
mod dlq;

use args::{Args, Command};

fn main() -> ExitCode {
    // Every TLS client of the process on the one provider, however it was built.
    verdict_tls::install_default_provider();
    // Warnings by default: leases recovered after a crash, broker reconnects, refused
    // reloads and settlement faults are what an operator must see without asking.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VERDICT_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        // The last line of defence: no log line carries a URL's credentials or a
        // configured secret, whatever a call site put in it.
        .with_writer(|| verdict_runtime::redact::RedactingWriter::new(std::io::stderr()))
        // Colour only for a person at a terminal, not in files or a journal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // Structured logs for collectors: VERDICT_LOG_FORMAT=json.
    if std::env::var("VERDICT_LOG_FORMAT").is_ok_and(|f| f == "json") {
        logs.json().init();
    } else {
        logs.init();
    }
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            // A config error may quote a consumer or broker URL: never its credentials.
            eprintln!("error: {}", verdict_runtime::redact::redact(&one_line(&e)));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes on one line, each said once: a cause whose text an earlier message
/// already quotes is not repeated, and the chain ends at a store error - its message says
/// what the database said, and the driver's error it keeps as its source (for code that
/// reads it) would only say it again, in the driver's words.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        if cause.is::<verdict_gateway::store::StoreError>() {
            break;
        }
    }
    line
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::New {
            path,
            sdk_path,
            sdk_version,
            lang,
        } => {
            let language: cli::Language = lang.parse()?;
            let sdk = cli::SdkSource::resolve(sdk_path, sdk_version)?;
            let made = cli::new_policy(&path, language, &sdk)?;
            let mut text = format!("created {}:\n", made.dir.display());
            for file in &made.files {
                text.push_str(&format!("  {}\n", file.display()));
            }
            text.push_str(&format!(
                "next: cd {} && {} (see its README.md)\n",
                made.dir.display(),
                made.language.next_steps()
            ));
            emit(&text)?;
        }
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
            watch,
        } => {
            let mut request = cli::TestRequest {
                policy: &policy,
                vectors: &vectors,
                config: config.as_deref(),
                properties,
                fuel,
                monotone,
            };
            if watch {
                cli::watch_test(&policy, &request, format, &mut |text: &str| emit(text))?;
                return Ok(ExitCode::SUCCESS);
            }
            let built;
            if policy.is_dir() {
                built = cli::build(std::slice::from_ref(&policy), None)?;
                request.policy = &built[0];
            }
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
        Command::Check { config, probe } => {
            let mut summary = cli::check(&config)?;
            if probe {
                summary.probe = cli::probe(&config)?;
            }
            emit(&(serde_json::to_string_pretty(&summary)? + "\n"))?;
            for warning in &summary.warnings {
                eprintln!("warning: {warning}");
            }
            let failed: Vec<String> = summary
                .probe
                .iter()
                .filter(|p| !p.ok)
                .map(|p| format!("{}: {}", p.peer, p.error.as_deref().unwrap_or("not usable")))
                .collect();
            if !failed.is_empty() {
                for line in &failed {
                    eprintln!("error: {line}");
                }
                return Ok(ExitCode::from(1));
            }
        }
        Command::Route {
            config,
            topic,
            failure,
        } => {
            let out = cli::route(&config, &topic, failure.as_deref())?;
            emit(&(serde_json::to_string_pretty(&out)? + "\n"))?;
        }
        Command::Run { config } => {
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async {
                let running = Gateway::start(&config, cli::shutdown_signal()).await?;
                eprintln!(
                    "verdict: generation {} active; admin API on {}",
                    running.registry.current().number,
                    running.admin_url
                );
                running.wait().await
            })?;
        }
        Command::Demo {
            policy,
            orders,
            consumer,
            admin,
            transient,
            permanent,
            exit,
        } => {
            if transient + permanent > 100 {
                anyhow::bail!(
                    "--transient {transient} and --permanent {permanent}: together at most 100 percent"
                );
            }
            let options = cli::demo::DemoOptions {
                policy,
                orders,
                consumer,
                admin,
                transient_pct: transient,
                permanent_pct: permanent,
                exit,
            };
            cli::demo::demo(&options, &mut |line| eprintln!("verdict demo: {line}"))?;
        }
        Command::Policy {
            admin,
            json,
            command,
        } => {
            emit(&cli::policy(&admin.client()?, &command, json)?)?;
        }
        Command::Jobs {
            admin,
            json,
            command,
        } => {
            let out = cli::jobs(&admin.client()?, &command, json, |job| {
                eprint!(
                    "\r{} {}: {}/{} ({}%)",
                    job["id"].as_str().unwrap_or("job"),
                    job["state"].as_str().unwrap_or("?"),
                    job["done"],
                    job["total"],
                    job["percent"]
                );
                if job["state"] != "running" {
                    eprintln!();
                }
            })?;
            emit(&out)?;
        }
        Command::Store {
            config,
            command: args::StoreCommand::Migrate,
        } => {
            let status = cli::store::migrate(&config)?;
            emit(&(serde_json::to_string_pretty(&status)? + "\n"))?;
        }
        Command::Admin {
            command:
                args::AdminCommand::Token {
                    command: args::TokenCommand::New { name, role },
                },
        } => emit(&cli::admin_token::new_token(&name, &role)?)?,
        Command::Dlq {
            config,
            json,
            source,
            command,
        } => emit(&dlq::run(&config, source, json, command)?)?,
        Command::Publish {
            admin,
            topic,
            payload,
            id,
            headers,
            batch,
        } => {
            let client = admin.client()?;
            let request = cli::PublishRequest {
                topic: &topic,
                payload: payload.as_deref(),
                id: id.as_deref(),
                headers: &headers,
                batch: batch.as_deref(),
            };
            emit(&cli::publish(&client, &request)?)?;
        }
        Command::Bench(args) => {
            let json = args.json;
            let report = verdict_cli::bench::run(&args.into_options()?)?;
            if json {
                emit(&(serde_json::to_string_pretty(&report.to_json())? + "\n"))?;
            } else {
                emit(&report.to_string())?;
            }
        }
        Command::Simulate {
            scenario,
            policy,
            config,
            settings,
            gateway,
            topic,
            compare,
            compare_policy,
            compare_settings,
            seed,
            fail_if,
            json,
            rows,
            html,
        } => {
            use verdict_cli::cli::simulate::{self, Decides, SimulateArgs};
            // Exit 2 for input that cannot run, as `verdict test` does: a CI job tells a
            // broken scenario or setting from a condition that held (1).
            let run = || -> anyhow::Result<simulate::Simulated> {
                let decides = match (policy, gateway) {
                    (Some(path), _) => Decides::Policy {
                        path,
                        config,
                        settings: match settings {
                            Some(s) => cli::settings_arg(&s, "--settings")?,
                            None => TopicSettings::default(),
                        },
                    },
                    (None, Some(gateway)) => Decides::Route { gateway, topic },
                    (None, None) => anyhow::bail!("give --policy P or -c verdict.toml"),
                };
                simulate::run(&SimulateArgs {
                    decides,
                    scenario,
                    compare,
                    compare_policy,
                    compare_settings: compare_settings
                        .map(|s| cli::settings_arg(&s, "--compare-settings"))
                        .transpose()?,
                    seed,
                    fail_if,
                    json,
                    rows,
                    html,
                })
            };
            let done = match run() {
                Ok(done) => done,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return Ok(ExitCode::from(2));
                }
            };
            emit(&done.text)?;
            eprintln!("{}", done.timing);
            if !done.failed.is_empty() {
                for condition in &done.failed {
                    eprintln!("fail-if held: {condition}");
                }
                return Ok(ExitCode::from(1));
            }
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

#[cfg(test)]
mod tests {
    use super::one_line;

    #[derive(Debug, thiserror::Error)]
    #[error("store: postgres: connection refused")]
    struct Quoting(#[source] std::io::Error);

    #[test]
    fn a_cause_the_message_already_quotes_is_said_once() {
        let driver =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = anyhow::Error::new(Quoting(driver)).context("opening the store");
        assert_eq!(
            one_line(&e),
            "opening the store: store: postgres: connection refused"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&plain), "outer: inner");
    }

    #[test]
    fn the_chain_ends_at_a_store_error_which_quotes_its_driver() {
        let driver = std::io::Error::other("FATAL: password authentication failed\nDETAIL: x");
        let store = verdict_gateway::store::StoreError::Connect {
            target: "127.0.0.1:5432/verdict".into(),
            message: "postgres: password authentication failed".into(),
            cause: Some(Box::new(driver)),
        };
        let e = anyhow::Error::new(store).context("opening the store");
        assert_eq!(
            one_line(&e),
            "opening the store: store 127.0.0.1:5432/verdict: postgres: password authentication \
             failed"
        );
    }
}
