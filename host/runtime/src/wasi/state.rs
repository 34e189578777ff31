//! What the WASI stubs keep per call: the deterministic clock and generator, and the
//! unfinished lines of stdout and stderr.

use verdict_types::SplitMix64;

/// How far each clock read moves the clock: time passes within a call, the same way on
/// every replay.
const NS_PER_READ: u64 = 1_000;
/// An unfinished line longer than this is written out cut, so a policy that never prints
/// a newline cannot grow the host's buffer.
pub(crate) const MAX_PENDING_LINE_BYTES: usize = 4 << 10;

/// The inputs of one call that the stubs answer from.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallInputs {
    /// The failure's `now-ms` (0 outside `decide`: `init` and `describe` see the epoch).
    pub(crate) now_ms: u64,
    /// The failure's jitter seed (0 outside `decide`).
    pub(crate) seed: u64,
}

pub(crate) struct WasiState {
    start_ns: u64,
    reads: u64,
    rng: SplitMix64,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

impl Default for WasiState {
    fn default() -> Self {
        WasiState::begin(CallInputs::default())
    }
}

impl WasiState {
    pub(crate) fn begin(inputs: CallInputs) -> Self {
        WasiState {
            start_ns: inputs.now_ms.saturating_mul(1_000_000),
            reads: 0,
            // A stream of its own, not the jitter itself: the SDKs draw jitter from the
            // seed directly, and an interpreter's hash seed must not repeat those draws.
            rng: SplitMix64::new(inputs.seed ^ 0x5749_5341_5052_4e47),
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }

    /// The clock in ns since the epoch; each read is a microsecond after the last.
    pub(crate) fn read_clock_ns(&mut self) -> u64 {
        let now = self
            .start_ns
            .saturating_add(self.reads.saturating_mul(NS_PER_READ));
        self.reads += 1;
        now
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    pub(crate) fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let word = self.rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// Append `bytes` to a stream's pending text and take out every finished line (a line cut
/// at [`MAX_PENDING_LINE_BYTES`] counts as finished).
pub(crate) fn take_lines(pending: &mut Vec<u8>, bytes: &[u8]) -> Vec<String> {
    let mut lines = Vec::new();
    for &b in bytes {
        if b == b'\n' {
            lines.push(String::from_utf8_lossy(pending).into_owned());
            pending.clear();
        } else if pending.len() < MAX_PENDING_LINE_BYTES {
            pending.push(b);
        } else {
            lines.push(String::from_utf8_lossy(pending).into_owned());
            pending.clear();
            pending.push(b);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_starts_at_the_failure_and_moves_a_microsecond_per_read() {
        let mut s = WasiState::begin(CallInputs {
            now_ms: 1_700_000_000_000,
            seed: 1,
        });
        assert_eq!(s.read_clock_ns(), 1_700_000_000_000_000_000);
        assert_eq!(s.read_clock_ns(), 1_700_000_000_000_001_000);
    }

    #[test]
    fn randomness_repeats_for_the_same_seed_and_differs_for_another() {
        let draw = |seed| {
            let mut s = WasiState::begin(CallInputs { now_ms: 0, seed });
            let mut bytes = [0u8; 13];
            s.fill(&mut bytes);
            bytes
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn lines_are_split_on_newlines_and_a_runaway_line_is_cut() {
        let mut pending = Vec::new();
        assert!(take_lines(&mut pending, b"half").is_empty());
        assert_eq!(take_lines(&mut pending, b" a line\nnext"), ["half a line"]);
        assert_eq!(pending, b"next");
        pending.clear();
        let long = vec![b'x'; MAX_PENDING_LINE_BYTES + 10];
        let lines = take_lines(&mut pending, &long);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), MAX_PENDING_LINE_BYTES);
        assert_eq!(pending.len(), 10);
    }
}
