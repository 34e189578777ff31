//! # verdict-runtime: decide with sandboxed retry/dead-letter policies
//!
//! The sandbox core of Verdict, on its own so that a team with its own consumer loop (a
//! Kafka consumer, a job runner) can embed the decision engine: Wasmtime and the contract
//! types, no async runtime, no HTTP, no database, no broker client.
//!
//! A [`Host`] owns one Wasmtime engine configured by [`Limits`]. It loads policy components
//! ([`Policy`]), checking that they speak the `verdict:policy` contract and import nothing
//! else. A policy bound to a topic's config and [`TopicSettings`] is a [`Decider`], which
//! turns a [`Failure`] into a [`Decision`]: the verdict after [`Guardrails`], its
//! [`Provenance`], and the [`Fault`] when the [`Fallback`] had to step in.
//!
//! ```no_run
//! use verdict_runtime::{FailureSpec, Host, Limits, TopicSettings};
//!
//! let host = Host::new(&Limits::new())?;
//! let policy = host.load_file("target/wasm32-unknown-unknown/release/rules.component.wasm".as_ref())?;
//! let orders = policy.configure(r#"{"max_attempts": 5}"#, TopicSettings::default())?;
//!
//! let failure = FailureSpec::from_json(r#"{"attempt": 5, "error": {"kind": "db.timeout"}}"#)?.into_failure();
//! let decision = orders.decide(&failure);
//! println!("{:?}: {}", decision.verdict.action, decision.verdict.reason);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/decide.rs` is the same as a program: `cargo run -p verdict-runtime --example
//! decide -- <policy.component.wasm> '<failure JSON>'`.
//!
//! Decisions never panic and never hang: the epoch deadline stops endless loops, the memory
//! cap stops memory bombs, a scan before compiling refuses compile bombs, and any trap yields
//! the topic's fallback verdict with the cause.
//!
//! What this crate owns: the engine and its limits, the contract check and bindings, loaded
//! policies and their warm instances, deciders, guardrails, fallbacks, decisions and their
//! counters, the compiled-artifact cache, and the bounded-text rules every layer above uses
//! for strings from outside. What it must not depend on: the registry, the gateway, the CLI,
//! or anything that brings in tokio, axum, hyper, rusqlite, lapin, async-nats or reqwest.

// One audited exception: loading compiled code from the artifact cache (`artifacts.rs`).
#![deny(unsafe_code)]

mod artifacts;
mod bindings;
pub mod bounds;
mod contract;
mod decider;
mod decision;
pub mod digest;
mod engine;
mod error;
mod failure;
mod fallback;
pub mod fsutil;
mod guardrails;
mod instance;
mod limits;
mod policy;
pub mod redact;
mod retry_budget;
mod stats;
mod stats_window;
pub mod text;
mod wasi;
mod wit;

pub use artifacts::CacheStats;
pub use contract::{Contract, SUPPORTED_CONTRACT};
pub use decider::{Decider, TopicSettings};
pub use decision::{Clamp, Decision, Provenance};
pub use engine::Host;
pub use error::{ConfigError, Fault, LoadError};
pub use failure::{ErrorSpec, Failure, FailureSpec, StatsSpec};
pub use fallback::Fallback;
pub use guardrails::Guardrails;
pub use limits::Limits;
pub use policy::Policy;
pub use retry_budget::{MAX_BUDGET_WINDOW_S, RetryBudget, RetryBudgetWindow};
pub use stats::{CLASSES, DecisionStats, VerdictCount, class_index, class_name};
pub use stats_window::{STATS_WINDOW_MS, StatsWindow};
pub use verdict_types::{Action, AttemptRecord, Class, Severity, SplitMix64, Verdict, jitter_seed};
pub use wasi::{WASI_INTERFACES, WasiInterface, describe as describe_wasi};
