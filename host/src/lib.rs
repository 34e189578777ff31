//! # verdict-host: run sandboxed retry/dead-letter policies
//!
//! A [`Host`] owns one Wasmtime engine configured by [`Limits`]. It loads policy
//! components ([`Policy`]), checking that they speak the `verdict:policy` contract and import
//! nothing else. A policy bound to a topic's config and [`TopicSettings`] is a [`Decider`],
//! which turns a [`Failure`] into a [`Decision`]: the verdict after [`Guardrails`], its
//! [`Provenance`], and the [`Fault`] when the [`Fallback`] had to step in.
//!
//! ```no_run
//! use verdict_host::{FailureSpec, Host, Limits, TopicSettings};
//!
//! let host = Host::new(&Limits::new())?;
//! let policy = host.load_file("target/wasm32-unknown-unknown/release/rules.component.wasm".as_ref())?;
//! let payments = policy.configure(r#"{"max_attempts": 5}"#, TopicSettings::default())?;
//!
//! let failure = FailureSpec::from_json(r#"{"attempt": 5, "error": {"kind": "db.timeout"}}"#)?.into_failure();
//! let decision = payments.decide(&failure);
//! println!("{}", serde_json::to_string_pretty(&decision)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Decisions never panic and never hang: the epoch deadline stops endless loops, the memory
//! cap stops memory bombs, and any trap yields the topic's fallback verdict with the cause.
//!
//! A gateway runs many topics: a [`Registry`] routes each topic to its policy and config from a
//! [`GatewayConfig`], admits every new version through the [`conformance`] harness before it
//! goes live, swaps generations atomically, and rolls back. [`admin`] serves it over HTTP
//! (`verdict run`), and [`cli`] holds every `verdict` command as a function.

// One audited exception: loading compiled code from the artifact cache (`artifacts.rs`).
#![deny(unsafe_code)]

pub mod admin;
mod artifacts;
pub mod bench;
mod bindings;
mod bounds;
pub mod cli;
mod clock;
mod config;
pub mod conformance;
mod contract;
mod decider;
mod decision;
pub mod demo;
pub mod dlq;
mod engine;
pub mod envelope;
mod error;
mod failure;
mod fallback;
mod fsutil;
mod guardrails;
mod instance;
mod limits;
mod metrics;
pub mod pipeline;
mod policy;
mod registry;
mod reload;
mod routing;
mod shadow;
pub mod sources;
mod stats;
pub mod store;
pub mod text;

pub use artifacts::CacheStats;
pub use config::{
    AdminConfig, AdmissionConfig, ConsumerConfig, DEFAULT_ADMIN_PORT, DlqFormat, DlqNaming,
    GatewayConfig, GatewayConfigError, GatewaySection, NatsConfig, PolicyConfig, RabbitmqConfig,
    RouteConfig, ShadowConfig, StorageConfig,
};
pub use contract::SUPPORTED_CONTRACT;
pub use decider::{Decider, TopicSettings};
pub use decision::{Clamp, Decision, Provenance};
pub use engine::Host;
pub use error::{ConfigError, Fault, LoadError};
pub use failure::{AttemptSpec, ErrorSpec, Failure, FailureSpec, StatsSpec, jitter_seed};
pub use fallback::Fallback;
pub use guardrails::Guardrails;
pub use limits::Limits;
pub use metrics::{METRICS_CONTENT_TYPE, Metrics};
pub use policy::Policy;
pub use registry::{ActiveRoute, Generation, Registry, RegistryError, Upload};
pub use reload::{ConfigWatcher, ReloadStatus, WatchError};
pub use routing::{RouteError, Router, TopicPattern};
pub use shadow::{Shadow, ShadowReport};
pub use stats::{DecisionStats, VerdictCount};
pub use verdict_sdk::{Action, Class, Severity, Verdict};

/// Cut `s` to at most `max` bytes on a character boundary.
pub(crate) fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}
