//! One limiter on wrong credentials, across the API's bearer tokens and the console's login
//! form: guessing is slow and seen. Past [`MAX_FAILURES_PER_SECOND`] wrong credentials
//! within a second, every credential presented gets 429 until that second is over - the
//! right one too, so a guesser learns nothing from racing the limit. Each wrong one is
//! counted (`verdict_admin_auth_failures_total`) and each burst that reaches the limit is
//! logged once as a warning naming the peer.
//!
//! One limiter for the listener rather than one per peer: the listener is on loopback (or
//! behind a proxy), where every peer has the same address.

use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// Wrong credentials accepted for checking within one second.
pub const MAX_FAILURES_PER_SECOND: u32 = 10;

const WINDOW: Duration = Duration::from_secs(1);

/// The limiter (see the module's doc).
#[derive(Debug)]
pub(crate) struct AuthFailures {
    burst: Mutex<Burst>,
    counter: Counter,
}

#[derive(Debug, Default)]
struct Burst {
    started: Option<Instant>,
    failures: u32,
    warned: bool,
}

impl Burst {
    /// The burst of now: a new one once a second has passed since this one started.
    fn current(&mut self, now: Instant) -> &mut Burst {
        if self.started.is_none_or(|s| now.duration_since(s) >= WINDOW) {
            *self = Burst {
                started: Some(now),
                ..Burst::default()
            };
        }
        self
    }
}

impl AuthFailures {
    /// A limiter counting wrong credentials in `counter`.
    pub(crate) fn new(counter: Counter) -> AuthFailures {
        AuthFailures {
            burst: Mutex::new(Burst::default()),
            counter,
        }
    }

    /// Whether a presented credential may be checked now.
    pub(crate) fn admits(&self) -> bool {
        self.admits_at(Instant::now())
    }

    fn admits_at(&self, now: Instant) -> bool {
        let mut burst = self.burst.lock().unwrap_or_else(PoisonError::into_inner);
        burst.current(now).failures < MAX_FAILURES_PER_SECOND
    }

    /// A presented credential was wrong (`peer`: who sent it, when known).
    pub(crate) fn failed(&self, peer: Option<SocketAddr>, what: &str) {
        self.failed_at(Instant::now(), peer, what);
    }

    fn failed_at(&self, now: Instant, peer: Option<SocketAddr>, what: &str) {
        self.counter.inc();
        let mut burst = self.burst.lock().unwrap_or_else(PoisonError::into_inner);
        let burst = burst.current(now);
        burst.failures = burst.failures.saturating_add(1);
        if burst.failures >= MAX_FAILURES_PER_SECOND && !burst.warned {
            burst.warned = true;
            let peer = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
            tracing::warn!(
                %peer,
                what,
                "admin: {MAX_FAILURES_PER_SECOND} wrong credentials within a second; every \
                 credential gets 429 for the rest of it (someone guessing?)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_wrong_credentials_close_the_second_and_the_next_second_opens_again() {
        let counter = Counter::default();
        let limiter = AuthFailures::new(counter.clone());
        let start = Instant::now();
        for i in 0..MAX_FAILURES_PER_SECOND {
            assert!(limiter.admits_at(start), "{i}");
            limiter.failed_at(start, None, "test");
        }
        assert!(!limiter.admits_at(start + Duration::from_millis(900)));
        assert!(limiter.admits_at(start + Duration::from_millis(1_001)));
        assert_eq!(counter.get(), u64::from(MAX_FAILURES_PER_SECOND));
    }
}
