//! Verdict's traces: the OpenTelemetry settings, the OTLP exporter and W3C trace context.
//!
//! The gateway asks [`Telemetry::start`] for a tracer once, from its `[telemetry]` table
//! completed by the standard `OTEL_*` variables ([`Settings::resolve`]), and makes every
//! span of a delivery with it. Off - no endpoint anywhere, the default - there is no tracer
//! at all ([`Tracing::off`]) and a delivery pays one branch.
//!
//! ```
//! use verdict_telemetry::{Requested, Settings};
//!
//! // Nothing configured: off.
//! assert!(Settings::resolve(&Requested::default(), &|_| None)?.is_none());
//!
//! // The standard variable alone turns it on; the traces path is added to the base URL.
//! let env = |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://collector:4318".to_string());
//! let settings = Settings::resolve(&Requested::default(), &env)?.expect("on");
//! assert_eq!(settings.endpoint, "http://collector:4318/v1/traces");
//! # Ok::<(), verdict_telemetry::SettingsError>(())
//! ```
//!
//! Exports are best effort: spans wait in a bounded queue; a batch the collector cannot
//! take is dropped, counted ([`ExportCounts`]) and warned about at most once a minute, and a
//! span that finds the queue full is dropped. A delivery never waits for a collector.

mod export;
mod grpc;
pub mod propagation;
mod settings;
mod telemetry;

pub use export::ExportCounts;
pub use settings::{Protocol, Requested, Sampling, Settings, SettingsError};
pub use telemetry::{Telemetry, Tracing};

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting cannot be used.
    #[error("{0}")]
    Setting(String),
    /// The TLS settings for the collector cannot be used.
    #[error("{0}")]
    Tls(String),
    /// The exporter could not be built.
    #[error("the OTLP exporter for {endpoint} cannot be built: {message}")]
    Exporter {
        /// The endpoint, without credentials.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
}

impl From<SettingsError> for StartError {
    fn from(e: SettingsError) -> StartError {
        StartError::Setting(e.to_string())
    }
}
