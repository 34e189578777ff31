//! An operator's hand on RabbitMQ while a run delivers: the delay exchange the route's
//! retries are published to deleted, or (`--refuse-writes`) every retry the gateway writes
//! refused for a moment by a `reject-publish` length limit of 0 on the delay buckets. The gateway must neither
//! lose a message nor call its consumer in a hot loop: a closed channel rebuilds the session
//! (declaring the exchange again), a refused write gives the message back at the bounded
//! rate.
//!
//! The DLQ is left alone: a length limit below a classic queue's depth makes the broker drop
//! what it holds (even with `reject-publish`), so refusing dead letters that way would
//! destroy earlier ones - the broker's doing, which no gateway can undo. The quorum buckets
//! keep what they hold and only refuse new copies. (`tests/under_change.rs` refuses DLQ
//! writes too, with nothing in the DLQ yet.)

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use verdict_gateway::sources::delay_buckets::bucket_ms;

use crate::rng::Rng;
use crate::sources::Source;

/// What the operator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Deleted the delay exchange of the route's current retry delay.
    DeleteExchange,
    /// Refused every write to the delay buckets for this long.
    RefuseWrites(Duration),
}

/// Do one of the acts, drawn from `rng` (the exchange deleted, or - with `refuse_writes` -
/// as often writes refused); `delay_ms` is the route's retry delay now.
pub fn strike(
    runtime: &tokio::runtime::Runtime,
    source: &Source,
    delay_ms: u64,
    refuse_writes: bool,
    rng: &mut Rng,
) -> Result<Act> {
    let p = source.prefix();
    if !refuse_writes || rng.percent(50) {
        // The bucket the retries wait in: classic (`[rabbitmq] delay_queues`' default), or
        // quorum in a run that refuses writes (a length limit drops what a classic queue
        // holds).
        let kind = if refuse_writes {
            "delay.qq"
        } else {
            "delay.wait"
        };
        let exchange = format!("{p}.{kind}.{}", bucket_ms(delay_ms));
        runtime.block_on(source.delete_exchange(&exchange))?;
        return Ok(Act::DeleteExchange);
    }
    let hold = Duration::from_millis(500 + rng.below(2_000));
    let policy = format!("{p}-refuse");
    let pattern = format!(r"^{}\.delay\..*$", regex_escape(p));
    rabbitmqctl(&[
        "set_policy",
        "--apply-to",
        "queues",
        &policy,
        &pattern,
        r#"{"max-length": 0, "overflow": "reject-publish"}"#,
    ])?;
    std::thread::sleep(hold);
    rabbitmqctl(&["clear_policy", &policy])?;
    Ok(Act::RefuseWrites(hold))
}

/// `prefix` as a regular expression matching itself (run prefixes are letters and digits,
/// but a pattern that matched other queues would refuse their writes too).
fn regex_escape(prefix: &str) -> String {
    prefix
        .chars()
        .flat_map(|c| {
            let escape = !c.is_ascii_alphanumeric();
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

fn rabbitmqctl(args: &[&str]) -> Result<()> {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .with_context(|| format!("rabbitmqctl {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "rabbitmqctl {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_matches_only_itself() {
        assert_eq!(regex_escape("tt12s3"), "tt12s3");
        assert_eq!(regex_escape("a.b-c"), r"a\.b\-c");
    }
}
