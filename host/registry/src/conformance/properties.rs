//! Property checks any policy is held to, with no vectors: a bounded, seeded sweep of
//! error kinds, attempts, seeds and topic statistics. A violation is shrunk to the smallest
//! input that still shows it.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};
use verdict_types::{Action, SplitMix64};

use verdict_runtime::{Clamp, Decider, Decision, FailureSpec, Fault, Policy, TopicSettings};

/// How far to sweep.
#[derive(Debug, Clone)]
pub struct PropertyOptions {
    /// Generated inputs per property.
    pub inputs: u32,
    /// Seed of the sweep (the same seed explores the same inputs).
    pub seed: u64,
    /// Kinds known never to succeed on retry (by default `verdict_types::NEVER_RETRY_KINDS`,
    /// what the SDK's `Failure::never_retry` answers): a policy must not retry them,
    /// whatever class it gives.
    pub never_retry_kinds: Vec<String>,
    /// The policy declares a monotone strategy: for one message (same kind and statistics,
    /// the seed the host derives for each attempt), a later attempt never gets a shorter
    /// retry delay than an earlier one.
    pub monotone: bool,
}

impl Default for PropertyOptions {
    fn default() -> Self {
        PropertyOptions {
            inputs: 200,
            seed: 0x5eed,
            never_retry_kinds: verdict_types::NEVER_RETRY_KINDS.map(String::from).to_vec(),
            monotone: false,
        }
    }
}

/// The smallest failing input found.
#[derive(Debug, Clone, Serialize)]
pub struct Counterexample {
    /// What went wrong.
    pub message: String,
    /// The failure (JSON, `verdict decide` format) that shows it.
    pub failure: String,
}

/// The outcome of one property.
#[derive(Debug, Clone, Serialize)]
pub struct PropertyResult {
    /// The property.
    pub name: String,
    /// True when no input violated it.
    pub passed: bool,
    /// Inputs tried.
    pub inputs: u32,
    /// The shrunk violation, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<Counterexample>,
}

const KINDS: [&str; 14] = [
    "db.timeout",
    "db.deadlock",
    "http.503",
    "http.429",
    "http.500",
    "transport.refused",
    "net.timeout",
    "json.parse",
    "schema.unknown_version",
    "auth.denied",
    "biz.stock_locked",
    "card.declined",
    "gateway.502",
    "mystery.error",
];

/// One generated input: everything a property varies.
#[derive(Debug, Clone, PartialEq)]
struct Input {
    kind: String,
    attempt: u32,
    seed: u64,
    deliveries: u32,
    failures: u32,
    consecutive: u32,
    retry_after_ms: Option<u64>,
    payload: Option<Value>,
}

impl Input {
    fn generate(rng: &mut SplitMix64) -> Input {
        let deliveries = rng.between(0, 1_000) as u32;
        Input {
            kind: KINDS[rng.between(0, KINDS.len() as u64 - 1) as usize].to_string(),
            attempt: rng.between(1, 40) as u32,
            seed: rng.next_u64(),
            deliveries,
            failures: rng.between(0, u64::from(deliveries)) as u32,
            consecutive: rng.between(0, 60) as u32,
            retry_after_ms: (rng.between(0, 3) == 0).then(|| rng.between(0, 120_000)),
            payload: match rng.between(0, 2) {
                0 => None,
                1 => Some(
                    json!({"schema_version": rng.between(1, 3), "amount": rng.between(0, 500)}),
                ),
                _ => Some(json!("not json {")),
            },
        }
    }

    fn spec(&self, attempt: u32, deferrals: u32, now_ms: u64) -> FailureSpec {
        let mut json = json!({
            "topic": "property", "message-id": "m", "attempt": attempt, "deferrals": deferrals,
            "now-ms": now_ms, "jitter-seed": self.seed,
            "error": {"kind": self.kind, "retry-after-ms": self.retry_after_ms},
            "stats": {"window-ms": 60_000, "deliveries": self.deliveries, "failures": self.failures,
                      "consecutive-failures": self.consecutive}
        });
        if let Some(p) = &self.payload {
            json["payload"] = p.clone();
        }
        FailureSpec::from_json(&json.to_string()).unwrap_or_default()
    }

    fn json(&self) -> String {
        let s = self.spec(self.attempt, 0, 0);
        let mut v =
            json!({"attempt": s.attempt, "jitter-seed": self.seed, "error": {"kind": self.kind}});
        if let Some(ms) = self.retry_after_ms {
            v["error"]["retry-after-ms"] = json!(ms);
        }
        if self.deliveries + self.failures + self.consecutive > 0 {
            v["stats"] = json!({"deliveries": self.deliveries, "failures": self.failures, "consecutive-failures": self.consecutive});
        }
        if let Some(p) = &self.payload {
            v["payload"] = p.clone();
        }
        v.to_string()
    }

    /// Simpler variants, simplest first.
    fn shrinks(&self) -> Vec<Input> {
        let mut out = Vec::new();
        let mut push = |f: &dyn Fn(&mut Input)| {
            let mut c = self.clone();
            f(&mut c);
            if c != *self {
                out.push(c);
            }
        };
        push(&|c| c.attempt = 1);
        push(&|c| c.attempt = c.attempt.saturating_sub(1).max(1));
        push(&|c| c.seed = 0);
        push(&|c| (c.deliveries, c.failures, c.consecutive) = (0, 0, 0));
        push(&|c| c.consecutive = 0);
        push(&|c| c.retry_after_ms = None);
        push(&|c| c.payload = None);
        out
    }
}

type Check<'a> = dyn Fn(&Input) -> Option<String> + 'a;

/// Run every property against `policy` configured with `config`. Fuel exhaustion shows as
/// a fault when the policy's host meters fuel (see [`verdict_runtime::Limits::fuel_per_decision`]).
pub fn check_properties(
    policy: &Arc<Policy>,
    config: &str,
    settings: &TopicSettings,
    options: &PropertyOptions,
) -> Result<Vec<PropertyResult>, verdict_runtime::ConfigError> {
    let decider = policy.configure(config, settings.clone())?;
    let guard = &settings.guardrails;
    let d = &decider;
    let properties: Vec<(&str, Box<Check<'_>>)> = vec![
        (
            "deterministic: the same input gives the same verdict",
            Box::new(|i: &Input| deterministic(d, i)),
        ),
        (
            "contained: no trap, timeout, memory or fuel fault",
            Box::new(|i: &Input| contained(d, i)),
        ),
        (
            "terminal classes (poison, permanent, ...) are never retried",
            Box::new(|i: &Input| {
                decide(d, i)
                    .clamps
                    .contains(&Clamp::TerminalClass)
                    .then(|| "a retry or delay came with a terminal class".into())
            }),
        ),
        (
            "never-retry kinds are not retried",
            Box::new(|i: &Input| never_retry(d, i, &options.never_retry_kinds)),
        ),
        (
            "delays stay within the cap",
            Box::new(|i: &Input| {
                decide(d, i)
                    .clamps
                    .iter()
                    .find(|c| matches!(c, Clamp::DelayCapped { .. }))
                    .map(|c| format!("{c:?}"))
            }),
        ),
        (
            "every message ends in dead-letter or discard within the ceiling",
            Box::new(move |i: &Input| terminates(d, i, guard)),
        ),
    ];
    let mut properties = properties;
    if options.monotone {
        properties.push((
            "delays never go backwards (declared monotone)",
            Box::new(|i: &Input| monotone(d, i)),
        ));
    }
    let mut results = Vec::new();
    for (name, check) in properties {
        let mut rng = SplitMix64::new(options.seed);
        let mut counterexample = None;
        for _ in 0..options.inputs {
            let input = Input::generate(&mut rng);
            if let Some(message) = check(&input) {
                let (smallest, message) = shrink(input, message, &*check);
                counterexample = Some(Counterexample {
                    message,
                    failure: smallest.json(),
                });
                break;
            }
        }
        results.push(PropertyResult {
            name: name.to_string(),
            passed: counterexample.is_none(),
            inputs: options.inputs,
            counterexample,
        });
    }
    Ok(results)
}

fn shrink(mut input: Input, mut message: String, check: &Check<'_>) -> (Input, String) {
    'outer: loop {
        for candidate in input.shrinks() {
            if let Some(m) = check(&candidate) {
                (input, message) = (candidate, m);
                continue 'outer;
            }
        }
        return (input, message);
    }
}

fn decide(d: &Decider, i: &Input) -> Decision {
    d.decide(&i.spec(i.attempt, 0, 0).into_failure())
}

fn deterministic(d: &Decider, i: &Input) -> Option<String> {
    let (a, b) = (decide(d, i), decide(d, i));
    (a.verdict != b.verdict).then(|| format!("{:?} then {:?}", a.verdict, b.verdict))
}

fn contained(d: &Decider, i: &Input) -> Option<String> {
    decide(d, i)
        .fallback
        .map(|f: Fault| format!("policy fault: {f}"))
}

fn never_retry(d: &Decider, i: &Input, kinds: &[String]) -> Option<String> {
    if !kinds
        .iter()
        .any(|k| verdict_types::kind_matches(k, &i.kind))
    {
        return None;
    }
    let v = decide(d, i).verdict;
    matches!(
        v.action,
        Action::Retry(_) | Action::Delay(_) | Action::Pause(_)
    )
    .then(|| format!("{} was answered {:?}", i.kind, v.action))
}

/// Retry delays of one message at attempts 1..=input.attempt (same kind and statistics, and
/// the seed the host derives for each attempt): none may be shorter than the one before.
fn monotone(d: &Decider, i: &Input) -> Option<String> {
    let mut previous: Option<(u32, u64)> = None;
    let message = format!("m-{}", i.seed);
    for attempt in 1..=i.attempt {
        let at = Input {
            seed: verdict_runtime::jitter_seed(&message, attempt),
            ..i.clone()
        };
        let Action::Retry(ms) = d
            .decide(&at.spec(attempt, 0, 0).into_failure())
            .verdict
            .action
        else {
            break;
        };
        if let Some((at, before)) = previous
            && ms < before
        {
            return Some(format!(
                "attempt {attempt} waits {ms} ms, less than attempt {at}'s {before} ms"
            ));
        }
        previous = Some((attempt, ms));
    }
    None
}

/// Replay one message's life: retries spend attempts, delays spend deferrals and time. The
/// policy itself must end it; if a guardrail had to, that is the violation.
fn terminates(d: &Decider, i: &Input, guard: &verdict_runtime::Guardrails) -> Option<String> {
    let (mut attempt, mut deferrals, mut now) = (1u32, 0u32, 0u64);
    let steps = guard.max_attempts as usize + guard.max_deferrals as usize + 2;
    for _ in 0..steps {
        let decision = d.decide(&i.spec(attempt, deferrals, now).into_failure());
        if let Some(clamp) = decision.clamps.iter().find(|c| {
            matches!(
                c,
                Clamp::AttemptCeiling { .. } | Clamp::DeferralBound { .. }
            )
        }) {
            return Some(format!(
                "the host had to end it at attempt {attempt}, deferral {deferrals}: {clamp:?}"
            ));
        }
        match decision.verdict.action {
            Action::Retry(ms) => (attempt, now) = (attempt + 1, now.saturating_add(ms)),
            // A pause spends what a delay does for the message it was asked about.
            Action::Delay(ms) | Action::Pause(ms) => {
                (deferrals, now) = (deferrals + 1, now.saturating_add(ms));
            }
            Action::DeadLetter | Action::Discard => return None,
        }
    }
    Some(format!("still retrying after {steps} steps"))
}
