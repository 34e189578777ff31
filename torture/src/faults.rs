//! The faults a run injects and where in the publishing they strike.

use std::collections::BTreeMap;

use crate::rng::Rng;

/// The faults a run injected.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Faults {
    /// `kill -9` of the gateway, then a restart.
    pub gateway_kills: u32,
    /// Broker stops and starts.
    pub broker_restarts: u32,
    /// Windows in which the consumer reset every connection.
    pub consumer_outages: u32,
    /// Config edits the gateway reloaded (the retry delay; on NATS and the store, a
    /// narrower route added or removed).
    pub reloads: u32,
    /// Rollbacks through the admin API.
    pub rollbacks: u32,
    /// An operator's hand on RabbitMQ: a delay exchange deleted, or writes refused by a
    /// `reject-publish` limit for a moment.
    pub operator_acts: u32,
}

/// A fault at a point of the publishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of the gateway, then a restart.
    Kill,
    /// The broker stopped and started.
    BrokerRestart,
    /// The consumer resets every connection for a while.
    ConsumerDown,
    /// The config edited, for the gateway to reload: the route's retry delay, and on NATS
    /// and the store a narrower route beside it added or removed.
    Reload,
    /// A rollback to the previous generation through the admin API.
    Rollback,
    /// An operator's hand on RabbitMQ (see [`crate::operator`]).
    Operator,
}

/// The faults of a run and where in the publishing they strike: `kinds` placed at seeded
/// points of `messages` publishes.
pub fn schedule(rng: &mut Rng, messages: usize, kinds: &[Fault]) -> BTreeMap<usize, Vec<Fault>> {
    let mut points: BTreeMap<usize, Vec<Fault>> = BTreeMap::new();
    for kind in kinds {
        // Not before the first publish: a fault needs something in flight to hurt.
        let at = 1 + rng.below(messages.saturating_sub(1).max(1) as u64) as usize;
        points.entry(at).or_default().push(*kind);
    }
    points
}

/// `n` faults of every kind the source allows, in turn from a seeded start, so a few
/// faults already cover every kind: broker restarts with `broker`, an operator's hand with
/// `operator` (RabbitMQ).
pub fn fault_kinds(rng: &mut Rng, n: usize, broker: bool, operator: bool) -> Vec<Fault> {
    let mut kinds = vec![
        Fault::Kill,
        Fault::ConsumerDown,
        Fault::Reload,
        Fault::Rollback,
    ];
    if broker {
        kinds.insert(1, Fault::BrokerRestart);
    }
    if operator {
        kinds.push(Fault::Operator);
    }
    let start = rng.below(kinds.len() as u64) as usize;
    (0..n).map(|i| kinds[(start + i) % kinds.len()]).collect()
}
