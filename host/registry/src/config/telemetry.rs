//! `[telemetry]`: traces of every delivery, exported over OTLP to a collector.
//!
//! ```toml
//! [telemetry]
//! endpoint = "http://127.0.0.1:4318"        # OTLP/HTTP; `/v1/traces` is added
//! headers = { x-api-key = { env = "COLLECTOR_KEY" } }
//! sample_ratio = 0.1                         # of the traces the gateway starts
//! ```
//!
//! Every field may be left to the standard OpenTelemetry variables instead
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER`, ...); what the file sets wins.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Secret, TlsConfig};

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies.
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC.
    #[serde(rename = "grpc")]
    Grpc,
}

/// Traces of every delivery, exported over OTLP. Off unless an endpoint is set here or in
/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`. Read when the gateway
/// starts: a change takes effect at the next start.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `false` turns traces off whatever the environment says; `true` turns them on, to
    /// `http://localhost:4318` (`grpc`: `:4317`) when no endpoint is set anywhere. Unset: on
    /// when an endpoint is known.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The collector: for `http/protobuf` its base URL (`/v1/traces` is added when the URL
    /// has no path), for `grpc` its address (`http://host:4317`). `https://` uses `tls`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `http/protobuf` (the default) or `grpc`.
    #[serde(default)]
    pub protocol: Option<OtlpProtocol>,
    /// Headers (gRPC metadata) sent with every export, such as a vendor's API key; each value
    /// a secret read from `{ env = "NAME" }` or `{ file = "path" }`, never written here.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// How long one export may take, in milliseconds (default 10000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The `service.name` the traces carry (default `verdict`).
    #[serde(default)]
    pub service_name: Option<String>,
    /// The fraction of traces the gateway starts that are kept, 0 to 1 (default 1). A message
    /// whose producer sent a trace context follows the producer's sampling decision.
    #[serde(default)]
    pub sample_ratio: Option<f64>,
    /// How long finished spans wait to be exported together, in milliseconds (default
    /// `OTEL_BSP_SCHEDULE_DELAY`, else 5000).
    #[serde(default)]
    pub batch_delay_ms: Option<u64>,
    /// TLS to an `https://` collector: the same table as every other peer's.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
}

impl TelemetryConfig {
    /// The same settings with relative paths taken from `base`.
    pub(super) fn resolved(&self, base: &Path) -> TelemetryConfig {
        TelemetryConfig {
            headers: self
                .headers
                .iter()
                .map(|(name, secret)| (name.clone(), secret.resolved(base)))
                .collect(),
            tls: self.tls.as_ref().map(|t| t.resolved(base)),
            ..self.clone()
        }
    }

    /// What a loaded file cannot mean: a field and the problem.
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        if let Some(ratio) = self.sample_ratio
            && !(0.0..=1.0).contains(&ratio)
        {
            return Err((
                "telemetry.sample_ratio".into(),
                format!("{ratio} is not between 0 and 1"),
            ));
        }
        if self.timeout_ms == Some(0) {
            return Err(("telemetry.timeout_ms".into(), "must be at least 1".into()));
        }
        if self.batch_delay_ms == Some(0) {
            return Err((
                "telemetry.batch_delay_ms".into(),
                "must be at least 1 (milliseconds finished spans wait to leave together)".into(),
            ));
        }
        if let Some(endpoint) = &self.endpoint {
            let parsed = url::Url::parse(endpoint).map_err(|e| {
                (
                    "telemetry.endpoint".to_string(),
                    format!(
                        "`{}` is not a URL: {e}",
                        verdict_runtime::text::redact_urls(endpoint)
                    ),
                )
            })?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                return Err((
                    "telemetry.endpoint".into(),
                    format!(
                        "`{}` must be an http:// or https:// URL with a host",
                        verdict_runtime::text::redact_urls(endpoint)
                    ),
                ));
            }
            if self.tls.is_some() && parsed.scheme() != "https" {
                return Err((
                    "telemetry.tls".into(),
                    "is set but the endpoint is not https://".into(),
                ));
            }
        }
        if let Some(tls) = &self.tls {
            tls.client_config("telemetry.tls")
                .map_err(|e| (e.setting().to_string(), e.problem()))?;
        }
        Ok(())
    }
}
