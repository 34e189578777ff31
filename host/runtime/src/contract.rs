//! Which components speak the `verdict:policy` contract: what they may import and must
//! export, and which versions this host accepts.

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::LoadError;

/// The contract versions this host loads (semver: every 0.1.x).
pub const SUPPORTED_CONTRACT: &str = "0.1.x";

/// Interfaces a policy may import.
const ALLOWED_IMPORTS: [&str; 2] = ["verdict:policy/host", "verdict:policy/types"];
/// The interface a policy must export.
const DECIDER: &str = "verdict:policy/decider";

/// Imports and exports of a component that passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Surface {
    pub(crate) imports: Vec<String>,
    pub(crate) exports: Vec<String>,
}

/// `name@version` with a version this host speaks.
fn compatible(name: &str, interface: &str) -> Option<bool> {
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    if path != interface {
        return None;
    }
    let ok = semver::Version::parse(version).is_ok_and(|v| v.major == 0 && v.minor == 1);
    Some(ok)
}

/// A WASI 0.2 interface the host links as a deterministic stub.
fn deterministic_wasi(import: &str) -> bool {
    let version = import.split_once('@').map_or("", |(_, v)| v);
    crate::wasi::is_wasi(import)
        && crate::wasi::describe(import).is_some()
        && semver::Version::parse(version).is_ok_and(|v| v.major == 0 && v.minor == 2)
}

/// Check `component` against the contract, naming the first offending import or export.
pub(crate) fn check(
    component: &Component,
    engine: &Engine,
    origin: &str,
) -> Result<Surface, LoadError> {
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    for import in &imports {
        if deterministic_wasi(import) {
            continue;
        }
        match ALLOWED_IMPORTS
            .iter()
            .find_map(|allowed| compatible(import, allowed))
        {
            Some(true) => {}
            Some(false) => {
                return Err(LoadError::WrongVersion {
                    origin: origin.into(),
                    found: import.clone(),
                    supported: SUPPORTED_CONTRACT,
                });
            }
            None => {
                return Err(LoadError::ForeignImport {
                    origin: origin.into(),
                    import: import.clone(),
                    supported: SUPPORTED_CONTRACT,
                });
            }
        }
    }
    match exports
        .iter()
        .find_map(|e| compatible(e, DECIDER).map(|ok| (e, ok)))
    {
        Some((_, true)) => Ok(Surface { imports, exports }),
        Some((found, false)) => Err(LoadError::WrongVersion {
            origin: origin.into(),
            found: found.clone(),
            supported: SUPPORTED_CONTRACT,
        }),
        None => Err(LoadError::MissingExport {
            origin: origin.into(),
            exports: if exports.is_empty() {
                "none".into()
            } else {
                exports.join(", ")
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(
            compatible("verdict:policy/decider@0.1.0", DECIDER),
            Some(true)
        );
        assert_eq!(
            compatible("verdict:policy/decider@0.1.7", DECIDER),
            Some(true)
        );
        assert_eq!(
            compatible("verdict:policy/decider@0.2.0", DECIDER),
            Some(false)
        );
        assert_eq!(
            compatible("verdict:policy/decider@1.1.0", DECIDER),
            Some(false)
        );
        assert_eq!(compatible("verdict:policy/decider", DECIDER), Some(false));
        assert_eq!(compatible("wasi:filesystem/types@0.2.0", DECIDER), None);
    }

    #[test]
    fn wasi_is_linked_at_0_2_for_the_catalogued_interfaces_only() {
        assert!(deterministic_wasi("wasi:clocks/wall-clock@0.2.0"));
        assert!(deterministic_wasi("wasi:io/streams@0.2.9"));
        assert!(!deterministic_wasi("wasi:io/streams@0.3.0"));
        assert!(!deterministic_wasi("wasi:io/streams"));
        assert!(!deterministic_wasi("wasi:http/outgoing-handler@0.2.0"));
        assert!(!deterministic_wasi("verdict:policy/host@0.1.0"));
    }
}
