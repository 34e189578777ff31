//! Operating the dead-letter queues: replay (with a dry run, a rate limit and a canary),
//! discard and export, the same on every source: the embedded store, a NATS JetStream DLQ
//! stream or RabbitMQ DLQ queues, each behind [`DeadLetters`]. `verdict dlq ...` and the
//! admin API both call these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::now_ms;
use crate::store::{DlqEntry, DlqFilter};
use crate::telemetry::ReplayTrace;
use verdict_registry::Registry;
use verdict_runtime::{AttemptRecord, Decision, ErrorSpec, Failure, FailureSpec};

mod backend;
mod groups;
mod history;
mod jobs;
mod runtime;

pub(crate) use backend::list_pages;
pub use backend::{
    CanaryProgress, DeadLetters, DlqError, DlqPage, PAGE_BYTES, PAGE_BYTES_MAX, PAGE_SIZE, matches,
    page_within,
};
pub(crate) use backend::{StatsTally, back_again, entry_from_headers, position_after};
pub use groups::{
    DlqGroup, Fingerprint, GroupSample, Grouping, MAX_REASON_CHARS, normalise_reason,
};
pub use history::{DlqHistory, DlqSample, KEPT_SAMPLES, SAMPLE_EVERY};
pub use jobs::{Job, JobAction, JobState, JobView, Jobs, KEPT_JOBS};
pub(crate) use runtime::Rt;

/// How to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Only show what the current policy would decide for each; move nothing.
    pub dry_run: bool,
    /// At most this many replays per second.
    pub rate_per_s: Option<f64>,
    /// Replay this many first, wait until each is delivered, and go on only if all were.
    pub canary: Option<usize>,
    /// How long to wait for the canary.
    pub canary_timeout: Duration,
    /// Who and why, for the audit log.
    pub note: String,
    /// Set to stop the replay before its next message (what is replayed stays replayed).
    pub cancel: Option<Arc<AtomicBool>>,
    /// Starts each replayed message's trace (off by default).
    pub trace: ReplayTrace,
}

impl ReplayOptions {
    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// The least time between two replays that `rate_per_s` asks for; none without a
    /// (positive) rate. A rate so low that the pause would not fit a [`Duration`] (below
    /// one per ~584 billion years) waits [`Duration::MAX`].
    pub fn pause(&self) -> Option<Duration> {
        self.rate_per_s
            .filter(|r| *r > 0.0)
            .map(|r| Duration::try_from_secs_f64(1.0 / r).unwrap_or(Duration::MAX))
    }
}

/// What a replay did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    /// Dead letters matched by the filter.
    pub matched: usize,
    /// Put back for delivery.
    pub replayed: usize,
    /// The canary's outcome, when one was asked for.
    pub canary: Option<CanaryOutcome>,
    /// With `dry_run`: what the current policy decides for each (its last failure again).
    pub dry_run: Vec<DryRunLine>,
    /// Stopped by its `cancel` flag before the end.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
}

/// How the canary went.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CanaryOutcome {
    /// Messages in the canary.
    pub size: usize,
    /// Delivered within the timeout.
    pub delivered: usize,
    /// Whether the rest was replayed.
    pub passed: bool,
}

/// One dry-run decision.
#[derive(Debug, Clone, Serialize)]
pub struct DryRunLine {
    /// The dead letter.
    pub seq: i64,
    /// Its message id.
    pub message_id: String,
    /// The decision the current policy makes on its last failure (none: no route now).
    pub decision: Option<Decision>,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The store or broker failed.
    #[error(transparent)]
    Backend(#[from] DlqError),
    /// A dry run needs the registry.
    #[error("a dry run needs the gateway's policies")]
    NoRegistry,
}

/// Whether a dead letter that came back from `repeats` replays is parked when the gateway
/// parks after `park_after_repeats` (0: never).
pub fn is_parked(repeats: u32, park_after_repeats: u32) -> bool {
    park_after_repeats > 0 && repeats >= park_after_repeats
}

/// `filter` as a bulk replay takes it: unless it names one dead letter (`seq`) or sets its
/// own `max_repeats`, parked letters are left out.
pub fn leaving_parked_out(mut filter: DlqFilter, park_after_repeats: u32) -> DlqFilter {
    if filter.seq.is_none() && filter.max_repeats.is_none() && park_after_repeats > 0 {
        filter.max_repeats = Some(park_after_repeats - 1);
    }
    filter
}

/// The dead letters `filter` matches in each `(source name, DLQs)`, grouped by
/// [`Fingerprint`], largest group first. Read a page at a time: memory grows with the
/// groups, not the letters.
pub fn groups(
    sources: &[(&str, &dyn DeadLetters)],
    filter: &DlqFilter,
    park_after_repeats: u32,
    now_ms: u64,
) -> Result<Vec<DlqGroup>, DlqError> {
    let mut grouping = Grouping::default();
    for (name, dlqs) in sources {
        let mut page_filter = DlqFilter {
            limit: Some(PAGE_SIZE),
            ..filter.clone()
        };
        loop {
            let page = dlqs.page(&page_filter, now_ms)?;
            for entry in &page.entries {
                grouping.add(name, entry, is_parked(entry.repeats, park_after_repeats));
            }
            match page.next {
                Some(next) => page_filter.after = Some(next),
                None => break,
            }
        }
    }
    Ok(grouping.into_groups())
}

/// Replay the dead letters `filter` matches; `progress(done, total)` after each.
pub fn replay(
    store: &dyn DeadLetters,
    registry: Option<&Registry>,
    filter: &DlqFilter,
    options: &ReplayOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<ReplayReport, ReplayError> {
    let entries = store.list(filter, now_ms())?;
    let mut report = ReplayReport {
        matched: entries.len(),
        ..ReplayReport::default()
    };
    if options.dry_run {
        let registry = registry.ok_or(ReplayError::NoRegistry)?;
        // Letters of one topic side by side are one batch: one call into the policy's
        // sandbox per 64 of them instead of one each.
        for run in entries.chunk_by(|a, b| a.topic == b.topic) {
            let failures: Vec<_> = run.iter().map(last_failure).collect();
            let decisions = match registry.decide_batch(&run[0].topic, &failures) {
                Some(decisions) => decisions.into_iter().map(Some).collect(),
                None => vec![None; run.len()],
            };
            report
                .dry_run
                .extend(run.iter().zip(decisions).map(|(e, decision)| DryRunLine {
                    seq: e.seq,
                    message_id: e.message_id.clone(),
                    decision,
                }));
        }
        return Ok(report);
    }
    let mut rest: &[DlqEntry] = &entries;
    if let Some(size) = options.canary.filter(|n| *n > 0) {
        let (canary, after) = entries.split_at(size.min(entries.len()));
        let token = replay_token();
        let ids = store.replay(canary, &options.note, &token, &options.trace)?;
        report.replayed += ids.len();
        progress(report.replayed, entries.len());
        let delivered = wait_delivered(store, &ids, &token, options)?;
        let passed = delivered == ids.len();
        report.canary = Some(CanaryOutcome {
            size: ids.len(),
            delivered,
            passed,
        });
        if !passed || options.cancelled() {
            report.cancelled = options.cancelled();
            return Ok(report);
        }
        rest = after;
    }
    let pause = options.pause();
    let token = replay_token();
    for entry in rest {
        if options.cancelled() {
            report.cancelled = true;
            break;
        }
        let started = Instant::now();
        report.replayed += store
            .replay(
                std::slice::from_ref(entry),
                &options.note,
                &token,
                &options.trace,
            )?
            .len();
        progress(report.replayed, entries.len());
        if let Some(pause) = pause {
            sleep_unless_cancelled(pause.saturating_sub(started.elapsed()), options);
        }
    }
    Ok(report)
}

/// Sleep `d`, a tenth of a second at a time, waking early when `options` is cancelled: a
/// slow rate must not keep a cancelled replay alive.
fn sleep_unless_cancelled(d: Duration, options: &ReplayOptions) {
    let until = Instant::now().checked_add(d);
    while !options.cancelled() {
        let left = until.map_or(Duration::from_millis(100), |u| {
            u.saturating_duration_since(Instant::now())
        });
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// The failure that dead-lettered `entry`, as its envelope records it: its last error, the
/// ones before as history, the original's headers, content type and payload bytes.
fn last_failure(entry: &DlqEntry) -> Failure {
    let e = &entry.envelope;
    let errors: Vec<AttemptRecord> = e
        .errors
        .iter()
        .map(|x| AttemptRecord {
            at_ms: x.at_ms,
            kind: x.kind.clone(),
            message: x.message.clone(),
        })
        .collect();
    let (history, last) = match errors.split_last() {
        Some((last, history)) => (history.to_vec(), last.clone()),
        None => (
            Vec::new(),
            AttemptRecord {
                at_ms: entry.created_at_ms,
                kind: entry.kind.clone(),
                message: String::new(),
            },
        ),
    };
    FailureSpec {
        topic: entry.topic.clone(),
        message_id: entry.message_id.clone(),
        consumer_group: e.consumer_group.clone(),
        attempt: entry.attempts.max(1),
        first_failed_at_ms: history.first().map_or(last.at_ms, |a| a.at_ms),
        now_ms: Some(now_ms()),
        error: ErrorSpec {
            kind: last.kind,
            message: last.message,
            ..ErrorSpec::default()
        },
        history,
        headers: e.original.headers.clone(),
        content_type: e.original.content_type.clone(),
        ..FailureSpec::default()
    }
    .into_failure()
    .with_payload(e.original.payload_bytes())
}

/// Marks the messages of one replay, so the canary can tell them from any other.
fn replay_token() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        now_ms(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Poll until every id is delivered, one is dead again, the canary timeout passes or the
/// replay is cancelled; returns how many were delivered.
fn wait_delivered(
    store: &dyn DeadLetters,
    ids: &[String],
    token: &str,
    options: &ReplayOptions,
) -> Result<usize, DlqError> {
    // A timeout past what an `Instant` can hold waits for good rather than panicking.
    let deadline = Instant::now().checked_add(options.canary_timeout);
    loop {
        let outcome = store.outcome(ids, token)?;
        let late = deadline.is_some_and(|d| Instant::now() > d);
        if outcome.delivered == ids.len() || outcome.failed || late || options.cancelled() {
            return Ok(outcome.delivered);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_replay_rate_gives_a_pause_without_panicking() {
        let pause = |rate: f64| {
            ReplayOptions {
                rate_per_s: Some(rate),
                ..ReplayOptions::default()
            }
            .pause()
        };
        assert_eq!(pause(2.0), Some(Duration::from_millis(500)));
        assert_eq!(pause(0.0), None);
        assert_eq!(pause(-1.0), None);
        assert_eq!(pause(f64::NAN), None);
        assert_eq!(pause(f64::INFINITY), Some(Duration::ZERO));
        // `{"rate_per_s": 1e-300}` (a JSON body of the admin API): 1e300 s does not fit a
        // Duration; before, `Duration::from_secs_f64` panicked in the replay.
        assert_eq!(pause(1e-300), Some(Duration::MAX));
        assert_eq!(pause(f64::MIN_POSITIVE), Some(Duration::MAX));
        assert_eq!(ReplayOptions::default().pause(), None);
    }
}
