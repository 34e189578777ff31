//! `[defaults]`: what every route starts from.

use schemars::JsonSchema;
use serde::Deserialize;

use verdict_runtime::{Fallback, Guardrails, TopicSettings};
use verdict_tls::TlsConfig;

/// Guardrails and fallback every route starts from (a route's `settings` replace both), and
/// the TLS settings of every consumer that has none of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// Bounds on every verdict.
    pub guardrails: Guardrails,
    /// The verdict when the policy fails.
    pub fallback: Fallback,
    /// TLS to `https://` consumers whose route sets no `consumer.tls`: a private CA, a
    /// client certificate for consumers that verify the gateway. Without it the platform's
    /// root certificates are trusted and no client certificate is presented.
    pub consumer_tls: Option<TlsConfig>,
}

impl Defaults {
    /// The guardrails and fallback as a route's settings.
    pub fn topic_settings(&self) -> TopicSettings {
        TopicSettings {
            guardrails: self.guardrails.clone(),
            fallback: self.fallback.clone(),
        }
    }
}
