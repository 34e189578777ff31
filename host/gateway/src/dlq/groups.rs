//! Dead letters grouped by why they failed: one group per topic, class, error kind and the
//! policy's reason with its variable parts (numbers, UUIDs, long hex ids) replaced by
//! placeholders - so that a thousand `order 1234 not found` letters are one line an
//! operator can act on, not a thousand.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::DlqEntry;

/// The longest normalised reason a group keeps: reasons come from policies and, on a
/// broker, from headers anyone could have written.
pub const MAX_REASON_CHARS: usize = 200;

/// What the dead letters of one group share.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Source topic.
    pub topic: String,
    /// The verdict's class.
    pub class: String,
    /// The last error's kind.
    pub kind: String,
    /// The verdict's reason, normalised by [`normalise_reason`].
    pub reason: String,
}

impl Fingerprint {
    /// The fingerprint of `entry`.
    pub fn of(entry: &DlqEntry) -> Fingerprint {
        Fingerprint {
            topic: entry.topic.clone(),
            class: entry.class.clone(),
            kind: entry.kind.clone(),
            reason: normalise_reason(&entry.reason),
        }
    }

    /// A short, stable id: the first 16 hex digits of the SHA-256 of the four parts. The
    /// same on every gateway and across restarts, so a group can be named in a URL or a
    /// command line.
    pub fn id(&self) -> String {
        let mut hash = Sha256::new();
        for part in [&self.topic, &self.class, &self.kind, &self.reason] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        hash.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// `reason` with what varies from one message to the next replaced: a UUID by `<uuid>`, a
/// hex run of 8 or more characters with a digit in it by `<hex>`, a number standing on its
/// own (not the `8` of `utf8`) by `<n>`; whitespace runs become one space, control
/// characters are dropped, and the result is at most [`MAX_REASON_CHARS`] characters.
pub fn normalise_reason(reason: &str) -> String {
    let chars: Vec<char> = reason.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut previous: Option<char> = None;
    while i < chars.len() && out.chars().count() < MAX_REASON_CHARS {
        let c = chars[i];
        if c.is_alphanumeric() {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || is_uuid_dash(&chars, i)) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            push_word(&mut out, &word, previous);
            previous = chars.get(i - 1).copied();
            continue;
        }
        if c.is_whitespace() {
            if !out.ends_with(' ') && !out.is_empty() {
                out.push(' ');
            }
        } else if !c.is_control() {
            out.push(c);
        }
        previous = Some(c);
        i += 1;
    }
    let trimmed = out.trim_end();
    trimmed.chars().take(MAX_REASON_CHARS).collect()
}

/// A dash that continues a word only inside a UUID-shaped run (so `m-42` stays two words
/// while `123e4567-e89b-...` is one).
fn is_uuid_dash(chars: &[char], i: usize) -> bool {
    chars[i] == '-' && {
        let start = (0..i)
            .rev()
            .take_while(|&j| chars[j].is_ascii_hexdigit() || chars[j] == '-')
            .last()
            .unwrap_or(i);
        let end = (i..chars.len())
            .take_while(|&j| chars[j].is_ascii_hexdigit() || chars[j] == '-')
            .last()
            .unwrap_or(i);
        is_uuid(&chars[start..=end])
    }
}

fn is_uuid(run: &[char]) -> bool {
    let s: String = run.iter().collect();
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn push_word(out: &mut String, word: &str, before: Option<char>) {
    if word.contains('-') {
        out.push_str("<uuid>");
    } else if word.len() >= 8
        && word.chars().all(|c| c.is_ascii_hexdigit())
        && word.chars().any(|c| c.is_ascii_digit())
    {
        out.push_str("<hex>");
    } else if word.chars().all(|c| c.is_ascii_digit()) {
        // `3.14` is one number: its `.14` follows a placeholder already written.
        if !(before == Some('.') && out.ends_with("<n>.")) {
            out.push_str("<n>");
        } else {
            out.pop();
        }
    } else if let Some(unit) = word.strip_prefix(|c: char| c.is_ascii_digit()) {
        // A number with its unit (`31ms`, `5xx`): the number varies, the unit does not.
        out.push_str("<n>");
        out.push_str(unit.trim_start_matches(|c: char| c.is_ascii_digit()));
    } else {
        // Letters then digits (`utf8`, `v2`, `http2`) are a name, not an id.
        out.push_str(word);
    }
}

/// One group of dead letters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DlqGroup {
    /// [`Fingerprint::id`]: what `verdict dlq replay --group` and the admin API take.
    pub id: String,
    /// What its letters share.
    #[serde(flatten)]
    pub fingerprint: Fingerprint,
    /// Dead letters in it.
    pub count: u64,
    /// Of those, parked ones: dead-lettered again after as many replays as the gateway
    /// allows; bulk replays leave them out.
    pub parked: u64,
    /// The oldest one's dead-lettering (ms since the epoch).
    pub first_seen_ms: u64,
    /// The newest one's.
    pub last_seen_ms: u64,
    /// Where they are: `embedded` (the store) or a broker.
    pub sources: BTreeSet<String>,
    /// The DLQs that hold them.
    pub dlqs: BTreeSet<String>,
    /// The policies that dead-lettered them, as `name@version`.
    pub policy_versions: BTreeSet<String>,
    /// The newest letter, for a first look.
    pub sample: GroupSample,
}

/// A group's example letter.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupSample {
    /// Where it is.
    pub source: String,
    /// Its key in that source (what `dlq show` takes).
    pub seq: i64,
    /// The message id.
    pub message_id: String,
    /// The reason as the policy gave it.
    pub reason: String,
}

/// Dead letters gathered into groups, a page at a time: memory grows with the number of
/// groups, not of letters.
#[derive(Debug, Default)]
pub struct Grouping {
    groups: BTreeMap<Fingerprint, DlqGroup>,
}

impl Grouping {
    /// Count `entry`, found in `source`; `parked` when it is parked.
    pub fn add(&mut self, source: &str, entry: &DlqEntry, parked: bool) {
        let fingerprint = Fingerprint::of(entry);
        let at = entry.created_at_ms;
        let policy = &entry.envelope.policy;
        let group = self
            .groups
            .entry(fingerprint.clone())
            .or_insert_with(|| DlqGroup {
                id: fingerprint.id(),
                fingerprint,
                count: 0,
                parked: 0,
                first_seen_ms: at,
                last_seen_ms: at,
                sources: BTreeSet::new(),
                dlqs: BTreeSet::new(),
                policy_versions: BTreeSet::new(),
                sample: sample_of(source, entry),
            });
        group.count += 1;
        group.parked += u64::from(parked);
        group.first_seen_ms = group.first_seen_ms.min(at);
        if at >= group.last_seen_ms {
            group.last_seen_ms = at;
            group.sample = sample_of(source, entry);
        }
        group.sources.insert(source.to_string());
        group.dlqs.insert(entry.dlq.clone());
        if !policy.name.is_empty() {
            group
                .policy_versions
                .insert(format!("{}@{}", policy.name, policy.version));
        }
    }

    /// Fold in `group`, counted elsewhere (another source): counts add up, the times and
    /// sets widen, the newer sample wins.
    pub fn absorb(&mut self, group: DlqGroup) {
        match self.groups.get_mut(&group.fingerprint) {
            None => {
                self.groups.insert(group.fingerprint.clone(), group);
            }
            Some(mine) => {
                mine.count += group.count;
                mine.parked += group.parked;
                mine.first_seen_ms = mine.first_seen_ms.min(group.first_seen_ms);
                if group.last_seen_ms >= mine.last_seen_ms {
                    mine.last_seen_ms = group.last_seen_ms;
                    mine.sample = group.sample;
                }
                mine.sources.extend(group.sources);
                mine.dlqs.extend(group.dlqs);
                mine.policy_versions.extend(group.policy_versions);
            }
        }
    }

    /// The groups, largest first (then by id, so the order is stable).
    pub fn into_groups(self) -> Vec<DlqGroup> {
        let mut groups: Vec<DlqGroup> = self.groups.into_values().collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.id.cmp(&b.id)));
        groups
    }
}

fn sample_of(source: &str, entry: &DlqEntry) -> GroupSample {
    GroupSample {
        source: source.to_string(),
        seq: entry.seq,
        message_id: entry.message_id.clone(),
        reason: entry.reason.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_parts_of_a_reason_become_placeholders() {
        let n = normalise_reason;
        assert_eq!(n("order 1234 not found"), "order <n> not found");
        assert_eq!(n("order 98 not found"), n("order 1234 not found"));
        assert_eq!(n("customer m-42 unknown"), "customer m-<n> unknown");
        assert_eq!(n("took 3.25 s"), "took <n> s");
        assert_eq!(n("timed out after 1500ms"), "timed out after <n>ms");
        assert_eq!(
            n("tenant 123e4567-e89b-12d3-a456-426614174000 is suspended"),
            "tenant <uuid> is suspended"
        );
        assert_eq!(n("blob 9f86d081884c7d65 missing"), "blob <hex> missing");
        // Names with digits in them are not ids.
        assert_eq!(n("not utf8 at byte 17"), "not utf8 at byte <n>");
        assert_eq!(n("schema v2 unknown"), "schema v2 unknown");
        // A word of hex letters only is a word.
        assert_eq!(n("deadbeefcafe"), "deadbeefcafe");
    }

    #[test]
    fn hostile_reasons_are_bounded_and_cleaned() {
        assert_eq!(normalise_reason("a\u{0}b\u{1b}[31m\n\n\tc"), "ab[<n>m c");
        let long = "x".repeat(10_000);
        assert_eq!(normalise_reason(&long).chars().count(), MAX_REASON_CHARS);
        let digits = "1 ".repeat(10_000);
        assert!(normalise_reason(&digits).chars().count() <= MAX_REASON_CHARS);
        assert_eq!(normalise_reason(""), "");
        assert_eq!(normalise_reason("--"), "--");
        assert_eq!(normalise_reason("é 1"), "é <n>");
    }

    #[test]
    fn groups_of_two_sources_fold_into_one() {
        let group = |source: &str, count, last| DlqGroup {
            id: "id".into(),
            fingerprint: Fingerprint {
                topic: "orders".into(),
                class: "poison".into(),
                kind: "json.invalid".into(),
                reason: "r".into(),
            },
            count,
            parked: 1,
            first_seen_ms: last - 10,
            last_seen_ms: last,
            sources: [source.to_string()].into(),
            dlqs: ["orders.DLQ".to_string()].into(),
            policy_versions: ["rules@0.1.0".to_string()].into(),
            sample: GroupSample {
                source: source.into(),
                seq: 1,
                message_id: format!("from-{source}"),
                reason: "r".into(),
            },
        };
        let mut all = Grouping::default();
        all.absorb(group("embedded", 3, 100));
        all.absorb(group("nats", 2, 200));
        let merged = all.into_groups();
        assert_eq!(merged.len(), 1);
        let g = &merged[0];
        assert_eq!(
            (g.count, g.parked, g.first_seen_ms, g.last_seen_ms),
            (5, 2, 90, 200)
        );
        assert_eq!(g.sources.len(), 2);
        assert_eq!(g.sample.message_id, "from-nats");
    }

    #[test]
    fn the_id_is_stable_and_tells_the_parts_apart() {
        let f = |topic: &str, class: &str| Fingerprint {
            topic: topic.into(),
            class: class.into(),
            kind: "json.invalid".into(),
            reason: "r".into(),
        };
        assert_eq!(f("orders", "poison").id(), f("orders", "poison").id());
        assert_eq!(f("orders", "poison").id().len(), 16);
        // The parts are length-prefixed: moving a character across them is another group.
        assert_ne!(f("ordersp", "oison").id(), f("orders", "poison").id());
    }
}
