//! The policy registry: topic -> active (policy, config), in numbered generations.
//!
//! A [`Generation`] is built from a [`GatewayConfig`] behind an admission gate (the component
//! loads and speaks the contract, matches its sha256 pin, passes its vector files, accepts
//! every route's config in `init`) and only then swapped in atomically. Readers take the
//! current generation without locks (`arc-swap`); a decision in flight keeps the generation
//! it started with, so a swap never fails or double-decides it. Previous generations are
//! kept (bounded) for [`Registry::rollback`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use arc_swap::ArcSwap;

use crate::conformance::{Report, Suite, run_suites};
use crate::{
    Decider, Decision, Failure, GatewayConfig, Host, LoadError, Policy, Router, Shadow,
    ShadowReport, TopicPattern,
};

/// Generations kept for rollback.
const HISTORY: usize = 16;

/// Why a configuration was refused. The active generation is untouched.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The sandbox limits are invalid.
    #[error("sandbox: {0}")]
    Sandbox(#[from] crate::ConfigError),
    /// A policy component failed to load.
    #[error("policy `{policy}`: {source}")]
    Load {
        /// The policy's name in the config.
        policy: String,
        /// Why.
        source: LoadError,
    },
    /// A component's digest does not match its pin.
    #[error("policy `{policy}`: sha256 is {actual}, but the config pins {pinned}")]
    Pin {
        /// The policy.
        policy: String,
        /// The pin.
        pinned: String,
        /// The component's digest.
        actual: String,
    },
    /// A policy failed its vectors.
    #[error("policy `{policy}` failed admission: {failed} case(s) failed\n{report}")]
    Admission {
        /// The policy.
        policy: String,
        /// Failed cases.
        failed: usize,
        /// The human report.
        report: String,
    },
    /// A vector file is invalid.
    #[error("policy `{policy}`: {source}")]
    Vectors {
        /// The policy.
        policy: String,
        /// Why.
        source: crate::conformance::VectorError,
    },
    /// A route's config was refused by its policy.
    #[error("routes[{index}] (`{topic}`): {source}")]
    Route {
        /// The route's index.
        index: usize,
        /// Its topic pattern.
        topic: String,
        /// Why.
        source: crate::ConfigError,
    },
    /// Routes are malformed or ambiguous.
    #[error("routes: {0}")]
    Routing(#[from] crate::RouteError),
    /// A route names a policy the config does not define.
    #[error("routes[{index}]: no policy named `{policy}`")]
    UnknownPolicy {
        /// The route's index.
        index: usize,
        /// The name.
        policy: String,
    },
    /// No earlier generation to roll back to.
    #[error("no earlier generation to roll back to")]
    NoHistory,
    /// The topic pattern is not a route of both the current and the previous generation.
    #[error("no route `{topic}` in both the current and the previous generation")]
    NoSuchRoute {
        /// The pattern asked for.
        topic: String,
    },
}

/// One route of a generation.
#[derive(Debug)]
pub struct ActiveRoute {
    /// The topic pattern.
    pub topic: String,
    /// The policy's name in the config.
    pub policy: String,
    /// The configured policy.
    pub decider: Decider,
    /// The shadow policy, if the route has one.
    pub shadow: Option<Shadow>,
}

/// An immutable routing table with its deciders.
#[derive(Debug)]
pub struct Generation {
    /// Activation number, increasing.
    pub number: u64,
    router: Router,
    /// The routes, in config order.
    pub routes: Vec<Arc<ActiveRoute>>,
}

impl Generation {
    /// The route for `topic`.
    pub fn route(&self, topic: &str) -> Option<&ActiveRoute> {
        self.router
            .resolve(topic)
            .and_then(|i| self.routes.get(i))
            .map(|r| &**r)
    }
}

/// Topic -> policy, hot-swappable.
pub struct Registry {
    host: Host,
    /// Components already compiled, by sha256: a reload that keeps a component reuses it
    /// instead of recompiling (weak, so retired components are freed).
    compiled: CompiledCache,
    current: ArcSwap<Generation>,
    history: Mutex<VecDeque<Arc<Generation>>>,
    next: Mutex<u64>,
}

impl Registry {
    /// Build the first generation from `config` (paths relative to `base_dir`).
    pub fn new(config: &GatewayConfig, base_dir: &Path) -> Result<Registry, RegistryError> {
        let host = Host::new(&config.sandbox)?;
        let compiled = CompiledCache::default();
        let first = build(&host, &compiled, config, base_dir, 1)?;
        Ok(Registry {
            host,
            compiled,
            current: ArcSwap::from_pointee(first),
            history: Mutex::new(VecDeque::new()),
            next: Mutex::new(2),
        })
    }

    /// The active generation.
    pub fn current(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// Decide for `topic`; `None` when no route matches.
    pub fn decide(&self, topic: &str, failure: &Failure) -> Option<Decision> {
        let generation = self.current.load();
        let route = generation.route(topic)?;
        let mut decision = route.decider.decide(failure);
        decision.generation = Some(generation.number);
        if let Some(shadow) = &route.shadow {
            shadow.observe(topic, failure, &decision);
        }
        Some(decision)
    }

    /// Shadow counters of the active generation's routes that have a shadow.
    pub fn shadow_report(&self) -> Vec<ShadowReport> {
        let generation = self.current.load();
        generation
            .routes
            .iter()
            .filter_map(|r| r.shadow.as_ref().map(|s| s.report(&r.topic, &r.policy)))
            .collect()
    }

    /// Build a new generation from `config` behind the admission gate and swap it in. On
    /// error the active generation stays.
    pub fn reload(&self, config: &GatewayConfig, base_dir: &Path) -> Result<u64, RegistryError> {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = build(&self.host, &self.compiled, config, base_dir, *next)?;
        *next += 1;
        Ok(self.swap_in(Arc::new(generation)))
    }

    /// Make the previous generation active again (it keeps its number; the replaced one
    /// is dropped once its in-flight decisions finish).
    pub fn rollback(&self) -> Result<u64, RegistryError> {
        let previous = self
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_back()
            .ok_or(RegistryError::NoHistory)?;
        let number = previous.number;
        self.current.store(previous);
        Ok(number)
    }

    /// Return one route (named by its topic pattern) to the policy and config it had in the
    /// previous generation, leaving every other route as it is. Activates a new generation.
    pub fn rollback_topic(&self, topic: &str) -> Result<u64, RegistryError> {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = self
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .back()
            .cloned()
            .ok_or(RegistryError::NoHistory)?;
        let no_route = || RegistryError::NoSuchRoute {
            topic: topic.to_string(),
        };
        let earlier = previous
            .routes
            .iter()
            .find(|r| r.topic == topic)
            .ok_or_else(no_route)?;
        let current = self.current.load_full();
        if !current.routes.iter().any(|r| r.topic == topic) {
            return Err(no_route());
        }
        let routes: Vec<Arc<ActiveRoute>> = current
            .routes
            .iter()
            .map(|r| {
                if r.topic == topic {
                    earlier.clone()
                } else {
                    r.clone()
                }
            })
            .collect();
        let patterns = routes
            .iter()
            .map(|r| TopicPattern::parse(&r.topic))
            .collect::<Result<Vec<_>, _>>()?;
        let generation = Generation {
            number: *next,
            router: Router::new(patterns, None)?,
            routes,
        };
        *next += 1;
        Ok(self.swap_in(Arc::new(generation)))
    }

    fn swap_in(&self, generation: Arc<Generation>) -> u64 {
        let number = generation.number;
        let old = self.current.swap(generation);
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.push_back(old);
        while history.len() > HISTORY {
            history.pop_front();
        }
        number
    }
}

type CompiledCache = Mutex<HashMap<String, Weak<Policy>>>;

/// Load a component, or reuse the compiled one with the same digest.
fn load(host: &Host, compiled: &CompiledCache, path: &Path) -> Result<Arc<Policy>, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let digest = crate::policy::sha256_hex(&bytes);
    let mut cache = compiled.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(policy) = cache.get(&digest).and_then(Weak::upgrade) {
        return Ok(policy);
    }
    let policy = host.load_bytes(&bytes, &path.display().to_string())?;
    cache.retain(|_, weak| weak.strong_count() > 0);
    cache.insert(digest, Arc::downgrade(&policy));
    Ok(policy)
}

fn build(
    host: &Host,
    compiled: &CompiledCache,
    config: &GatewayConfig,
    base_dir: &Path,
    number: u64,
) -> Result<Generation, RegistryError> {
    let mut policies: BTreeMap<&str, Arc<Policy>> = BTreeMap::new();
    for (name, spec) in &config.policies {
        let policy = load(host, compiled, &base_dir.join(&spec.path)).map_err(|source| {
            RegistryError::Load {
                policy: name.clone(),
                source,
            }
        })?;
        if let Some(pinned) = &spec.sha256
            && !pinned.eq_ignore_ascii_case(&policy.provenance().sha256)
        {
            return Err(RegistryError::Pin {
                policy: name.clone(),
                pinned: pinned.clone(),
                actual: policy.provenance().sha256.clone(),
            });
        }
        admit(name, &policy, &spec.vectors, base_dir)?;
        policies.insert(name, policy);
    }
    let patterns = config
        .routes
        .iter()
        .map(|r| TopicPattern::parse(&r.topic))
        .collect::<Result<Vec<_>, _>>()?;
    let router = Router::new(patterns, None)?;
    let mut routes = Vec::with_capacity(config.routes.len());
    for (index, route) in config.routes.iter().enumerate() {
        // A config built in code skips `GatewayConfig::parse`'s check: refuse, never drop.
        let unknown = |name: &str| RegistryError::UnknownPolicy {
            index,
            policy: name.to_string(),
        };
        let policy = policies
            .get(route.policy.as_str())
            .ok_or_else(|| unknown(&route.policy))?;
        let json = config_text(route.config.as_ref());
        let settings = route
            .settings
            .clone()
            .unwrap_or_else(|| config.defaults.clone());
        let configure = |policy: &Arc<Policy>, json: &str| {
            policy
                .configure(json, settings.clone())
                .map_err(|source| RegistryError::Route {
                    index,
                    topic: route.topic.clone(),
                    source,
                })
        };
        let decider = configure(policy, &json)?;
        let shadow = match &route.shadow {
            Some(spec) => {
                let shadow_policy = policies
                    .get(spec.policy.as_str())
                    .ok_or_else(|| unknown(&spec.policy))?;
                let json = config_text(spec.config.as_ref());
                Some(Shadow::new(
                    spec.policy.clone(),
                    configure(shadow_policy, &json)?,
                ))
            }
            None => None,
        };
        routes.push(Arc::new(ActiveRoute {
            topic: route.topic.clone(),
            policy: route.policy.clone(),
            decider,
            shadow,
        }));
    }
    Ok(Generation {
        number,
        router,
        routes,
    })
}

/// A route's policy config as the JSON text `init` receives (`{}` when absent).
fn config_text(config: Option<&serde_json::Value>) -> String {
    config.map_or_else(|| "{}".to_string(), serde_json::Value::to_string)
}

fn admit(
    name: &str,
    policy: &Arc<Policy>,
    vectors: &[std::path::PathBuf],
    base_dir: &Path,
) -> Result<(), RegistryError> {
    if vectors.is_empty() {
        return Ok(());
    }
    let suites = vectors
        .iter()
        .map(|v| Suite::load(&base_dir.join(v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| RegistryError::Vectors {
            policy: name.to_string(),
            source,
        })?;
    let report = Report::new(
        (**policy.provenance()).clone(),
        run_suites(policy, &suites),
        vec![],
    );
    if report.failed > 0 {
        return Err(RegistryError::Admission {
            policy: name.to_string(),
            failed: report.failed,
            report: report.human(),
        });
    }
    Ok(())
}
