//! The `verdict` commands as library functions; the binary only parses arguments and prints.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use verdict_runtime::{Decision, FailureSpec, Host, Limits, SUPPORTED_CONTRACT, TopicSettings};

pub mod admin_token;
pub mod demo;
pub mod dlq;
pub mod jobs;
mod new;
mod policy;
mod signal;
pub mod simulate;
pub mod store;
mod watch;

pub use jobs::{JobsCommand, jobs};
pub use new::{Language, Scaffold, SdkSource, new_policy};
pub use policy::{PolicyCommand, policy};
pub use signal::shutdown_signal;
pub use watch::watch_test;

/// `verdict build`: build each policy project (a Rust crate, a Python or a JavaScript
/// project) into a component; returns the component paths.
pub fn build(dirs: &[PathBuf], target_dir: Option<&Path>) -> Result<Vec<PathBuf>> {
    let options = verdict_componentize::BuildOptions {
        target_dir: target_dir.map(Path::to_path_buf),
        ..Default::default()
    };
    dirs.iter()
        .map(|dir| Ok(verdict_componentize::build(dir, &options)?.component))
        .collect()
}

/// `verdict bench --policy`: a component as it is, or a policy crate directory built (in
/// release, into the crate's own target dir) to one.
pub fn bench_policy(path: &Path) -> Result<PathBuf> {
    if path.is_dir() {
        let built = verdict_componentize::build(path, &Default::default())
            .with_context(|| format!("--policy {}: building the policy", path.display()))?;
        Ok(built.component)
    } else if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        bail!(
            "--policy {}: neither a component file nor a policy crate directory",
            path.display()
        )
    }
}

/// What `verdict inspect` prints.
#[derive(Debug, Serialize)]
pub struct Inspection {
    /// The policy's name.
    pub name: String,
    /// The policy's version.
    pub version: String,
    /// What it does.
    pub description: String,
    /// SHA-256 of the component.
    pub sha256: String,
    /// The contract the component speaks, e.g. `verdict:policy@0.2`.
    pub contract: String,
    /// The contract versions this host loads.
    pub host_contracts: &'static str,
    /// The component's imports.
    pub imports: Vec<String>,
    /// The WASI interfaces among the imports, each with what its deterministic stub grants
    /// (empty for a Rust policy, which imports no WASI).
    pub wasi: Vec<WasiStub>,
    /// The component's exports.
    pub exports: Vec<String>,
}

/// A WASI import and the deterministic stub the host links for it.
#[derive(Debug, Serialize)]
pub struct WasiStub {
    /// The import as the component names it, with its version.
    pub import: String,
    /// Always `deterministic stub`: the host links no real WASI for policies.
    pub linked_as: &'static str,
    /// What a call gets.
    pub grants: &'static str,
}

/// `verdict inspect`: load (and so check) a component and describe it.
pub fn inspect(path: &Path) -> Result<Inspection> {
    let host = Host::new(&Limits::new())?;
    let policy = host.load_file(path)?;
    let p = policy.provenance();
    Ok(Inspection {
        name: p.name.clone(),
        version: p.version.clone(),
        description: policy.description().to_string(),
        sha256: p.sha256.clone(),
        contract: policy.contract().to_string(),
        host_contracts: SUPPORTED_CONTRACT,
        imports: policy.imports().to_vec(),
        wasi: policy
            .imports()
            .iter()
            .filter_map(|import| {
                verdict_runtime::describe_wasi(import).map(|stub| WasiStub {
                    import: import.clone(),
                    linked_as: "deterministic stub",
                    grants: stub.grants,
                })
            })
            .collect(),
        exports: policy.exports().to_vec(),
    })
}

/// `verdict decide`: one decision from a policy, a config and a failure.
pub fn decide(
    policy: &Path,
    config: Option<&str>,
    failure: &str,
    settings: TopicSettings,
) -> Result<Decision> {
    let config = match config {
        Some(arg) => json_arg(arg, "--config")?,
        None => "{}".to_string(),
    };
    let spec = read_failure(failure)?;
    let host = Host::new(&Limits::new())?;
    let decider = host.load_file(policy)?.configure(&config, settings)?;
    Ok(decider.decide(&spec.into_failure()))
}

/// A JSON argument given inline (starts with `{`) or as a file path.
fn json_arg(arg: &str, flag: &str) -> Result<String> {
    let text = if arg.trim_start().starts_with('{') {
        arg.to_string()
    } else if Path::new(arg).is_file() {
        std::fs::read_to_string(arg).with_context(|| format!("{flag} {arg}"))?
    } else {
        bail!("{flag}: `{arg}` is neither inline JSON (starting with '{{') nor a readable file");
    };
    serde_json::from_str::<serde_json::Value>(&text)
        .with_context(|| format!("{flag}: not valid JSON"))?;
    Ok(text)
}

/// A JSON value given inline (starts with `{`) or as a file path (`--config` of
/// `verdict policy shadow`).
pub fn json_value_arg(arg: &str, flag: &str) -> Result<serde_json::Value> {
    Ok(serde_json::from_str(&json_arg(arg, flag)?)?)
}

/// Guardrails and fallback given inline (starts with `{`) or as a file path (`--settings`
/// of `verdict simulate`); a bad field is named with its path, as in `verdict.toml`.
pub fn settings_arg(arg: &str, flag: &str) -> Result<TopicSettings> {
    let text = json_arg(arg, flag)?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de)
        .map_err(|e| anyhow::anyhow!("{flag}: {}: {}", e.path(), e.inner()))
}

/// Output formats of `verdict test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per case, expected against got for failures.
    Human,
    /// The stable JSON report (`format: 1`).
    Json,
    /// JUnit XML for CI systems.
    Junit,
}

/// What `verdict test` was asked to do.
#[derive(Debug, Clone)]
pub struct TestRequest<'a> {
    /// The component.
    pub policy: &'a Path,
    /// Vector files.
    pub vectors: &'a [PathBuf],
    /// Config replacing each suite's default (inline JSON or a file).
    pub config: Option<&'a str>,
    /// Run the property checks too (always run when no vector file is given).
    pub properties: bool,
    /// Fuel budget per decision for the property checks.
    pub fuel: u64,
    /// The policy declares a monotone strategy (checked by the properties).
    pub monotone: bool,
}

/// The input of `verdict test` is invalid (exit code 2), as opposed to a failing case (1).
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct InvalidInput(anyhow::Error);

/// `verdict test`: run vectors (and properties); returns the rendered report and whether
/// everything passed.
pub fn test(
    request: &TestRequest<'_>,
    format: Format,
) -> std::result::Result<(String, bool), InvalidInput> {
    let invalid = |e: anyhow::Error| InvalidInput(e);
    let config = request
        .config
        .map(|c| json_arg(c, "--config"))
        .transpose()
        .map_err(invalid)?;
    let suites = request
        .vectors
        .iter()
        .map(|path| verdict_registry::conformance::Suite::load_with_config(path, config.as_deref()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(e.into()))?;
    let host = Host::new(&verdict_registry::conformance::metered_limits(request.fuel))
        .map_err(|e| invalid(e.into()))?;
    let policy = host
        .load_file(request.policy)
        .map_err(|e| invalid(e.into()))?;
    let settings = TopicSettings::default();
    let results = verdict_registry::conformance::run_suites(&policy, &suites);
    let properties = if request.properties || request.monotone || request.vectors.is_empty() {
        let options = verdict_registry::conformance::PropertyOptions {
            monotone: request.monotone,
            ..Default::default()
        };
        verdict_registry::conformance::check_properties(
            &policy,
            config.as_deref().unwrap_or("{}"),
            &settings,
            &options,
        )
        .map_err(|e| invalid(e.into()))?
    } else {
        Vec::new()
    };
    let report = verdict_registry::conformance::Report::new(
        (**policy.provenance()).clone(),
        results,
        properties,
    );
    let out = match format {
        Format::Human => report.human(),
        Format::Json => {
            serde_json::to_string_pretty(&report).map_err(|e| invalid(e.into()))? + "\n"
        }
        Format::Junit => report.junit(),
    };
    Ok((out, report.failed == 0))
}

/// One route of `verdict check`'s summary.
#[derive(Debug, Serialize)]
pub struct RouteSummary {
    /// The topic pattern.
    pub topic: String,
    /// The policy's name in the config.
    pub policy: String,
    /// What the component says it is.
    pub provenance: verdict_runtime::Provenance,
    /// The contract the component speaks, e.g. `verdict:policy@0.2`.
    pub contract: String,
    /// The config it was initialised with.
    pub config: serde_json::Value,
    /// The worst a message can meet on this route, per way the policy treats the kinds it
    /// was probed with (`http.500, http.503: at most 5 deliveries, dead-lettered
    /// (exhausted) within 31.0 s`), explored over many jitter seeds with the route's
    /// guardrails.
    pub worst_case: Vec<String>,
}

/// What `verdict check` prints: the generation the config would activate.
#[derive(Debug, Serialize)]
pub struct CheckSummary {
    /// Generation number (1 for a fresh registry).
    pub generation: u64,
    /// The routes, in config order.
    pub routes: Vec<RouteSummary>,
    /// What an operator should know before activating the config: routes whose policy was
    /// built for an older contract. None stops the config from loading.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What `verdict run` creates on the brokers when missing (streams, buckets, durable
    /// consumers, queues); nothing is created by the check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub created_when_missing: Vec<String>,
    /// Where traces go (`off` unless `[telemetry]` or the `OTEL_*` variables name a
    /// collector).
    pub traces: String,
    /// With `--probe`: what connecting to each consumer and broker showed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probe: Vec<verdict_gateway::probe::PeerProbe>,
}

fn open_registry(config_path: &Path) -> Result<verdict_registry::Registry> {
    let config = verdict_registry::GatewayConfig::load(config_path)?;
    let base = config_path.parent().unwrap_or(Path::new("."));
    Ok(verdict_registry::Registry::new(&config, base)?)
}

/// `verdict check -c verdict.toml`: validate the config and run the admission gate (load,
/// pins, vectors, every route's `init`) without starting anything.
pub fn check(config_path: &Path) -> Result<CheckSummary> {
    let registry = open_registry(config_path)?;
    let generation = registry.current();
    let routes: Vec<RouteSummary> = generation
        .routes
        .iter()
        .map(|r| RouteSummary {
            topic: r.topic.clone(),
            policy: r.policy.clone(),
            provenance: (**r.decider.policy().provenance()).clone(),
            contract: r.decider.policy().contract().to_string(),
            config: serde_json::from_str(r.decider.config()).unwrap_or(serde_json::Value::Null),
            worst_case: worst_case(r),
        })
        .collect();
    let config = verdict_registry::GatewayConfig::load(config_path)?;
    let traces = match verdict_gateway::telemetry::settings(&config.telemetry)? {
        None => "off".to_string(),
        Some(s) => format!(
            "{} to {} as `{}`, {} sampled{}",
            s.protocol.name(),
            verdict_runtime::text::redact_urls(&s.endpoint),
            s.service_name,
            s.sampling.ratio,
            if s.sampling.parent_based {
                " (a producer's trace context decides for its messages)"
            } else {
                ""
            }
        ),
    };
    let warnings = older_contracts(&routes);
    Ok(CheckSummary {
        generation: generation.number,
        routes,
        warnings,
        traces,
        created_when_missing: broker_objects(&config),
        probe: Vec::new(),
    })
}

/// One warning per route whose policy speaks an older contract than the current one.
fn older_contracts(routes: &[RouteSummary]) -> Vec<String> {
    let current = verdict_runtime::Contract::CURRENT;
    routes
        .iter()
        .filter(|r| r.contract != current.to_string())
        .map(|r| {
            format!(
                "route `{}`: policy `{}` speaks {}, older than {current}; it runs unchanged, one \
                 failure per call where the gateway batches - rebuilt with the current SDK \
                 (`verdict build`), a Rust, Python or JavaScript policy moves to {current}",
                r.topic, r.policy, r.contract
            )
        })
        .collect()
}

/// Connect once to each consumer and broker `config_path` names (`verdict check --probe`).
pub fn probe(config_path: &Path) -> Result<Vec<verdict_gateway::probe::PeerProbe>> {
    let config = verdict_registry::GatewayConfig::load(config_path)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let base = config_path.parent().unwrap_or(Path::new(""));
    Ok(runtime.block_on(verdict_gateway::probe::probe(&config, base)))
}

/// The worst cases of route `r`, and what its retry budget may add to them.
fn worst_case(r: &verdict_registry::ActiveRoute) -> Vec<String> {
    let mut lines: Vec<String> =
        verdict_simulate::worst_cases(&probe_topic(&r.topic), &|f| r.decider.decide(f))
            .iter()
            .map(verdict_simulate::WorstCase::sentence)
            .collect();
    let guardrails = &r.decider.settings().guardrails;
    if let Some(b) = &guardrails.retry_budget {
        lines.push(format!(
            "retry budget {}% of first attempts + {}/s over {} s: while the route is over it, \
             a retry also waits (no attempt spent), up to {} after the message first failed",
            b.percent,
            b.min_per_s,
            b.window_s,
            humantime::format_duration(std::time::Duration::from_millis(
                guardrails.max_deferral_age_ms
            ))
        ));
    }
    lines
}

/// A topic a route of `pattern` takes (`payments.>` -> `payments.probe`).
fn probe_topic(pattern: &str) -> String {
    pattern
        .split('.')
        .map(|part| {
            if part == "*" || part == ">" {
                "probe"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The broker objects the gateway creates when they are missing, as the config names them.
fn broker_objects(config: &verdict_registry::GatewayConfig) -> Vec<String> {
    use verdict_registry::SourceKind;
    let routes = |kind| -> Vec<&str> {
        config
            .routes
            .iter()
            .filter(|r| r.source == kind)
            .map(|r| r.topic.as_str())
            .collect()
    };
    let mut out = Vec::new();
    let nats = routes(SourceKind::Nats);
    if !nats.is_empty() {
        let n = &config.nats;
        let subjects = if n.subjects.is_empty() {
            verdict_gateway::sources::nats::widest_subjects(
                &nats.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        } else {
            n.subjects.clone()
        };
        out.push(format!(
            "nats stream `{}` with subjects {subjects:?}",
            n.stream
        ));
        out.push(format!(
            "nats stream `{}` with subjects [\"{}.>\"]",
            n.dlq_stream, n.dlq_subject_prefix
        ));
        out.push(format!(
            "nats stream `{}` with subjects [\"{}.>\"]",
            n.audit_stream, n.audit_subject_prefix
        ));
        out.push(format!("nats key-value bucket `{}`", n.history_bucket));
        let durable = if n.durable.is_empty() {
            &config.gateway.consumer_group
        } else {
            &n.durable
        };
        for route in nats {
            out.push(format!(
                "nats durable consumer `{}` on `{}` for route `{route}`",
                verdict_gateway::sources::nats::route_durable(durable, route),
                n.stream
            ));
        }
    }
    let rabbit = routes(SourceKind::Rabbitmq);
    if !rabbit.is_empty() {
        for queue in rabbit {
            let dlq = config
                .gateway
                .dlq_naming
                .dlq_for(queue, &config.gateway.global_dlq);
            out.push(format!(
                "rabbitmq queue `{queue}` and its DLQ queue `{dlq}`"
            ));
        }
        out.push(format!("rabbitmq queue `{}`", config.rabbitmq.audit_queue));
        let kind = match config.rabbitmq.delay_queues {
            verdict_registry::DelayQueues::Quorum => "quorum",
            verdict_registry::DelayQueues::Classic => "classic",
        };
        let zero = config.rabbitmq.bucket_name(0);
        let pattern = zero.strip_suffix('0').unwrap_or(&zero);
        out.push(format!(
            "rabbitmq delay exchanges and {kind} queues `{pattern}<ms>`, as delays need them"
        ));
        if config.rabbitmq.delay_queues == verdict_registry::DelayQueues::Classic {
            out.push(format!(
                "rabbitmq queue `{}` (retries due to go back) and, for messages in it no \
                 gateway put there, `{}`",
                config.rabbitmq.due_queue(),
                config.rabbitmq.due_invalid_queue()
            ));
        }
    }
    out
}

/// `verdict route -c verdict.toml --topic T [--failure F]`: which route a topic takes and,
/// with a failure, the decision it would get.
pub fn route(config_path: &Path, topic: &str, failure: Option<&str>) -> Result<serde_json::Value> {
    let registry = open_registry(config_path)?;
    let generation = registry.current();
    let Some(route) = generation.route(topic) else {
        bail!("no route matches topic `{topic}` (add a `>` route as the default)");
    };
    let mut out = serde_json::json!({"topic": topic, "route": route.topic, "policy": route.policy});
    if let Some(failure) = failure {
        let spec = read_failure(failure)?;
        let decision = registry.decide(topic, &spec.into_failure());
        out["decision"] = serde_json::to_value(decision)?;
    }
    Ok(out)
}

fn read_failure(arg: &str) -> Result<FailureSpec> {
    let text = if arg == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("--failure -: reading stdin")?;
        s
    } else {
        std::fs::read_to_string(arg).with_context(|| format!("--failure {arg}"))?
    };
    FailureSpec::from_json(&text).map_err(|e| anyhow::anyhow!("--failure {arg}: {e}"))
}

/// What `verdict publish` sends.
#[derive(Debug)]
pub struct PublishRequest<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The payload (JSON or text; stdin when absent and no batch).
    pub payload: Option<&'a str>,
    /// The message id.
    pub id: Option<&'a str>,
    /// `name=value` headers.
    pub headers: &'a [String],
    /// A JSONL file of messages.
    pub batch: Option<&'a Path>,
}

/// `verdict publish`: one message or a JSONL batch, through the gateway's API.
pub fn publish(
    client: &crate::client::AdminClient,
    request: &PublishRequest<'_>,
) -> Result<String> {
    let body = match request.batch {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
            let messages = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, line)| {
                    serde_json::from_str::<serde_json::Value>(line)
                        .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))
                })
                .collect::<Result<Vec<_>>>()?;
            serde_json::Value::Array(messages)
        }
        None => {
            let text = match request.payload {
                Some(p) => p.to_string(),
                None => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .context("reading the payload from stdin")?;
                    s
                }
            };
            let payload = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
            let mut headers = serde_json::Map::new();
            for h in request.headers {
                let (name, value) = h
                    .split_once('=')
                    .with_context(|| format!("--header {h}: expected NAME=VALUE"))?;
                headers.insert(name.into(), value.into());
            }
            let mut message = serde_json::json!({ "payload": payload, "headers": headers });
            if let Some(id) = request.id {
                message["id"] = id.into();
            }
            message
        }
    };
    let published: verdict_gateway::store::Published =
        client.post(&format!("/v1/topics/{}/messages", request.topic), &body)?;
    Ok(format!(
        "published {} message(s){}\n",
        published.accepted.len(),
        if published.duplicates.is_empty() {
            String::new()
        } else {
            format!(", {} duplicate(s) ignored", published.duplicates.len())
        }
    ))
}
