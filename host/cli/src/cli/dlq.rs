//! `verdict dlq ...`: the dead-letter queues of a gateway, read and changed where they live -
//! its store (the SQLite file next to the config) or, with `--source nats|rabbitmq`, the
//! broker its config names - so the commands work whether or not `verdict run` is running.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use verdict_gateway::dlq::{DeadLetters, ReplayOptions, ReplayReport};
use verdict_gateway::sources::nats::NatsDeadLetters;
use verdict_gateway::sources::rabbitmq::RabbitDeadLetters;
use verdict_gateway::store::{DlqFilter, Store};
use verdict_registry::SourceKind;
use verdict_registry::{GatewayConfig, Registry};

/// `--source`: where the DLQs live - `embedded` (the gateway's store), `nats` (the
/// `[nats]` DLQ stream) or `rabbitmq` (the DLQ queues of the RabbitMQ routes).
pub fn parse_source(arg: &str) -> Result<SourceKind, String> {
    serde_json::from_value(serde_json::Value::String(arg.to_string()))
        .map_err(|_| format!("`{arg}`: expected embedded, nats, rabbitmq or kafka"))
}

/// The DLQs of `source` for the gateway configured by `config_path`.
pub fn open(
    config_path: &Path,
    source: SourceKind,
) -> Result<(GatewayConfig, Box<dyn DeadLetters>)> {
    Ok(match source {
        SourceKind::Embedded => {
            let (config, store) = open_store(config_path)?;
            (config, Box::new(store))
        }
        SourceKind::Nats => {
            let config = GatewayConfig::load(config_path)?;
            let dlqs = NatsDeadLetters::connect(&config)?;
            (config, Box::new(dlqs))
        }
        SourceKind::Rabbitmq => {
            let config = GatewayConfig::load(config_path)?;
            let dlqs = RabbitDeadLetters::connect(&config)?;
            (config, Box::new(dlqs))
        }
        SourceKind::Kafka => {
            let config = GatewayConfig::load(config_path)?;
            let dlqs = verdict_gateway::sources::kafka_dead_letters(&config)?;
            (config, dlqs)
        }
    })
}

/// The config and store of the gateway configured by `config_path`.
pub fn open_store(config_path: &Path) -> Result<(GatewayConfig, Store)> {
    let config = GatewayConfig::load(config_path)?;
    let base = config_path.parent().unwrap_or(Path::new("."));
    if config.gateway.store.is_none() {
        let path = store_path(config_path, &config);
        if !path.is_file() {
            bail!(
                "no store at {} (has `verdict run -c {}` run yet?)",
                path.display(),
                config_path.display()
            );
        }
    }
    let store = verdict_gateway::open_store(&config, base)?;
    Ok((config, store))
}

fn store_path(config_path: &Path, config: &GatewayConfig) -> PathBuf {
    config_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(&config.storage.dir)
        .join(&config.gateway.database)
}

/// `verdict dlq list`: one page of dead letters, one line each (or a JSON array), at most
/// `filter.limit` (1,000 when absent) and `max_bytes` of them as JSON; the page ends with the
/// flag that lists the next one (on stderr with `--json`, so stdout stays one array).
pub fn list(
    config_path: &Path,
    source: SourceKind,
    filter: &DlqFilter,
    max_bytes: usize,
    as_json: bool,
) -> Result<String> {
    let (_, dlqs) = open(config_path, source)?;
    let mut filter = filter.clone();
    filter.limit = Some(filter.limit.unwrap_or(verdict_gateway::dlq::PAGE_SIZE));
    let page = verdict_gateway::dlq::page_within(
        dlqs.as_ref(),
        &filter,
        verdict_gateway::pipeline::now_ms(),
        max_bytes.max(1),
    )?;
    let more = page
        .next
        .as_ref()
        .map(|next| format!("more: list again with --after {next}\n"));
    if as_json {
        if let Some(more) = &more {
            eprint!("{more}");
        }
        return Ok(serde_json::to_string_pretty(&page.entries)? + "\n");
    }
    let mut out = format!(
        "{:>6}  {:<24} {:<16} {:<18} {:<10} {:<24} {:>8}  {}\n",
        "SEQ", "DEAD-LETTERED", "TOPIC", "DLQ", "CLASS", "KIND", "ATTEMPTS", "MESSAGE ID"
    );
    for e in &page.entries {
        writeln!(
            out,
            "{:>6}  {:<24} {:<16} {:<18} {:<10} {:<24} {:>8}  {}",
            e.seq,
            verdict_gateway::envelope::rfc3339(e.created_at_ms),
            e.topic,
            e.dlq,
            e.class,
            e.kind,
            e.attempts,
            e.message_id
        )?;
    }
    writeln!(out, "{} dead letter(s)", page.entries.len())?;
    out.push_str(more.as_deref().unwrap_or_default());
    Ok(out)
}

/// `verdict dlq show SEQ`: the whole envelope.
pub fn show(config_path: &Path, source: SourceKind, seq: i64) -> Result<String> {
    let entry = if source == SourceKind::Embedded {
        open_store(config_path)?.1.dlq_entry(seq)?
    } else {
        let (_, dlqs) = open(config_path, source)?;
        let filter = DlqFilter {
            seq: Some(seq),
            limit: Some(1),
            ..DlqFilter::default()
        };
        dlqs.list(&filter, verdict_gateway::pipeline::now_ms())?
            .into_iter()
            .next()
    };
    let entry = entry.with_context(|| format!("no dead letter {seq} (see `verdict dlq list`)"))?;
    Ok(serde_json::to_string_pretty(&entry)? + "\n")
}

/// `verdict dlq stats`: depth and oldest entry per DLQ.
pub fn stats(config_path: &Path, source: SourceKind, as_json: bool) -> Result<String> {
    let (_, dlqs) = open(config_path, source)?;
    let mut stats = dlqs.stats()?;
    stats.retain(|s| s.depth > 0);
    if as_json {
        return Ok(serde_json::to_string_pretty(&stats)? + "\n");
    }
    let now = verdict_gateway::pipeline::now_ms();
    let mut out = format!(
        "{:<24} {:<20} {:>8}  {}\n",
        "DLQ", "TOPIC", "DEPTH", "OLDEST"
    );
    for s in stats.iter().filter(|s| s.depth > 0) {
        writeln!(
            out,
            "{:<24} {:<20} {:>8}  {} ago",
            s.dlq,
            s.topic,
            s.depth,
            humantime::format_duration(std::time::Duration::from_secs(
                now.saturating_sub(s.oldest_at_ms) / 1_000
            ))
        )?;
    }
    Ok(out)
}

/// `verdict dlq replay`: put dead letters back for delivery (or, with `dry_run`, show what
/// the current policy would decide). `progress(done, total)` reports as it goes.
pub fn replay(
    config_path: &Path,
    source: SourceKind,
    filter: &DlqFilter,
    options: &ReplayOptions,
    progress: impl FnMut(usize, usize),
) -> Result<ReplayReport> {
    let (config, dlqs) = open(config_path, source)?;
    let filter = &verdict_gateway::dlq::leaving_parked_out(
        filter.clone(),
        config.gateway.park_after_repeats,
    );
    let registry = if options.dry_run {
        let base = config_path.parent().unwrap_or(Path::new("."));
        Some(Registry::new(&config, base)?)
    } else {
        None
    };
    // A replay starts a trace per message, as the gateway's own replays do, when the config
    // (or the OTEL_* variables) export traces; the spans leave before the command ends.
    let traced =
        !options.dry_run && verdict_gateway::telemetry::settings(&config.telemetry)?.is_some();
    let runtime = match traced {
        true => Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?,
        ),
        false => None,
    };
    let telemetry = match &runtime {
        Some(runtime) => {
            verdict_gateway::telemetry::start(&config.telemetry, runtime.handle().clone())?
        }
        None => None,
    };
    let mut options = options.clone();
    if let Some(telemetry) = &telemetry {
        options.trace = verdict_gateway::telemetry::ReplayTrace::new(telemetry.tracing());
    }
    let report =
        verdict_gateway::dlq::replay(dlqs.as_ref(), registry.as_ref(), filter, &options, progress);
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    Ok(report?)
}

/// `verdict dlq groups`: the dead letters grouped by cause, largest group first - of
/// `source`, or with `all_sources` of the store and every broker a route uses, folded
/// together.
pub fn groups(
    config_path: &Path,
    source: SourceKind,
    all_sources: bool,
    filter: &DlqFilter,
    as_json: bool,
) -> Result<String> {
    let config = GatewayConfig::load(config_path)?;
    let mut kinds = vec![source];
    if all_sources {
        kinds = vec![SourceKind::Embedded];
        for route in &config.routes {
            if !kinds.contains(&route.source) {
                kinds.push(route.source);
            }
        }
    }
    let mut all = verdict_gateway::dlq::Grouping::default();
    for kind in kinds {
        let (_, dlqs) =
            open(config_path, kind).with_context(|| format!("the {} DLQs", kind.name()))?;
        for group in verdict_gateway::dlq::groups(
            &[(kind.name(), dlqs.as_ref())],
            filter,
            config.gateway.park_after_repeats,
            verdict_gateway::pipeline::now_ms(),
        )? {
            all.absorb(group);
        }
    }
    let groups = all.into_groups();
    if as_json {
        return Ok(serde_json::to_string_pretty(&groups)? + "\n");
    }
    let mut out = format!(
        "{:<16}  {:>6} {:>6}  {:<16} {:<10} {:<24} {:<24}  {}\n",
        "GROUP", "COUNT", "PARKED", "TOPIC", "CLASS", "KIND", "LAST SEEN", "REASON"
    );
    for g in &groups {
        writeln!(
            out,
            "{:<16}  {:>6} {:>6}  {:<16} {:<10} {:<24} {:<24}  {}",
            g.id,
            g.count,
            g.parked,
            g.fingerprint.topic,
            g.fingerprint.class,
            g.fingerprint.kind,
            verdict_gateway::envelope::rfc3339(g.last_seen_ms),
            g.fingerprint.reason,
        )?;
    }
    if groups.is_empty() {
        out.push_str("(no dead letters)\n");
    }
    Ok(out)
}

/// `verdict dlq discard --reason R`: discard for good (audited).
pub fn discard(
    config_path: &Path,
    source: SourceKind,
    filter: &DlqFilter,
    reason: &str,
) -> Result<u64> {
    if reason.trim().is_empty() {
        bail!("--reason: say why these dead letters are discarded (it goes into the audit log)");
    }
    let (_, dlqs) = open(config_path, source)?;
    let entries = dlqs.list(filter, verdict_gateway::pipeline::now_ms())?;
    Ok(dlqs.discard(&entries, reason)?)
}

/// `verdict dlq export`: one envelope per line (JSONL) to `out`; returns how many.
pub fn export(
    config_path: &Path,
    source: SourceKind,
    filter: &DlqFilter,
    out: &mut dyn Write,
) -> Result<usize> {
    let (_, dlqs) = open(config_path, source)?;
    let entries = dlqs.list(filter, verdict_gateway::pipeline::now_ms())?;
    for e in &entries {
        serde_json::to_writer(&mut *out, &e.envelope)?;
        out.write_all(b"\n")?;
    }
    Ok(entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_takes_the_config_spelling_and_names_what_it_expected() {
        assert_eq!(parse_source("embedded"), Ok(SourceKind::Embedded));
        assert_eq!(parse_source("nats"), Ok(SourceKind::Nats));
        assert_eq!(parse_source("rabbitmq"), Ok(SourceKind::Rabbitmq));
        assert_eq!(parse_source("kafka"), Ok(SourceKind::Kafka));
        for bad in ["sqs", "NATS", "", "nats\r\nx"] {
            let e = parse_source(bad).unwrap_err();
            assert!(
                e.contains("expected embedded, nats, rabbitmq or kafka"),
                "{bad:?}: {e}"
            );
        }
    }
}
