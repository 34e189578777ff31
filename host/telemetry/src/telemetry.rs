//! The tracer provider the gateway runs with, and the cheap handle its spans are made with.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};

use crate::StartError;
use crate::export::{ExportCounts, exporter};
use crate::settings::Settings;

/// Telemetry on: the provider with its batch exporter. Dropping it without
/// [`Telemetry::shutdown`] loses what was not yet exported.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracing: Tracing,
    settings: Settings,
    counts: Arc<ExportCounts>,
}

/// The handle spans are made with: a tracer, or none when telemetry is off. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Tracing {
    tracer: Option<SdkTracer>,
}

impl Tracing {
    /// Telemetry off: no spans, nothing exported, nothing spent.
    pub fn off() -> Tracing {
        Tracing { tracer: None }
    }

    /// The tracer, when telemetry is on.
    pub fn tracer(&self) -> Option<&SdkTracer> {
        self.tracer.as_ref()
    }
}

/// The instrumentation scope every span of the gateway carries.
pub const SCOPE: &str = "verdict-gateway";

impl Telemetry {
    /// Start exporting with `settings`; exports run on `runtime` (the gateway's).
    pub fn start(
        settings: Settings,
        runtime: tokio::runtime::Handle,
    ) -> Result<Telemetry, StartError> {
        let counts = Arc::new(ExportCounts::default());
        let exporter = exporter(&settings, runtime, counts.clone())?;
        let mut batch = BatchConfigBuilder::default();
        if let Some(delay) = settings.batch_delay {
            batch = batch.with_scheduled_delay(delay.max(Duration::from_millis(1)));
        }
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch.build())
            .build();
        let ratio = Sampler::TraceIdRatioBased(settings.sampling.ratio);
        let sampler = if settings.sampling.parent_based {
            Sampler::ParentBased(Box::new(ratio))
        } else {
            ratio
        };
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer_with_scope(
            opentelemetry::InstrumentationScope::builder(SCOPE)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        Ok(Telemetry {
            provider,
            tracing: Tracing {
                tracer: Some(tracer),
            },
            settings,
            counts,
        })
    }

    /// The handle to make spans with.
    pub fn tracing(&self) -> Tracing {
        self.tracing.clone()
    }

    /// What it was started with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// What the exporter sent and failed to send so far.
    pub fn counts(&self) -> &Arc<ExportCounts> {
        &self.counts
    }

    /// Export what is finished and stop. Blocks (up to the export timeout and a second):
    /// call it from a blocking thread, never from the runtime's workers, which the export
    /// itself needs.
    pub fn shutdown(&self) {
        let limit = self.settings.timeout + Duration::from_secs(1);
        if let Err(e) = self.provider.shutdown_with_timeout(limit) {
            tracing::warn!(error = %e, "traces still queued at shutdown could not all be exported");
        }
    }
}
