//! What the registry has done: changes applied and refused, and why the last one was refused.

use serde::Serialize;

/// The changes a registry has applied and refused (reloads from the file, API
/// activations, rollbacks, shadow changes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReloadStatus {
    /// Changes that went live.
    pub reloads: u64,
    /// Changes refused (the previous generation stayed active).
    pub refused: u64,
    /// Why the last refused change was refused.
    pub last_error: Option<String>,
    /// The active generation after the last change.
    pub generation: u64,
}
