//! What the gateway reports about its health: whether it is ready (`/readyz`: every broker
//! source connected and the store answering, with the warnings an operator must fix), and
//! what it knows about its sources without asking them - each broker source's connection
//! and the depths of the brokers' DLQs (`/metrics`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Why the gateway is not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unready {
    /// These sources are not connected to their brokers: each one's name, and what it last
    /// warned about (why, when it knows: a TLS handshake refused, a login failed).
    SourcesDown(Vec<String>),
    /// The store does not answer (the message names the store).
    Store(String),
}

/// Whether a gateway is ready, from its `sources`' readiness, its consumers' warnings and its
/// `store`: `ready`, then a `warning:` line for each thing an operator must fix though the
/// sources keep working; or why not.
pub(crate) async fn ready(
    sources: &[Readiness],
    consumer_warnings: Vec<String>,
    store: Arc<crate::store::Store>,
) -> Result<String, Unready> {
    let ready: String = std::iter::once("ready\n".to_string())
        .chain(
            sources
                .iter()
                .filter_map(|s| Some(format!("warning: {}: {}\n", s.name(), s.warning()?))),
        )
        .chain(
            consumer_warnings
                .into_iter()
                .map(|w| format!("warning: consumer: {w}\n")),
        )
        .collect();
    let down: Vec<String> = sources
        .iter()
        .filter(|s| !s.is_up())
        .map(|s| match s.warning() {
            Some(why) => format!("{} ({why})", s.name()),
            None => s.name().to_string(),
        })
        .collect();
    if !down.is_empty() {
        return Err(Unready::SourcesDown(down));
    }
    let name = store.describe();
    // Always naming the store: a connection the database cut fails with the driver's words
    // only ("broken pipe"), which would leave the operator guessing which database.
    let unready = |e: &dyn std::fmt::Display| {
        let e = e.to_string();
        let target = name.split_once(' ').map_or(name.as_str(), |(_, t)| t);
        Unready::Store(if e.contains(target) {
            e
        } else {
            format!("{name}: {e}")
        })
    };
    match tokio::task::spawn_blocking(move || store.counts()).await {
        Ok(Ok(_)) => Ok(ready),
        Ok(Err(e)) => Err(unready(&e)),
        Err(e) => Err(unready(&e)),
    }
}

/// How long `/readyz` shows a warning after it was last seen.
const WARNING_SHOWN_FOR: Duration = Duration::from_secs(600);
/// How often a warning that keeps happening is logged again.
const WARNING_LOGGED_EVERY: Duration = Duration::from_secs(60);

/// Whether a source is connected to its broker, and what it has seen that an operator must
/// fix though it keeps working (a misconfiguration); `/readyz` reads these.
#[derive(Debug, Clone)]
pub struct Readiness {
    name: &'static str,
    /// Connected (the low bit), and the number of the newest connection (the rest): one
    /// word, so a report from a replaced connection is told apart and dropped atomically.
    up: Arc<AtomicU64>,
    warning: Arc<Mutex<Option<Warning>>>,
    /// Whether `warning` may hold one: clearing is a load, not a lock, when it does not
    /// (a consumer's health is cleared on every delivery).
    warned: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Warning {
    text: String,
    seen: Instant,
    logged: Instant,
}

impl Readiness {
    /// A source named `name`, not yet connected.
    pub fn new(name: &'static str) -> Readiness {
        Readiness {
            name,
            up: Arc::new(AtomicU64::new(0)),
            warning: Arc::default(),
            warned: Arc::default(),
        }
    }

    /// The source's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Connected now?
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed) & 1 == 1
    }

    /// Record (dis)connection.
    pub fn set(&self, up: bool) {
        let _ = self
            .up
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v & !1 | u64::from(up))
            });
    }

    /// A handle for one new connection's own events (a client's disconnects and
    /// reconnects), which count only while it is the newest connection: a client replaced
    /// by a newer one (a reload sets the routes up again on a new connection) may report its
    /// own close long after, and must not mark the source down then.
    pub fn for_connection(&self) -> ConnectionReadiness {
        let previous = self.up.fetch_add(2, Ordering::Relaxed);
        ConnectionReadiness {
            readiness: self.clone(),
            connection: (previous >> 1) + 1,
        }
    }

    /// Something the operator must fix was seen (again): `/readyz` shows `text` for ten
    /// minutes after the last time. True when it should be logged now: new text, or a
    /// minute since it was last logged.
    pub fn warn(&self, text: String) -> bool {
        let now = Instant::now();
        let mut warning = self.warning.lock().unwrap_or_else(PoisonError::into_inner);
        self.warned.store(true, Ordering::Relaxed);
        let log = warning
            .as_ref()
            .is_none_or(|w| w.text != text || now.duration_since(w.logged) >= WARNING_LOGGED_EVERY);
        let logged = match warning.as_ref() {
            Some(w) if !log => w.logged,
            _ => now,
        };
        *warning = Some(Warning {
            text,
            seen: now,
            logged,
        });
        log
    }

    /// What was wrong is right again (a delivery went through): no warning to show.
    pub fn clear_warning(&self) {
        if self.warned.load(Ordering::Relaxed) && self.warned.swap(false, Ordering::Relaxed) {
            *self.warning.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }

    /// The warning `/readyz` shows, if one was seen in the last ten minutes.
    pub fn warning(&self) -> Option<String> {
        self.warning
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|w| w.seen.elapsed() < WARNING_SHOWN_FOR)
            .map(|w| w.text.clone())
    }
}

/// One connection's view of its source's [`Readiness`]: see [`Readiness::for_connection`].
#[derive(Debug, Clone)]
pub struct ConnectionReadiness {
    readiness: Readiness,
    connection: u64,
}

impl ConnectionReadiness {
    /// Record this connection's (dis)connection, if it is still the newest; whether it was.
    pub fn set(&self, up: bool) -> bool {
        self.readiness
            .up
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v >> 1 == self.connection).then_some(v & !1 | u64::from(up))
            })
            .is_ok()
    }
}

/// The dead-letter queues a broker holds, as last read from the broker (refreshed about once
/// a second by each broker source) plus the dead letters this process wrote to them; the
/// metrics read this instead of asking the broker on every scrape.
#[derive(Debug, Clone, Default)]
pub struct BrokerDlqs(Arc<Mutex<BTreeMap<(&'static str, String), BrokerDlq>>>);

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
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
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
    fn a_replaced_connection_cannot_mark_the_source_down_or_up() {
        let ready = Readiness::new("nats");
        let old = ready.for_connection();
        assert!(old.set(true) && ready.is_up());
        // A reload connects again; the new session is up.
        let new = ready.for_connection();
        ready.set(true);
        // The old client closes late, or reconnects late: neither counts.
        assert!(!old.set(false));
        assert!(ready.is_up(), "the newest connection is up");
        ready.set(false);
        assert!(!old.set(true));
        assert!(!ready.is_up(), "the newest connection is down");
        // The newest one's own events do.
        assert!(new.set(true) && ready.is_up());
        assert!(new.set(false) && !ready.is_up());
    }

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
