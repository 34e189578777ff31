//! Why the registry refused a change. The active generation is untouched by every one.
//!
//! Each message is whole in its `Display` (the admin API, `/v1/status` and the reload log
//! show it alone), so no variant also exposes its cause as `source()`: an error chain
//! printed with `{:#}` says everything once.

use crate::RouteError;
use verdict_runtime::{ConfigError, LoadError};

/// Why a configuration, upload or operator action was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The config file could not be read or is invalid.
    #[error(transparent)]
    Config(#[from] crate::GatewayConfigError),
    /// The sandbox limits are invalid.
    #[error("sandbox: {0}")]
    Sandbox(ConfigError),
    /// A policy component failed to load.
    #[error("policy `{policy}`: {error}")]
    Load {
        /// The policy's name in the config.
        policy: String,
        /// Why.
        error: LoadError,
    },
    /// A component's digest does not match its pin.
    #[error("policy `{policy}`: sha256 is {actual}, but the config pins {pinned}")]
    Pin {
        /// The policy.
        policy: String,
        /// The pin.
        pinned: String,
        /// The component's digest.
        actual: String,
    },
    /// A policy failed its vectors or property checks.
    #[error("policy `{policy}` failed admission: {failed} check(s) failed\n{report}")]
    Admission {
        /// The policy.
        policy: String,
        /// Failed cases and properties.
        failed: usize,
        /// The human report.
        report: String,
    },
    /// A vector file is invalid.
    #[error("policy `{policy}`: {error}")]
    Vectors {
        /// The policy.
        policy: String,
        /// Why.
        error: crate::conformance::VectorError,
    },
    /// A route's config was refused by its policy.
    #[error("routes[{index}] (`{topic}`): {error}")]
    Route {
        /// The route's index.
        index: usize,
        /// Its topic pattern.
        topic: String,
        /// Why.
        error: ConfigError,
    },
    /// Routes are malformed or ambiguous.
    #[error("routes: {0}")]
    Routing(RouteError),
    /// A route names a policy the config does not define.
    #[error("routes[{index}]: no policy named `{policy}`")]
    UnknownPolicy {
        /// The route's index.
        index: usize,
        /// The name.
        policy: String,
    },
    /// An operator action names a policy the config does not define.
    #[error("no policy named `{policy}` (defined: {defined})")]
    NoSuchPolicy {
        /// The name asked for.
        policy: String,
        /// The names defined.
        defined: String,
    },
    /// Activation names a component that was never uploaded for the policy.
    #[error("policy `{policy}`: no uploaded component with sha256 {sha256}")]
    NotUploaded {
        /// The policy.
        policy: String,
        /// The digest asked for.
        sha256: String,
    },
    /// The state directory could not be written.
    #[error("{path}: {error}")]
    Storage {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What the OS said.
        error: std::io::Error,
    },
    /// No earlier generation to roll back to.
    #[error("no earlier generation to roll back to")]
    NoHistory,
    /// The topic pattern is not a route (of both the current and the previous generation,
    /// for a rollback).
    #[error("no route `{topic}`")]
    NoSuchRoute {
        /// The pattern asked for.
        topic: String,
    },
}

impl From<ConfigError> for RegistryError {
    fn from(e: ConfigError) -> Self {
        RegistryError::Sandbox(e)
    }
}

impl From<RouteError> for RegistryError {
    fn from(e: RouteError) -> Self {
        RegistryError::Routing(e)
    }
}
