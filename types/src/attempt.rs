//! One earlier failed attempt of a message: what the host records and a policy reads back
//! as the message's history.

use serde::{Deserialize, Serialize};

/// One earlier failed attempt of the same message. In JSON (vector files, `verdict
/// decide`): `{"at-ms": 1700000000000, "kind": "db.timeout", "message": "..."}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AttemptRecord {
    /// When it failed, in ms since the Unix epoch.
    pub at_ms: u64,
    /// Its error kind.
    pub kind: String,
    /// Its error message.
    #[serde(default)]
    pub message: String,
}
