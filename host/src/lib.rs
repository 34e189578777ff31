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

#![forbid(unsafe_code)]

pub mod admin;
pub mod bench;
pub mod cli;
mod clock;
pub mod demo;
pub mod dlq;
pub mod envelope;
mod metrics;
pub mod pipeline;
pub mod sources;
pub mod store;

pub use metrics::{METRICS_CONTENT_TYPE, Metrics};
pub use verdict_registry::{
    ActiveRoute, AdminConfig, AdmissionConfig, ConfigWatcher, ConsumerConfig, DEFAULT_ADMIN_PORT,
    DlqFormat, DlqNaming, GatewayConfig, GatewayConfigError, GatewaySection, Generation,
    NatsConfig, PolicyConfig, RabbitmqConfig, Registry, RegistryError, ReloadStatus, RouteConfig,
    RouteError, Router, ShadowConfig, ShadowReport, SourceKind, StorageConfig, TopicPattern,
    Upload, WatchError, conformance,
};
pub use verdict_runtime::{
    Action, AttemptSpec, CacheStats, Clamp, Class, ConfigError, Decider, Decision, ErrorSpec,
    Failure, FailureSpec, Fallback, Fault, Guardrails, Host, Limits, LoadError, Policy, Provenance,
    SUPPORTED_CONTRACT, Severity, StatsSpec, TopicSettings, Verdict, jitter_seed,
};
pub use verdict_runtime::{DecisionStats, VerdictCount, text};
