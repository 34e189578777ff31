//! `[admission]`: what a policy must pass before it goes live.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::conformance::PropertyOptions;

/// The admission gate. Vectors and property checks run under a fuel ceiling, so a slow
/// machine never turns a slow scheduler into a refused policy, and a policy that loops is
/// refused deterministically.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Fuel per decision during admission.
    pub fuel_per_decision: u64,
    /// Run the harness's property checks with every route's config.
    pub properties: bool,
    /// Generated inputs per property.
    pub property_inputs: u32,
    /// Error kinds a policy must never retry (globs).
    pub never_retry_kinds: Vec<String>,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        let properties = PropertyOptions::default();
        AdmissionConfig {
            fuel_per_decision: 10_000_000,
            properties: true,
            property_inputs: 64,
            never_retry_kinds: properties.never_retry_kinds,
        }
    }
}

impl AdmissionConfig {
    /// The property sweep this config asks for.
    pub fn property_options(&self) -> PropertyOptions {
        PropertyOptions {
            inputs: self.property_inputs,
            never_retry_kinds: self.never_retry_kinds.clone(),
            ..PropertyOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_checks_by_default_the_kinds_the_sdk_dead_letters() {
        let kinds = AdmissionConfig::default().never_retry_kinds;
        assert_eq!(kinds, verdict_types::NEVER_RETRY_KINDS.map(String::from));
    }
}
