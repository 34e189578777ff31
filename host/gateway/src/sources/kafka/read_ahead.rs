//! How far the source reads ahead of its slots.
//!
//! librdkafka fetches as fast as the application polls, and every record polled becomes a
//! task waiting for one of the source's `max_in_flight` slots. Unbounded, a backlog of
//! 100,000 records is 100,000 tasks: memory grows with the topic, and a gateway killed then
//! holds every one of them uncommitted, so its partitions' next owner reads them all again:
//! a replay that lands minutes after the kill that caused it. So past a bound of records
//! taken and not yet done the source pauses its partitions, and resumes them once half of
//! that has drained.
//!
//! Polling never stops meanwhile: rebalances and commit results are served by the same
//! poll, and a member that stops polling stalls its whole group. Pausing is safe to do at
//! any record: librdkafka drops what it had fetched beyond the last record the application
//! took and fetches on from there (or from where the application last sought), so nothing
//! is skipped.
//!
//! What counts is records that wait for a slot or hold one: a retry copy parked until it is
//! due and a blocking route's record waiting out its delay need none before their time.
//! A partition paused for such a reason of its own is never paused or resumed here: its
//! own owner resumes it.

use std::collections::BTreeSet;

/// A topic partition.
pub(crate) type PartitionId = (String, i32);

/// The partitions paused because too many records are in flight.
#[derive(Debug)]
pub(crate) struct ReadAhead {
    /// Records in flight at which reading pauses.
    pause_at: usize,
    /// Records in flight at which it resumes.
    resume_at: usize,
    /// The partitions this bound paused.
    paused: BTreeSet<PartitionId>,
}

impl ReadAhead {
    /// A bound of twice `max_in_flight`: a full set of slots and as many records ready for
    /// the next ones, so a slot freed is filled at once.
    pub(crate) fn new(max_in_flight: usize) -> ReadAhead {
        let max_in_flight = max_in_flight.max(1);
        ReadAhead {
            pause_at: max_in_flight.saturating_mul(2),
            resume_at: max_in_flight,
            paused: BTreeSet::new(),
        }
    }

    /// With `in_flight` records taken and not done, the partitions among `readable` (those
    /// not paused for a reason of their own) to pause now.
    pub(crate) fn pause_now<'a>(
        &mut self,
        in_flight: usize,
        readable: impl Iterator<Item = &'a PartitionId>,
    ) -> Vec<PartitionId> {
        if in_flight < self.pause_at {
            return Vec::new();
        }
        readable
            .filter(|id| self.paused.insert((*id).clone()))
            .cloned()
            .collect()
    }

    /// With `in_flight` records taken and not done, the partitions to resume now: every one
    /// this bound paused, but those `paused_otherwise` says are paused for a reason of their
    /// own since (their owner resumes them).
    pub(crate) fn resume_now(
        &mut self,
        in_flight: usize,
        paused_otherwise: impl Fn(&PartitionId) -> bool,
    ) -> Vec<PartitionId> {
        if self.paused.is_empty() || in_flight > self.resume_at {
            return Vec::new();
        }
        std::mem::take(&mut self.paused)
            .into_iter()
            .filter(|id| !paused_otherwise(id))
            .collect()
    }

    /// `id` was taken away: a partition given back starts reading (its assignment resumes
    /// it), so this bound no longer holds it.
    pub(crate) fn forget(&mut self, id: &PartitionId) {
        self.paused.remove(id);
    }

    /// Whether the bound holds any partition paused.
    pub(crate) fn holding(&self) -> bool {
        !self.paused.is_empty()
    }

    /// Whether the bound holds `id` paused.
    pub(crate) fn holds(&self, id: &PartitionId) -> bool {
        self.paused.contains(id)
    }

    /// `ids` could not be resumed: they stay paused for room, and the next drain tries again.
    pub(crate) fn keep(&mut self, ids: Vec<PartitionId>) {
        self.paused.extend(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[(&str, i32)]) -> Vec<PartitionId> {
        names.iter().map(|(t, p)| ((*t).to_string(), *p)).collect()
    }

    #[test]
    fn reading_pauses_at_twice_the_slots_and_resumes_at_the_slots() {
        let mut bound = ReadAhead::new(4);
        let all = ids(&[("orders", 0), ("orders", 1), ("retry.1000", 0)]);
        assert!(bound.pause_now(7, all.iter()).is_empty(), "below the bound");
        assert_eq!(
            bound.pause_now(8, all.iter()),
            all,
            "at the bound: every partition"
        );
        assert!(bound.holding());
        assert!(
            bound.pause_now(9, all.iter()).is_empty(),
            "a partition is paused once"
        );
        assert!(
            bound.resume_now(5, |_| false).is_empty(),
            "not drained to the slots yet"
        );
        assert_eq!(bound.resume_now(4, |_| false), all);
        assert!(!bound.holding());
        assert!(
            bound.resume_now(0, |_| false).is_empty(),
            "nothing paused, nothing to resume"
        );
    }

    #[test]
    fn a_partition_assigned_while_paused_is_paused_at_its_first_record() {
        let mut bound = ReadAhead::new(1);
        let first = ids(&[("orders", 0)]);
        assert_eq!(bound.pause_now(2, first.iter()), first);
        let later = ids(&[("orders", 0), ("orders", 1)]);
        assert_eq!(bound.pause_now(3, later.iter()), ids(&[("orders", 1)]));
    }

    #[test]
    fn a_partition_paused_for_its_own_reason_is_left_to_its_owner() {
        let mut bound = ReadAhead::new(2);
        let all = ids(&[("orders", 0), ("orders", 1)]);
        bound.pause_now(4, all.iter());
        // orders/1 since waits for a blocking route's record: resuming it here would read
        // past that record.
        let blocked = ("orders".to_string(), 1);
        assert_eq!(
            bound.resume_now(1, |id| *id == blocked),
            ids(&[("orders", 0)])
        );
        assert!(!bound.holding(), "its owner resumes it, not this bound");
    }

    #[test]
    fn a_resume_that_failed_is_tried_again_at_the_next_drain() {
        let mut bound = ReadAhead::new(1);
        let all = ids(&[("orders", 0)]);
        bound.pause_now(2, all.iter());
        let resumed = bound.resume_now(1, |_| false);
        bound.keep(resumed);
        assert!(bound.holds(&all[0]));
        assert_eq!(bound.resume_now(0, |_| false), all);
    }

    #[test]
    fn a_partition_taken_away_is_forgotten() {
        let mut bound = ReadAhead::new(1);
        let all = ids(&[("orders", 0)]);
        bound.pause_now(2, all.iter());
        bound.forget(&all[0]);
        assert!(!bound.holding());
        assert!(bound.resume_now(0, |_| false).is_empty());
    }
}
