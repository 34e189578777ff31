//! What the exporter is told: the operator's `[telemetry]` settings, completed from the
//! standard OpenTelemetry environment variables, checked once.
//!
//! A setting in the config file wins over its environment variable; the variable fills what
//! the file leaves unset, so a deployment that configures every process through `OTEL_*`
//! needs no `[telemetry]` table at all. Telemetry is on when an endpoint is known (from
//! `endpoint`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`) or
//! `enabled = true`, and off when `enabled = false`, `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` say so.

use std::time::Duration;

use verdict_tls::TlsConfig;

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`), to `<endpoint>/v1/traces`.
    HttpProtobuf,
    /// OTLP/gRPC (`grpc`).
    Grpc,
}

impl Protocol {
    /// The name `OTEL_EXPORTER_OTLP_PROTOCOL` and `[telemetry] protocol` use.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    }

    /// The protocol named `text`, as the environment variables spell it.
    pub fn parse(text: &str) -> Result<Protocol, String> {
        match text.trim() {
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "grpc" => Ok(Protocol::Grpc),
            "http/json" => {
                Err("`http/json` is not supported; use `http/protobuf` or `grpc`".into())
            }
            other => Err(format!(
                "`{}` is not an OTLP protocol (expected `http/protobuf` or `grpc`)",
                verdict_runtime::text::one_line(other, 64)
            )),
        }
    }

    /// Where a collector listens by default.
    fn default_endpoint(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http://localhost:4318",
            Protocol::Grpc => "http://localhost:4317",
        }
    }
}

/// Which traces are kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// A message whose producer sent a trace context follows the producer's decision
    /// (`sampled` flag); only traces the gateway starts are sampled by `ratio`.
    pub parent_based: bool,
    /// The fraction of the traces the gateway starts that are kept (0 to 1).
    pub ratio: f64,
}

/// What the operator wrote in `[telemetry]`, its secrets already read.
#[derive(Debug, Clone, Default)]
pub struct Requested {
    /// `enabled`.
    pub enabled: Option<bool>,
    /// `endpoint`.
    pub endpoint: Option<String>,
    /// `protocol`.
    pub protocol: Option<Protocol>,
    /// `headers`, values read.
    pub headers: Vec<(String, String)>,
    /// `timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// `service_name`.
    pub service_name: Option<String>,
    /// `sample_ratio`.
    pub sample_ratio: Option<f64>,
    /// `batch_delay_ms`.
    pub batch_delay_ms: Option<u64>,
    /// `tls`.
    pub tls: Option<TlsConfig>,
}

/// Everything the exporter needs, resolved and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The URL spans are sent to: for HTTP the full traces URL, for gRPC the collector.
    pub endpoint: String,
    /// The setting or variable the endpoint came from, for errors.
    pub endpoint_from: String,
    /// The transport.
    pub protocol: Protocol,
    /// Headers (or gRPC metadata) sent with every export. The exporter adds the ones
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (else `OTEL_EXPORTER_OTLP_HEADERS`) names, whose
    /// value wins for a name both give.
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Which traces are kept.
    pub sampling: Sampling,
    /// How long finished spans wait to be sent in one batch; `None`: `OTEL_BSP_SCHEDULE_DELAY`
    /// or the SDK's 5 s.
    pub batch_delay: Option<Duration>,
    /// TLS to an `https://` endpoint.
    pub tls: TlsConfig,
    /// Where the TLS settings came from, for errors.
    pub tls_from: String,
}

/// A setting that cannot be used, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct SettingsError {
    /// The `[telemetry]` field or environment variable.
    pub setting: String,
    /// What is wrong with it.
    pub message: String,
}

fn error(setting: &str, message: impl Into<String>) -> SettingsError {
    SettingsError {
        setting: setting.to_string(),
        message: message.into(),
    }
}

/// The value of an environment variable, `None` when unset or blank.
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn var(env: Env<'_>, name: &str) -> Option<(String, String)> {
    env(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .map(|v| (name.to_string(), v))
}

/// The first of `names` that is set, with its name.
fn first(env: Env<'_>, names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|name| var(env, name))
}

impl Settings {
    /// The settings `requested` and the environment (`env`, e.g.
    /// `|name| std::env::var(name).ok()`) describe; `None` when telemetry is off.
    pub fn resolve(requested: &Requested, env: Env<'_>) -> Result<Option<Settings>, SettingsError> {
        let truthy =
            |name: &str| var(env, name).is_some_and(|(_, v)| v.eq_ignore_ascii_case("true"));
        match requested.enabled {
            Some(false) => return Ok(None),
            Some(true) => {}
            None => {
                if truthy("OTEL_SDK_DISABLED") {
                    return Ok(None);
                }
            }
        }
        // Off unless something names a collector: the other variables are then none of this
        // process's business (a shared environment may hold values meant for other SDKs).
        let named = requested.endpoint.is_some()
            || requested.enabled == Some(true)
            || first(
                env,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                ],
            )
            .is_some();
        if !named {
            return Ok(None);
        }
        if let Some((name, exporter)) = var(env, "OTEL_TRACES_EXPORTER") {
            match exporter.as_str() {
                "otlp" => {}
                "none" if requested.enabled != Some(true) => return Ok(None),
                "none" => {}
                other => {
                    return Err(error(
                        &name,
                        format!(
                            "`{}`: only `otlp` (or `none`) is supported",
                            verdict_runtime::text::one_line(other, 64)
                        ),
                    ));
                }
            }
        }
        let protocol = match requested.protocol {
            Some(p) => p,
            None => match first(
                env,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                    "OTEL_EXPORTER_OTLP_PROTOCOL",
                ],
            ) {
                Some((name, value)) => Protocol::parse(&value).map_err(|m| error(&name, m))?,
                None => Protocol::HttpProtobuf,
            },
        };
        let Some((endpoint_from, endpoint)) = endpoint(requested, protocol, env)? else {
            return Ok(None);
        };
        let timeout_ms = match requested.timeout_ms {
            Some(ms) => Some(("telemetry.timeout_ms".to_string(), ms)),
            None => match first(
                env,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                    "OTEL_EXPORTER_OTLP_TIMEOUT",
                ],
            ) {
                Some((name, value)) => Some((
                    name.clone(),
                    value
                        .parse::<u64>()
                        .map_err(|_| error(&name, "expected a whole number of milliseconds"))?,
                )),
                None => None,
            },
        };
        let timeout = match timeout_ms {
            Some((name, 0)) => return Err(error(&name, "must be at least 1 ms")),
            Some((_, ms)) => Duration::from_millis(ms),
            None => Duration::from_secs(10),
        };
        for (name, value) in &requested.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(error(
                    &format!(
                        "telemetry.headers.{}",
                        verdict_runtime::text::one_line(name, 64)
                    ),
                    "is not a valid header name",
                ));
            }
            if http::HeaderValue::from_str(value).is_err() {
                return Err(error(
                    &format!("telemetry.headers.{name}"),
                    "its value is not a valid header value (one line of visible characters)",
                ));
            }
        }
        // The exporter reads these itself; their values (API keys, most often) are secrets.
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some((_, list)) = var(env, name) {
                for pair in list.split(',') {
                    if let Some((_, value)) = pair.split_once('=') {
                        verdict_runtime::redact::remember(value.trim());
                    }
                }
            }
        }
        let service_name = requested
            .service_name
            .clone()
            .or_else(|| var(env, "OTEL_SERVICE_NAME").map(|(_, v)| v))
            .or_else(|| {
                var(env, "OTEL_RESOURCE_ATTRIBUTES").and_then(|(_, list)| {
                    list.split(',').find_map(|pair| {
                        let (key, value) = pair.split_once('=')?;
                        (key.trim() == "service.name").then(|| value.trim().to_string())
                    })
                })
            })
            .unwrap_or_else(|| "verdict".to_string());
        let sampling = sampling(requested, env)?;
        let batch_delay = requested.batch_delay_ms.map(Duration::from_millis);
        let tls_from = if requested.tls.is_some() {
            "telemetry.tls"
        } else {
            "OTEL_EXPORTER_OTLP_CERTIFICATE"
        }
        .to_string();
        let tls = match &requested.tls {
            Some(tls) => tls.clone(),
            None => TlsConfig {
                ca_file: first(
                    env,
                    &[
                        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                        "OTEL_EXPORTER_OTLP_CERTIFICATE",
                    ],
                )
                .map(|(_, v)| v.into()),
                client_cert: first(
                    env,
                    &[
                        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
                        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    ],
                )
                .map(|(_, v)| v.into()),
                client_key: first(
                    env,
                    &[
                        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
                        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
                    ],
                )
                .map(|(_, v)| v.into()),
                server_name: None,
            },
        };
        Ok(Some(Settings {
            endpoint,
            endpoint_from,
            protocol,
            headers: requested.headers.clone(),
            timeout,
            service_name,
            sampling,
            batch_delay,
            tls,
            tls_from,
        }))
    }
}

/// The traces URL and where it came from; `None` when nothing names one and telemetry was
/// not asked for explicitly.
fn endpoint(
    requested: &Requested,
    protocol: Protocol,
    env: Env<'_>,
) -> Result<Option<(String, String)>, SettingsError> {
    // A base URL (the file's, `OTEL_EXPORTER_OTLP_ENDPOINT`, the default) gets the traces
    // path appended for HTTP; the signal's own variable is used as it is (the spec's rule).
    let (from, url, base) = if let Some(url) = &requested.endpoint {
        ("telemetry.endpoint".to_string(), url.clone(), true)
    } else if let Some((name, url)) = var(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        (name, url, false)
    } else if let Some((name, url)) = var(env, "OTEL_EXPORTER_OTLP_ENDPOINT") {
        (name, url, true)
    } else if requested.enabled == Some(true) {
        (
            "telemetry.enabled".to_string(),
            protocol.default_endpoint().to_string(),
            true,
        )
    } else {
        return Ok(None);
    };
    let parsed = url::Url::parse(&url).map_err(|e| {
        error(
            &from,
            format!(
                "`{}` is not a URL: {e}",
                verdict_runtime::text::redact_urls(&url)
            ),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(error(
            &from,
            format!(
                "`{}` must be an http:// or https:// URL with a host",
                verdict_runtime::text::redact_urls(&url)
            ),
        ));
    }
    verdict_runtime::redact::remember_url(&url);
    // The file's URL with a path is the operator's full traces URL; a base URL (the
    // standard variable's always is) gets the signal's path, on the parsed URL so a query
    // stays a query.
    let append = protocol == Protocol::HttpProtobuf
        && base
        && (from != "telemetry.endpoint" || parsed.path().is_empty() || parsed.path() == "/");
    let mut parsed = parsed;
    if append {
        let path = format!("{}/v1/traces", parsed.path().trim_end_matches('/'));
        parsed.set_path(&path);
    }
    let url = if append { parsed.to_string() } else { url };
    Ok(Some((from, url)))
}

fn sampling(requested: &Requested, env: Env<'_>) -> Result<Sampling, SettingsError> {
    if let Some(ratio) = requested.sample_ratio {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(error(
                "telemetry.sample_ratio",
                format!("{ratio} is not between 0 and 1"),
            ));
        }
        return Ok(Sampling {
            parent_based: true,
            ratio,
        });
    }
    let arg = || -> Result<f64, SettingsError> {
        match var(env, "OTEL_TRACES_SAMPLER_ARG") {
            None => Ok(1.0),
            Some((name, value)) => value
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| error(&name, "expected a ratio between 0 and 1")),
        }
    };
    let Some((name, sampler)) = var(env, "OTEL_TRACES_SAMPLER") else {
        return Ok(Sampling {
            parent_based: true,
            ratio: 1.0,
        });
    };
    let (parent_based, ratio) = match sampler.as_str() {
        "always_on" => (false, 1.0),
        "always_off" => (false, 0.0),
        "traceidratio" => (false, arg()?),
        "parentbased_always_on" => (true, 1.0),
        "parentbased_always_off" => (true, 0.0),
        "parentbased_traceidratio" => (true, arg()?),
        other => {
            return Err(error(
                &name,
                format!(
                    "`{}` is not a sampler this gateway knows (always_on, always_off, \
                     traceidratio, parentbased_always_on, parentbased_always_off, \
                     parentbased_traceidratio)",
                    verdict_runtime::text::one_line(other, 64)
                ),
            ));
        }
    };
    Ok(Sampling {
        parent_based,
        ratio,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(
        requested: &Requested,
        vars: &[(&str, &str)],
    ) -> Result<Option<Settings>, SettingsError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::resolve(requested, &|name| vars.get(name).cloned())
    }

    #[test]
    fn telemetry_is_off_unless_an_endpoint_or_enabled_says_otherwise() {
        assert_eq!(resolve(&Requested::default(), &[]), Ok(None));
        let on = resolve(
            &Requested {
                enabled: Some(true),
                ..Requested::default()
            },
            &[],
        )
        .unwrap()
        .unwrap();
        assert_eq!(on.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(on.service_name, "verdict");
        assert_eq!(
            on.sampling,
            Sampling {
                parent_based: true,
                ratio: 1.0
            }
        );
        let from_env = resolve(
            &Requested::default(),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(from_env.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(from_env.endpoint_from, "OTEL_EXPORTER_OTLP_ENDPOINT");
        let disabled = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(resolve(&Requested::default(), &disabled), Ok(None));
        let none = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ];
        assert_eq!(resolve(&Requested::default(), &none), Ok(None));
        // Values meant for other SDKs in a shared environment do not matter while off.
        let others = [
            ("OTEL_TRACES_EXPORTER", "console"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_TRACES_SAMPLER", "xray"),
        ];
        assert_eq!(resolve(&Requested::default(), &others), Ok(None));
        let off = Requested {
            enabled: Some(false),
            endpoint: Some("http://c:4318".into()),
            ..Requested::default()
        };
        assert_eq!(resolve(&off, &[]), Ok(None));
    }

    #[test]
    fn the_file_wins_over_the_environment_and_the_traces_variable_is_used_as_it_is() {
        let file = Requested {
            endpoint: Some("http://from-file:4318".into()),
            timeout_ms: Some(2_000),
            service_name: Some("gw-eu".into()),
            ..Requested::default()
        };
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://from-env:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "9000"),
            ("OTEL_SERVICE_NAME", "env-name"),
        ];
        let s = resolve(&file, &vars).unwrap().unwrap();
        assert_eq!(s.endpoint, "http://from-file:4318/v1/traces");
        assert_eq!(s.timeout, Duration::from_millis(2_000));
        assert_eq!(s.service_name, "gw-eu");
        let s = resolve(
            &Requested::default(),
            &[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://c:4318/custom");
        let s = resolve(
            &Requested::default(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_RESOURCE_ATTRIBUTES", "team=a,service.name=gw"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.protocol, s.endpoint.as_str(), s.service_name.as_str()),
            (Protocol::Grpc, "http://c:4317", "gw")
        );
        let file_path = Requested {
            endpoint: Some("https://c/otlp/v1/traces".into()),
            ..Requested::default()
        };
        assert_eq!(
            resolve(&file_path, &[]).unwrap().unwrap().endpoint,
            "https://c/otlp/v1/traces",
            "a path in the file is the operator's"
        );
    }

    #[test]
    fn samplers_follow_the_standard_variables_and_the_file_ratio_is_parent_based() {
        let ratio = |vars: &[(&str, &str)]| {
            resolve(
                &Requested {
                    enabled: Some(true),
                    ..Requested::default()
                },
                vars,
            )
            .map(|s| s.unwrap().sampling)
        };
        assert_eq!(
            ratio(&[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25")
            ]),
            Ok(Sampling {
                parent_based: false,
                ratio: 0.25
            })
        );
        assert_eq!(
            ratio(&[("OTEL_TRACES_SAMPLER", "parentbased_always_off")]),
            Ok(Sampling {
                parent_based: true,
                ratio: 0.0
            })
        );
        let e = ratio(&[("OTEL_TRACES_SAMPLER", "jaeger_remote")]).unwrap_err();
        assert_eq!(e.setting, "OTEL_TRACES_SAMPLER");
        let e = ratio(&[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ])
        .unwrap_err();
        assert_eq!(e.setting, "OTEL_TRACES_SAMPLER_ARG");
        let file = Requested {
            enabled: Some(true),
            sample_ratio: Some(0.1),
            ..Requested::default()
        };
        assert_eq!(
            resolve(&file, &[("OTEL_TRACES_SAMPLER", "always_off")])
                .unwrap()
                .unwrap()
                .sampling,
            Sampling {
                parent_based: true,
                ratio: 0.1
            }
        );
        let bad = Requested {
            enabled: Some(true),
            sample_ratio: Some(1.5),
            ..Requested::default()
        };
        assert_eq!(
            resolve(&bad, &[]).unwrap_err().setting,
            "telemetry.sample_ratio"
        );
    }

    #[test]
    fn bad_values_are_named_by_their_setting_and_never_show_a_secret() {
        let e = resolve(
            &Requested::default(),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
        )
        .unwrap_err();
        assert_eq!(e.setting, "OTEL_EXPORTER_OTLP_ENDPOINT");
        let e = resolve(
            &Requested {
                endpoint: Some("ftp://c".into()),
                ..Requested::default()
            },
            &[],
        )
        .unwrap_err();
        assert_eq!(e.setting, "telemetry.endpoint");
        let e = resolve(
            &Requested {
                enabled: Some(true),
                ..Requested::default()
            },
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
        )
        .unwrap_err();
        assert_eq!(e.setting, "OTEL_EXPORTER_OTLP_PROTOCOL");
        let e = resolve(
            &Requested {
                enabled: Some(true),
                ..Requested::default()
            },
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")],
        )
        .unwrap_err();
        assert_eq!(e.setting, "OTEL_EXPORTER_OTLP_TIMEOUT");
        let e = resolve(
            &Requested {
                enabled: Some(true),
                headers: vec![("x-key".into(), "a\nb".into())],
                ..Requested::default()
            },
            &[],
        )
        .unwrap_err();
        assert_eq!(e.setting, "telemetry.headers.x-key");
        assert!(!e.to_string().contains("a\nb"), "{e}");
        let e = resolve(
            &Requested::default(),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://user:pw-in-url@/x")],
        )
        .unwrap_err();
        assert!(!e.to_string().contains("pw-in-url"), "{e}");
        resolve(
            &Requested {
                enabled: Some(true),
                ..Requested::default()
            },
            &[("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr3t-header-value")],
        )
        .unwrap();
        assert!(!verdict_runtime::redact::redact("sent s3cr3t-header-value").contains("s3cr3t"));
    }
}
