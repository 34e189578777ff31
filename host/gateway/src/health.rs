//! What the gateway reports about its sources without asking them: whether each broker
//! source is connected (`/readyz`) and the depths of the brokers' DLQs (`/metrics`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a source is connected to its broker; `/readyz` reads these.
#[derive(Debug, Clone)]
pub struct Readiness {
    name: &'static str,
    up: Arc<AtomicBool>,
}

impl Readiness {
    /// A source named `name`, not yet connected.
    pub fn new(name: &'static str) -> Readiness {
        Readiness {
            name,
            up: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The source's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Connected now?
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Record (dis)connection.
    pub fn set(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }
}

/// The dead-letter queues a broker holds, as last read from the broker (refreshed about once
/// a second by each broker source) plus the dead letters this process wrote to them; the
/// metrics read this instead of asking the broker on every scrape.
#[derive(Debug, Clone, Default)]
pub struct BrokerDlqs(Arc<std::sync::Mutex<BTreeMap<(&'static str, String), BrokerDlq>>>);

/// One broker DLQ.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerDlq {
    /// Source topic (empty for a global DLQ, whose letters come from many).
    pub topic: String,
    /// Dead letters waiting, as the broker counts them.
    pub depth: u64,
    /// Dead letters this process wrote (and the broker confirmed).
    pub ingress: u64,
}

impl BrokerDlqs {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(&'static str, String), BrokerDlq>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The broker's count for `dlq` of `source`.
    pub(crate) fn set_depth(&self, source: &'static str, dlq: &str, topic: &str, depth: u64) {
        let mut map = self.lock();
        let entry = map.entry((source, dlq.to_string())).or_default();
        entry.topic = topic.to_string();
        entry.depth = depth;
    }

    /// One dead letter confirmed by the broker.
    pub(crate) fn written(&self, source: &'static str, dlq: &str, topic: &str) {
        let mut map = self.lock();
        let entry = map.entry((source, dlq.to_string())).or_default();
        entry.topic = topic.to_string();
        entry.ingress += 1;
        entry.depth += 1;
    }

    /// Every broker DLQ: (source, dlq, state).
    pub fn snapshot(&self) -> Vec<(&'static str, String, BrokerDlq)> {
        self.lock()
            .iter()
            .map(|((source, dlq), d)| (*source, dlq.clone(), d.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_dlq_depth_is_the_brokers_count_and_ingress_is_ours() {
        let dlqs = BrokerDlqs::default();
        dlqs.written("nats", "orders.DLQ", "orders");
        dlqs.written("nats", "orders.DLQ", "orders");
        assert_eq!(
            dlqs.snapshot(),
            [(
                "nats",
                "orders.DLQ".to_string(),
                BrokerDlq {
                    topic: "orders".into(),
                    depth: 2,
                    ingress: 2
                }
            )]
        );
        // The broker's own count wins at the next poll (a replay emptied it).
        dlqs.set_depth("nats", "orders.DLQ", "orders", 0);
        assert_eq!(dlqs.snapshot()[0].2.depth, 0);
        assert_eq!(dlqs.snapshot()[0].2.ingress, 2);
    }
}
