//! Which of the group's durable consumers delivers a message, when several see it.
//!
//! Every route has a durable consumer filtered to its subjects, and filters overlap:
//! `orders.>` and `orders.vip` both see a message on `orders.vip`. Exactly one of them must
//! deliver it; the others acknowledge their copy and move on. The rule is a pure function
//! of the message's subject and stream sequence, computed the same way by every consumer:
//!
//! - among the consumers whose filter covers the subject and that were responsible for its
//!   stream sequence - each consumer is responsible for the *lives* of its route: from the
//!   stream's last sequence when the route was added (exclusive) to its boundary when it was
//!   removed (inclusive), open while it is consumed - the most specific filter owns the
//!   message (exact before wildcard, `orders.*` before `orders.>`), as routing does.
//!
//! A life's boundary is fixed when its route is removed: the furthest stream sequence the
//! consumer or any consumer overlapping it had been handed. Within a life, messages of its
//! subjects were (or would have been) delivered by it - the retries it holds come back to it
//! and it delivers them on the route that takes their subject now - and the other consumers
//! skipped them. Outside its lives (before its route was added, between a removal and the
//! route being added again, after a removal) the other routes delivered them; it
//! acknowledges what it sees there, and a retired consumer is deleted once everything up to
//! its last boundary is acknowledged. So removing, narrowing, widening or restoring a route
//! hands every waiting retry on, and replays nothing another consumer already delivered.
//!
//! In a fleet, gateways change routes one after another, and a gateway's session keeps its
//! view of the lives until its own routes change. So whenever a fetched message's subject
//! is covered by more than one consumer the session knows of a route consumed now, the
//! owner is decided again from the lives *as the server has them* ([`owner_by_marks`]),
//! read after the message was handed out. A boundary is fixed in two writes for that
//! reason: first the consumer is marked `boundary=pending` (a check that reads it waits,
//! or gives the message back), then the boundary is read - covering everything handed out
//! before the mark - and written. A message handed out after the boundary was read is
//! checked after it too, and sees the boundary. Gateways that remove a route at the same
//! moment read different boundaries: the first recorded in the history bucket is the one
//! every one of them writes (`Broker::consumers`). A mark left pending by a gateway that
//! stopped between the two writes is settled by the next session start of a gateway whose
//! checks found it stale ([`super::stale`]).

use verdict_registry::config::covers_subject as covers;

/// One durable consumer of the group, as ownership sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Its durable name.
    pub durable: String,
    /// Its filter subject (its route's pattern).
    pub filter: String,
    /// The spans of stream sequences it is responsible for (see [`Life`]).
    pub lives: Vec<Life>,
    /// Whether its route is consumed now.
    pub active: bool,
}

/// One span of a route's consumer's responsibility: the messages published after `after`
/// (the stream's last sequence when its route was added) up to `through` (the boundary
/// fixed when it was removed), or without end while it is consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Life {
    /// The stream's last sequence when the route was added (0: made by a version that did
    /// not record it).
    pub after: u64,
    /// The last stream sequence it is responsible for, once its route was removed.
    pub through: Option<u64>,
}

impl Life {
    fn covers(&self, seq: u64) -> bool {
        seq > self.after && self.through.is_none_or(|t| seq <= t)
    }
}

impl Member {
    /// Whether it was responsible for the message at stream sequence `seq`.
    pub(crate) fn responsible(&self, seq: u64) -> bool {
        lives_cover(&self.lives, seq)
    }

    /// A retired consumer's last boundary: it is deleted once everything up to there is
    /// acknowledged. `None` while its route is consumed.
    pub(crate) fn retired_through(&self) -> Option<u64> {
        if self.active {
            return None;
        }
        self.lives.iter().filter_map(|l| l.through).max()
    }
}

/// Whether `lives` cover `seq`; no recorded lives is one life from the stream's start (a
/// consumer an earlier version made).
fn lives_cover(lives: &[Life], seq: u64) -> bool {
    if lives.is_empty() {
        return seq > 0;
    }
    lives.iter().any(|l| l.covers(seq))
}

/// The consumers of one session: the routes consumed now and the retired ones draining.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ownership {
    members: Vec<Member>,
}

impl Ownership {
    /// The session's consumers.
    pub(crate) fn new(members: Vec<Member>) -> Ownership {
        Ownership { members }
    }

    /// The member named `durable`.
    pub(crate) fn member(&self, durable: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.durable == durable)
    }

    /// The consumers other than `durable` whose filters cover `subject`.
    pub(crate) fn others_covering<'a>(
        &'a self,
        subject: &'a str,
        durable: &'a str,
    ) -> impl Iterator<Item = &'a Member> + 'a {
        self.members
            .iter()
            .filter(move |m| m.durable != durable && covers(&m.filter, subject))
    }

    /// The durable name of the consumer that delivers the message at stream sequence `seq`
    /// on `subject`: among the consumers that were responsible for it (within one of their
    /// lives) the most specific; when none was (a route made for subjects nobody consumed),
    /// the most specific route consumed now. `None` when no consumer covers the subject.
    pub(crate) fn owner(&self, subject: &str, seq: u64) -> Option<&str> {
        let covering = || self.members.iter().filter(|m| covers(&m.filter, subject));
        let responsible = covering().filter(|m| m.responsible(seq));
        most_specific(responsible)
            .or_else(|| most_specific(covering().filter(|m| m.active)))
            .map(|m| m.durable.as_str())
    }
}

/// Among `candidates` (route, marks as the server has them; `None` for a consumer deleted
/// since, which delivers nothing), all covering one message's subject, the position of the
/// one that delivers the message at `seq`: the most specific of those responsible for it,
/// the first of equals. `None` when none is (a consumer the session does not know took it
/// over): the caller then delivers it itself - a duplicate at worst, never a message
/// nobody delivers.
pub(crate) fn owner_by_marks(candidates: &[(&str, Option<&Marks>)], seq: u64) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, (_, marks))| marks.is_some_and(|m| m.responsible(seq)))
        .fold(
            None,
            |best: Option<(usize, &str)>, (i, (route, _))| match best {
                Some((_, b)) if !more_specific(route, b) => best,
                _ => Some((i, route)),
            },
        )
        .map(|(i, _)| i)
}

/// The member with the most specific filter; the first of equals.
fn most_specific<'a>(members: impl Iterator<Item = &'a Member>) -> Option<&'a Member> {
    members.fold(None, |best, m| match best {
        Some(b) if !more_specific(&m.filter, &b.filter) => Some(b),
        _ => Some(m),
    })
}

/// What the gateway records in a consumer's description (`nats consumer info` shows it):
/// the lives of its route, the spans of stream sequences it is responsible for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    /// See [`Member::lives`]; empty in a description the gateway did not write.
    pub lives: Vec<Life>,
    /// Its route was removed and the boundary of its open life is being read: nobody
    /// decides by these marks until the boundary is written (see the module docs).
    pub pending: bool,
}

impl Marks {
    /// A consumer made now, the stream's last sequence being `last`.
    pub(crate) fn born(last: u64) -> Marks {
        Marks {
            lives: vec![Life {
                after: last,
                through: None,
            }],
            pending: false,
        }
    }

    /// The marks in a description the gateway wrote (none in any other). Reads the
    /// `born-after=` / `retired-through=` of earlier versions as one life.
    pub(crate) fn parse(description: Option<&str>) -> Marks {
        let words = || description.into_iter().flat_map(|d| d.split([' ', ';']));
        let pending = words().any(|w| w == PENDING);
        if let Some(spans) = words().find_map(|w| w.strip_prefix("lives=")) {
            let lives = spans
                .split(',')
                .filter_map(|span| {
                    let (after, through) = span.split_once("..")?;
                    Some(Life {
                        after: after.parse().ok()?,
                        through: match through {
                            "" => None,
                            t => Some(t.parse().ok()?),
                        },
                    })
                })
                .collect();
            return Marks { lives, pending };
        }
        let number = |key: &str| words().find_map(|w| w.strip_prefix(key)?.parse::<u64>().ok());
        let (born, retired) = (number("born-after="), number("retired-through="));
        if born.is_none() && retired.is_none() {
            return Marks::default();
        }
        Marks {
            lives: vec![Life {
                after: born.unwrap_or(0),
                through: retired,
            }],
            pending,
        }
    }

    /// Whether its route is consumed (its last life is open; a consumer without marks
    /// counts as one life from the stream's start).
    pub(crate) fn open(&self) -> bool {
        self.lives.last().is_none_or(|l| l.through.is_none())
    }

    /// Its route removed: the open life ends at `through`, the boundary no longer pending.
    pub(crate) fn close(&mut self, through: u64) {
        self.pending = false;
        match self.lives.last_mut() {
            Some(life) => life.through = Some(through),
            None => self.lives.push(Life {
                after: 0,
                through: Some(through),
            }),
        }
    }

    /// Its route added again, the stream's last sequence being `last`: a new life.
    pub(crate) fn reopen(&mut self, last: u64) {
        self.pending = false;
        self.lives.push(Life {
            after: last,
            through: None,
        });
    }

    /// The last boundary, once its route is removed.
    pub(crate) fn through(&self) -> Option<u64> {
        self.lives.iter().filter_map(|l| l.through).max()
    }

    /// Whether it is responsible for the message at `seq`.
    pub(crate) fn responsible(&self, seq: u64) -> bool {
        lives_cover(&self.lives, seq)
    }

    /// The description of the consumer of `route` with these marks.
    pub(crate) fn describe(&self, route: &str) -> String {
        let spans: Vec<String> = self
            .lives
            .iter()
            .map(|l| match l.through {
                Some(t) => format!("{}..{t}", l.after),
                None => format!("{}..", l.after),
            })
            .collect();
        let mut text = format!(
            "verdict: consumer of route {route}; lives={}",
            spans.join(",")
        );
        if self.pending {
            text.push(' ');
            text.push_str(PENDING);
        } else if !self.open() {
            text.push_str(" (route removed: delivers what it holds of those, then is deleted)");
        }
        text
    }
}

/// The word in a description whose boundary is being read.
const PENDING: &str = "boundary=pending";

/// Whether `a` is strictly more specific than `b`, both covering one subject: `b` covers
/// `a` but not the reverse; for patterns neither covers (`a.*.c` and `a.b.*`), the one
/// whose first wildcard comes later, then the smaller string - an order every consumer
/// agrees on, whatever order it lists its routes in.
fn more_specific(a: &str, b: &str) -> bool {
    match (covers(b, a), covers(a, b)) {
        (true, false) => true,
        (false, true) | (true, true) => false,
        (false, false) => {
            (first_wildcard(a), std::cmp::Reverse(a)) > (first_wildcard(b), std::cmp::Reverse(b))
        }
    }
}

/// The index of the first wildcard token (`*` or `>`), or the token count when none.
fn first_wildcard(pattern: &str) -> usize {
    pattern
        .split('.')
        .position(|t| t == "*" || t == ">")
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(filter: &str, born_after: u64) -> Member {
        Member {
            durable: format!("gw-{filter}"),
            filter: filter.into(),
            lives: Marks::born(born_after).lives,
            active: true,
        }
    }

    fn retired(filter: &str, through: u64) -> Member {
        lived(filter, &[(0, Some(through))], false)
    }

    fn lived(filter: &str, lives: &[(u64, Option<u64>)], active: bool) -> Member {
        Member {
            durable: format!("gw-{filter}"),
            filter: filter.into(),
            lives: lives
                .iter()
                .map(|&(after, through)| Life { after, through })
                .collect(),
            active,
        }
    }

    fn owner(o: &Ownership, subject: &str, seq: u64) -> Option<String> {
        o.owner(subject, seq)
            .map(|d| d.trim_start_matches("gw-").to_string())
    }

    #[test]
    fn the_most_specific_route_owns_a_message() {
        let o = Ownership::new(vec![route("orders.>", 0), route("orders.vip", 0)]);
        assert_eq!(owner(&o, "orders.vip", 1).as_deref(), Some("orders.vip"));
        assert_eq!(owner(&o, "orders.eu", 1).as_deref(), Some("orders.>"));
        assert_eq!(owner(&o, "invoices", 1), None);
    }

    #[test]
    fn a_removed_route_keeps_what_it_was_handed_and_nothing_after() {
        // `orders.vip` removed: up to its boundary it delivers vip messages (its retries
        // and the ones the wide route skipped for it); after it the wide route does.
        let o = Ownership::new(vec![route("orders.>", 0), retired("orders.vip", 40)]);
        assert_eq!(owner(&o, "orders.vip", 40).as_deref(), Some("orders.vip"));
        assert_eq!(owner(&o, "orders.vip", 41).as_deref(), Some("orders.>"));
        assert_eq!(owner(&o, "orders.eu", 10).as_deref(), Some("orders.>"));
    }

    #[test]
    fn a_route_added_under_a_wider_one_takes_only_what_is_published_after_it() {
        // What the wide route was handed before the vip route existed stays with it (its
        // retries are delivered on the vip route's consumer by it): nothing twice.
        let o = Ownership::new(vec![route("orders.>", 0), route("orders.vip", 50)]);
        assert_eq!(owner(&o, "orders.vip", 50).as_deref(), Some("orders.>"));
        assert_eq!(owner(&o, "orders.vip", 51).as_deref(), Some("orders.vip"));
    }

    #[test]
    fn a_narrowed_route_leaves_its_old_messages_with_the_retired_consumer() {
        // `orders.>` narrowed to `orders.eu.>`, made at 120: what the wide one was handed
        // stays with it; eu messages published after are the eu route's; us ones nobody's.
        let o = Ownership::new(vec![route("orders.eu.>", 120), retired("orders.>", 100)]);
        assert_eq!(owner(&o, "orders.us", 50).as_deref(), Some("orders.>"));
        assert_eq!(owner(&o, "orders.eu.fr", 50).as_deref(), Some("orders.>"));
        assert_eq!(
            owner(&o, "orders.eu.fr", 110).as_deref(),
            Some("orders.eu.>"),
            "never handed to the wide one"
        );
        assert_eq!(
            owner(&o, "orders.eu.fr", 121).as_deref(),
            Some("orders.eu.>")
        );
        assert_eq!(owner(&o, "orders.us", 101), None);
    }

    #[test]
    fn a_widened_route_skips_what_the_narrower_retired_one_delivered() {
        let o = Ownership::new(vec![route("orders.>", 9), retired("orders.vip", 7)]);
        assert_eq!(owner(&o, "orders.vip", 3).as_deref(), Some("orders.vip"));
        assert_eq!(owner(&o, "orders.vip", 8).as_deref(), Some("orders.>"));
        assert_eq!(
            owner(&o, "orders.eu", 3).as_deref(),
            Some("orders.>"),
            "nobody had it"
        );
    }

    #[test]
    fn every_consumer_computes_one_owner_for_patterns_neither_covers() {
        let a = Ownership::new(vec![route("a.*.c", 0), route("a.b.*", 0)]);
        let b = Ownership::new(vec![route("a.b.*", 0), route("a.*.c", 0)]);
        assert_eq!(a.owner("a.b.c", 1), b.owner("a.b.c", 1));
        assert_eq!(owner(&a, "a.b.c", 1).as_deref(), Some("a.b.*"));
    }

    #[test]
    fn a_route_removed_keeps_nothing_from_before_it_was_added() {
        // `orders.vip` added at 50 and removed at 80: the wide route's retries of vip
        // messages published before 50 stay the wide route's (the vip consumer skipped
        // them while it was consumed), up to 80 they are the vip consumer's.
        let o = Ownership::new(vec![
            route("orders.>", 0),
            lived("orders.vip", &[(50, Some(80))], false),
        ]);
        assert_eq!(owner(&o, "orders.vip", 20).as_deref(), Some("orders.>"));
        assert_eq!(owner(&o, "orders.vip", 60).as_deref(), Some("orders.vip"));
        assert_eq!(owner(&o, "orders.vip", 81).as_deref(), Some("orders.>"));
    }

    #[test]
    fn a_route_added_again_leaves_the_gap_to_the_route_that_had_it() {
        // `orders.vip` consumed over (50, 80], removed, added again at 120: what was
        // published in the gap was the wide route's, and stays so.
        let o = Ownership::new(vec![
            route("orders.>", 0),
            lived("orders.vip", &[(50, Some(80)), (120, None)], true),
        ]);
        assert_eq!(owner(&o, "orders.vip", 60).as_deref(), Some("orders.vip"));
        assert_eq!(owner(&o, "orders.vip", 100).as_deref(), Some("orders.>"));
        assert_eq!(owner(&o, "orders.vip", 121).as_deref(), Some("orders.vip"));
    }

    /// Whether the consumer of route `mine` leaves the message at `seq` to `theirs`.
    fn leaves_to(mine: (&str, &Marks), theirs: (&str, &Marks), seq: u64) -> bool {
        owner_by_marks(&[(mine.0, Some(mine.1)), (theirs.0, Some(theirs.1))], seq) == Some(1)
    }

    #[test]
    fn a_message_is_left_only_to_a_consumer_the_server_says_delivers_it() {
        let wide = Marks::born(0);
        let mut vip = Marks::born(50);
        // Both responsible: the more specific delivers.
        assert!(leaves_to(("orders.>", &wide), ("orders.vip", &vip), 60));
        assert!(!leaves_to(("orders.vip", &vip), ("orders.>", &wide), 60));
        // Another gateway removed the vip route at 80: past it, the wide route delivers.
        vip.close(80);
        assert!(!leaves_to(("orders.>", &wide), ("orders.vip", &vip), 90));
        assert!(leaves_to(("orders.vip", &vip), ("orders.>", &wide), 90));
        // ...and added it again at 100.
        vip.reopen(100);
        assert!(!leaves_to(("orders.vip", &vip), ("orders.>", &wide), 101));
        assert!(leaves_to(("orders.>", &wide), ("orders.vip", &vip), 101));
    }

    #[test]
    fn the_server_marks_pick_one_owner_among_every_covering_consumer() {
        let wide = Marks::born(0);
        let star = Marks::born(0);
        let mut vip = Marks::born(50);
        let all = |vip: &Marks| {
            [
                ("orders.>", wide.clone()),
                ("orders.*", star.clone()),
                ("orders.vip", vip.clone()),
            ]
        };
        let pick = |c: &[(&str, Marks)], seq| {
            let c: Vec<(&str, Option<&Marks>)> = c.iter().map(|(r, m)| (*r, Some(m))).collect();
            owner_by_marks(&c, seq)
        };
        // Before the vip route was added, the more specific of the wide ones.
        assert_eq!(pick(&all(&vip), 40), Some(1));
        assert_eq!(pick(&all(&vip), 60), Some(2));
        // Another gateway removed the vip route at 80: a stale session that fetched 90 on
        // the vip consumer leaves it; 70 stays the vip consumer's.
        vip.close(80);
        assert_eq!(pick(&all(&vip), 90), Some(1));
        assert_eq!(pick(&all(&vip), 70), Some(2));
        // Whatever order a gateway lists them in, the same consumer.
        let mut reversed = all(&vip);
        reversed.reverse();
        assert_eq!(pick(&reversed, 90), Some(1));
        // Nobody responsible: nobody named.
        assert_eq!(pick(&[("orders.vip", vip.clone())], 90), None);
        // A consumer deleted since delivers nothing: the next one takes it.
        assert_eq!(
            owner_by_marks(&[("orders.vip", None), ("orders.>", Some(&wide))], 60),
            Some(1)
        );
    }

    #[test]
    fn a_pending_boundary_is_written_and_read_back_and_cleared_by_the_boundary() {
        let mut marks = Marks::born(12);
        marks.pending = true;
        let text = marks.describe("orders.vip");
        assert!(text.contains("boundary=pending"), "{text}");
        let read = Marks::parse(Some(&text));
        assert!(read.pending && read.open(), "{read:?}");
        marks.close(40);
        assert!(!marks.pending);
        assert!(!Marks::parse(Some(&marks.describe("orders.vip"))).pending);
        marks.pending = true;
        marks.reopen(90);
        assert!(!marks.pending && marks.open());
    }

    #[test]
    fn marks_survive_a_round_trip_through_the_description() {
        let mut marks = Marks::born(12);
        assert!(marks.open());
        marks.close(40);
        assert!(!marks.open() && marks.through() == Some(40));
        assert_eq!(Marks::parse(Some(&marks.describe("orders.>"))), marks);
        marks.reopen(90);
        assert!(marks.open() && marks.responsible(91) && !marks.responsible(60));
        assert_eq!(Marks::parse(Some(&marks.describe("orders.>"))), marks);
        // An earlier version's marks read as one life.
        let legacy = Marks::parse(Some(
            "verdict: consumer of route a.>; born-after=12; retired-through=40 (route removed)",
        ));
        assert_eq!(
            legacy.lives,
            vec![Life {
                after: 12,
                through: Some(40)
            }]
        );
        assert_eq!(
            Marks::parse(Some("someone else's consumer")),
            Marks::default()
        );
        assert_eq!(Marks::parse(None), Marks::default());
        assert!(Marks::default().open() && Marks::default().responsible(1));
    }
}
