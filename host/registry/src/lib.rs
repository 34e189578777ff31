//! # verdict-registry: the operator's policies and routes
//!
//! The control plane between the sandbox ([`verdict_runtime`]) and the gateway. It reads the
//! operator's `verdict.toml` ([`GatewayConfig`]), routes topics to policies ([`Router`]:
//! exact before the most specific wildcard before `>`), and keeps the [`Registry`]: numbered
//! generations of routes with their deciders, each built behind an admission gate (the
//! component loads and speaks the contract, matches its pin, passes its vector files and
//! the property checks of the [`conformance`] harness under a fuel ceiling) and swapped in
//! atomically, with rollback. A [`ConfigWatcher`] reloads it when the files change; a
//! [`Shadow`] policy can decide beside the active one to count where they disagree.
//!
//! ```no_run
//! use verdict_registry::{GatewayConfig, Registry};
//! use verdict_runtime::FailureSpec;
//!
//! let config = GatewayConfig::load("verdict.toml".as_ref())?;
//! let registry = Registry::new(&config, ".".as_ref())?; // paths relative to the config's directory
//! let failure = FailureSpec::from_json(r#"{"topic": "orders.eu", "error": {"kind": "http.503"}}"#)?.into_failure();
//! if let Some(decision) = registry.decide("orders.eu", &failure) {
//!     println!("{:?}", decision.verdict.action);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What this crate owns: the config file and its sections (including the words the gateway
//! reads: sources, consumers, brokers, storage), routing, generations, admission, shadows,
//! hot reload and the conformance harness. What it must not depend on: the gateway (its
//! store, sources, pipeline and admin server), the CLI, an async runtime or a network client.

#![forbid(unsafe_code)]

pub mod config;
pub mod conformance;
mod registry;
mod reload;
mod routing;
mod shadow;

pub use config::{
    AdminConfig, AdmissionConfig, ConsoleConfig, ConsumerConfig, DEFAULT_ADMIN_PORT, DelayQueues,
    DlqFormat, DlqNaming, GatewayConfig, GatewayConfigError, GatewaySection, KafkaConfig,
    KafkaRetryMode, NatsConfig, OnDeadLetter, OpenReads, OtlpProtocol, PolicyConfig,
    RabbitmqConfig, RouteConfig, RouteOrdering, SaslConfig, SaslMechanism, Secret, ShadowConfig,
    SourceKind, StorageConfig, TelemetryConfig,
};
pub use registry::{ActiveRoute, Generation, Registry, RegistryError, ReloadStatus, Upload};
pub use reload::{ConfigWatcher, WatchError};
pub use routing::{RouteError, Router, TopicPattern};
pub use shadow::{Shadow, ShadowReport};
