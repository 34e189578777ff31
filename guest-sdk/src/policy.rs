//! The one trait a policy author implements.

use serde::de::DeserializeOwned;

use crate::{Failure, Verdict};

/// A retry/dead-letter policy.
///
/// `Config` is the operator's per-topic configuration, parsed from JSON before
/// [`Policy::new`] sees it; give it `#[serde(deny_unknown_fields, default)]` so typos are
/// refused and omitted fields take your defaults. `new` checks what serde cannot (ranges,
/// consistency) and returns an error that names the field. `decide` must be a pure function
/// of the failure: no clocks or randomness of its own (the failure carries both).
///
/// Export it with [`export_policy!`](crate::export_policy).
pub trait Policy: Sized + 'static {
    /// The per-topic configuration.
    type Config: DeserializeOwned;

    /// Build the policy from its configuration, or explain why the configuration is wrong.
    fn new(config: Self::Config) -> Result<Self, String>;

    /// Decide what happens to a failed delivery.
    fn decide(&self, failure: &Failure) -> Verdict;
}

/// Parse `config_json` and build the policy, exactly as the host's `init` call does inside
/// the component. Use it in native tests.
pub fn instantiate<P: Policy>(config_json: &str) -> Result<P, String> {
    P::new(crate::parse_config(config_json)?)
}
