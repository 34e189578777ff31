//! The clock of a shared store: the database server's, not the gateway's.
//!
//! Several gateways share a PostgreSQL or MariaDB store. Every instant the store compares -
//! when a lease runs out, when a retry falls due, what retention prunes - must come from one
//! clock, or a gateway whose wall clock runs 30 s ahead claims its peers' leased messages
//! while they are still being delivered. That one clock is the database's: the store reads
//! it when it connects and every [`REANCHOR_EVERY`] after, and between readings advances it
//! with the process's monotonic clock, so a wall-clock step on the gateway (NTP, a VM
//! resumed, `faketime`) changes nothing the store decides.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the database's clock is read again (to follow its own drift and steps).
pub(crate) const REANCHOR_EVERY: Duration = Duration::from_secs(10);

/// A reading whose round trip is within this is precise enough to take whatever the last
/// one's was (loopback and LAN round trips are far below it).
const PRECISE: Duration = Duration::from_millis(10);

/// A reading is taken, however slow, once the one in use is this old.
const RENEW_ANYWAY: Duration = Duration::from_secs(300);

/// The database's time in milliseconds since the epoch, as of the best recent reading,
/// carried forward by the monotonic clock.
///
/// A reading is the database's time at an unknown instant within the round trip, so its
/// error is up to half the round trip. A thread starved of CPU between taking the time and
/// sending the query makes a round trip of seconds, and trusting its midpoint would move
/// every due time by seconds; such a reading is dropped unless it is about as precise as
/// the one in use (or that one is [`RENEW_ANYWAY`] old).
#[derive(Debug, Default)]
pub(crate) struct DbClock {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    anchor: Option<Anchor>,
    /// When a reading was last tried, taken or not.
    tried: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Anchor {
    /// The database's clock at `at`.
    db_ms: u64,
    at: Instant,
    /// The reading's round trip: twice its possible error.
    rtt: Duration,
}

impl DbClock {
    /// Now by the database's clock. Before the first reading (never, once connected) it is
    /// the gateway's own wall clock.
    pub(crate) fn now_ms(&self) -> u64 {
        match self.lock().anchor {
            Some(a) => a
                .db_ms
                .saturating_add(u64::try_from(a.at.elapsed().as_millis()).unwrap_or(u64::MAX)),
            None => crate::clock::now_ms(),
        }
    }

    /// Whether the clock should be read again: never read, or last tried
    /// [`REANCHOR_EVERY`] ago.
    pub(crate) fn stale(&self) -> bool {
        self.lock()
            .tried
            .is_none_or(|t| t.elapsed() >= REANCHOR_EVERY)
    }

    /// Take a reading: `read` asks the database for its time, which is taken to be the
    /// database's time halfway through the round trip.
    pub(crate) fn read<E>(&self, read: impl FnOnce() -> Result<i64, E>) -> Result<(), E> {
        let before = Instant::now();
        let db_ms = read()?;
        let after = Instant::now();
        self.take(db_ms, before, after);
        Ok(())
    }

    fn take(&self, db_ms: i64, before: Instant, after: Instant) {
        let rtt = after.saturating_duration_since(before);
        let reading = Anchor {
            db_ms: u64::try_from(db_ms).unwrap_or(0),
            at: before + rtt / 2,
            rtt,
        };
        let mut state = self.lock();
        state.tried = Some(after);
        let better = match state.anchor {
            None => true,
            Some(a) => rtt <= (a.rtt * 2).max(PRECISE) || a.at.elapsed() >= RENEW_ANYWAY,
        };
        if better {
            state.anchor = Some(reading);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_reading_is_carried_forward_by_the_monotonic_clock() {
        let clock = DbClock::default();
        assert!(clock.stale());
        // A database whose clock is an hour behind the gateway's.
        let db = crate::clock::now_ms() as i64 - 3_600_000;
        clock.read(|| Ok::<_, ()>(db)).unwrap();
        assert!(!clock.stale());
        std::thread::sleep(Duration::from_millis(30));
        let now = clock.now_ms() as i64;
        assert!(
            now >= db + 30 && now < db + 1_000,
            "{now} should be {db} + ~30 ms, whatever the gateway's wall clock says"
        );
    }

    #[test]
    fn a_failed_reading_keeps_the_last_one() {
        let clock = DbClock::default();
        clock.read(|| Ok::<_, ()>(5_000)).unwrap();
        assert!(clock.read(|| Err::<i64, _>("down")).is_err());
        assert!(clock.now_ms() < 6_000);
    }

    #[test]
    fn a_reading_from_a_starved_thread_does_not_move_the_clock() {
        let clock = DbClock::default();
        let t0 = Instant::now();
        clock.take(1_000_000, t0, t0 + Duration::from_millis(1));
        // Descheduled for 8 s between taking the time and sending the query: its midpoint
        // is 4 s off. Dropped: the precise reading stays.
        let t1 = t0 + Duration::from_secs(10);
        clock.take(1_010_000 + 8_000, t1, t1 + Duration::from_secs(8));
        let anchor = clock.lock().anchor.unwrap();
        assert_eq!(
            (anchor.db_ms, anchor.rtt),
            (1_000_000, Duration::from_millis(1))
        );
        assert!(!clock.stale(), "tried, so not asked again at once");
        // A precise one later is taken.
        let t2 = t0 + Duration::from_secs(20);
        clock.take(1_020_000, t2, t2 + Duration::from_millis(3));
        assert_eq!(clock.lock().anchor.unwrap().db_ms, 1_020_000);
    }

    #[test]
    fn a_slow_first_reading_is_replaced_by_the_next_precise_one() {
        let clock = DbClock::default();
        let t0 = Instant::now();
        clock.take(1_000_000, t0, t0 + Duration::from_secs(6));
        let t1 = t0 + Duration::from_secs(16);
        clock.take(1_016_000, t1, t1 + Duration::from_millis(2));
        assert_eq!(clock.lock().anchor.unwrap().rtt, Duration::from_millis(2));
    }
}
