//! `verdict-simulate`: what a retry policy does to an outage, before it goes live.
//!
//! A [`Scenario`] describes what is published and how the consumer answers over time (an
//! outage, a brown-out, a poison burst, a rate-limited dependency). [`simulate`] runs it in
//! virtual time, asking the caller's decider for a verdict on every failure - the real
//! policy component behind the host's guardrails and fallback - and applies each verdict
//! as the gateway does, redeliveries gated by the route's retry budget when its guardrails
//! have one. The [`Report`] says what the dependency went through (deliveries
//! per second, first attempts against retries), what reached the DLQ and why, how long the
//! backlog took to drain after recovery, how long messages took to end, and how many calls
//! one message cost. The same scenario, decider and seed give the same report.
//!
//! ```no_run
//! use verdict_runtime::{Host, Limits, TopicSettings};
//! use verdict_simulate::{Scenario, simulate};
//!
//! let host = Host::new(&Limits::new())?;
//! let decider = host
//!     .load_file("rules.component.wasm".as_ref())?
//!     .configure(r#"{"max_attempts": 5}"#, TopicSettings::default())?;
//! let scenario = Scenario::load("scenarios/outage-3m.toml".as_ref())?;
//! let guardrails = &decider.settings().guardrails;
//! let report = simulate(&scenario, guardrails, &|failure| decider.decide(failure));
//! println!("{}", report.to_table(20));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod condition;
mod engine;
mod html;
mod report;
mod scenario;
#[cfg(test)]
mod test_policy;
mod worst;

pub use condition::{Condition, ConditionError};
pub use engine::run as simulate;
pub use html::html;
pub use report::{Report, Series};
pub use scenario::{
    Answer, Broker, Consumer, ConsumerPhase, MAX_DURATION_S, MAX_RATE_PER_S, Publish, PublishPhase,
    Scenario, ScenarioError,
};
pub use worst::{PROBE_KINDS, PROBE_MAX_DELIVERIES, PROBE_SEEDS, WorstCase, worst_cases};
