//! `verdict policy ...`: the operator's commands against a running gateway, as clients of
//! its admin API. Each returns the text to print: a table for people, or the API's JSON
//! with `--json`.

use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::client::AdminClient;
use verdict_gateway::admin::{GenerationView, PolicyView, RouteView};
use verdict_registry::ShadowReport;

/// One `verdict policy` command: the command line's own form (clap parses it as is).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum PolicyCommand {
    /// Policies: component, version, sha256, decisions, faults, uploads.
    List,
    /// Routes: policy, component, decisions, faults, shadow.
    Routes,
    /// The active generation (*) and those kept for rollback.
    History,
    /// Return to the previous generation, for one route or for all.
    Rollback {
        /// Roll back only this route (its topic pattern). It lasts until the next change of
        /// any route or a restart (both rebuild it from the config file).
        #[arg(long)]
        topic: Option<String>,
    },
    /// How often each route's shadow policy disagreed with the active one.
    ShadowReport,
    /// Turn a route's shadow policy on, or off with --off.
    Shadow {
        /// The route (its topic pattern).
        #[arg(long)]
        topic: String,
        /// The shadow policy (a name in the config's `[policies]`).
        #[arg(long, required_unless_present = "off")]
        policy: Option<String>,
        /// The shadow's config: inline JSON or a file.
        #[arg(long)]
        config: Option<String>,
        /// Turn the shadow off.
        #[arg(long, conflicts_with_all = ["policy", "config"])]
        off: bool,
    },
    /// Stage a component for a policy (checked on arrival); --activate puts it live.
    Upload {
        /// The policy (a name in the config's `[policies]`).
        name: String,
        /// The component file.
        file: std::path::PathBuf,
        /// Activate it once staged (the admission gate runs first).
        #[arg(long)]
        activate: bool,
    },
    /// Activate a staged component by its sha256 (the admission gate runs first).
    Activate {
        /// The policy.
        name: String,
        /// The component's sha256.
        sha256: String,
    },
    /// Make the gateway re-read its config file now.
    Reload,
    /// Generation, changes applied and refused, artifact cache.
    Status,
}

/// Run `command` against the API `client` talks to.
pub fn policy(client: &AdminClient, command: &PolicyCommand, as_json: bool) -> Result<String> {
    let out = |value: Value, human: fn(&Value) -> Result<String>| -> Result<String> {
        if as_json {
            Ok(serde_json::to_string_pretty(&value)? + "\n")
        } else {
            human(&value)
        }
    };
    match command {
        PolicyCommand::List => out(client.get("/v1/policies")?, list_table),
        PolicyCommand::Routes => out(client.get("/v1/routes")?, routes_table),
        PolicyCommand::History => out(client.get("/v1/generations")?, history_table),
        PolicyCommand::ShadowReport => out(client.get("/v1/shadow")?, shadow_table),
        PolicyCommand::Status => out(client.get("/v1/status")?, pretty),
        PolicyCommand::Rollback { topic } => {
            let body = match topic {
                Some(t) => json!({ "topic": t }),
                None => json!({}),
            };
            out(client.post("/v1/rollback", &body)?, generation_line)
        }
        PolicyCommand::Shadow {
            topic,
            policy,
            config,
            off,
        } => {
            let config = config
                .as_deref()
                .map(|c| crate::cli::json_value_arg(c, "--config"))
                .transpose()?;
            // No policy turns the shadow off; clap has made sure --off came alone.
            let policy = if *off { None } else { policy.clone() };
            let body = json!({ "topic": topic, "policy": policy, "config": config });
            out(client.post("/v1/shadow", &body)?, generation_line)
        }
        PolicyCommand::Reload => out(client.post("/v1/reload", &json!({}))?, generation_line),
        PolicyCommand::Activate { name, sha256 } => out(
            client.post(
                &format!("/v1/policies/{name}/activate"),
                &json!({ "sha256": sha256 }),
            )?,
            generation_line,
        ),
        PolicyCommand::Upload {
            name,
            file,
            activate,
        } => upload(client, name, file, *activate, as_json),
    }
}

fn upload(
    client: &AdminClient,
    name: &str,
    file: &Path,
    activate: bool,
    as_json: bool,
) -> Result<String> {
    let bytes = std::fs::read(file).with_context(|| file.display().to_string())?;
    let staged: Value = client.put_bytes(&format!("/v1/policies/{name}/component"), &bytes)?;
    let sha256 = staged["provenance"]["sha256"].as_str().unwrap_or_default();
    let mut text = format!(
        "staged {name}: {}@{} sha256 {sha256}\n",
        staged["provenance"]["name"].as_str().unwrap_or_default(),
        staged["provenance"]["version"].as_str().unwrap_or_default(),
    );
    let mut result = json!({ "staged": staged });
    if activate {
        let activated: Value = client.post(
            &format!("/v1/policies/{name}/activate"),
            &json!({ "sha256": sha256 }),
        )?;
        text += &generation_line(&activated)?;
        result["activated"] = activated;
    }
    if as_json {
        return Ok(serde_json::to_string_pretty(&result)? + "\n");
    }
    Ok(text)
}

fn pretty(value: &Value) -> Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

fn generation_line(value: &Value) -> Result<String> {
    let mut line = format!("generation {} is active\n", value["generation"]);
    if let Some(note) = value["note"].as_str() {
        line += &format!("note: {note}\n");
    }
    Ok(line)
}

fn short(sha: &str) -> &str {
    &sha[..12.min(sha.len())]
}

fn list_table(value: &Value) -> Result<String> {
    let policies: Vec<PolicyView> = serde_json::from_value(value.clone())?;
    let mut s = format!(
        "{:<14} {:<22} {:<13} {:>10} {:>7} {:>8}  routes\n",
        "POLICY", "COMPONENT", "SHA256", "DECISIONS", "FAULTS", "UPLOADS"
    );
    for p in policies {
        let (component, sha) = match &p.component {
            Some(c) => (
                format!("{}@{}", c.name, c.version),
                short(&c.sha256).to_string(),
            ),
            None => ("(unused)".into(), String::new()),
        };
        writeln!(
            s,
            "{:<14} {:<22} {:<13} {:>10} {:>7} {:>8}  {}",
            p.name,
            component,
            sha,
            p.stats.decisions,
            p.stats.faults,
            p.uploads.len(),
            p.routes.join(", ")
        )?;
    }
    Ok(s)
}

fn routes_table(value: &Value) -> Result<String> {
    let routes: Vec<RouteView> = serde_json::from_value(value.clone())?;
    let mut s = format!(
        "{:<20} {:<14} {:<22} {:>10} {:>7}  {:<8} shadow\n",
        "TOPIC", "POLICY", "COMPONENT", "DECISIONS", "FAULTS", "STATE"
    );
    for r in routes {
        let shadow = r.shadow.map_or_else(String::new, |sh| {
            format!(
                "{} ({} of {} disagree)",
                sh.shadow, sh.disagreements, sh.compared
            )
        });
        // A route its policy paused delivers nothing until the pause ends, then one probe;
        // one at its `max_parked_keys` ("full") takes only retries.
        let state = match r.paused {
            None if r.parked_keys.is_some_and(|p| p.full) => "full",
            None => "open",
            Some(p) if p.probing => "probing",
            Some(_) => "paused",
        };
        writeln!(
            s,
            "{:<20} {:<14} {:<22} {:>10} {:>7}  {state:<8} {shadow}",
            r.topic,
            r.policy,
            format!("{}@{}", r.component.name, r.component.version),
            r.stats.decisions,
            r.stats.faults,
        )?;
    }
    Ok(s)
}

fn history_table(value: &Value) -> Result<String> {
    let generations: Vec<GenerationView> = serde_json::from_value(value.clone())?;
    let mut s = String::new();
    for g in generations.iter().rev() {
        let mark = if g.active { "*" } else { " " };
        writeln!(s, "{mark} {:>4}  {}", g.number, g.cause)?;
        for (topic, policy) in &g.routes {
            writeln!(s, "        {topic:<20} {policy}")?;
        }
    }
    Ok(s)
}

fn shadow_table(value: &Value) -> Result<String> {
    let reports: Vec<ShadowReport> = serde_json::from_value(value.clone())?;
    if reports.is_empty() {
        return Ok("no route has a shadow policy\n".into());
    }
    let mut s = format!(
        "{:<20} {:<14} {:<14} {:>9} {:>13}  by class\n",
        "TOPIC", "ACTIVE", "SHADOW", "COMPARED", "DISAGREEMENTS"
    );
    for r in reports {
        let by_class: Vec<String> = r.by_class.iter().map(|(c, n)| format!("{c}={n}")).collect();
        writeln!(
            s,
            "{:<20} {:<14} {:<14} {:>9} {:>13}  {}",
            r.topic,
            r.active,
            r.shadow,
            r.compared,
            r.disagreements,
            by_class.join(" ")
        )?;
    }
    Ok(s)
}
