//! The OTLP exporter: HTTP/protobuf through reqwest or gRPC through tonic, both over the one
//! TLS stack, run on the gateway's own runtime.
//!
//! The SDK's batch processor exports from a thread of its own, outside any async runtime;
//! both clients need one (reqwest's and tonic's connections are tokio's). [`OnRuntime`]
//! hands each export to the runtime the gateway runs on and waits for it there, so the
//! batch thread never needs a reactor and an export never runs on a delivery's task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::StartError;
use crate::settings::{Protocol, Settings};

/// Counts of what the exporter sent, for `/metrics`.
#[derive(Debug, Default)]
pub struct ExportCounts {
    /// Spans the collector accepted.
    pub exported_spans: AtomicU64,
    /// Batches that failed (the spans in them are lost: traces are best effort).
    pub failed_exports: AtomicU64,
}

/// An exporter whose exports run on a tokio runtime.
#[derive(Debug)]
pub(crate) struct OnRuntime {
    inner: Arc<opentelemetry_otlp::SpanExporter>,
    runtime: tokio::runtime::Handle,
    endpoint: String,
    counts: Arc<ExportCounts>,
    last_warning: Arc<Mutex<Option<Instant>>>,
}

/// At most one warning about failing exports this often: a collector that is down must not
/// flood the log the operator reads for the gateway's own trouble.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl OnRuntime {
    fn failed(&self, error: &str) {
        self.counts.failed_exports.fetch_add(1, Ordering::Relaxed);
        let mut last = self
            .last_warning
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(
                endpoint = %verdict_runtime::redact::redact(&self.endpoint),
                error = %verdict_runtime::text::one_line(&verdict_runtime::redact::redact(error), 512),
                "traces cannot be exported to the OTLP collector; their spans are dropped \
                 (deliveries go on; this warning repeats at most once a minute)"
            );
        }
    }
}

impl SpanExporter for OnRuntime {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let inner = self.inner.clone();
        let outcome = self
            .runtime
            .spawn(async move { inner.export(batch).await })
            .await;
        match outcome {
            Ok(Ok(())) => {
                self.counts
                    .exported_spans
                    .fetch_add(spans, Ordering::Relaxed);
                Ok(())
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string());
                Err(e)
            }
            Err(e) => {
                let text = format!("the export task ended: {e}");
                self.failed(&text);
                Err(OTelSdkError::InternalFailure(text))
            }
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        // Called once, when the provider is built, before any export shares the exporter.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// The exporter `settings` describe, its exports run on `runtime`.
pub(crate) fn exporter(
    settings: &Settings,
    runtime: tokio::runtime::Handle,
    counts: Arc<ExportCounts>,
) -> Result<OnRuntime, StartError> {
    let tls = settings
        .tls
        .client_config(&settings.tls_from)
        .map_err(|e| StartError::Tls(e.to_string()))?;
    let build = |e: opentelemetry_otlp::ExporterBuildError| StartError::Exporter {
        endpoint: format!(
            "{} ({})",
            verdict_runtime::text::redact_urls(&settings.endpoint),
            settings.endpoint_from
        ),
        message: e.to_string(),
    };
    let inner = match settings.protocol {
        Protocol::HttpProtobuf => {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(settings.timeout)
                .tls_backend_preconfigured(rustls::ClientConfig::clone(&tls))
                .build()
                .map_err(|e| StartError::Exporter {
                    endpoint: verdict_runtime::text::redact_urls(&settings.endpoint),
                    message: e.to_string(),
                })?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(settings.timeout)
                .with_http_client(client)
                .with_headers(settings.headers.iter().cloned().collect())
                .build()
                .map_err(build)?
        }
        Protocol::Grpc => {
            let channel = {
                // The channel connects lazily, on the runtime, at the first export.
                let _entered = runtime.enter();
                crate::grpc::channel(settings, tls)?
            };
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (name, value) in &settings.headers {
                let key =
                    tonic::metadata::MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                        .map_err(|_| {
                            StartError::Setting(format!(
                                "telemetry.headers.{name}: not a gRPC metadata key"
                            ))
                        })?;
                let value = value.parse().map_err(|_| {
                    StartError::Setting(format!(
                        "telemetry.headers.{name}: not a gRPC metadata value"
                    ))
                })?;
                metadata.insert(key, value);
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_channel(channel)
                .with_timeout(settings.timeout)
                .with_metadata(metadata)
                .build()
                .map_err(build)?
        }
    };
    Ok(OnRuntime {
        inner: Arc::new(inner),
        runtime,
        endpoint: settings.endpoint.clone(),
        counts,
        last_warning: Arc::new(Mutex::new(None)),
    })
}
