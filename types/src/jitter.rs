//! The jitter seed: what makes one delivery's jittered delay the same wherever it is
//! computed - by the host for a fallback, by a policy for its retry.

/// The jitter seed the host gives a delivery: a stable hash of the message id and the
/// attempt (FNV-1a, then a SplitMix64 finaliser), identical across runs and machines.
pub fn jitter_seed(message_id: &str, attempt: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in message_id.bytes().chain(attempt.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    crate::SplitMix64::new(h).next_u64()
}
