//! `verdict jobs ...`: the DLQ jobs of a running gateway (a client of its admin API) -
//! start one on a group of dead letters, follow it, list them, cancel one.

use std::fmt::Write;
use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::client::AdminClient;

/// One `verdict jobs` command.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum JobsCommand {
    /// Jobs, newest first: running ones and the last hundred that ended.
    List,
    /// One job: state, progress, canary, dry-run decisions.
    Show {
        /// Its id (`job-<n>`).
        id: String,
    },
    /// Stop a running job at its next step; what it did stays done.
    Cancel {
        /// Its id.
        id: String,
    },
    /// Replay a group of dead letters (from `verdict dlq groups`), parked ones left out,
    /// cut off at the start: letters that arrive meanwhile stay for the next look.
    Replay {
        /// Which group.
        #[command(flatten)]
        group: GroupArgs,
        /// At most this many per second.
        #[arg(long)]
        rate: Option<f64>,
        /// Replay this many first; go on only once they are all delivered.
        #[arg(long)]
        canary: Option<usize>,
        /// Why (for the audit log).
        #[arg(long)]
        note: Option<String>,
    },
    /// Discard a group of dead letters for good (audited).
    Discard {
        /// Which group.
        #[command(flatten)]
        group: GroupArgs,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Ask the current policy what it decides for each dead letter of a group; move nothing.
    DryRun {
        /// Which group.
        #[command(flatten)]
        group: GroupArgs,
    },
}

/// Which group, where, and whether to wait for the job.
#[derive(Debug, Clone, clap::Args)]
pub struct GroupArgs {
    /// The group's id (from `verdict dlq groups` or `GET /v1/dlq/groups`).
    #[arg(long)]
    group: String,
    /// Whose DLQs: the gateway's store (default), `nats` or `rabbitmq`.
    #[arg(long)]
    source: Option<String>,
    /// Return at once instead of following the job to its end.
    #[arg(long)]
    no_wait: bool,
}

/// Run `command` against the API `client` talks to; `progress` sees each view of a job
/// being followed.
pub fn jobs(
    client: &AdminClient,
    command: &JobsCommand,
    as_json: bool,
    mut progress: impl FnMut(&Value),
) -> Result<String> {
    let job = match command {
        JobsCommand::List => {
            let jobs: Vec<Value> = client.get("/v1/jobs")?;
            if as_json {
                return Ok(serde_json::to_string_pretty(&jobs)? + "\n");
            }
            return Ok(table(&jobs));
        }
        JobsCommand::Show { id } => client.get(&format!("/v1/jobs/{}", path_part(id)?))?,
        JobsCommand::Cancel { id } => {
            client.post(&format!("/v1/jobs/{}/cancel", path_part(id)?), &json!({}))?
        }
        JobsCommand::Replay {
            group,
            rate,
            canary,
            note,
        } => start(
            client,
            group,
            "replay",
            json!({"rate_per_s": rate, "canary": canary, "note": note}),
            &mut progress,
        )?,
        JobsCommand::Discard { group, reason } => start(
            client,
            group,
            "discard",
            json!({ "reason": reason }),
            &mut progress,
        )?,
        JobsCommand::DryRun { group } => start(client, group, "dry-run", json!({}), &mut progress)?,
    };
    if as_json {
        return Ok(serde_json::to_string_pretty(&job)? + "\n");
    }
    Ok(table(std::slice::from_ref(&job)))
}

/// An id as one path segment: what the API names jobs and groups with, nothing else.
fn path_part(id: &str) -> Result<&str> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        bail!("`{id}` is not a job or group id (letters, digits and `-`)");
    }
    Ok(id)
}

/// Start a job on a group; unless `--no-wait`, poll it until it ends.
fn start(
    client: &AdminClient,
    group: &GroupArgs,
    action: &str,
    mut body: Value,
    progress: &mut impl FnMut(&Value),
) -> Result<Value> {
    if let Some(source) = &group.source {
        body["source"] = json!(source);
    }
    // Fields left unset are not sent: the API's defaults apply.
    if let Some(map) = body.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    let path = format!("/v1/dlq/groups/{}/{action}", path_part(&group.group)?);
    let mut job: Value = client.post(&path, &body)?;
    if group.no_wait {
        return Ok(job);
    }
    let id = job["id"].as_str().unwrap_or_default().to_string();
    while job["state"] == "running" {
        progress(&job);
        std::thread::sleep(Duration::from_millis(250));
        job = client.get(&format!("/v1/jobs/{id}"))?;
    }
    progress(&job);
    Ok(job)
}

fn table(jobs: &[Value]) -> String {
    let mut out = format!(
        "{:<10} {:<8} {:<10} {:>6} {:>6} {:>5}  {:<16} {}\n",
        "JOB", "ACTION", "STATE", "DONE", "TOTAL", "%", "GROUP", "NOTE"
    );
    for j in jobs {
        let text = |k: &str| j[k].as_str().unwrap_or("-").to_string();
        let mut note = text("note");
        if let Some(error) = j["error"].as_str() {
            note = format!("error: {error}");
        } else if let Some(canary) = j["canary"].as_object() {
            let _ = write!(
                note,
                " (canary {}/{} delivered{})",
                canary.get("delivered").unwrap_or(&json!(0)),
                canary.get("size").unwrap_or(&json!(0)),
                if canary.get("passed") == Some(&json!(true)) {
                    ""
                } else {
                    ": failed, the rest stays"
                }
            );
        } else if let Some(decisions) = j["decisions"].as_object().filter(|d| !d.is_empty()) {
            let parts: Vec<String> = decisions.iter().map(|(k, v)| format!("{k} {v}")).collect();
            note = format!("now: {}", parts.join(", "));
        }
        let _ = writeln!(
            out,
            "{:<10} {:<8} {:<10} {:>6} {:>6} {:>5}  {:<16} {}",
            text("id"),
            text("action"),
            text("state"),
            j["done"].to_string(),
            j["total"].to_string(),
            j["percent"].to_string(),
            j["filter"]["group"].as_str().unwrap_or("-"),
            note.trim(),
        );
    }
    out
}
