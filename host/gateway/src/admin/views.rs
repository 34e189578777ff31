//! What the admin API returns (and `verdict policy ...` prints).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use verdict_registry::{Generation, Registry, ReloadStatus, ShadowReport};
use verdict_runtime::{CacheStats, DecisionStats, Provenance};

use crate::clock::unix_ms;
use crate::pipeline::Pipeline;

/// One route of the active generation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteView {
    /// Topic pattern.
    pub topic: String,
    /// Policy name in the config.
    pub policy: String,
    /// The component's own name, version and sha256.
    pub component: Provenance,
    /// The route's policy config.
    pub config: serde_json::Value,
    /// When the component was loaded (ms since the epoch).
    pub loaded_at_ms: u64,
    /// Decisions so far (since the route was last rebuilt).
    pub stats: DecisionStatsView,
    /// The shadow, if any, with its counts.
    pub shadow: Option<ShadowReport>,
    /// Set while the route's policy has it paused (a `pause` verdict): nothing is delivered
    /// until the pause ends, then one probe.
    #[serde(default)]
    pub paused: Option<PausedView>,
    /// On a route ordered by key: the keys whose oldest unfinished message has failed
    /// (parked), as the gateway last read them (about every second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_keys: Option<ParkedView>,
}

/// A route's parked keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedView {
    /// Parked keys, their later messages held back.
    pub keys: u64,
    /// The route's `max_parked_keys`, if it has one.
    pub max: Option<u64>,
    /// At the bound: the route takes only retries until a parked key clears.
    pub full: bool,
}

/// A paused route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausedView {
    /// When the pause ends, in ms since the epoch (now or earlier once it waits for its
    /// probe).
    pub until_ms: u64,
    /// Whether the probe delivery that decides between resuming and pausing again is out.
    pub probing: bool,
}

/// [`DecisionStats`] as JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DecisionStatsView {
    /// Decisions made.
    pub decisions: u64,
    /// Decisions where the policy faulted and the fallback applied.
    pub faults: u64,
    /// Decisions a guardrail changed.
    pub clamped: u64,
}

impl From<&DecisionStats> for DecisionStatsView {
    fn from(s: &DecisionStats) -> Self {
        DecisionStatsView {
            decisions: s.decisions,
            faults: s.faults,
            clamped: s.clamped,
        }
    }
}

/// One policy of the config.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyView {
    /// Name in the config.
    pub name: String,
    /// The component in use.
    pub component: Option<Provenance>,
    /// When it was loaded (ms since the epoch).
    pub loaded_at_ms: Option<u64>,
    /// Generation of the registry.
    pub generation: u64,
    /// Routes (topic patterns) using it, as active policy.
    pub routes: Vec<String>,
    /// Decisions, faults and clamps over those routes.
    pub stats: DecisionStatsView,
    /// Digests of components uploaded for it (activate one by digest).
    pub uploads: Vec<String>,
}

/// A generation, active or kept for rollback.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenerationView {
    /// Its number.
    pub number: u64,
    /// Whether it is the active one.
    pub active: bool,
    /// When it was built (ms since the epoch).
    pub activated_at_ms: u64,
    /// What made it.
    pub cause: String,
    /// Route -> `policy@version (sha256 prefix)`.
    pub routes: BTreeMap<String, String>,
}

/// The registry at a glance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusView {
    /// The active generation.
    pub generation: u64,
    /// Changes applied and refused, and the last refusal's reason.
    pub changes: ReloadStatusView,
    /// Compilations and artifact-cache hits.
    pub artifact_cache: CacheStatsView,
}

/// [`ReloadStatus`] as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReloadStatusView {
    /// Applied.
    pub applied: u64,
    /// Refused.
    pub refused: u64,
    /// Why the last refusal was refused.
    pub last_error: Option<String>,
}

/// [`CacheStats`] as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheStatsView {
    /// Compiled.
    pub compiled: u64,
    /// Loaded from the cache.
    pub hits: u64,
    /// Entries rejected as stale or corrupt.
    pub rejected: u64,
}

pub(crate) fn status(registry: &Registry) -> StatusView {
    let ReloadStatus {
        reloads,
        refused,
        last_error,
        ..
    } = registry.status();
    let CacheStats {
        compiled,
        hits,
        rejected,
    } = registry.cache_stats();
    StatusView {
        generation: registry.current().number,
        changes: ReloadStatusView {
            applied: reloads,
            refused,
            last_error,
        },
        artifact_cache: CacheStatsView {
            compiled,
            hits,
            rejected,
        },
    }
}

/// The active generation's routes, with each one's pause as `pipeline` (when this process
/// delivers) knows it.
pub(crate) fn routes(generation: &Generation, pipeline: Option<&Pipeline>) -> Vec<RouteView> {
    let now_ms = crate::clock::now_ms();
    generation
        .routes
        .iter()
        .map(|r| RouteView {
            topic: r.topic.clone(),
            policy: r.policy.clone(),
            component: (**r.decider.policy().provenance()).clone(),
            config: serde_json::from_str(r.decider.config()).unwrap_or(serde_json::Value::Null),
            loaded_at_ms: unix_ms(r.decider.policy().loaded_at()),
            stats: (&r.decider.stats()).into(),
            shadow: r.shadow.as_ref().map(|s| s.report(&r.topic, &r.policy)),
            paused: pipeline
                .and_then(|p| p.route_pause(&r.topic))
                .map(|pause| PausedView {
                    until_ms: now_ms
                        .saturating_add(u64::try_from(pause.left.as_millis()).unwrap_or(u64::MAX)),
                    probing: pause.probing,
                }),
            parked_keys: pipeline
                .and_then(|p| p.parked_keys(&r.topic))
                .map(|parked| ParkedView {
                    keys: parked.keys,
                    max: parked.max,
                    full: parked.full(),
                }),
        })
        .collect()
}

pub(crate) fn policies(registry: &Registry) -> Vec<PolicyView> {
    let generation = registry.current();
    let config = generation.config();
    config
        .policies
        .keys()
        .map(|name| {
            let using: Vec<_> = generation
                .routes
                .iter()
                .filter(|r| &r.policy == name)
                .collect();
            let mut stats = DecisionStats::default();
            for r in &using {
                stats.add(&r.decider.stats());
            }
            let policy = generation.policies.get(name);
            PolicyView {
                name: name.clone(),
                component: policy.map(|p| (**p.provenance()).clone()),
                loaded_at_ms: policy.map(|p| unix_ms(p.loaded_at())),
                generation: generation.number,
                routes: using.iter().map(|r| r.topic.clone()).collect(),
                stats: (&stats).into(),
                uploads: registry.uploads(name),
            }
        })
        .collect()
}

pub(crate) fn generation(g: &Generation, active: bool) -> GenerationView {
    GenerationView {
        number: g.number,
        active,
        activated_at_ms: unix_ms(g.activated_at),
        cause: g.cause.clone(),
        routes: g
            .routes
            .iter()
            .map(|r| {
                let p = r.decider.policy().provenance();
                let short = &p.sha256[..12.min(p.sha256.len())];
                (
                    r.topic.clone(),
                    format!("{}@{} ({short})", r.policy, p.version),
                )
            })
            .collect(),
    }
}
