//! Building a generation from its [`Desired`], behind the admission gate.
//!
//! Every component is read, checked against its pin, compiled (or reused: same digest, same
//! compiled code) and admitted; every route's config is checked against its policy's
//! properties and accepted by `init`. A route whose inputs are all unchanged since the
//! previous generation is carried over as it is (warm instances, counters, shadow counts),
//! so a reload rebuilds only the routes it changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::SystemTime;

use super::admission::{Admission, Candidate};
use super::desired::Desired;
use super::{ActiveRoute, Generation, RegistryError};
use crate::{Router, Shadow, TopicPattern};
use verdict_runtime::{Host, Policy};

/// Components already compiled for the serving engine, by sha256 (weak, so retired
/// components are freed).
pub(crate) type CompiledCache = Mutex<HashMap<String, Weak<Policy>>>;

pub(crate) struct Builder<'a> {
    pub host: &'a Host,
    pub compiled: &'a CompiledCache,
    pub admission: &'a Admission,
}

struct Loaded<'a> {
    serving: Arc<Policy>,
    candidate: Candidate<'a>,
}

impl Builder<'_> {
    pub(crate) fn build(
        &self,
        source: Arc<Desired>,
        previous: Option<&Generation>,
        number: u64,
        cause: String,
    ) -> Result<Generation, RegistryError> {
        let config = source.effective();
        let base_dir = source.base_dir.as_path();
        let mut files = BTreeMap::new();
        for (name, spec) in &config.policies {
            let path = base_dir.join(&spec.path);
            let bytes = verdict_runtime::bounds::read(&path, self.host.limits(), name).map_err(
                |source| RegistryError::Load {
                    policy: name.clone(),
                    error: source,
                },
            )?;
            let sha256 = verdict_runtime::digest::sha256_hex(&bytes);
            if let Some(pinned) = &spec.sha256
                && !pinned.eq_ignore_ascii_case(&sha256)
            {
                return Err(RegistryError::Pin {
                    policy: name.clone(),
                    pinned: pinned.clone(),
                    actual: sha256,
                });
            }
            files.insert(name.as_str(), (bytes, sha256));
        }
        let mut policies: BTreeMap<&str, Loaded<'_>> = BTreeMap::new();
        for (name, (bytes, sha256)) in &files {
            let mut candidate = Candidate::new(name, bytes, sha256);
            self.admission
                .vectors(&mut candidate, &config.policies[*name].vectors, base_dir)?;
            let serving = self.compile(name, bytes, sha256)?;
            policies.insert(name, Loaded { serving, candidate });
        }
        let patterns = config
            .routes
            .iter()
            .map(|r| TopicPattern::parse(&r.topic))
            .collect::<Result<Vec<_>, _>>()?;
        let router = Router::new(patterns, None)?;
        let mut routes = Vec::with_capacity(config.routes.len());
        for (index, route) in config.routes.iter().enumerate() {
            let settings = route
                .settings
                .clone()
                .unwrap_or_else(|| config.defaults.topic_settings());
            let active = Part::new(index, &route.policy, route.config.as_ref(), &policies)?;
            let shadow = match &route.shadow {
                Some(s) => Some(Part::new(index, &s.policy, s.config.as_ref(), &policies)?),
                None => None,
            };
            // The store keys a message by it when it is published; a RabbitMQ route's
            // source reads its key itself.
            let key_header = match (route.ordering, route.source) {
                (crate::RouteOrdering::Key, crate::SourceKind::Embedded) => {
                    route.key_header.clone()
                }
                _ => None,
            };
            let ordered = route.ordering == crate::RouteOrdering::Key;
            let dead_letters_key = route.on_dead_letter == crate::OnDeadLetter::DeadLetterKey;
            let fingerprint = format!(
                "{}\0{}\0{settings:?}\0{:?}\0{}\0{}\0{ordered}\0{key_header:?}\0{dead_letters_key}\0{:?}",
                route.topic,
                active.fingerprint(),
                route.consumer,
                route.core,
                shadow.as_ref().map(Part::fingerprint).unwrap_or_default(),
                route.max_parked_keys
            );
            if let Some(same) =
                previous.and_then(|g| g.routes.iter().find(|r| r.fingerprint == fingerprint))
            {
                routes.push(same.clone());
                continue;
            }
            let mut configure = |part: &Part| {
                let loaded = policies
                    .get_mut(part.name)
                    .expect("Part::new checked the name");
                self.admission
                    .properties(&mut loaded.candidate, &part.config, &settings)?;
                loaded
                    .serving
                    .configure(&part.config, settings.clone())
                    .map_err(|source| RegistryError::Route {
                        index,
                        topic: route.topic.clone(),
                        error: source,
                    })
            };
            let decider = configure(&active)?;
            let shadow = match &shadow {
                Some(part) => Some(Shadow::new(part.name.to_string(), configure(part)?)),
                None => None,
            };
            routes.push(Arc::new(ActiveRoute {
                topic: route.topic.clone(),
                policy: route.policy.clone(),
                decider,
                shadow,
                consumer: route.consumer.clone(),
                core: route.core,
                ordered,
                key_header,
                dead_letters_key,
                max_parked_keys: route.max_parked_keys,
                fingerprint,
            }));
        }
        Ok(Generation {
            number,
            activated_at: SystemTime::now(),
            cause,
            router,
            routes,
            policies: policies
                .into_iter()
                .map(|(name, loaded)| (name.to_string(), loaded.serving))
                .collect(),
            source,
        })
    }

    /// Compile a component for the serving engine, or reuse the one with the same digest.
    fn compile(
        &self,
        name: &str,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<Arc<Policy>, RegistryError> {
        let mut cache = self.compiled.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(policy) = cache.get(sha256).and_then(Weak::upgrade) {
            return Ok(policy);
        }
        let policy = self
            .host
            .load_bytes(bytes, name)
            .map_err(|source| RegistryError::Load {
                policy: name.to_string(),
                error: source,
            })?;
        cache.retain(|_, weak| weak.strong_count() > 0);
        cache.insert(sha256.to_string(), Arc::downgrade(&policy));
        Ok(policy)
    }
}

/// A policy as a route uses it: which one, with which config text.
struct Part<'a> {
    name: &'a str,
    sha256: &'a str,
    config: String,
}

impl<'a> Part<'a> {
    fn new(
        index: usize,
        name: &'a str,
        config: Option<&serde_json::Value>,
        policies: &BTreeMap<&str, Loaded<'a>>,
    ) -> Result<Self, RegistryError> {
        // A config built in code skips `GatewayConfig::parse`'s check: refuse, never drop.
        let loaded = policies
            .get(name)
            .ok_or_else(|| RegistryError::UnknownPolicy {
                index,
                policy: name.to_string(),
            })?;
        Ok(Part {
            name,
            sha256: loaded.candidate.sha256,
            config: config_text(config),
        })
    }

    fn fingerprint(&self) -> String {
        format!("{}\0{}\0{}", self.name, self.sha256, self.config)
    }
}

/// A policy config as the JSON text `init` receives (`{}` when absent).
pub(crate) fn config_text(config: Option<&serde_json::Value>) -> String {
    config.map_or_else(|| "{}".to_string(), serde_json::Value::to_string)
}
