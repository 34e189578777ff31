//! A few connections to a shared database, so that a gateway's claims, settlements and
//! lease extensions do not queue behind each other on one connection. Each slot holds a
//! connection made on first use (and again after it broke); a call takes the first free
//! slot, or waits on one in turn when all are busy.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Connections per gateway: the claim loop, the settlement writer, the lease keeper and one
/// for the admin API and metrics each find one free.
pub(crate) const CONNECTIONS: usize = 4;

/// Slots of lazily made connections.
pub(crate) struct Pool<C> {
    slots: Vec<Mutex<Option<C>>>,
    next: AtomicUsize,
}

impl<C> Pool<C> {
    pub(crate) fn new() -> Pool<C> {
        Pool {
            slots: (0..CONNECTIONS).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// A slot to use: a free one if any, else the next in turn (waiting for it).
    pub(crate) fn get(&self) -> MutexGuard<'_, Option<C>> {
        for slot in &self.slots {
            match slot.try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        self.slots[n].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every connection made so far, taken out of the pool.
    #[cfg(feature = "postgres")]
    pub(crate) fn drain(&self) -> Vec<C> {
        self.slots
            .iter()
            .filter_map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).take())
            .collect()
    }
}
