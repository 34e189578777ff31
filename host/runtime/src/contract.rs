//! Which components speak the `verdict:policy` contract: what they may import and must
//! export, and which versions this host accepts.

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::LoadError;

/// The contract versions this host loads (semver: every 0.1.x and 0.2.x).
pub const SUPPORTED_CONTRACT: &str = "0.1.x or 0.2.x";

/// A version of the `verdict:policy` contract this host speaks. While the contract is
/// `0.x`, its minor version is the compatibility line: every `0.2.y` component is a
/// [`Contract::V0_2`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Contract {
    /// `verdict:policy@0.1`: one failure per call, its details through free `host`
    /// functions about the current failure.
    V0_1,
    /// `verdict:policy@0.2`: `decide-batch`, each failure's details behind a `details`
    /// handle, a reason lifted only when given.
    V0_2,
}

impl Contract {
    /// The contract the SDKs build for.
    pub const CURRENT: Contract = Contract::V0_2;

    /// Its version line, e.g. `0.2`.
    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1",
            Contract::V0_2 => "0.2",
        }
    }

    /// Whether a newer contract exists that this component could be rebuilt for.
    pub fn is_older(self) -> bool {
        self < Contract::CURRENT
    }

    fn from_minor(minor: u64) -> Option<Contract> {
        match minor {
            1 => Some(Contract::V0_1),
            2 => Some(Contract::V0_2),
            _ => None,
        }
    }
}

impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "verdict:policy@{}", self.version())
    }
}

/// Interfaces a policy may import.
const ALLOWED_IMPORTS: [&str; 2] = ["verdict:policy/host", "verdict:policy/types"];
/// The interface a policy must export.
const DECIDER: &str = "verdict:policy/decider";

/// Imports and exports of a component that passed the check, and the contract they speak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Surface {
    pub(crate) imports: Vec<String>,
    pub(crate) exports: Vec<String>,
    pub(crate) contract: Contract,
}

/// For `name@version` naming `interface`: the contract its version belongs to, or `None`
/// inside when this host speaks no such version. `None` outside: another interface.
fn compatible(name: &str, interface: &str) -> Option<Option<Contract>> {
    let (path, version) = name.split_once('@').unwrap_or((name, ""));
    if path != interface {
        return None;
    }
    let contract = semver::Version::parse(version)
        .ok()
        .filter(|v| v.major == 0)
        .and_then(|v| Contract::from_minor(v.minor));
    Some(contract)
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
    let mut imported = Vec::new();
    for import in &imports {
        if deterministic_wasi(import) {
            continue;
        }
        match ALLOWED_IMPORTS
            .iter()
            .find_map(|allowed| compatible(import, allowed))
        {
            Some(Some(contract)) => imported.push((import, contract)),
            Some(None) => {
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
        Some((_, Some(contract))) => {
            // One contract per component: a 0.1 import beside a 0.2 export would be
            // answered by the wrong half of the host.
            if let Some((import, _)) = imported.iter().find(|(_, c)| *c != contract) {
                return Err(LoadError::MixedContracts {
                    origin: origin.into(),
                    import: (*import).clone(),
                    contract,
                });
            }
            Ok(Surface {
                imports,
                exports,
                contract,
            })
        }
        Some((found, None)) => Err(LoadError::WrongVersion {
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
        let v0_1 = Some(Some(Contract::V0_1));
        let v0_2 = Some(Some(Contract::V0_2));
        assert_eq!(compatible("verdict:policy/decider@0.1.0", DECIDER), v0_1);
        assert_eq!(compatible("verdict:policy/decider@0.1.7", DECIDER), v0_1);
        assert_eq!(compatible("verdict:policy/decider@0.2.0", DECIDER), v0_2);
        assert_eq!(compatible("verdict:policy/decider@0.2.3", DECIDER), v0_2);
        assert_eq!(
            compatible("verdict:policy/decider@0.3.0", DECIDER),
            Some(None)
        );
        assert_eq!(
            compatible("verdict:policy/decider@1.1.0", DECIDER),
            Some(None)
        );
        assert_eq!(compatible("verdict:policy/decider", DECIDER), Some(None));
        assert_eq!(compatible("wasi:filesystem/types@0.2.0", DECIDER), None);
    }

    #[test]
    fn the_current_contract_is_the_newest_and_older_ones_say_so() {
        assert_eq!(Contract::CURRENT, Contract::V0_2);
        assert!(Contract::V0_1.is_older());
        assert!(!Contract::V0_2.is_older());
        assert_eq!(Contract::V0_1.to_string(), "verdict:policy@0.1");
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
