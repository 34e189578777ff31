//! What a simulation found: totals, the retry load over time, the backlog, dead letters by
//! class, time to drain after recovery, publish-to-end times and amplification - as a
//! serialisable [`Report`] and as terminal tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use verdict_runtime::{Decision, RetryBudget};

use crate::scenario::Scenario;

const US_PER_S: u64 = 1_000_000;

/// How a message ended.
pub(crate) enum Outcome {
    Delivered,
    Dead(&'static str),
    Discarded,
}

/// A simulation's findings.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// What decided (set by the caller: a policy and its config, or a route).
    pub policy: String,
    /// The seed every draw came from.
    pub seed: u64,
    /// Virtual seconds simulated, publishing and draining.
    pub simulated_s: f64,
    /// Messages published.
    pub published: u64,
    /// Delivered in the end.
    pub delivered: u64,
    /// Dead-lettered.
    pub dead: u64,
    /// Discarded by a verdict.
    pub discarded: u64,
    /// Still waiting for a delivery when the simulation stopped (`max_drain_s` passed).
    pub unfinished: u64,
    /// Dead letters by the verdict's class.
    pub dead_by_class: BTreeMap<String, u64>,
    /// Deliveries that were a message's first.
    pub first_attempts: u64,
    /// Deliveries after a retry or a delay.
    pub retries: u64,
    /// Redeliveries the retry budget held back (each time one was due and the budget had
    /// no room; one message may be held many times).
    pub held: u64,
    /// Times a `pause` verdict stopped the route (a probe answered `pause` again counts
    /// again).
    pub pauses: u64,
    /// Virtual seconds the route spent paused.
    pub paused_s: f64,
    /// With key ordering: how many keys the messages spread over.
    pub keys: Option<u64>,
    /// With key ordering: messages published while an older one of their key was
    /// unfinished, so they waited behind it.
    pub held_back: u64,
    /// With key ordering: the most keys parked at once (their oldest message failed and not
    /// ended yet).
    pub peak_parked_keys: u64,
    /// The retry budget that gated redeliveries, if the guardrails had one.
    pub retry_budget: Option<RetryBudget>,
    /// Calls the dependency saw: deliveries, with the consumer's own retries and the
    /// broker's redeliveries.
    pub dependency_calls: u64,
    /// Dependency calls per published message.
    pub amplification: f64,
    /// Deliveries per message that ended, on average.
    pub attempts_mean: f64,
    /// The most deliveries one message took.
    pub attempts_max: u64,
    /// Milliseconds from publish to the end (delivered, dead or discarded): the median.
    pub p50_ms: u64,
    /// ... the 99th percentile.
    pub p99_ms: u64,
    /// ... the longest.
    pub max_ms: u64,
    /// Seconds from the consumer's recovery (its last phase) until every message published
    /// before it had ended; `None` when some never did, or the scenario has no phases.
    pub drain_s: Option<f64>,
    /// Messages published per second while publishing, on average.
    pub publish_rate: f64,
    /// The most retries in one second.
    pub peak_retry_rate: u64,
    /// The most messages waiting at a second's end.
    pub peak_backlog: u64,
    /// Verdicts by action.
    pub decisions: BTreeMap<String, u64>,
    /// Verdicts the guardrails bounded.
    pub clamped: u64,
    /// Verdicts from the fallback because the policy faulted.
    pub fallbacks: u64,
    /// Per second: first attempts, retries and the backlog at its end.
    pub series: Series,
}

/// The report's time series, one value per simulated second.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Series {
    /// First deliveries.
    pub first_attempts: Vec<u64>,
    /// Redeliveries after a retry or a delay.
    pub retries: Vec<u64>,
    /// Redeliveries held back by the retry budget.
    pub held: Vec<u64>,
    /// Messages published and not yet ended.
    pub backlog: Vec<u64>,
}

/// Collects a run's events into a [`Report`].
pub(crate) struct Recorder {
    report: Report,
    recovery_us: Option<u64>,
    duration_s: u64,
    pending: u64,
    second: u64,
    latencies_ms: Vec<u64>,
    deliveries_sum: u64,
    ended: u64,
    outage_end_us: Option<u64>,
    outage_pending: u64,
    /// The end of the latest pause, in virtual µs: overlapping pauses count once.
    paused_through_us: u64,
}

impl Recorder {
    pub(crate) fn new(scenario: &Scenario) -> Recorder {
        Recorder {
            report: Report {
                scenario: scenario.name.clone(),
                policy: String::new(),
                seed: scenario.seed,
                simulated_s: 0.0,
                published: 0,
                delivered: 0,
                dead: 0,
                discarded: 0,
                unfinished: 0,
                pauses: 0,
                paused_s: 0.0,
                keys: scenario.ordering.as_ref().map(|o| o.keys),
                held_back: 0,
                peak_parked_keys: 0,
                dead_by_class: BTreeMap::new(),
                first_attempts: 0,
                retries: 0,
                held: 0,
                retry_budget: None,
                dependency_calls: 0,
                amplification: 0.0,
                attempts_mean: 0.0,
                attempts_max: 0,
                p50_ms: 0,
                p99_ms: 0,
                max_ms: 0,
                drain_s: None,
                publish_rate: 0.0,
                peak_retry_rate: 0,
                peak_backlog: 0,
                decisions: BTreeMap::new(),
                clamped: 0,
                fallbacks: 0,
                series: Series::default(),
            },
            recovery_us: (!scenario.consumer.phases.is_empty())
                .then(|| scenario.recovery_s() * US_PER_S),
            duration_s: scenario.duration_s,
            pending: 0,
            second: 0,
            latencies_ms: Vec::new(),
            deliveries_sum: 0,
            ended: 0,
            outage_end_us: None,
            outage_pending: 0,
            paused_through_us: 0,
        }
    }

    /// The clock reached `at_us`: close every second before it.
    pub(crate) fn advance(&mut self, at_us: u64) {
        while (self.second + 1) * US_PER_S <= at_us {
            self.slot(self.second);
            self.report.series.backlog[self.second as usize] = self.pending;
            self.second += 1;
        }
    }

    /// The series' slot for second `s`, made if new.
    fn slot(&mut self, s: u64) -> usize {
        let s = s as usize;
        let series = &mut self.report.series;
        if series.first_attempts.len() <= s {
            series.first_attempts.resize(s + 1, 0);
            series.retries.resize(s + 1, 0);
            series.held.resize(s + 1, 0);
            series.backlog.resize(s + 1, 0);
        }
        s
    }

    pub(crate) fn published(&mut self, at_us: u64) {
        self.report.published += 1;
        self.pending += 1;
        if self.recovery_us.is_some_and(|r| at_us < r) {
            self.outage_pending += 1;
        }
    }

    pub(crate) fn delivered(&mut self, at_us: u64, first: bool, calls: u64) {
        let s = self.slot(at_us / US_PER_S);
        if first {
            self.report.first_attempts += 1;
            self.report.series.first_attempts[s] += 1;
        } else {
            self.report.retries += 1;
            self.report.series.retries[s] += 1;
        }
        self.report.dependency_calls += calls;
    }

    pub(crate) fn retry_budget(&mut self, budget: Option<RetryBudget>) {
        self.report.retry_budget = budget;
    }

    pub(crate) fn held(&mut self, at_us: u64) {
        let s = self.slot(at_us / US_PER_S);
        self.report.held += 1;
        self.report.series.held[s] += 1;
    }

    /// A message was published while an older one of its key was unfinished.
    pub(crate) fn held_back(&mut self) {
        self.report.held_back += 1;
    }

    /// `parked` keys are parked now.
    pub(crate) fn parked_keys(&mut self, parked: usize) {
        let parked = parked as u64;
        self.report.peak_parked_keys = self.report.peak_parked_keys.max(parked);
    }

    /// The route paused at `at_us` until `until_us` (a pause that extends one already
    /// running counts only the time it adds).
    pub(crate) fn paused(&mut self, at_us: u64, until_us: u64) {
        self.report.pauses += 1;
        let from_us = at_us.max(self.paused_through_us);
        self.report.paused_s += until_us.saturating_sub(from_us) as f64 / US_PER_S as f64;
        self.paused_through_us = self.paused_through_us.max(until_us);
    }

    pub(crate) fn decided(&mut self, decision: &Decision) {
        let action = decision.verdict.action.name();
        *self.report.decisions.entry(action.into()).or_default() += 1;
        self.report.clamped += u64::from(!decision.clamps.is_empty());
        self.report.fallbacks += u64::from(decision.is_fallback());
    }

    pub(crate) fn ended(
        &mut self,
        published_us: u64,
        at_us: u64,
        deliveries: u32,
        outcome: Outcome,
    ) {
        match outcome {
            Outcome::Delivered => self.report.delivered += 1,
            Outcome::Dead(class) => {
                self.report.dead += 1;
                *self.report.dead_by_class.entry(class.into()).or_default() += 1;
            }
            Outcome::Discarded => self.report.discarded += 1,
        }
        self.pending = self.pending.saturating_sub(1);
        self.ended += 1;
        self.deliveries_sum += u64::from(deliveries);
        self.report.attempts_max = self.report.attempts_max.max(u64::from(deliveries));
        self.latencies_ms
            .push(at_us.saturating_sub(published_us) / 1_000);
        if self.recovery_us.is_some_and(|r| published_us < r) {
            self.outage_pending = self.outage_pending.saturating_sub(1);
            self.outage_end_us = Some(self.outage_end_us.unwrap_or(0).max(at_us));
        }
    }

    pub(crate) fn finish(mut self, unfinished: u64) -> Report {
        let last = self.report.series.first_attempts.len() as u64;
        self.advance(last.max(self.second + 1) * US_PER_S);
        let r = &mut self.report;
        r.unfinished = unfinished;
        r.simulated_s = self.second as f64;
        r.amplification = ratio(r.dependency_calls, r.published);
        r.attempts_mean = ratio(self.deliveries_sum, self.ended);
        self.latencies_ms.sort_unstable();
        r.p50_ms = percentile(&self.latencies_ms, 50.0);
        r.p99_ms = percentile(&self.latencies_ms, 99.0);
        r.max_ms = self.latencies_ms.last().copied().unwrap_or(0);
        r.drain_s = match (self.recovery_us, self.outage_pending) {
            (Some(recovery), 0) => Some(
                self.outage_end_us
                    .map_or(0.0, |end| end.saturating_sub(recovery) as f64 / 1e6),
            ),
            _ => None,
        };
        r.publish_rate = r.published as f64 / self.duration_s.max(1) as f64;
        r.peak_retry_rate = r.series.retries.iter().copied().max().unwrap_or(0);
        r.peak_backlog = r.series.backlog.iter().copied().max().unwrap_or(0);
        self.report
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The `pct` percentile of `sorted` (nearest rank).
fn percentile(sorted: &[u64], pct: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Report {
    /// A figure of the report by name, for `--fail-if` (`None`: no such figure; a drain
    /// that never ended is infinite).
    pub fn metric(&self, name: &str) -> Option<f64> {
        Some(match name {
            "published" => self.published as f64,
            "delivered" => self.delivered as f64,
            "dead" => self.dead as f64,
            "discarded" => self.discarded as f64,
            "unfinished" => self.unfinished as f64,
            "retries" => self.retries as f64,
            "held" => self.held as f64,
            "pauses" => self.pauses as f64,
            "paused_s" => self.paused_s,
            "held_back" => self.held_back as f64,
            "peak_parked_keys" => self.peak_parked_keys as f64,
            "dependency_calls" => self.dependency_calls as f64,
            "amplification" => self.amplification,
            "attempts_mean" => self.attempts_mean,
            "attempts_max" => self.attempts_max as f64,
            "p50_ms" => self.p50_ms as f64,
            "p99_ms" => self.p99_ms as f64,
            "max_ms" => self.max_ms as f64,
            "drain_s" => self.drain_s.unwrap_or(f64::INFINITY),
            "publish_rate" => self.publish_rate,
            "peak_retry_rate" => self.peak_retry_rate as f64,
            "peak_backlog" => self.peak_backlog as f64,
            "clamped" => self.clamped as f64,
            "fallbacks" => self.fallbacks as f64,
            _ => return None,
        })
    }

    /// The figures `--fail-if` knows.
    pub const METRICS: &'static [&'static str] = &[
        "published",
        "delivered",
        "dead",
        "discarded",
        "unfinished",
        "retries",
        "held",
        "pauses",
        "paused_s",
        "held_back",
        "peak_parked_keys",
        "dependency_calls",
        "amplification",
        "attempts_mean",
        "attempts_max",
        "p50_ms",
        "p99_ms",
        "max_ms",
        "drain_s",
        "publish_rate",
        "peak_retry_rate",
        "peak_backlog",
        "clamped",
        "fallbacks",
    ];

    /// The summary rows: a label and the value, as text.
    pub(crate) fn rows(&self) -> Vec<(&'static str, String)> {
        let classes = if self.dead_by_class.is_empty() {
            "-".to_string()
        } else {
            self.dead_by_class
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        vec![
            ("published", self.published.to_string()),
            ("delivered", self.delivered.to_string()),
            ("dead-lettered", format!("{} ({classes})", self.dead)),
            ("discarded", self.discarded.to_string()),
            ("unfinished", self.unfinished.to_string()),
            (
                "deliveries",
                format!("{} first + {} retries", self.first_attempts, self.retries),
            ),
            (
                "retry budget",
                match &self.retry_budget {
                    None => "none".into(),
                    Some(b) => format!(
                        "{}% of first attempts + {}/s over {} s: {} held",
                        b.percent, b.min_per_s, b.window_s, self.held
                    ),
                },
            ),
            (
                "route paused",
                if self.pauses == 0 {
                    "never".into()
                } else {
                    format!("{} times, {:.1} s in all", self.pauses, self.paused_s)
                },
            ),
            (
                "key ordering",
                match self.keys {
                    None => "off".into(),
                    Some(keys) => format!(
                        "{keys} keys: {} messages waited behind their key, at most {} keys \
                         parked at once",
                        self.held_back, self.peak_parked_keys
                    ),
                },
            ),
            (
                "dependency calls",
                format!(
                    "{} ({:.2} per message)",
                    self.dependency_calls, self.amplification
                ),
            ),
            (
                "deliveries per message",
                format!("{:.2} mean, {} max", self.attempts_mean, self.attempts_max),
            ),
            (
                "publish to end",
                format!(
                    "p50 {} ms, p99 {} ms, max {} ms",
                    self.p50_ms, self.p99_ms, self.max_ms
                ),
            ),
            (
                "drain after recovery",
                self.drain_s
                    .map_or_else(|| "never".into(), |s| format!("{s:.1} s")),
            ),
            (
                "retry load",
                format!(
                    "peak {}/s against {:.0}/s published",
                    self.peak_retry_rate, self.publish_rate
                ),
            ),
            ("peak backlog", self.peak_backlog.to_string()),
            (
                "verdicts",
                self.decisions
                    .iter()
                    .map(|(a, n)| format!("{a} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            (
                "clamped / fallbacks",
                format!("{} / {}", self.clamped, self.fallbacks),
            ),
        ]
    }

    /// The report as terminal text: the summary, then the timeline in at most `rows_max`
    /// rows.
    pub fn to_table(&self, rows_max: usize) -> String {
        let mut out = format!(
            "scenario {} - {} (seed {}, {:.0} s simulated)\n\n",
            self.scenario, self.policy, self.seed, self.simulated_s
        );
        for (label, value) in self.rows() {
            let _ = writeln!(out, "  {label:<24} {value}");
        }
        out.push('\n');
        out += &self.timeline(rows_max);
        out
    }

    /// Per-bucket rates: first attempts and retries per second, and the backlog at the
    /// bucket's end.
    fn timeline(&self, rows_max: usize) -> String {
        let seconds = self.series.first_attempts.len();
        let bucket = seconds.div_ceil(rows_max.max(1)).max(1);
        // The held column only when a retry budget gated the run.
        let budgeted = self.retry_budget.is_some();
        let mut out = format!(
            "  {:>8}  {:>10}  {:>10}  {}{:>10}\n",
            "from s",
            "first/s",
            "retries/s",
            if budgeted { "    held/s  " } else { "" },
            "backlog"
        );
        for start in (0..seconds).step_by(bucket) {
            let end = (start + bucket).min(seconds);
            let span = (end - start) as f64;
            let sum = |v: &[u64]| v[start..end].iter().sum::<u64>() as f64 / span;
            let held = if budgeted {
                format!("{:>10.1}  ", sum(&self.series.held))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:>8}  {:>10.1}  {:>10.1}  {held}{:>10}",
                start,
                sum(&self.series.first_attempts),
                sum(&self.series.retries),
                self.series.backlog[end - 1]
            );
        }
        out
    }

    /// Two reports side by side: the same scenario, two policies or configs.
    pub fn compare(a: &Report, b: &Report) -> String {
        let mut out = format!(
            "scenario {} (seed {})\n\n  {:<24} {:<40} {}\n",
            a.scenario, a.seed, "", a.policy, b.policy
        );
        for ((label, left), (_, right)) in a.rows().into_iter().zip(b.rows()) {
            let _ = writeln!(out, "  {label:<24} {left:<40} {right}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
