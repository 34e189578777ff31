//! `verdict simulate`: a policy against a scenario in virtual time, with the real
//! component behind the host's guardrails - from a component and its config, or from a
//! gateway config's route.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use verdict_runtime::{Decider, Host, Limits, TopicSettings};
use verdict_simulate::{Condition, Report, Scenario, simulate};

/// The deadline of one decision in a simulation.
const SIMULATION_DECIDE_TIMEOUT_MS: u64 = 1_000;

/// What decides: a component with its config, or the route of a gateway config.
pub enum Decides {
    /// `--policy P [--config C] [--settings S]`.
    Policy {
        /// The component.
        path: PathBuf,
        /// Its config (inline JSON or a file).
        config: Option<String>,
        /// Guardrails and fallback.
        settings: TopicSettings,
    },
    /// `-c verdict.toml`: the route the scenario's topic (or `topic`) takes.
    Route {
        /// The gateway config.
        gateway: PathBuf,
        /// The topic to route (the scenario's when absent).
        topic: Option<String>,
    },
}

/// Everything `verdict simulate` was asked.
pub struct SimulateArgs {
    /// What decides.
    pub decides: Decides,
    /// The scenario file.
    pub scenario: PathBuf,
    /// A second config for the same policy (or, with `compare_policy`, for another).
    pub compare: Option<String>,
    /// A second component to compare.
    pub compare_policy: Option<PathBuf>,
    /// Other guardrails and fallback for the second run (a retry budget against none).
    pub compare_settings: Option<TopicSettings>,
    /// Overrides the scenario's seed.
    pub seed: Option<u64>,
    /// Conditions that fail the run (exit 1).
    pub fail_if: Vec<String>,
    /// Print JSON instead of tables.
    pub json: bool,
    /// Rows of the timeline table.
    pub rows: usize,
    /// Write the HTML report (figures and plots) here.
    pub html: Option<PathBuf>,
}

/// What `verdict simulate` prints, and whether a `--fail-if` condition held.
pub struct Simulated {
    /// The output.
    pub text: String,
    /// How long it took and the ratio to virtual time, for stderr.
    pub timing: String,
    /// The conditions that held (the run fails when any did).
    pub failed: Vec<String>,
}

/// Run `verdict simulate`.
pub fn run(args: &SimulateArgs) -> Result<Simulated> {
    let conditions = args
        .fail_if
        .iter()
        .map(|c| Condition::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    let mut scenario = Scenario::load(&args.scenario)?;
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    let started = Instant::now();
    let first = match &args.decides {
        Decides::Policy {
            path,
            config,
            settings,
        } => {
            let decider = decider(path, config.as_deref(), settings.clone())?;
            let label = label(path, config.as_deref(), settings);
            run_one(&scenario, &label, &decider)
        }
        Decides::Route { gateway, topic } => {
            if args.compare.is_some()
                || args.compare_policy.is_some()
                || args.compare_settings.is_some()
            {
                bail!(
                    "--compare takes a policy's config: use `--policy P --config C1 --compare \
                     C2`, not a gateway config"
                );
            }
            let registry = super::open_registry(gateway)?;
            let topic = topic.clone().unwrap_or_else(|| scenario.topic.clone());
            scenario.topic = topic.clone();
            let generation = registry.current();
            let route = generation.route(&topic).with_context(|| {
                format!(
                    "{}: no route takes topic `{topic}` (add a `>` route as the default)",
                    gateway.display()
                )
            })?;
            let label = format!(
                "{} route `{}` ({})",
                gateway.display(),
                route.topic,
                route.policy
            );
            run_one(&scenario, &label, &route.decider)
        }
    };
    let second = match &args.decides {
        Decides::Policy {
            path,
            config,
            settings,
        } if args.compare.is_some()
            || args.compare_policy.is_some()
            || args.compare_settings.is_some() =>
        {
            // What is not given again stays as in the first run; another component starts
            // from its own defaults.
            let config = match (&args.compare, &args.compare_policy) {
                (Some(c), _) => Some(c.as_str()),
                (None, Some(_)) => None,
                (None, None) => config.as_deref(),
            };
            let path = args.compare_policy.as_deref().unwrap_or(path);
            let settings = args.compare_settings.as_ref().unwrap_or(settings);
            let decider = decider(path, config, settings.clone())?;
            let label = label(path, config, settings);
            Some(run_one(&scenario, &label, &decider))
        }
        _ => None,
    };
    let elapsed = started.elapsed().as_secs_f64();
    let simulated = first.simulated_s + second.as_ref().map_or(0.0, |r| r.simulated_s);
    let timing = format!(
        "simulated {simulated:.0} s in {elapsed:.2} s ({:.0}x real time)",
        simulated / elapsed.max(1e-6)
    );
    let failed: Vec<String> = conditions
        .iter()
        .map(|c| c.check(&first))
        .filter(|(held, _)| *held)
        .map(|(_, text)| text)
        .collect();
    if let Some(path) = &args.html {
        let reports: Vec<&Report> = std::iter::once(&first).chain(second.as_ref()).collect();
        std::fs::write(path, verdict_simulate::html(&reports))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let text = match (&second, args.json) {
        (None, true) => serde_json::to_string_pretty(&first)? + "\n",
        (Some(b), true) => {
            serde_json::to_string_pretty(&serde_json::json!({"a": first, "b": b}))? + "\n"
        }
        (None, false) => first.to_table(args.rows),
        (Some(b), false) => Report::compare(&first, b),
    };
    Ok(Simulated {
        text,
        timing,
        failed,
    })
}

fn run_one(scenario: &Scenario, label: &str, decider: &Decider) -> Report {
    let mut report = simulate(scenario, &decider.settings().guardrails, &|f| {
        decider.decide(f)
    });
    report.policy = label.to_string();
    report
}

fn decider(path: &Path, config: Option<&str>, settings: TopicSettings) -> Result<Decider> {
    let config = match config {
        Some(arg) => super::json_arg(arg, "--config")?,
        None => "{}".to_string(),
    };
    // Offline, a decision has time: the gateway's 10 ms deadline would turn a busy
    // machine's slow call into a fault and the fallback, and the same inputs into another
    // report. Fuel and memory stay bounded as in the gateway.
    let mut limits = Limits::new();
    limits.decide_timeout_ms(SIMULATION_DECIDE_TIMEOUT_MS);
    let host = Host::new(&limits)?;
    let policy = host
        .load_file(path)
        .with_context(|| format!("loading {}", path.display()))?;
    Ok(policy.configure(&config, settings)?)
}

/// `rules.component.wasm {"max_attempts": 3}, retry budget 20%`, short.
fn label(path: &Path, config: Option<&str>, settings: &TopicSettings) -> String {
    let mut label = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    if let Some(c) = config {
        label = format!("{label} {}", verdict_runtime::text::one_line(c.trim(), 60));
    }
    if let Some(b) = &settings.guardrails.retry_budget {
        label = format!("{label}, retry budget {}%", b.percent);
    }
    label
}
