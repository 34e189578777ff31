//! The admission gate: what a policy must pass before any topic uses it.
//!
//! Vectors and property checks run on a second engine that meters fuel (the serving engine
//! does not, as fuel costs every decision ~15%), so a looping or slow policy is refused
//! deterministically, however loaded the machine. Checks are pure functions of the
//! component, its config and the vector files, so a passed check is remembered by digest and
//! not repeated when a reload brings the same inputs back.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};

use super::RegistryError;
use crate::AdmissionConfig;
use crate::conformance::{Report, Suite, check_properties, run_suites};
use verdict_runtime::{Host, Limits, Policy, TopicSettings};

pub(crate) struct Admission {
    host: Host,
    config: AdmissionConfig,
    passed: Mutex<HashSet<[u8; 32]>>,
    /// Where passed checks are remembered across restarts (one hex key per line).
    ledger: Option<PathBuf>,
}

/// One component under admission: its bytes, compiled for the metered engine on first need.
pub(crate) struct Candidate<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
    pub sha256: &'a str,
    metered: Option<Arc<Policy>>,
}

impl<'a> Candidate<'a> {
    pub(crate) fn new(name: &'a str, bytes: &'a [u8], sha256: &'a str) -> Self {
        Candidate {
            name,
            bytes,
            sha256,
            metered: None,
        }
    }
}

impl Admission {
    /// With `state`, compiled artifacts and passed checks persist there, so a restart
    /// neither recompiles nor re-checks what it has admitted before.
    pub(crate) fn new(
        sandbox: &Limits,
        config: &AdmissionConfig,
        state: Option<&Path>,
    ) -> Result<Self, RegistryError> {
        if let Some(state) = state
            && let Err(e) = verdict_runtime::fsutil::create_private_dir(state)
        {
            tracing::warn!(path = %state.display(), error = %e, "could not create the state directory");
        }
        let artifacts = state.map(|s| s.join("artifacts"));
        let ledger = state.map(|s| s.join("admitted"));
        let passed = ledger
            .as_deref()
            .and_then(|l| std::fs::read_to_string(l).ok())
            .map(|text| text.lines().filter_map(parse_key).collect())
            .unwrap_or_default();
        let mut limits = crate::conformance::metered_limits(config.fuel_per_decision);
        limits
            .pooled_instances(16)
            .warm_instances(1)
            // A candidate with vectors is compiled here before the serving engine sees it: the
            // same bounds apply to both compilers.
            .bounds_of(sandbox);
        Ok(Admission {
            host: Host::with_artifact_cache(&limits, artifacts)?,
            config: config.clone(),
            passed: Mutex::new(passed),
            ledger,
        })
    }

    /// The candidate passes every vector file (each suite brings its own config).
    pub(crate) fn vectors(
        &self,
        candidate: &mut Candidate<'_>,
        files: &[PathBuf],
        base_dir: &Path,
    ) -> Result<(), RegistryError> {
        if files.is_empty() {
            return Ok(());
        }
        let name = candidate.name;
        let vectors_error = |source| RegistryError::Vectors {
            policy: name.to_string(),
            error: source,
        };
        let mut key = Sha256::new();
        key.update(b"vectors\0");
        key.update(env!("CARGO_PKG_VERSION").as_bytes());
        key.update(candidate.sha256.as_bytes());
        let mut suites = Vec::with_capacity(files.len());
        for file in files {
            let path = base_dir.join(file);
            let text = std::fs::read(&path).map_err(|e| {
                vectors_error(crate::conformance::VectorError {
                    file: path.clone(),
                    case: None,
                    field: "(file)".into(),
                    message: e.to_string(),
                })
            })?;
            key.update(Sha256::digest(&text));
            suites.push(path);
        }
        let key: [u8; 32] = key.finalize().into();
        if self.already(&key) {
            return Ok(());
        }
        let suites = suites
            .iter()
            .map(|path| Suite::load(path))
            .collect::<Result<Vec<_>, _>>()
            .map_err(vectors_error)?;
        let policy = self.metered(candidate)?;
        let report = Report::new(
            (**policy.provenance()).clone(),
            run_suites(&policy, &suites),
            vec![],
        );
        self.verdict(name, &report, key)
    }

    /// The candidate, configured for a route, passes the property checks.
    pub(crate) fn properties(
        &self,
        candidate: &mut Candidate<'_>,
        config: &str,
        settings: &TopicSettings,
    ) -> Result<(), RegistryError> {
        if !self.config.properties {
            return Ok(());
        }
        let mut key = Sha256::new();
        key.update(b"properties\0");
        key.update(env!("CARGO_PKG_VERSION").as_bytes());
        key.update(candidate.sha256.as_bytes());
        key.update(config.as_bytes());
        key.update(format!("{settings:?}{:?}", self.config).as_bytes());
        let key: [u8; 32] = key.finalize().into();
        if self.already(&key) {
            return Ok(());
        }
        let name = candidate.name;
        let policy = self.metered(candidate)?;
        let results =
            match check_properties(&policy, config, settings, &self.config.property_options()) {
                Ok(results) => results,
                // A config the policy refuses, or an `init` that traps, fails on the serving
                // engine too and is reported by the route that carries it, with its index.
                Err(
                    verdict_runtime::ConfigError::Rejected { .. }
                    | verdict_runtime::ConfigError::InitFault {
                        fault:
                            verdict_runtime::Fault::Trap { .. }
                            | verdict_runtime::Fault::Panic { .. }
                            | verdict_runtime::Fault::Timeout { .. }
                            | verdict_runtime::Fault::MemoryCap { .. },
                        ..
                    },
                ) => return Ok(()),
                // The checking engine could not instantiate the component (a component
                // past the per-component limits, say): the policy was not checked, so it
                // is refused with the reason - never admitted unchecked.
                Err(e) => {
                    return Err(RegistryError::Admission {
                        policy: name.to_string(),
                        failed: 1,
                        report: format!("the properties could not be checked: {e}"),
                    });
                }
            };
        let report = Report::new((**policy.provenance()).clone(), vec![], results);
        self.verdict(name, &report, key)
    }

    fn already(&self, key: &[u8; 32]) -> bool {
        self.passed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(key)
    }

    fn verdict(&self, name: &str, report: &Report, key: [u8; 32]) -> Result<(), RegistryError> {
        if report.failed > 0 {
            return Err(RegistryError::Admission {
                policy: name.to_string(),
                failed: report.failed,
                report: report.human(),
            });
        }
        self.passed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
        if let Some(ledger) = &self.ledger {
            // Losing the ledger costs a re-check on the next start, nothing else.
            let line = format!("{}\n", verdict_runtime::digest::hex(&key));
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(ledger)
                .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
            if let Err(e) = written {
                tracing::warn!(path = %ledger.display(), error = %e, "could not record a passed admission check");
            }
        }
        Ok(())
    }

    fn metered(&self, candidate: &mut Candidate<'_>) -> Result<Arc<Policy>, RegistryError> {
        if let Some(policy) = &candidate.metered {
            return Ok(policy.clone());
        }
        let policy = self
            .host
            .load_bytes(candidate.bytes, candidate.name)
            .map_err(|source| RegistryError::Load {
                policy: candidate.name.to_string(),
                error: source,
            })?;
        candidate.metered = Some(policy.clone());
        Ok(policy)
    }
}

fn parse_key(line: &str) -> Option<[u8; 32]> {
    let line = line.trim();
    if line.len() != 64 {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(line.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}
