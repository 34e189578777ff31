//! The dead letters a run left, as the judge reads them: from the admin API or straight
//! from the broker, then counted by the message each holds.

use std::collections::{BTreeMap, HashMap};

use crate::plan::key_of;

/// The key of dead letters whose envelope holds no message of the run (a payload lost or
/// mangled on its way to the DLQ).
pub const NO_KEY: &str = "<no key>";

/// A dead letter, as far as the checks go.
#[derive(Debug, Clone)]
pub struct Dead {
    /// Dead letters of the key.
    pub count: u32,
    /// The first one's time.
    pub at_ms: u64,
    /// The last one's time.
    pub last_at_ms: u64,
    /// The policy its envelope names.
    pub policy: String,
}

/// One dead letter as the judge needs it.
pub struct Letter {
    /// When it was dead-lettered (ms since the epoch).
    pub created_at_ms: u64,
    /// Its envelope, decoded.
    pub envelope: verdict_gateway::envelope::Envelope,
}

/// The dead letters by the key of the message each holds. `by_digest` finds the key of a
/// letter too big for its broker, which keeps only its payload's digest.
pub fn tally(letters: &[Letter], by_digest: &HashMap<String, String>) -> BTreeMap<String, Dead> {
    let mut out: BTreeMap<String, Dead> = BTreeMap::new();
    for letter in letters {
        let original = &letter.envelope.original;
        let key = key_of(&original.payload_bytes())
            .or_else(|| {
                let omitted = original.payload_omitted.as_ref()?;
                by_digest.get(&omitted.sha256).cloned()
            })
            .unwrap_or_else(|| NO_KEY.into());
        let d = out.entry(key).or_insert(Dead {
            count: 0,
            at_ms: u64::MAX,
            last_at_ms: 0,
            policy: String::new(),
        });
        d.count += 1;
        d.at_ms = d.at_ms.min(letter.created_at_ms);
        d.last_at_ms = d.last_at_ms.max(letter.created_at_ms);
        d.policy.clone_from(&letter.envelope.policy.name);
    }
    out
}
