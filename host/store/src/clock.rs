//! Wall-clock times as the contract and the store keep them: milliseconds since the epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` in milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}
