//! A loaded policy: compiled, checked against the contract, described, fingerprinted.

use std::sync::Arc;
use std::time::SystemTime;

use wasmtime::component::Component;

use crate::digest::sha256_hex;
use crate::instance::{Instance, Pre};
use crate::wit::{PolicyBindingsPre, v0_1};
use crate::{ConfigError, Contract, Decider, Host, LoadError, Provenance, TopicSettings, contract};

/// A policy component, compiled once and shared by every topic that uses it.
pub struct Policy {
    host: Host,
    pre: Pre,
    contract: Contract,
    provenance: Arc<Provenance>,
    description: String,
    imports: Vec<String>,
    exports: Vec<String>,
    loaded_at: SystemTime,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("provenance", &self.provenance)
            .finish_non_exhaustive()
    }
}

impl Policy {
    pub(crate) fn load(host: &Host, bytes: &[u8], origin: &str) -> Result<Self, LoadError> {
        let _span = tracing::info_span!("load", origin).entered();
        check_header(bytes, origin)?;
        crate::bounds::check(bytes, host.limits(), origin)?;
        let sha256 = sha256_hex(bytes);
        let component = host
            .artifacts()
            .get_or_compile(host.engine(), &sha256, bytes, |bytes| {
                Component::new(host.engine(), bytes)
            })
            .map_err(|e| LoadError::Compile {
                origin: origin.into(),
                message: format!("{e:#}"),
            })?;
        let surface = contract::check(&component, host.engine(), origin)?;
        let pre = crate::wasi::linker_for(host.linker(), host.engine(), &component)
            .and_then(|linker| linker.instantiate_pre(&component))
            .and_then(|pre| match surface.contract {
                Contract::V0_2 => PolicyBindingsPre::new(pre).map(Pre::V0_2),
                Contract::V0_1 => v0_1::PolicyBindingsPre::new(pre).map(Pre::V0_1),
            })
            .map_err(|e| LoadError::Link {
                origin: origin.into(),
                message: format!("{e:#}"),
            })?;
        let mut policy = Policy {
            host: host.clone(),
            pre,
            contract: surface.contract,
            provenance: Arc::new(Provenance {
                name: origin.into(),
                version: String::new(),
                sha256,
            }),
            description: String::new(),
            imports: surface.imports,
            exports: surface.exports,
            loaded_at: SystemTime::now(),
        };
        let mut first = Instance::new(&policy).map_err(|fault| LoadError::Instantiate {
            origin: origin.into(),
            fault,
        })?;
        let info = first
            .describe(host.limits())
            .map_err(|fault| LoadError::Describe {
                origin: origin.into(),
                fault,
            })?;
        let sha256 = policy.provenance.sha256.clone();
        // The policy names itself: the name and version reach log lines, metric labels and
        // every envelope, so they are one bounded line each.
        use crate::text::{MAX_NAME_BYTES, one_line};
        policy.provenance = Arc::new(Provenance {
            name: one_line(&info.name, MAX_NAME_BYTES),
            version: one_line(&info.version, MAX_NAME_BYTES),
            sha256,
        });
        policy.description = one_line(&info.description, 4 * 1_024);
        tracing::info!(name = %policy.provenance.name, version = %policy.provenance.version, contract = %policy.contract, "policy loaded");
        Ok(policy)
    }

    /// Name, version and sha256.
    pub fn provenance(&self) -> &Arc<Provenance> {
        &self.provenance
    }

    /// The policy's one-line description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The contract version the component speaks.
    pub fn contract(&self) -> Contract {
        self.contract
    }

    /// The component's imports (all within the contract).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// When this component was loaded (compiled or taken from the artifact cache).
    pub fn loaded_at(&self) -> SystemTime {
        self.loaded_at
    }

    /// The component's exports.
    pub fn exports(&self) -> &[String] {
        &self.exports
    }

    /// Bind the policy to a topic's config: instantiate it and call `init(config)`. A
    /// refused config is an error naming the policy and the field.
    pub fn configure(
        self: &Arc<Self>,
        config_json: &str,
        settings: TopicSettings,
    ) -> Result<Decider, ConfigError> {
        let _span = tracing::info_span!("init", policy = %self.provenance.name).entered();
        let policy = self.provenance.name.clone();
        let mut instance = Instance::new(self).map_err(|fault| ConfigError::InitFault {
            policy: policy.clone(),
            fault,
        })?;
        match instance.init(self.host.limits(), config_json) {
            Ok(Ok(())) => {}
            Ok(Err(message)) => return Err(ConfigError::Rejected { policy, message }),
            Err(fault) => return Err(ConfigError::InitFault { policy, fault }),
        }
        Ok(Decider::new(
            self.clone(),
            Arc::from(config_json),
            settings,
            instance,
        ))
    }

    pub(crate) fn host(&self) -> &Host {
        &self.host
    }

    pub(crate) fn pre(&self) -> &Pre {
        &self.pre
    }
}

/// Cheap checks that give a precise error before the compiler's generic one.
fn check_header(bytes: &[u8], origin: &str) -> Result<(), LoadError> {
    const COMPONENT_LAYER: [u8; 2] = [0x01, 0x00];
    if bytes.is_empty() {
        return Err(LoadError::Empty {
            origin: origin.into(),
        });
    }
    if !bytes.starts_with(b"\0asm") {
        return Err(LoadError::NotWasm {
            origin: origin.into(),
        });
    }
    // Bytes 4..6 are the version, 6..8 the layer: 0 for core modules, 1 for components.
    if bytes.len() >= 8 && bytes[6..8] != COMPONENT_LAYER {
        return Err(LoadError::CoreModule {
            origin: origin.into(),
        });
    }
    Ok(())
}
