//! Keys parked per route: on a route ordered by key, a key whose oldest unfinished message
//! has failed (waiting for its retry, given back to wait, or in flight again) holds its
//! later messages back. The embedded source reads the store's counts about
//! every second ([`ParkedKeys::read`]); a route at its `max_parked_keys` then claims only
//! retries until a key clears, so a failing dependency cannot park every key in the topic.
//! A RabbitMQ or NATS route holds its parked keys in the gateway's memory and says how many
//! as they change ([`ParkedKeys::held`]); a Kafka route ordered by key counts a partition whose
//! record waits out a retry in place as one parked key while it waits ([`Parking`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use verdict_registry::Generation;

use super::metrics::Labels;

/// A route's parked keys as last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parked {
    /// Parked keys.
    pub keys: u64,
    /// The route's `max_parked_keys`, if it has one.
    pub max: Option<u64>,
}

impl Parked {
    /// Whether the route is at its bound: it takes only retries.
    pub fn full(&self) -> bool {
        self.max.is_some_and(|max| self.keys >= max)
    }
}

/// Every ordered route's parked keys, and their gauges.
#[derive(Debug)]
pub(crate) struct ParkedKeys {
    /// Read from the store.
    by_route: Mutex<HashMap<String, Parked>>,
    /// Counted by a broker source that holds its parked keys itself.
    held: Mutex<HashMap<String, u64>>,
    /// `verdict_parked_keys{topic}`.
    keys: Family<Labels, Gauge>,
    /// `verdict_route_parked_keys_full{topic}`.
    full: Family<Labels, Gauge>,
}

impl ParkedKeys {
    pub(crate) fn new(keys: Family<Labels, Gauge>, full: Family<Labels, Gauge>) -> Self {
        ParkedKeys {
            by_route: Mutex::default(),
            held: Mutex::default(),
            keys,
            full,
        }
    }

    /// The store's counts per topic, summed per route of `generation` that orders by key
    /// (a route with none parked reads 0; a route no longer there is forgotten, its gauges
    /// set to 0).
    pub(crate) fn read(&self, generation: &Generation, per_topic: &[(String, u64)]) {
        let mut now: HashMap<String, Parked> = generation
            .routes
            .iter()
            .filter(|r| r.key_header.is_some())
            .map(|r| {
                let parked = Parked {
                    keys: 0,
                    max: r.max_parked_keys,
                };
                (r.topic.clone(), parked)
            })
            .collect();
        for (topic, keys) in per_topic {
            if let Some(parked) = generation
                .route(topic)
                .and_then(|r| now.get_mut(r.topic.as_str()))
            {
                parked.keys = parked.keys.saturating_add(*keys);
            }
        }
        let mut by_route = self.by_route.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in by_route.keys().filter(|r| !now.contains_key(*r)) {
            self.set_gauges(gone, 0, false);
        }
        for (route, parked) in &now {
            self.set_gauges(route, parked.keys, parked.full());
        }
        *by_route = now;
    }

    fn set_gauges(&self, route: &str, keys: u64, full: bool) {
        let labels = vec![("topic", route.to_string())];
        self.keys
            .get_or_create(&labels)
            .set(i64::try_from(keys).unwrap_or(i64::MAX));
        self.full.get_or_create(&labels).set(i64::from(full));
    }

    /// Whether any route's parked keys are kept: they must be read again (set to nothing)
    /// once no route orders by key any more, or a route kept "full" would stay so.
    pub(crate) fn tracked(&self) -> bool {
        !self
            .by_route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// A broker source's parked keys on `route` now (a RabbitMQ or NATS route ordered by
    /// key: its keys whose message is retrying in place).
    pub(crate) fn held(&self, route: &str, keys: u64) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(route.to_string(), keys);
        self.set_gauges(route, keys, false);
    }

    /// One key of `route` more (`Some(true)`) or fewer (`Some(false)`) parked, or the route
    /// counted from 0 if it was not yet (`None`), for a broker source that counts its keys
    /// as they park and clear.
    pub(crate) fn step(&self, route: &str, parked: Option<bool>) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let keys = held.entry(route.to_string()).or_insert(0);
        *keys = match parked {
            Some(true) => keys.saturating_add(1),
            Some(false) => keys.saturating_sub(1),
            None => *keys,
        };
        // Under the lock: two steps at once must not leave the gauge at the earlier value.
        self.set_gauges(route, *keys, false);
    }

    /// The route's parked keys as last read or counted, if it orders by key.
    pub(crate) fn of(&self, route: &str) -> Option<Parked> {
        let read = self
            .by_route
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(route)
            .copied();
        read.or_else(|| {
            let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.get(route).map(|&keys| Parked { keys, max: None })
        })
    }
}

/// A parked key counted on its route while this lives: a Kafka partition whose record waits
/// out a retry in place (and is delivered again) holds every later record of its keys.
#[must_use = "the key counts as parked only while the guard lives"]
pub(crate) struct Parking {
    pipeline: std::sync::Arc<super::Pipeline>,
    route: String,
}

impl Parking {
    pub(super) fn new(pipeline: std::sync::Arc<super::Pipeline>, route: &str) -> Parking {
        pipeline.parked.step(route, Some(true));
        Parking {
            pipeline,
            route: route.to_string(),
        }
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        self.pipeline.parked.step(&self.route, Some(false));
    }
}
