//! What a run reads from and asks of the gateway through its admin API: the generation, hot
//! reloads, the DLQ's depth and its letters.

use std::time::{Duration, Instant};
use verdict_gateway::store::DlqEntry;

use anyhow::{Context, Result};
use verdict_cli::client::AdminClient;

use crate::consumer::Consumer;
use crate::letters::Letter;
use crate::progress::Progress;
use crate::sources::SourceName;

/// The active generation.
pub fn generation(admin: &AdminClient) -> Result<u64> {
    let status: serde_json::Value = admin.get("/v1/status").context("reading /v1/status")?;
    Ok(status["generation"].as_u64().unwrap_or(0))
}

/// Edit the configs (`write`) and wait for every gateway to reload its own. `Err` of a
/// string when one did not within 10 s: a hot reload that does not happen is a violation of
/// its own.
pub fn reload(
    admins: &[AdminClient],
    write: impl FnOnce() -> std::io::Result<()>,
) -> Result<std::result::Result<(), String>> {
    let before = admins
        .iter()
        .map(generation)
        .collect::<Result<Vec<u64>>>()?;
    write().context("writing the config")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    for (k, (admin, before)) in admins.iter().zip(before).enumerate() {
        while generation(admin)? <= before {
            if Instant::now() > deadline {
                return Ok(Err(format!(
                    "gateway {k} did not reload a config edit within 10 s (generation \
                     {before} throughout)"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(Ok(()))
}

fn source_query(name: SourceName) -> String {
    match name {
        store if store.is_store() => String::new(),
        other => format!("source={}", other.as_str()),
    }
}

/// Dead letters waiting, over every DLQ the gateway knows: the sum of its
/// `verdict_dlq_depth` gauges. The gateway keeps those from its own records and the
/// brokers' counts (refreshed every second), where `/v1/dlq/stats` would read every letter
/// of a broker's DLQ - a cost that grows with the DLQ, paid once a batch.
pub fn dlq_depth(admin: &AdminClient) -> Result<u64> {
    let text = admin.get_text("/metrics").context("reading /metrics")?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("verdict_dlq_depth{") || l.starts_with("verdict_dlq_depth "))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v.max(0.0) as u64)
        .sum())
}

/// Where the store still holds messages: its rows by state (`ready`, `scheduled`,
/// `leased`), from the gateway's `verdict_messages` gauges (kept by the store itself, a
/// shared store's for every gateway); empty when the gateway cannot be asked.
pub fn store_census(admin: &AdminClient) -> Vec<(String, u64)> {
    store_waiting(admin).unwrap_or_default()
}

/// The store's rows not terminal yet, by state (only states that hold some). An error when
/// the gateway could not read its store for this scrape: it leaves the store's series out
/// rather than failing the scrape, and missing is not zero.
pub fn store_waiting(admin: &AdminClient) -> Result<Vec<(String, u64)>> {
    let text = admin.get_text("/metrics").context("reading /metrics")?;
    if !text
        .lines()
        .any(|l| l.starts_with("verdict_messages{state=\"delivered\"} "))
    {
        anyhow::bail!("/metrics holds no store counts (the store did not answer this scrape)");
    }
    Ok(["ready", "scheduled", "leased"]
        .into_iter()
        .filter_map(|state| {
            let series = format!("verdict_messages{{state=\"{state}\"}} ");
            let n = text
                .lines()
                .find_map(|l| l.strip_prefix(series.as_str()))?
                .trim()
                .parse::<f64>()
                .ok()? as u64;
            (n > 0).then(|| (format!("store rows {state}"), n))
        })
        .collect())
}

/// The DLQ, page by page through the admin API, every payload whole (the judge keys a
/// letter by the message its payload holds; pages stay bounded by bytes).
pub fn dead_letters(admin: &AdminClient, name: SourceName) -> Result<Vec<Letter>> {
    let mut out = Vec::new();
    let source = source_query(name);
    let mut after = String::new();
    loop {
        let path = format!("/v1/dlq?limit=1000&payloads=full&{source}{after}");
        let (page, next): (Vec<DlqEntry>, _) = admin
            .get_page(&path)
            .with_context(|| format!("reading the DLQ ({path})"))?;
        out.extend(page.into_iter().map(|e| Letter {
            created_at_ms: e.created_at_ms,
            envelope: e.envelope,
        }));
        match next {
            Some(n) => after = format!("&after={n}"),
            None => return Ok(out),
        }
    }
}

/// Wait until at most `max` of the `published` messages are not terminal yet (`dlq_count`
/// counts the dead letters: [`dlq_depth`], or the broker's own count where the gateway's
/// is not the DLQ's): ten minutes at most, after which publishing goes on and the settle
/// phase reports what is stuck.
pub fn wait_for_backlog(
    max: usize,
    consumer: &Consumer,
    dlq_count: impl Fn() -> Result<u64>,
    published: usize,
    progress: &Progress,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let terminal = consumer.accepted_keys() + dlq_count()? as usize;
        let open = published.saturating_sub(terminal);
        if open <= max || Instant::now() > deadline {
            return Ok(());
        }
        progress.show(&format!("waiting: {open} not terminal yet (at most {max})"));
        std::thread::sleep(Duration::from_millis(200));
    }
}
