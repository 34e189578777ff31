//! A store that stopped answering, as the claim loop sees it: how long to wait before the
//! next try (doubling from the poll interval up to [`MAX_DELAY`]) and what to tell the
//! operator - the first failure and any new error at once, the same error again at most
//! every [`REPEAT_LOG`], and the recovery - instead of one line per try.

use std::time::{Duration, Instant};

/// The longest wait between two tries: a database back from a restart is used again
/// within this.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(2);
/// How often the same failure is logged again while it lasts.
pub(crate) const REPEAT_LOG: Duration = Duration::from_secs(30);

/// The claim loop's view of a failing store; `None` while it answers.
#[derive(Debug, Default)]
pub(crate) struct StoreOutage {
    current: Option<Outage>,
}

#[derive(Debug)]
struct Outage {
    since: Instant,
    tries: u64,
    delay: Duration,
    last_error: String,
    logged_at: Instant,
}

impl StoreOutage {
    /// A try failed with `error`: log as the rules above say; how long to wait.
    pub(crate) fn failed(&mut self, error: &dyn std::fmt::Display, poll: Duration) -> Duration {
        let error = error.to_string();
        let now = Instant::now();
        match &mut self.current {
            None => {
                tracing::error!(%error, "claiming messages failed; retrying with backoff");
                self.current = Some(Outage {
                    since: now,
                    tries: 1,
                    delay: poll.min(MAX_DELAY),
                    last_error: error,
                    logged_at: now,
                });
            }
            Some(o) => {
                o.tries += 1;
                o.delay = (o.delay * 2).clamp(Duration::from_millis(1), MAX_DELAY);
                if o.last_error != error || now.duration_since(o.logged_at) >= REPEAT_LOG {
                    tracing::error!(
                        %error,
                        tries = o.tries,
                        failing_for_s = now.duration_since(o.since).as_secs(),
                        "claiming messages still fails; retrying with backoff"
                    );
                    o.last_error = error;
                    o.logged_at = now;
                }
            }
        }
        self.current.as_ref().map_or(poll, |o| o.delay)
    }

    /// A try worked: the outage, if there was one, is over.
    pub(crate) fn answered(&mut self) {
        if let Some(o) = self.current.take() {
            tracing::warn!(
                tries = o.tries,
                down_for_ms = u64::try_from(o.since.elapsed().as_millis()).unwrap_or(u64::MAX),
                "the store answers again; claiming resumed"
            );
        }
    }

    /// Whether the last try failed.
    #[cfg(test)]
    fn is_down(&self) -> bool {
        self.current.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_the_ceiling_and_ends_with_the_outage() {
        let poll = Duration::from_millis(10);
        let mut outage = StoreOutage::default();
        let waits: Vec<Duration> = (0..12).map(|_| outage.failed(&"down", poll)).collect();
        assert_eq!(waits[0], poll);
        assert_eq!(waits[1], poll * 2);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().unwrap(), MAX_DELAY);
        outage.answered();
        assert!(!outage.is_down());
        assert_eq!(
            outage.failed(&"down", poll),
            poll,
            "a new outage starts over"
        );
        // A poll interval longer than the ceiling does not make the first wait longer.
        let mut slow = StoreOutage::default();
        assert_eq!(slow.failed(&"down", Duration::from_secs(600)), MAX_DELAY);
    }
}
