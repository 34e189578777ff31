//! What a bench run found: one [`Figures`] per target, printed as a table (ratios against
//! the baseline of the same run: `nats-native`, or `embedded` without it) or as JSON.

use std::fmt;
use std::time::Duration;

use super::HandlingSummary;
use super::{BenchOptions, Target};

/// One target's run.
#[derive(Debug, Clone)]
pub struct Figures {
    /// What ran.
    pub target: Target,
    /// Which round (from 1) of the run.
    pub round: usize,
    /// Messages published.
    pub messages: usize,
    /// First publish to the last message settled.
    pub elapsed: Duration,
    /// Deliveries the consumer answered (first attempts and retries).
    pub deliveries: u64,
    /// Messages the consumer took.
    pub delivered: u64,
    /// Messages retired to a DLQ.
    pub dead_lettered: u64,
    /// Messages the broker dropped after `MaxDeliver` (native redelivery only).
    pub dropped: u64,
    /// Messages the consumer took more than once.
    pub duplicates: u32,
    /// Receipt -> settlement applied, per delivery.
    pub handling: HandlingSummary,
    /// CPU of this process outside the load generator.
    pub cpu: Duration,
    /// Of which inside policy evaluation (thread CPU time of each decision).
    pub policy: Duration,
    /// Wall time inside policy evaluation (more than `policy` when threads were preempted).
    pub policy_wall: Duration,
    /// The broker's or database server's CPU, when it runs on this machine.
    pub broker_cpu: Option<Duration>,
}

impl Figures {
    /// Messages settled per second.
    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Share of [`Figures::cpu`] spent in policy evaluation (0..1).
    pub fn policy_share(&self) -> f64 {
        self.policy.as_secs_f64() / self.cpu.as_secs_f64().max(1e-9)
    }

    fn per_message(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e6 / self.messages.max(1) as f64
    }

    fn json(&self, baseline: Option<&Figures>) -> serde_json::Value {
        serde_json::json!({
            "target": self.target,
            "round": self.round,
            "messages": self.messages,
            "seconds": self.elapsed.as_secs_f64(),
            "messages_per_second": self.rate(),
            "vs_baseline": baseline.map(|b| self.rate() / b.rate()),
            "deliveries": self.deliveries,
            "delivered": self.delivered,
            "dead_lettered": self.dead_lettered,
            "dropped": self.dropped,
            "duplicates": self.duplicates,
            "settled_deliveries": self.handling.count,
            "settle_p50_us": self.handling.p50.as_micros(),
            "settle_p99_us": self.handling.p99.as_micros(),
            "settle_max_us": self.handling.max.as_micros(),
            "cpu_us_per_message": self.per_message(self.cpu),
            "policy_cpu_share": self.policy_share(),
            "policy_wall_ms": self.policy_wall.as_secs_f64() * 1e3,
            "broker_cpu_us_per_message": self.broker_cpu.map(|d| self.per_message(d)),
        })
    }
}

/// Every target of one run, and what they were given.
#[derive(Debug, Clone)]
pub struct Report {
    /// Per target, in the order run.
    pub targets: Vec<Figures>,
    setup: String,
}

impl Report {
    pub(crate) fn new(options: &BenchOptions) -> Report {
        Report {
            targets: Vec::new(),
            setup: format!(
                "{} messages per target; the consumer fails {}% of them 1-3 times and {}% always; \
                 concurrency {}; retries {} ms apart, at most {} deliveries; policy {}",
                options.messages,
                options.transient_percent,
                options.permanent_percent,
                options.concurrency,
                options.retry_delay_ms,
                options.max_attempts,
                options.policy.display(),
            ),
        }
    }

    /// The figures of `target` in `round`, if it ran.
    pub fn get(&self, target: Target, round: usize) -> Option<&Figures> {
        self.targets
            .iter()
            .find(|f| f.target == target && f.round == round)
    }

    /// The baseline the ratios are taken against: `nats-native` when the run has it, else
    /// `embedded` (the store targets are judged against the embedded store).
    pub fn baseline(&self) -> Option<Target> {
        [Target::NatsNative, Target::Embedded]
            .into_iter()
            .find(|t| self.targets.iter().any(|f| f.target == *t))
    }

    /// `figures`' throughput over the baseline of the same round.
    pub fn ratio(&self, figures: &Figures) -> Option<f64> {
        self.get(self.baseline()?, figures.round)
            .map(|b| figures.rate() / b.rate())
    }

    /// The targets run, in the order first run.
    fn target_order(&self) -> Vec<Target> {
        let mut seen: Vec<Target> = Vec::new();
        for f in &self.targets {
            if !seen.contains(&f.target) {
                seen.push(f.target);
            }
        }
        seen
    }

    /// Each target's median ratio to the baseline over the rounds (the figure to quote: a
    /// shared machine drifts between rounds, the same-round ratio much less).
    pub fn median_ratios(&self) -> Vec<(Target, f64)> {
        let Some(baseline) = self.baseline() else {
            return Vec::new();
        };
        self.target_order()
            .into_iter()
            .filter_map(|target| self.median_against(target, baseline).map(|m| (target, m)))
            .collect()
    }

    /// Each TLS (or traced) target's median throughput over its plain twin's in the same
    /// round (what TLS, or tracing, costs), when the run has both.
    pub fn tls_ratios(&self) -> Vec<(Target, Target, f64)> {
        self.target_order()
            .into_iter()
            .filter_map(|target| {
                let plain = target.plain_twin()?;
                self.median_against(target, plain)
                    .map(|m| (target, plain, m))
            })
            .collect()
    }

    /// Each shared-store target's median throughput over the embedded store's in the same
    /// round, and each three-gateway target's over its one-gateway twin's, when the run has
    /// both: a shared store is judged against the embedded store, and more gateways should
    /// not make it slower. (With `embedded` the baseline, the table has the first already.)
    pub fn store_ratios(&self) -> Vec<(Target, Target, f64)> {
        let vs_embedded = self.baseline() != Some(Target::Embedded);
        self.target_order()
            .into_iter()
            .flat_map(|target| {
                let against = (vs_embedded && target.shared_store())
                    .then_some(Target::Embedded)
                    .into_iter()
                    .chain(target.single_gateway_twin());
                against.filter_map(move |other| {
                    self.median_against(target, other)
                        .map(|m| (target, other, m))
                })
            })
            .collect()
    }

    /// The median over the rounds of `target`'s throughput over `other`'s in the same round.
    fn median_against(&self, target: Target, other: Target) -> Option<f64> {
        let ratios = self
            .targets
            .iter()
            .filter(|f| f.target == target)
            .filter_map(|f| Some(f.rate() / self.get(other, f.round)?.rate()));
        median(ratios)
    }

    /// The report as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let medians: serde_json::Map<String, serde_json::Value> = self
            .median_ratios()
            .into_iter()
            .map(|(t, r)| (t.name().to_string(), r.into()))
            .collect();
        let tls: serde_json::Map<String, serde_json::Value> = self
            .tls_ratios()
            .into_iter()
            .map(|(t, _, r)| (t.name().to_string(), r.into()))
            .collect();
        let stores: serde_json::Map<String, serde_json::Value> = self
            .store_ratios()
            .into_iter()
            .map(|(t, other, r)| (format!("{}/{}", t.name(), other.name()), r.into()))
            .collect();
        serde_json::json!({
            "setup": self.setup,
            "targets": self
                .targets
                .iter()
                .map(|f| f.json(self.baseline().and_then(|b| self.get(b, f.round))))
                .collect::<Vec<_>>(),
            "baseline": self.baseline(),
            "median_vs_baseline": medians,
            "median_tls_vs_plain": tls,
            "median_store_ratios": stores,
        })
    }
}

/// The median of `values` (none when empty).
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "verdict bench: {}", self.setup)?;
        writeln!(
            f,
            "{:<16} {:>8} {:>9} {:>10} {:>9} {:>6} {:>7} {:>4} {:>10} {:>10} {:>8} {:>7} {:>8}",
            "target",
            "msg/s",
            "vs base",
            "deliveries",
            "delivered",
            "DLQ",
            "dropped",
            "dup",
            "settle p50",
            "settle p99",
            "CPU/msg",
            "policy",
            "broker/msg"
        )?;
        let rounds = self.targets.iter().map(|t| t.round).max().unwrap_or(0);
        for t in &self.targets {
            let label = if rounds > 1 {
                format!("{}#{}", t.target.name(), t.round)
            } else {
                t.target.name().to_string()
            };
            let ratio = self
                .ratio(t)
                .map_or("-".to_string(), |r| format!("{r:.2}x"));
            // The baseline evaluates no policy: a dash, not 0.00%.
            let policy = if t.target == Target::NatsNative {
                "-".to_string()
            } else {
                format!("{:.2}%", t.policy_share() * 100.0)
            };
            let broker = t
                .broker_cpu
                .map_or("-".to_string(), |d| format!("{:.0} us", t.per_message(d)));
            writeln!(
                f,
                "{:<16} {:>8.0} {:>9} {:>10} {:>9} {:>6} {:>7} {:>4} {:>10} {:>10} {:>5.0} us {:>7} {:>8}",
                label,
                t.rate(),
                ratio,
                t.deliveries,
                t.delivered,
                t.dead_lettered,
                t.dropped,
                t.duplicates,
                ms(t.handling.p50),
                ms(t.handling.p99),
                t.per_message(t.cpu),
                policy,
                broker,
            )?;
        }
        if rounds > 1 {
            let medians: Vec<String> = self
                .median_ratios()
                .iter()
                .map(|(t, r)| format!("{} {r:.2}x", t.name()))
                .collect();
            writeln!(
                f,
                "median over {rounds} rounds, vs {}: {}",
                self.baseline().map_or("-", Target::name),
                medians.join(", ")
            )?;
        }
        let tls: Vec<String> = self
            .tls_ratios()
            .iter()
            .map(|(t, plain, r)| format!("{} {r:.2}x {}", t.name(), plain.name()))
            .collect();
        if !tls.is_empty() {
            writeln!(
                f,
                "TLS and traces against plain (median of same-round ratios): {}",
                tls.join(", ")
            )?;
        }
        let stores: Vec<String> = self
            .store_ratios()
            .iter()
            .map(|(t, other, r)| format!("{} {r:.2}x {}", t.name(), other.name()))
            .collect();
        if !stores.is_empty() {
            writeln!(
                f,
                "shared stores (median of same-round ratios): {}",
                stores.join(", ")
            )?;
        }
        writeln!(
            f,
            "settle = a delivery's receipt from its source to its settlement applied there; \
             CPU = this process without the load generator; policy = share of that CPU in policy evaluation"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(target: Target, round: usize, seconds: f64) -> Figures {
        Figures {
            target,
            round,
            messages: 1_000,
            elapsed: Duration::from_secs_f64(seconds),
            deliveries: 0,
            delivered: 0,
            dead_lettered: 0,
            dropped: 0,
            duplicates: 0,
            handling: HandlingSummary::default(),
            cpu: Duration::ZERO,
            policy: Duration::ZERO,
            policy_wall: Duration::ZERO,
            broker_cpu: None,
        }
    }

    fn report(targets: Vec<Figures>) -> Report {
        Report {
            targets,
            setup: String::new(),
        }
    }

    #[test]
    fn shared_stores_are_judged_against_the_embedded_store_of_their_own_round() {
        // Round 2's machine is twice as slow: the same-round ratios stay the same.
        let run = report(vec![
            figures(Target::Embedded, 1, 1.0),
            figures(Target::NatsNative, 1, 0.5),
            figures(Target::Postgres, 1, 2.0),
            figures(Target::PostgresX3, 1, 1.0),
            figures(Target::Embedded, 2, 2.0),
            figures(Target::NatsNative, 2, 1.0),
            figures(Target::Postgres, 2, 4.0),
            figures(Target::PostgresX3, 2, 2.0),
        ]);
        assert_eq!(run.baseline(), Some(Target::NatsNative));
        let stores = run.store_ratios();
        assert_eq!(
            stores,
            vec![
                (Target::Postgres, Target::Embedded, 0.5),
                (Target::PostgresX3, Target::Embedded, 1.0),
                (Target::PostgresX3, Target::Postgres, 2.0),
            ]
        );
        let shown = run.to_string();
        assert!(
            shown.contains(
                "postgres 0.50x embedded, postgres-x3 1.00x embedded, postgres-x3 2.00x postgres"
            ),
            "{shown}"
        );
        assert_eq!(
            run.to_json()["median_store_ratios"]["postgres/embedded"],
            0.5
        );
    }

    #[test]
    fn with_the_embedded_store_as_baseline_only_the_gateway_counts_are_compared() {
        let run = report(vec![
            figures(Target::Embedded, 1, 1.0),
            figures(Target::Mysql, 1, 4.0),
            figures(Target::MysqlX3, 1, 2.0),
        ]);
        assert_eq!(run.baseline(), Some(Target::Embedded));
        assert_eq!(
            run.store_ratios(),
            vec![(Target::MysqlX3, Target::Mysql, 2.0)]
        );
        assert_eq!(
            run.median_ratios(),
            vec![
                (Target::Embedded, 1.0),
                (Target::Mysql, 0.25),
                (Target::MysqlX3, 0.5)
            ]
        );
    }
}
