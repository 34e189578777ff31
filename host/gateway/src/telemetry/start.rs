//! Starting telemetry from the config's `[telemetry]` and the process's environment.

use verdict_registry::{OtlpProtocol, TelemetryConfig};
use verdict_telemetry::{Protocol, Requested, Settings, Telemetry};

/// Why the gateway's telemetry could not start: a setting named, never a secret.
#[derive(Debug, thiserror::Error)]
#[error("[telemetry] {0}")]
pub struct StartError(String);

/// What `config` and the process's environment ask of telemetry, resolved and checked
/// (secrets read); `None` when it is off. `verdict check` shows it.
pub fn settings(config: &TelemetryConfig) -> Result<Option<Settings>, StartError> {
    let env = |name: &str| std::env::var(name).ok();
    // Whether telemetry is on at all, before any secret is read: a gateway with traces off
    // must not need the collector's key.
    let mut requested = requested(config, Vec::new());
    if Settings::resolve(&requested, &env)
        .map_err(|e| StartError(e.to_string()))?
        .is_none()
    {
        return Ok(None);
    }
    for (name, secret) in &config.headers {
        let value = secret
            .read()
            .map_err(|e| StartError(format!("telemetry.headers.{name}: {e}")))?;
        requested.headers.push((name.clone(), value));
    }
    Settings::resolve(&requested, &env).map_err(|e| StartError(e.to_string()))
}

/// What the file asks, with `headers` as the export headers.
fn requested(config: &TelemetryConfig, headers: Vec<(String, String)>) -> Requested {
    Requested {
        enabled: config.enabled,
        endpoint: config.endpoint.clone(),
        protocol: config.protocol.map(|p| match p {
            OtlpProtocol::HttpProtobuf => Protocol::HttpProtobuf,
            OtlpProtocol::Grpc => Protocol::Grpc,
        }),
        headers,
        timeout_ms: config.timeout_ms,
        service_name: config.service_name.clone(),
        sample_ratio: config.sample_ratio,
        batch_delay_ms: config.batch_delay_ms,
        tls: config.tls.clone(),
    }
}

/// Telemetry as `config` and the environment describe it, started on `runtime`; `None`
/// when it is off.
pub fn start(
    config: &TelemetryConfig,
    runtime: tokio::runtime::Handle,
) -> Result<Option<Telemetry>, StartError> {
    let Some(settings) = settings(config)? else {
        return Ok(None);
    };
    let telemetry = Telemetry::start(settings, runtime).map_err(|e| StartError(e.to_string()))?;
    let settings = telemetry.settings();
    tracing::info!(
        endpoint = %verdict_runtime::redact::redact(&settings.endpoint),
        protocol = settings.protocol.name(),
        service = %settings.service_name,
        sample_ratio = settings.sampling.ratio,
        "exporting traces over OTLP"
    );
    Ok(Some(telemetry))
}
