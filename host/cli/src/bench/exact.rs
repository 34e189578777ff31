//! The bench's measurement hooks on a pipeline: each decision timed on its thread's CPU
//! clock (wall time overstates a decision's cost on a busy machine: a preempted thread's
//! wait counts) and exact receipt-to-settlement percentiles. Production does without both:
//! the CPU clock is two system calls per decision and the percentiles a lock per delivery.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use verdict_gateway::model::Handled;
use verdict_gateway::pipeline::Observer;

/// Exact percentiles (3 significant digits) of receipt -> settlement applied.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HandlingSummary {
    /// Deliveries handled.
    pub count: u64,
    /// Median receipt -> settled.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

/// What [`Exact`] measured so far.
pub(crate) struct Exact {
    /// Thread CPU time spent deciding, in nanoseconds.
    decide_cpu_ns: AtomicU64,
    /// Receipt -> settlement applied, in microseconds (1 us .. 1 h).
    handling_us: Mutex<Histogram<u64>>,
}

impl Exact {
    pub(crate) fn new() -> Exact {
        Exact {
            decide_cpu_ns: AtomicU64::new(0),
            handling_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid"),
            ),
        }
    }

    /// Thread CPU time spent deciding.
    pub(crate) fn policy_cpu(&self) -> Duration {
        Duration::from_nanos(self.decide_cpu_ns.load(Ordering::Relaxed))
    }

    /// The percentiles of every delivery handled so far.
    pub(crate) fn handling(&self) -> HandlingSummary {
        let h = self.histogram();
        let us = Duration::from_micros;
        HandlingSummary {
            count: h.len(),
            p50: us(h.value_at_quantile(0.50)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
        }
    }

    fn histogram(&self) -> std::sync::MutexGuard<'_, Histogram<u64>> {
        self.handling_us
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Observer for Exact {
    fn decision(&self, decide: &mut dyn FnMut()) {
        let clock = cpu_time::ThreadTime::try_now().ok();
        decide();
        if let Some(spent) = clock.and_then(|c| c.try_elapsed().ok()) {
            let ns = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
            self.decide_cpu_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    fn handled(&self, _outcome: Handled, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        self.histogram().saturating_record(us);
    }
}
