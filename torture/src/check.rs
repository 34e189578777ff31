//! The invariants, checked against what was published, what the consumer saw and what the
//! DLQ holds at the end of a run.
//!
//! A fault excuses exactly what it can cause, and only for the messages whose life (publish
//! to last delivery or dead letter) overlaps its window: a gateway kill or a broker restart
//! may deliver a message again and may cost it an attempt; a consumer outage may cost it
//! attempts; writes the source refuses may cost attempts and have the gateway dead-letter a
//! message itself. Nothing excuses a lost message, a second dead letter, a delivery after a
//! dead letter (beyond the slack between two clocks, [`LATE_MARGIN_MS`]), a dead letter that
//! does not name its policy, or a panic.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::consumer::Request;
use crate::letters::{Dead, NO_KEY};
use crate::plan::{MAX_ATTEMPTS, Planned, fate};
use crate::sources::SourceName;

/// What a fault window excuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excuse {
    /// Deliveries again and attempts lost (a gateway kill, a broker restart).
    Redelivery,
    /// Attempts lost (the consumer down).
    Attempts,
    /// The source refusing the gateway's writes (an operator's length limit): messages
    /// given back and delivered again, and - past the bound on failed settlements - dead-
    /// lettered by the gateway itself (policy `verdict-gateway`) instead of their policy.
    Refused,
}

/// A span of time a fault was acting in (ms since the epoch).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// From.
    pub from_ms: u64,
    /// To.
    pub to_ms: u64,
    /// What it excuses.
    pub excuse: Excuse,
}

/// The consumer's log, by key: the requests of each, in order.
pub fn by_key(log: &[Request]) -> HashMap<&str, Vec<&Request>> {
    let mut out: HashMap<&str, Vec<&Request>> = HashMap::new();
    for r in log {
        if let Some(key) = r.key.as_deref() {
            out.entry(key).or_default().push(r);
        }
    }
    out
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Broken invariants, one line each.
    pub violations: Vec<String>,
    /// Accepted deliveries beyond the first of a message (and beyond a producer's copies).
    pub duplicates: u64,
    /// Messages accepted at least once.
    pub delivered: usize,
    /// Longest publish-to-terminal time (ms).
    pub max_publish_to_terminal_ms: u64,
    /// Messages neither delivered nor dead-lettered, each with its requests: lost, unless
    /// a census of the source finds them still waiting there.
    pub unfinished: Vec<(String, usize)>,
}

/// The checks' inputs.
pub struct Inputs<'a> {
    /// The source.
    pub name: SourceName,
    /// The run's seed (the consumer's fates derive from it).
    pub seed: u64,
    /// What was planned.
    pub planned: &'a [Planned],
    /// When each taken message was published.
    pub published_at: &'a BTreeMap<String, u64>,
    /// Messages the source refused at publish.
    pub refused: &'a BTreeSet<String>,
    /// Messages a producer had to publish again (the broker may hold one more copy).
    pub resent: &'a BTreeSet<String>,
    /// The DLQ, by key.
    pub dead: &'a BTreeMap<String, Dead>,
    /// Everything the consumer saw.
    pub log: &'a [Request],
    /// The faults' windows.
    pub windows: &'a [Window],
    /// How much later than its dead letter's time a delivery may be logged and still be
    /// from before it: [`LATE_MARGIN_MS`], plus on a broker (whose letters carry the
    /// gateway's clock) how far the slowest gateway's clock runs behind.
    pub late_ms: u64,
}

/// The name a dead letter decided by the gateway itself gives as its policy.
const GATEWAY_POLICY: &str = "verdict-gateway";

/// How much later than its dead letter's time a delivery may reach the consumer's log and
/// still be one from before it: the consumer notes a request once its body is read, and the
/// time a letter carries is read from a clock carried forward between readings (a shared
/// store's) - on a machine whose two cores the gateway, the database and the harness share,
/// both lag by up to a few hundred milliseconds. Anything later is a delivery after the
/// dead letter: the gateway still had the message.
pub const LATE_MARGIN_MS: u64 = 500;

/// Check every invariant.
pub fn check(i: &Inputs) -> Findings {
    let mut f = Findings::default();
    let requests = by_key(i.log);
    let overlaps = |from: u64, to: u64, excuse: Excuse| {
        i.windows
            .iter()
            .any(|w| w.excuse == excuse && w.from_ms <= to && from <= w.to_ms)
    };
    for m in i.planned {
        let key = m.key.as_str();
        let mine = requests.get(key).map(Vec::as_slice).unwrap_or_default();
        let died = i.dead.get(key);
        if i.refused.contains(key) {
            if !mine.is_empty() || died.is_some() {
                f.violations.push(format!(
                    "message {key} was refused at publish yet reached the consumer or the DLQ"
                ));
            }
            continue;
        }
        let Some(&at) = i.published_at.get(key) else {
            continue;
        };
        // RabbitMQ and Kafka keep every copy a producer publishes; the others drop a
        // repeated id. A publish sent again after a lost confirm (or acknowledgement) may add
        // one - where nothing drops a repeated id, or the message has none.
        //
        // On Kafka the id makes no difference: nothing deduplicates on it, and a planned id
        // Kafka cannot carry as one (past 255 bytes, control characters) is replaced by the
        // record's place, `<topic>/<partition>@<offset>` - each copy a message of its own,
        // as RabbitMQ keeps each copy whatever its (cut) id. The checks key a message by its
        // payload, never by an id, so a replaced id changes nothing else here.
        let mut copies = if i.name.keeps_every_copy() {
            u64::from(m.copies)
        } else {
            1
        };
        if i.resent.contains(key) && (i.name.keeps_every_copy() || m.id.is_none()) {
            copies += 1;
        }
        let accepted: Vec<u64> = mine
            .iter()
            .filter(|r| r.accepted)
            .map(|r| r.at_ms)
            .collect();
        let last_seen = mine
            .iter()
            .map(|r| r.at_ms)
            .chain(died.map(|d| d.at_ms))
            .max()
            .unwrap_or(at);
        // A message given back and taken again at once, without end, reaches its consumer
        // hundreds of times; every fault together explains a few deliveries more than
        // its attempts, never four times as many.
        let most = u64::from(MAX_ATTEMPTS) * 4 * copies;
        if mine.len() as u64 > most {
            f.violations.push(format!(
                "message {key} reached its consumer {} times, more than {most} ({MAX_ATTEMPTS} \
                 attempts per copy): a redelivery loop",
                mine.len()
            ));
        }
        let redelivered = overlaps(at, last_seen, Excuse::Redelivery);
        let refused = overlaps(at, last_seen, Excuse::Refused);
        let attempts_lost = redelivered || refused || overlaps(at, last_seen, Excuse::Attempts);
        match (accepted.first(), died) {
            (None, None) => f.unfinished.push((key.to_string(), mine.len())),
            (Some(_), Some(_)) if copies == 1 && !redelivered => f.violations.push(format!(
                "message {key} was both delivered and dead-lettered with no gateway kill or \
                 broker restart in its lifetime"
            )),
            // Its acceptance not acknowledged before the fault, the message came again and
            // failed: a duplicate the fault explains.
            (Some(_), Some(_)) if copies == 1 => f.duplicates += 1,
            _ => {}
        }
        if let Some(&first) = accepted.first() {
            f.delivered += 1;
            f.max_publish_to_terminal_ms =
                f.max_publish_to_terminal_ms.max(first.saturating_sub(at));
            if !fate(i.seed, key).accepted() {
                f.violations.push(format!(
                    "message {key} was accepted, but its consumer never accepts it"
                ));
            }
            let extra = (accepted.len() as u64).saturating_sub(copies);
            f.duplicates += extra;
            if extra > 0 && !redelivered {
                f.violations.push(format!(
                    "message {key} was accepted {} times with no gateway kill or broker \
                     restart in its lifetime",
                    accepted.len()
                ));
            }
        }
        if let Some(d) = died {
            let mut letters_allowed =
                dead_letters_allowed(copies, redelivered && i.name.keeps_every_copy());
            if i.name == SourceName::Kafka {
                // A kill re-reads every record of the dead gateway's partitions after their
                // last commit, and a record re-read is a life of its own that may end in
                // the DLQ again: a letter written but not yet committed past is written
                // once more, and a retry copy read in a fault's window goes on beside the
                // record it came from. So one letter more per fault that re-reads (a kill,
                // a broker restart) between the message's publication and its last letter
                // - however late the replay comes, behind a backlog - and one per delivery
                // inside a fault's window. The last letter stretches only this count (a
                // late letter widens its own excuse, by one per fault it reaches), never
                // the other checks' lifetime.
                let last_letter = last_seen.max(d.last_at_ms);
                let faults = i
                    .windows
                    .iter()
                    .filter(|w| {
                        w.excuse == Excuse::Redelivery && w.from_ms <= last_letter && at <= w.to_ms
                    })
                    .count() as u64;
                let hops = mine
                    .iter()
                    .filter(|r| overlaps(r.at_ms, r.at_ms, Excuse::Redelivery))
                    .count() as u64;
                letters_allowed = letters_allowed.max(copies * (1 + faults + hops));
            }
            if u64::from(d.count) > letters_allowed {
                f.violations
                    .push(format!("message {key} has {} dead letters", d.count));
            }
            if d.policy != "rules" && !(refused && d.policy == GATEWAY_POLICY) {
                f.violations.push(format!(
                    "the dead letter of {key} names policy {:?}, not \"rules\"",
                    d.policy
                ));
            }
            f.max_publish_to_terminal_ms =
                f.max_publish_to_terminal_ms.max(d.at_ms.saturating_sub(at));
            if fate(i.seed, key).accepted() && !attempts_lost {
                f.violations.push(format!(
                    "message {key} was dead-lettered, but its consumer accepts it in time and \
                     no fault touched it"
                ));
            }
            let late = mine
                .iter()
                .filter(|r| r.at_ms > d.at_ms + i.late_ms)
                .count();
            if late > 0 && copies == 1 && !redelivered {
                f.violations.push(format!(
                    "message {key} was delivered {late} time(s) after it was dead-lettered"
                ));
            }
        }
    }
    if let Some(d) = i.dead.get(NO_KEY) {
        f.violations.push(format!(
            "{} dead letter(s) whose envelope holds no message of this run (payload lost or \
             mangled)",
            d.count
        ));
    }
    f
}

/// Dead letters a message may have: one per copy the broker holds, and on RabbitMQ and
/// Kafka, which have no duplicate window, two per copy when a fault redelivered it - each
/// copy's dead letter may be written, and its ack die with the connection (RabbitMQ) or its
/// offset not be committed before a kill (Kafka), and the copy come back to be
/// dead-lettered again. (On Kafka the record read again is the first one, its attempts
/// counted afresh, while its retry copy goes on: two lives, each of which may end in the
/// DLQ.)
fn dead_letters_allowed(copies: u64, redelivered_without_duplicate_window: bool) -> u64 {
    if redelivered_without_duplicate_window {
        copies * 2
    } else {
        copies
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Abilities, Fate};

    fn plan(n: usize) -> Vec<Planned> {
        let can = Abilities {
            binary: false,
            max_payload: 1000,
            binary_headers: false,
        };
        crate::plan::messages(7, n, &["t".into()], can, false)
            .into_iter()
            .map(|mut m| {
                m.copies = 1;
                m
            })
            .collect()
    }

    fn accept(key: &str, at_ms: u64) -> Request {
        Request {
            key: Some(key.into()),
            reply: "accept",
            at_ms,
            accepted: true,
        }
    }

    /// RabbitMQ and Kafka alike.
    #[test]
    fn each_copy_of_a_redelivered_rabbitmq_message_may_be_dead_lettered_twice() {
        assert_eq!(dead_letters_allowed(1, false), 1);
        assert_eq!(dead_letters_allowed(2, false), 2);
        assert_eq!(dead_letters_allowed(1, true), 2);
        // The same id published twice, both copies in flight at a broker restart.
        assert_eq!(dead_letters_allowed(2, true), 4);
    }

    /// Each invariant the checker holds fails a run that breaks it: a checker that finds
    /// nothing proves nothing.
    #[test]
    fn the_checker_catches_each_kind_of_broken_invariant() {
        let planned = plan(200);
        let ok = planned
            .iter()
            .find(|m| fate(7, &m.key) == Fate::Ok)
            .unwrap();
        let poison = planned
            .iter()
            .find(|m| fate(7, &m.key) == Fate::Poison)
            .unwrap();
        let published_at: BTreeMap<String, u64> =
            [(ok.key.clone(), 1_000), (poison.key.clone(), 1_000)].into();
        let planned = vec![ok.clone(), poison.clone()];
        let none = BTreeSet::new();
        let run_late =
            |log: &[Request], dead: &BTreeMap<String, Dead>, windows: &[Window], late_ms: u64| {
                check(&Inputs {
                    name: SourceName::Nats,
                    seed: 7,
                    planned: &planned,
                    published_at: &published_at,
                    refused: &none,
                    resent: &none,
                    dead,
                    log,
                    windows,
                    late_ms,
                })
            };
        let run = |log: &[Request], dead: &BTreeMap<String, Dead>, windows: &[Window]| {
            run_late(log, dead, windows, LATE_MARGIN_MS)
        };
        let dead_poison = |count| -> BTreeMap<String, Dead> {
            [(
                poison.key.clone(),
                Dead {
                    count,
                    at_ms: 1_500,
                    last_at_ms: 1_500,
                    policy: "rules".into(),
                },
            )]
            .into()
        };
        // A clean run passes.
        let clean = run(&[accept(&ok.key, 1_100)], &dead_poison(1), &[]);
        assert_eq!(clean.violations, Vec::<String>::new());
        // Lost.
        let lost = run(&[], &dead_poison(1), &[]);
        assert_eq!(lost.unfinished, [(ok.key.clone(), 0)], "{lost:?}");
        // Two dead letters.
        let twice = run(&[accept(&ok.key, 1_100)], &dead_poison(2), &[]);
        assert!(twice.violations[0].contains("2 dead letters"), "{twice:?}");
        // A duplicate with no fault; the same inside a kill's window is excused.
        let log = [accept(&ok.key, 1_100), accept(&ok.key, 1_200)];
        let dup = run(&log, &dead_poison(1), &[]);
        assert!(dup.violations[0].contains("accepted 2 times"), "{dup:?}");
        let kill = Window {
            from_ms: 1_150,
            to_ms: 1_160,
            excuse: Excuse::Redelivery,
        };
        let excused = run(&log, &dead_poison(1), &[kill]);
        assert_eq!(excused.violations, Vec::<String>::new());
        assert_eq!(excused.duplicates, 1);
        // A poison message accepted; an accepted one dead-lettered without a fault.
        let mut wrong = dead_poison(1);
        wrong.insert(
            ok.key.clone(),
            Dead {
                count: 1,
                at_ms: 1_300,
                last_at_ms: 1_300,
                policy: "other".into(),
            },
        );
        let wrong = run(&[accept(&poison.key, 1_100)], &wrong, &[]);
        let all = wrong.violations.join("\n");
        assert!(all.contains("never accepts it"), "{all}");
        assert!(all.contains("no fault touched it"), "{all}");
        assert!(all.contains("not \"rules\""), "{all}");
        // Delivered after its dead letter (the letter at 1,500): within the margin a request
        // is one from before it, past it one the gateway should no longer have had - however
        // little past, unless a gateway's clock runs behind by as much.
        let poison_at = |at_ms| {
            [
                accept(&ok.key, 1_100),
                Request {
                    key: Some(poison.key.clone()),
                    reply: "422",
                    at_ms,
                    accepted: false,
                },
            ]
        };
        let on_time = run(&poison_at(1_500 + LATE_MARGIN_MS), &dead_poison(1), &[]);
        assert_eq!(on_time.violations, Vec::<String>::new());
        for at_ms in [1_600 + LATE_MARGIN_MS, 9_000] {
            let late = run(&poison_at(at_ms), &dead_poison(1), &[]);
            assert!(
                late.violations[0].contains("delivered 1 time(s) after it was dead-lettered"),
                "{at_ms}: {late:?}"
            );
        }
        let behind = run_late(
            &poison_at(1_600 + LATE_MARGIN_MS),
            &dead_poison(1),
            &[],
            LATE_MARGIN_MS + 30_000,
        );
        assert_eq!(behind.violations, Vec::<String>::new());
        // The gateway's own dead letter: a violation, unless writes were refused meanwhile.
        let mut by_gateway = dead_poison(1);
        by_gateway.get_mut(&poison.key).unwrap().policy = GATEWAY_POLICY.into();
        let log = [accept(&ok.key, 1_100)];
        let unexcused = run(&log, &by_gateway, &[]);
        assert!(
            unexcused.violations[0].contains("verdict-gateway"),
            "{unexcused:?}"
        );
        let refusal = Window {
            from_ms: 1_200,
            to_ms: 1_400,
            excuse: Excuse::Refused,
        };
        let excused = run(&log, &by_gateway, &[refusal]);
        assert_eq!(excused.violations, Vec::<String>::new());
        // A redelivery loop, whatever the faults.
        let looped: Vec<Request> = (0..200).map(|n| accept(&ok.key, 1_100 + n)).collect();
        let looped: Vec<Request> = looped
            .into_iter()
            .map(|r| Request {
                accepted: false,
                ..r
            })
            .chain([accept(&ok.key, 1_400)])
            .collect();
        let looped = run(&looped, &dead_poison(1), &[kill]);
        assert!(
            looped
                .violations
                .iter()
                .any(|v| v.contains("redelivery loop")),
            "{looped:?}"
        );
        // A dead letter that lost its message on the way.
        let mut mangled = dead_poison(1);
        mangled.insert(
            NO_KEY.into(),
            Dead {
                count: 3,
                at_ms: 1_500,
                last_at_ms: 1_500,
                policy: "rules".into(),
            },
        );
        let mangled = run(&[accept(&ok.key, 1_100)], &mangled, &[]);
        assert!(
            mangled.violations[0].starts_with("3 dead letter(s) whose envelope"),
            "{mangled:?}"
        );
    }

    /// On Kafka a kill replays a letter not yet committed past, however late the replay
    /// comes behind a backlog: one letter more per kill in the message's lifetime, and no
    /// more than that.
    #[test]
    fn kafka_allows_one_more_letter_per_kill_in_a_messages_lifetime() {
        let planned = plan(200);
        let poison = planned
            .iter()
            .find(|m| fate(7, &m.key) == Fate::Poison)
            .unwrap()
            .clone();
        let published_at: BTreeMap<String, u64> = [(poison.key.clone(), 1_000)].into();
        let planned = vec![poison.clone()];
        let none = BTreeSet::new();
        let kill = |from_ms| Window {
            from_ms,
            to_ms: from_ms + 5_000,
            excuse: Excuse::Redelivery,
        };
        // Dead-lettered at 10 s, replayed after kills at 10.3 s and 14 s, the last replay
        // dead-lettered 170 s later: far outside both kills' windows.
        let dead: BTreeMap<String, Dead> = [(
            poison.key.clone(),
            Dead {
                count: 3,
                at_ms: 10_000,
                last_at_ms: 184_000,
                policy: "rules".into(),
            },
        )]
        .into();
        let judge = |windows: &[Window]| {
            check(&Inputs {
                name: SourceName::Kafka,
                seed: 7,
                planned: &planned,
                published_at: &published_at,
                refused: &none,
                resent: &none,
                dead: &dead,
                log: &[],
                windows,
                late_ms: LATE_MARGIN_MS,
            })
        };
        let two_kills = judge(&[kill(10_300), kill(14_000)]);
        assert_eq!(two_kills.violations, Vec::<String>::new());
        let one_kill = judge(&[kill(10_300)]);
        assert!(
            one_kill.violations[0].contains("3 dead letters"),
            "{one_kill:?}"
        );
        // A kill after the last letter explains none of them.
        let after = judge(&[kill(10_300), kill(200_000)]);
        assert!(after.violations[0].contains("3 dead letters"), "{after:?}");
    }
}
