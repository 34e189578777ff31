//! A scenario: what is published, and how the consumer answers, over time.
//!
//! ```toml
//! name = "outage-3m"
//! duration_s = 600
//! seed = 7
//!
//! [publish]
//! phases = [{ from_s = 0, rate_per_s = 100 }]
//!
//! [consumer]
//! capacity_per_s = 400
//! latency_ms = 20
//! phases = [
//!     { from_s = 60, answers = [{ kind = "http.503", pct = 100 }] },
//!     { from_s = 240, answers = [{ kind = "db.deadlock", pct = 2 },
//!                                { kind = "schema.unknown-version", pct = 1, sticky = true }] },
//! ]
//! ```
//!
//! Before the first consumer phase, and for the share of a phase its answers leave over,
//! deliveries succeed.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

/// Longest simulated time a scenario may ask for (a week).
pub const MAX_DURATION_S: u64 = 7 * 24 * 3_600;
/// Highest publish rate a phase may ask for.
pub const MAX_RATE_PER_S: f64 = 100_000.0;

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A name for reports.
    #[serde(default)]
    pub name: String,
    /// What the scenario shows, for reports.
    #[serde(default)]
    pub description: String,
    /// Seconds of publishing. The simulation runs on after it until every message is
    /// delivered, dead-lettered or discarded, or `max_drain_s` more have passed.
    pub duration_s: u64,
    /// Seconds the simulation may run on after publishing stops.
    #[serde(default = "default_max_drain_s")]
    pub max_drain_s: u64,
    /// Seeds every random draw: the same scenario, policy and seed give the same report.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The topic the messages are published on (what the policy sees).
    #[serde(default = "default_topic")]
    pub topic: String,
    /// What is published.
    pub publish: Publish,
    /// How the consumer answers.
    pub consumer: Consumer,
    /// What the broker does before the gateway sees a failure.
    #[serde(default)]
    pub broker: Broker,
    /// Key ordering, as a route with `ordering = "key"` delivers: each message gets one of
    /// `keys` keys (drawn at random, seeded), and a key's messages go one at a time in
    /// publish order - a message waiting for a retry holds its key's later ones back.
    /// Absent: unordered.
    #[serde(default)]
    pub ordering: Option<Ordering>,
}

/// The keys of an ordered route.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ordering {
    /// How many distinct keys the messages spread over (1 to 10,000,000).
    pub keys: u64,
}

/// The most keys a scenario may spread its messages over.
const MAX_KEYS: u64 = 10_000_000;

fn default_max_drain_s() -> u64 {
    3_600
}
fn default_seed() -> u64 {
    1
}
fn default_topic() -> String {
    "orders".into()
}

/// The publish rate over time.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Publish {
    /// From each phase's `from_s` on, its rate (until the next phase).
    pub phases: Vec<PublishPhase>,
}

/// One rate, from a moment on.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishPhase {
    /// Seconds from the start.
    pub from_s: u64,
    /// Messages per second (evenly spaced; 0 publishes nothing).
    pub rate_per_s: f64,
}

/// The consumer: how much it takes and what it answers.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Consumer {
    /// Deliveries per second it can take; more wait their turn (the backlog).
    pub capacity_per_s: f64,
    /// Milliseconds an answer takes, unless the answer says otherwise.
    #[serde(default = "default_latency_ms")]
    pub latency_ms: u64,
    /// Times the consumer retries the dependency itself, at once, before it answers with a
    /// failure (each is a call the dependency sees).
    #[serde(default)]
    pub retries: u32,
    /// From each phase's `from_s` on, its answers (until the next phase).
    #[serde(default)]
    pub phases: Vec<ConsumerPhase>,
}

fn default_latency_ms() -> u64 {
    20
}

/// The consumer's answers from a moment on.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerPhase {
    /// Seconds from the start.
    pub from_s: u64,
    /// Failures, each a share of deliveries; what is left over succeeds.
    #[serde(default)]
    pub answers: Vec<Answer>,
}

/// A failure the consumer answers with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The error kind, as the consumer reports it (`http.503`, `db.deadlock`, ...).
    pub kind: String,
    /// Percent of deliveries (or, when `sticky`, of messages) that get it.
    pub pct: f64,
    /// Milliseconds this answer takes (the consumer's `latency_ms` when absent).
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// A `Retry-After` hint, in milliseconds.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    /// The same messages get it on every delivery in this phase (a poison message),
    /// rather than a fresh draw per delivery (a flaky dependency).
    #[serde(default)]
    pub sticky: bool,
}

/// What a broker does with a failed delivery before the gateway's policy sees it.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Broker {
    /// Immediate redeliveries of a failed delivery (a broker's own redelivery count, say),
    /// each a delivery the consumer takes.
    #[serde(default)]
    pub redeliveries: u32,
}

/// A scenario that cannot be run: the file, the field and what was expected.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct ScenarioError {
    /// The file.
    pub file: String,
    /// The field path (`consumer.phases[1].answers[0].pct`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Scenario {
    /// Read and check `path`.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            field: "(file)".into(),
            message: e.to_string(),
        })?;
        Scenario::parse(&text, &file)
    }

    /// Parse and check TOML; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let err = |field: String, message: String| ScenarioError {
            file: file.to_string(),
            field,
            message,
        };
        let de = toml::Deserializer::parse(text)
            .map_err(|e| err("(syntax)".into(), e.message().to_string()))?;
        let scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            err(
                if path == "." { "(root)".into() } else { path },
                e.inner().message().to_string(),
            )
        })?;
        scenario
            .check()
            .map_err(|(field, message)| err(field, message))?;
        Ok(scenario)
    }

    /// The JSON Schema of a scenario file, as checked in at
    /// `host/simulate/scenario.schema.json`.
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(Scenario)).unwrap_or_default()
    }

    fn check(&self) -> Result<(), (String, String)> {
        if self.duration_s == 0 || self.duration_s > MAX_DURATION_S {
            return Err((
                "duration_s".into(),
                format!("1 to {MAX_DURATION_S} seconds, not {}", self.duration_s),
            ));
        }
        if self.max_drain_s > MAX_DURATION_S {
            return Err((
                "max_drain_s".into(),
                format!("at most {MAX_DURATION_S} seconds"),
            ));
        }
        if let Some(ordering) = &self.ordering
            && !(1..=MAX_KEYS).contains(&ordering.keys)
        {
            return Err((
                "ordering.keys".into(),
                format!("1 to {MAX_KEYS} keys, not {}", ordering.keys),
            ));
        }
        if self.topic.is_empty() || self.topic.len() > 255 {
            return Err(("topic".into(), "1 to 255 bytes".into()));
        }
        // Printed in terminal tables, CI logs and the HTML report: one plain line each.
        for (field, text, max) in [
            ("name", &self.name, 128),
            ("description", &self.description, 1_024),
            ("topic", &self.topic, 255),
        ] {
            if text.len() > max || text.chars().any(char::is_control) {
                return Err((
                    field.into(),
                    format!("at most {max} bytes on one line, without control characters"),
                ));
            }
        }
        if self.publish.phases.is_empty() {
            return Err((
                "publish.phases".into(),
                "at least one phase (`{ from_s = 0, rate_per_s = 100 }`)".into(),
            ));
        }
        sorted(
            self.publish.phases.iter().map(|p| p.from_s),
            "publish.phases",
        )?;
        for (i, p) in self.publish.phases.iter().enumerate() {
            if !(0.0..=MAX_RATE_PER_S).contains(&p.rate_per_s) {
                return Err((
                    format!("publish.phases[{i}].rate_per_s"),
                    format!("0 to {MAX_RATE_PER_S}, not {}", p.rate_per_s),
                ));
            }
        }
        let c = &self.consumer;
        if !(c.capacity_per_s >= 1.0 && c.capacity_per_s <= 10.0 * MAX_RATE_PER_S) {
            return Err((
                "consumer.capacity_per_s".into(),
                format!("1 to {}, not {}", 10.0 * MAX_RATE_PER_S, c.capacity_per_s),
            ));
        }
        if c.retries > 100 || self.broker.redeliveries > 100 {
            return Err((
                if c.retries > 100 {
                    "consumer.retries"
                } else {
                    "broker.redeliveries"
                }
                .into(),
                "at most 100".into(),
            ));
        }
        sorted(c.phases.iter().map(|p| p.from_s), "consumer.phases")?;
        for (i, phase) in c.phases.iter().enumerate() {
            let mut total = 0.0;
            for (j, a) in phase.answers.iter().enumerate() {
                let at = format!("consumer.phases[{i}].answers[{j}]");
                // The kinds the gateway accepts from a consumer, and no others.
                if !verdict_runtime::text::is_kind(&a.kind) {
                    return Err((
                        format!("{at}.kind"),
                        format!(
                            "`{}`: 1 to {} bytes of letters, digits and `. _ - : / +`",
                            verdict_runtime::text::one_line(&a.kind, 64),
                            verdict_runtime::text::MAX_KIND_BYTES
                        ),
                    ));
                }
                if !(0.0..=100.0).contains(&a.pct) {
                    return Err((format!("{at}.pct"), format!("0 to 100, not {}", a.pct)));
                }
                total += a.pct;
            }
            if total > 100.0 + 1e-9 {
                return Err((
                    format!("consumer.phases[{i}].answers"),
                    format!("the shares add up to {total}%, more than 100%"),
                ));
            }
        }
        Ok(())
    }

    /// The publish rate at `at_s`.
    pub fn rate_at(&self, at_s: u64) -> f64 {
        self.publish
            .phases
            .iter()
            .rev()
            .find(|p| p.from_s <= at_s)
            .map_or(0.0, |p| p.rate_per_s)
    }

    /// The consumer's answers at `at_s` (none: every delivery succeeds).
    pub fn answers_at(&self, at_s: u64) -> &[Answer] {
        self.consumer
            .phases
            .iter()
            .rev()
            .find(|p| p.from_s <= at_s)
            .map_or(&[], |p| p.answers.as_slice())
    }

    /// When the last consumer phase starts: the recovery a drain time counts from.
    pub fn recovery_s(&self) -> u64 {
        self.consumer.phases.last().map_or(0, |p| p.from_s)
    }
}

fn sorted(from: impl Iterator<Item = u64>, field: &str) -> Result<(), (String, String)> {
    let mut last = None;
    for (i, at) in from.enumerate() {
        if last.is_some_and(|l| at <= l) {
            return Err((
                format!("{field}[{i}].from_s"),
                "phases must start in order, each later than the one before".into(),
            ));
        }
        last = Some(at);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        duration_s = 600
        [publish]
        phases = [{ from_s = 0, rate_per_s = 100 }, { from_s = 300, rate_per_s = 50 }]
        [consumer]
        capacity_per_s = 400
        phases = [
            { from_s = 60, answers = [{ kind = "http.503", pct = 100 }] },
            { from_s = 240, answers = [{ kind = "schema.unknown-version", pct = 1, sticky = true }] },
        ]
    "#;

    #[test]
    fn a_scenario_reads_with_defaults_and_answers_by_phase() {
        let s = Scenario::parse(GOOD, "s.toml").unwrap();
        assert_eq!(
            (s.seed, s.topic.as_str(), s.max_drain_s),
            (1, "orders", 3_600)
        );
        assert_eq!(
            (s.rate_at(0), s.rate_at(299), s.rate_at(300)),
            (100.0, 100.0, 50.0)
        );
        assert!(s.answers_at(59).is_empty());
        assert_eq!(s.answers_at(60)[0].kind, "http.503");
        assert!(s.answers_at(241)[0].sticky);
        assert_eq!(s.recovery_s(), 240);
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let cases = [
            (
                GOOD.replace("duration_s = 600", "duration_s = 0"),
                "duration_s",
            ),
            (
                GOOD.replace("pct = 100", "pct = 101"),
                "consumer.phases[0].answers[0].pct",
            ),
            (
                GOOD.replace("pct = 1, sticky", "pct = 1, stiky"),
                "consumer.phases[1].answers[0]",
            ),
            (
                GOOD.replace("from_s = 240", "from_s = 30"),
                "consumer.phases[1].from_s",
            ),
            (
                GOOD.replace("\"http.503\"", "\"http 503\""),
                "consumer.phases[0].answers[0].kind",
            ),
            (
                GOOD.replace("capacity_per_s = 400", "capacity_per_s = 0"),
                "consumer.capacity_per_s",
            ),
            (
                GOOD.replace("rate_per_s = 50", "rate_per_s = -1"),
                "publish.phases[1].rate_per_s",
            ),
            ("duration_s = [".to_string(), "(syntax)"),
            (format!("name = \"x\\u001b[2Jy\"\n{GOOD}"), "name"),
            (
                format!("description = \"{}\"\n{GOOD}", "d".repeat(1_025)),
                "description",
            ),
        ];
        for (text, field) in cases {
            let e = Scenario::parse(&text, "s.toml").unwrap_err();
            assert!(e.field.starts_with(field), "want {field}, got {e}");
            assert!(e.to_string().starts_with("s.toml: "), "{e}");
        }
    }
}

#[cfg(test)]
mod shipped {
    use super::*;

    /// The scenarios that ship, beside this crate.
    fn shipped() -> Vec<std::path::PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn the_shipped_scenarios_are_valid_and_named_after_their_files() {
        let mut files = shipped();
        let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bench/hour-at-1000.toml");
        files.push(bench);
        assert!(files.len() >= 5, "{files:?}");
        for file in files {
            let s = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                Some(s.name.as_str()),
                file.file_stem().and_then(|n| n.to_str()),
                "{}",
                file.display()
            );
            assert!(!s.description.is_empty(), "{}", file.display());
        }
    }

    /// `VERDICT_BLESS=1 cargo test -p verdict-simulate` rewrites the checked-in schema.
    #[test]
    fn the_checked_in_schema_is_current() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenario.schema.json");
        let now = serde_json::to_string_pretty(&Scenario::schema()).unwrap() + "\n";
        if std::env::var_os("VERDICT_BLESS").is_some() {
            std::fs::write(&path, &now).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == now,
            "{} is stale: run `VERDICT_BLESS=1 cargo test -p verdict-simulate`",
            path.display()
        );
    }
}
