//! Which offset of a partition may be committed when records finish out of order.
//!
//! Kafka remembers one number per partition and consumer group: the next offset to read.
//! Committing it says "everything before this is done", so a gateway that delivers a
//! partition's records concurrently may commit only up to its lowest record still in
//! flight: a record at offset 7 delivered while offset 5 still waits for its consumer does
//! not move the commit past 5. A crash then redelivers 5, 6 and 7 (a duplicate, counted),
//! never loses 5 (the guarantee: nothing lost).

use std::collections::BTreeSet;

/// One partition's records in flight and the offset that may be committed.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartitionOffsets {
    /// Records taken and not yet terminal (delivered, or their retry or dead letter
    /// acknowledged by the broker).
    in_flight: BTreeSet<i64>,
    /// One past the highest offset taken: what to commit when nothing is in flight.
    next: Option<i64>,
    /// The offset last handed out to commit.
    committed: Option<i64>,
}

impl PartitionOffsets {
    /// Record `offset` as taken. Offsets come in increasing order from one fetch position;
    /// one at or below an offset already taken (a seek back, a redelivery after a
    /// rebalance) is tracked the same way and never moves the commit backwards.
    pub(crate) fn take(&mut self, offset: i64) {
        self.in_flight.insert(offset);
        let after = offset.saturating_add(1);
        self.next = Some(self.next.map_or(after, |n| n.max(after)));
    }

    /// Record `offset` as terminal. An offset never taken (or already finished) is ignored:
    /// it cannot be trusted to say anything about the others.
    pub(crate) fn finish(&mut self, offset: i64) {
        self.in_flight.remove(&offset);
    }

    /// Records taken and not yet terminal.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The offset to commit now - the lowest record in flight, or one past the highest
    /// taken when none is - when it is past what was last handed out; `None` when there is
    /// nothing new to commit.
    pub(crate) fn take_commit(&mut self) -> Option<i64> {
        let next = self.next?;
        let ready = self.in_flight.first().copied().unwrap_or(next);
        if self.committed.is_some_and(|c| ready <= c) {
            return None;
        }
        self.committed = Some(ready);
        Some(ready)
    }

    /// The commit that was handed out failed: hand the same offset out again next time.
    pub(crate) fn commit_failed(&mut self, offset: i64) {
        if self.committed == Some(offset) {
            self.committed = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_waits_for_the_lowest_record_in_flight() {
        let mut p = PartitionOffsets::default();
        assert_eq!(p.take_commit(), None, "nothing taken, nothing to commit");
        for offset in 5..=8 {
            p.take(offset);
        }
        assert_eq!(p.take_commit(), Some(5), "5 is still in flight");
        p.finish(7);
        p.finish(8);
        assert_eq!(
            p.take_commit(),
            None,
            "7 and 8 finished, 5 and 6 not: no progress"
        );
        p.finish(5);
        assert_eq!(p.take_commit(), Some(6));
        p.finish(6);
        assert_eq!(p.take_commit(), Some(9), "everything taken is done");
        assert_eq!(p.take_commit(), None, "said once");
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn a_failed_commit_is_handed_out_again_and_never_moves_backwards() {
        let mut p = PartitionOffsets::default();
        p.take(10);
        p.finish(10);
        assert_eq!(p.take_commit(), Some(11));
        p.commit_failed(11);
        assert_eq!(p.take_commit(), Some(11));
        // A seek back redelivers 10: taken again, it holds the next commit at 10, which is
        // behind what was committed, so nothing is handed out until it passes 11.
        p.take(10);
        assert_eq!(p.take_commit(), None);
        p.take(11);
        p.finish(10);
        assert_eq!(
            p.take_commit(),
            None,
            "11 is in flight: 11 was already committed"
        );
        p.finish(11);
        assert_eq!(p.take_commit(), Some(12));
    }

    #[test]
    fn hostile_finishes_do_not_move_the_commit() {
        let mut p = PartitionOffsets::default();
        p.take(3);
        p.finish(99);
        p.finish(-1);
        p.finish(i64::MAX);
        assert_eq!(p.take_commit(), Some(3));
        assert_eq!(p.in_flight(), 1);
    }

    /// Any order of finishes: the commit never passes a record in flight and ends one past
    /// the last.
    #[test]
    fn any_order_of_finishes_commits_only_what_is_done() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..200 {
            let mut p = PartitionOffsets::default();
            let offsets: Vec<i64> = (100..140).collect();
            for &o in &offsets {
                p.take(o);
            }
            let mut order = offsets.clone();
            for i in (1..order.len()).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                order.swap(i, (seed % (i as u64 + 1)) as usize);
            }
            let mut done = BTreeSet::new();
            for o in order {
                p.finish(o);
                done.insert(o);
                if let Some(c) = p.take_commit() {
                    assert!((100..c).all(|x| done.contains(&x)), "committed {c} early");
                }
            }
            assert_eq!(p.in_flight(), 0);
            assert_eq!(p.committed, Some(140));
        }
    }
}
