//! The delay buckets a broker retry waits in: a bounded set of delays 25% apart (a
//! RabbitMQ delay queue or a Kafka retry topic each), so a retry is never early and at most
//! a quarter late, and a few dozen queues or topics cover 50 ms to a day.

/// The shortest delay bucket; each next one is 25% longer (rounded up to whole ms).
const FIRST_BUCKET_MS: u64 = 50;
/// The longest delay bucket: a day (the config checks that its queue name is short enough).
pub const MAX_BUCKET_MS: u64 = verdict_registry::config::MAX_DELAY_BUCKET_MS;

/// The delay bucket a verdict's delay waits in: the shortest bucket at least as long as the
/// delay (a retry never comes early, and at most 25% late), capped at a day; 0 stays 0
/// (republished at once).
pub fn bucket_ms(delay_ms: u64) -> u64 {
    if delay_ms == 0 {
        return 0;
    }
    let mut bucket = FIRST_BUCKET_MS;
    while bucket < delay_ms && bucket < MAX_BUCKET_MS {
        bucket = bucket + bucket.div_ceil(4);
    }
    bucket.min(MAX_BUCKET_MS)
}

/// Every delay bucket, shortest first: what a tool cleaning a delay prefix away must look
/// for.
pub fn all_buckets() -> Vec<u64> {
    let mut buckets = Vec::new();
    let mut delay = 1;
    while delay <= MAX_BUCKET_MS {
        let bucket = bucket_ms(delay);
        buckets.push(bucket);
        delay = bucket + 1;
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_never_come_early_and_at_most_a_quarter_late() {
        assert_eq!(bucket_ms(0), 0);
        assert_eq!(bucket_ms(1), 50);
        let mut d = 1;
        while d < MAX_BUCKET_MS {
            let b = bucket_ms(d);
            assert!(b >= d, "{d} -> {b}");
            assert!(d < 50 || b * 4 <= d * 5 + 4, "{d} -> {b}");
            d = d * 3 / 2 + 7;
        }
        assert_eq!(bucket_ms(10 * MAX_BUCKET_MS), MAX_BUCKET_MS);
        // Few enough queues to declare lazily: about 64 from 50 ms to a day.
        let mut buckets = std::collections::BTreeSet::new();
        for e in 0..40 {
            buckets.insert(bucket_ms(1 << e));
        }
        assert!(buckets.len() < 70, "{}", buckets.len());
    }
}
