//! The policy registry: topic -> active (policy, config), in numbered generations.
//!
//! A [`Generation`] is built from a [`GatewayConfig`] (plus the operator's changes made
//! through the admin API) behind an admission gate - the component loads and speaks the
//! contract, matches its sha256 pin, passes its vector files and the property checks under a
//! fuel ceiling, accepts every route's config in `init` - and only then swapped in
//! atomically. Readers take the current generation without locks (`arc-swap`); a decision
//! in flight keeps the generation it started with, so a swap never fails or double-decides
//! it. Previous generations are kept (bounded) for [`Registry::rollback`].

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use crate::{GatewayConfig, Router, Shadow, ShadowConfig, ShadowReport, TopicPattern};
use verdict_runtime::{CacheStats, Decider, Decision, Failure, Host, Policy};

mod admission;
mod build;
mod desired;
mod error;
mod status;
mod upload;

use build::{Builder, CompiledCache};
use desired::{ComponentOverride, Desired, Journal, ShadowOverride};
pub use error::RegistryError;
pub use status::ReloadStatus;
pub use upload::Upload;

/// Generations kept for rollback.
const HISTORY: usize = 16;

/// The operator's API changes, in the state directory.
const JOURNAL: &str = "operator.json";

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
    /// Where the gateway delivers the route's messages.
    pub consumer: Option<crate::ConsumerConfig>,
    /// A core topic (lower DLQ alert bar).
    pub core: bool,
    /// Whether the route orders by key (`ordering = "key"`): on the embedded source,
    /// RabbitMQ and NATS by `key_header`, on Kafka by the record's own key (its partition).
    pub ordered: bool,
    /// The header a message's key is read from when it is published, if the route orders
    /// by key (`ordering = "key"`) on the embedded source.
    pub key_header: Option<String>,
    /// Whether a dead letter takes its key's later messages with it (`on_dead_letter =
    /// "dead-letter-key"`).
    pub dead_letters_key: bool,
    /// How many keys may wait for a retry at once (`max_parked_keys`); `None`: no bound.
    pub max_parked_keys: Option<u64>,
    /// Everything the route was built from; equal fingerprints mean the route is reused.
    fingerprint: String,
}

/// An immutable routing table with its deciders.
#[derive(Debug)]
pub struct Generation {
    /// Activation number, increasing.
    pub number: u64,
    /// When it was built.
    pub activated_at: SystemTime,
    /// What made it: `config file`, `activate rules 3f2a...`, `shadow on payments.>`, ...
    pub cause: String,
    router: Router,
    /// The routes, in config order.
    pub routes: Vec<Arc<ActiveRoute>>,
    /// Every policy of the config, compiled (also those no route uses yet, so a shadow or
    /// a route added later does not recompile them).
    pub policies: BTreeMap<String, Arc<Policy>>,
    source: Arc<Desired>,
}

impl Generation {
    /// The route for `topic`.
    pub fn route(&self, topic: &str) -> Option<&ActiveRoute> {
        self.router
            .resolve(topic)
            .and_then(|i| self.routes.get(i))
            .map(|r| &**r)
    }

    /// Every route is the same one, in the same order.
    fn same_routes(&self, other: &Generation) -> bool {
        self.routes.len() == other.routes.len()
            && self
                .routes
                .iter()
                .zip(&other.routes)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// The config this generation runs, with the operator's API changes applied.
    pub fn config(&self) -> GatewayConfig {
        self.source.effective()
    }
}

/// Topic -> policy, hot-swappable.
pub struct Registry {
    host: Host,
    admission: admission::Admission,
    compiled: CompiledCache,
    state: PathBuf,
    uploads: PathBuf,
    current: ArcSwap<Generation>,
    history: Mutex<VecDeque<Arc<Generation>>>,
    /// The next generation number; held for the whole of a change, so changes are serial.
    next: Mutex<u64>,
    status: Mutex<ReloadStatus>,
}

impl Registry {
    /// Build the first generation from `config` (paths relative to `base_dir`, where the
    /// state directory is too).
    pub fn new(config: &GatewayConfig, base_dir: &Path) -> Result<Registry, RegistryError> {
        let state = base_dir.join(&config.storage.dir);
        let cached = config.storage.artifact_cache.then_some(state.as_path());
        let host = Host::with_artifact_cache(&config.sandbox, cached.map(|s| s.join("artifacts")))?;
        let admission = admission::Admission::new(&config.sandbox, &config.admission, cached)?;
        let compiled = CompiledCache::default();
        let builder = Builder {
            host: &host,
            compiled: &compiled,
            admission: &admission,
        };
        let from_file = || Arc::new(Desired::from_file(config.clone(), base_dir.to_path_buf()));
        let journal = state.join(JOURNAL);
        let first = match Journal::load(&journal) {
            Ok(Some(j)) => {
                let source = Arc::new(j.apply(config.clone(), base_dir.to_path_buf()));
                let cause = if source.components.is_empty() && source.shadows.is_empty() {
                    "config file"
                } else {
                    "config file + operator changes"
                };
                builder.build(source, None, 1, cause.into()).or_else(|e| {
                    tracing::warn!(error = %e, "the journaled operator changes are refused; starting from the file alone");
                    builder.build(from_file(), None, 1, "config file".into())
                })?
            }
            Ok(None) => builder.build(from_file(), None, 1, "config file".into())?,
            Err(e) => {
                tracing::warn!(error = %e, "the operator journal is unreadable; starting from the file alone");
                builder.build(from_file(), None, 1, "config file".into())?
            }
        };
        Ok(Registry {
            host,
            admission,
            compiled,
            uploads: state.join("uploads"),
            state,
            current: ArcSwap::from_pointee(first),
            history: Mutex::new(VecDeque::new()),
            next: Mutex::new(2),
            status: Mutex::new(ReloadStatus {
                generation: 1,
                ..ReloadStatus::default()
            }),
        })
    }

    /// The active generation.
    pub fn current(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// The state directory (uploads, artifact cache).
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The generations kept for rollback, oldest first (the active one is not among them).
    pub fn history(&self) -> Vec<Arc<Generation>> {
        self.history_lock().iter().cloned().collect()
    }

    /// Compilations and artifact-cache hits of the serving engine.
    pub fn cache_stats(&self) -> CacheStats {
        self.host.cache_stats()
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

    /// Decide on several failures of `topic` with one generation: as [`Registry::decide`]
    /// on each, in order, but a policy on contract 0.2 answers up to 64 of them per call
    /// into its sandbox. `None` when no route matches.
    pub fn decide_batch(&self, topic: &str, failures: &[Failure]) -> Option<Vec<Decision>> {
        let generation = self.current.load();
        let route = generation.route(topic)?;
        let mut decisions = route.decider.decide_batch(failures);
        for (failure, decision) in failures.iter().zip(&mut decisions) {
            decision.generation = Some(generation.number);
            if let Some(shadow) = &route.shadow {
                shadow.observe(topic, failure, decision);
            }
        }
        Some(decisions)
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

    /// Build a new generation from `config` (a new version of the file) behind the admission
    /// gate and swap it in. API changes whose file entry is unchanged carry over. On error
    /// the active generation stays.
    pub fn reload(&self, config: &GatewayConfig, base_dir: &Path) -> Result<u64, RegistryError> {
        self.change("config file".into(), |current| {
            Ok(current.with_file(config.clone(), base_dir.to_path_buf()))
        })
    }

    /// Read the config file at `path` again and [`reload`](Registry::reload) it (paths
    /// relative to its directory). A file that does not parse is refused like any other
    /// change, and counted.
    pub fn reload_file(&self, path: &Path) -> Result<u64, RegistryError> {
        match GatewayConfig::load(path) {
            Ok(config) => self.reload(&config, path.parent().unwrap_or(Path::new("."))),
            Err(e) => {
                let e = RegistryError::from(e);
                self.record(Err(&e));
                Err(e)
            }
        }
    }

    /// Changes applied and refused so far, with the last refusal's reason.
    pub fn status(&self) -> ReloadStatus {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Make `policy` run the uploaded component with digest `sha256` (see
    /// [`Registry::upload`]), behind the admission gate (its vector files and pin still apply).
    pub fn activate(&self, policy: &str, sha256: &str) -> Result<u64, RegistryError> {
        let sha256 = sha256.to_ascii_lowercase();
        let path = self.uploaded_path(policy, &sha256)?;
        if !path.is_file() {
            return Err(RegistryError::NotUploaded {
                policy: policy.into(),
                sha256,
            });
        }
        let cause = format!("activate {policy} {}", &sha256[..12.min(sha256.len())]);
        self.change(cause, |current| {
            self.check_policy(current, policy)?;
            let mut next = current.clone();
            let replaced = current.file.policies[policy].clone();
            next.components
                .insert(policy.into(), ComponentOverride { path, replaced });
            Ok(next)
        })
    }

    /// Turn the shadow of the route `topic` (its pattern) on with `shadow`, or off with `None`.
    pub fn set_shadow(
        &self,
        topic: &str,
        shadow: Option<ShadowConfig>,
    ) -> Result<u64, RegistryError> {
        let cause = match &shadow {
            Some(s) => format!("shadow {} on {topic}", s.policy),
            None => format!("shadow off on {topic}"),
        };
        self.change(cause, |current| {
            let route = current
                .file
                .routes
                .iter()
                .find(|r| r.topic == topic)
                .ok_or_else(|| RegistryError::NoSuchRoute {
                    topic: topic.into(),
                })?;
            if let Some(s) = &shadow {
                self.check_policy(current, &s.policy)?;
            }
            let mut next = current.clone();
            next.shadows.insert(
                topic.into(),
                ShadowOverride {
                    shadow,
                    replaced: route.shadow.clone(),
                },
            );
            Ok(next)
        })
    }

    /// Make the previous generation active again (it keeps its number; the replaced one
    /// is dropped once its in-flight decisions finish).
    pub fn rollback(&self) -> Result<u64, RegistryError> {
        let _serial = self.next_lock();
        let previous = self
            .history_lock()
            .pop_back()
            .ok_or(RegistryError::NoHistory)?;
        let number = previous.number;
        self.journal(&previous.source);
        self.current.store(previous);
        tracing::info!(generation = number, "rolled back");
        self.record(Ok(number));
        Ok(number)
    }

    /// Return one route (named by its topic pattern) to the policy and config it had in the
    /// previous generation, leaving every other route as it is. Activates a new generation.
    /// It changes the running generation only: the next change of any route (a reload of
    /// the file, an activation, a shadow change) or a restart rebuilds the route from the
    /// config file. To keep it, change the route in the file.
    pub fn rollback_topic(&self, topic: &str) -> Result<u64, RegistryError> {
        let mut next = self.next_lock();
        let previous = self
            .history_lock()
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
            .map(|r| if r.topic == topic { earlier } else { r }.clone())
            .collect();
        let patterns = routes
            .iter()
            .map(|r| TopicPattern::parse(&r.topic))
            .collect::<Result<Vec<_>, _>>()?;
        let generation = Generation {
            number: *next,
            activated_at: SystemTime::now(),
            cause: format!("rollback {topic} to generation {}", previous.number),
            router: Router::new(patterns, None)?,
            routes,
            policies: current.policies.clone(),
            source: current.source.clone(),
        };
        *next += 1;
        let number = self.swap_in(Arc::new(generation));
        self.record(Ok(number));
        Ok(number)
    }

    /// Build the generation `edit` makes of the current `Desired` and swap it in.
    fn change(
        &self,
        cause: String,
        edit: impl FnOnce(&Desired) -> Result<Desired, RegistryError>,
    ) -> Result<u64, RegistryError> {
        let mut next = self.next_lock();
        let current = self.current.load_full();
        let result = edit(&current.source).and_then(|source| {
            Builder {
                host: &self.host,
                compiled: &self.compiled,
                admission: &self.admission,
            }
            .build(Arc::new(source), Some(&current), *next, cause.clone())
        });
        match result {
            // Nothing a decision depends on changed (an editor touched the file, a reload of
            // the same text, a setting outside the routes): no new generation, nothing to
            // roll back to - but the file's other settings (`[admin]`, `[console]`) do take
            // effect, under the current number and cause.
            Ok(mut generation) if generation.same_routes(&current) => {
                generation.number = current.number;
                generation.activated_at = current.activated_at;
                generation.cause = current.cause.clone();
                self.current.store(Arc::new(generation));
                Ok(current.number)
            }
            Ok(generation) => {
                *next += 1;
                let number = self.swap_in(Arc::new(generation));
                tracing::info!(generation = number, cause, "generation activated");
                self.record(Ok(number));
                Ok(number)
            }
            Err(e) => {
                tracing::warn!(cause, error = %e, "change refused; the active generation stays");
                self.record(Err(&e));
                Err(e)
            }
        }
    }

    fn record(&self, outcome: Result<u64, &RegistryError>) {
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(generation) => {
                status.reloads += 1;
                status.generation = generation;
            }
            Err(e) => {
                status.refused += 1;
                // Open to read (`/v1/status`): a URL quoted from the config loses its
                // credentials first.
                status.last_error = Some(verdict_runtime::redact::redact(&e.to_string()));
            }
        }
    }

    fn check_policy(&self, source: &Desired, policy: &str) -> Result<(), RegistryError> {
        if source.file.policies.contains_key(policy) {
            return Ok(());
        }
        Err(RegistryError::NoSuchPolicy {
            policy: policy.into(),
            defined: source
                .file
                .policies
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    fn swap_in(&self, generation: Arc<Generation>) -> u64 {
        let number = generation.number;
        self.journal(&generation.source);
        let old = self.current.swap(generation.clone());
        // Routes the new generation did not carry over keep no warm instances while
        // retired: the pool's slots are the serving routes'. (A decision still running on
        // the old generation finishes and may leave its one instance warm.)
        for route in &old.routes {
            if !generation.routes.iter().any(|r| Arc::ptr_eq(r, route)) {
                route.decider.release_warm();
                if let Some(shadow) = &route.shadow {
                    shadow.decider.release_warm();
                }
            }
        }
        let mut history = self.history_lock();
        history.push_back(old);
        while history.len() > HISTORY {
            history.pop_front();
        }
        number
    }

    /// Journal the operator's changes of the generation going live (a failure costs them
    /// at the next restart, and is logged).
    fn journal(&self, source: &Desired) {
        let path = self.state.join(JOURNAL);
        if let Err(e) = Journal::save(source, &path) {
            tracing::warn!(path = %path.display(), error = %e, "could not journal the operator's changes");
        }
    }

    fn history_lock(&self) -> MutexGuard<'_, VecDeque<Arc<Generation>>> {
        self.history.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn next_lock(&self) -> MutexGuard<'_, u64> {
        self.next.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("generation", &self.current.load().number)
            .finish_non_exhaustive()
    }
}
