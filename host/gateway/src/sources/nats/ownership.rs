//! Which of the group's durable consumers delivers a message, when several see it.
//!
//! Every route has a durable consumer filtered to its subjects, and filters overlap:
//! `orders.>` and `orders.vip` both see a message on `orders.vip`. Exactly one of them must
//! deliver it; the others acknowledge their copy and move on. The rule is a pure function
//! of the message's subject and stream sequence, computed the same way by every consumer:
//!
//! - among the consumers whose filter covers the subject - the routes consumed now, and the
//!   *retired* consumers (routes a reload or a restart removed) for the messages they were
//!   responsible for, stream sequences up to their boundary - the most specific filter owns
//!   the message (exact before wildcard, `orders.*` before `orders.>`), as routing does.
//!
//! A retired consumer's boundary is fixed when it is retired: the furthest stream sequence
//! it or any consumer overlapping it had been handed. Up to there, messages of its subjects
//! were (or would have been) delivered by it under the old routes - the retries it holds
//! come back to it and it delivers them on the route that takes their subject now - and the
//! other consumers skipped them. Beyond it, the routes of now deliver; the retired consumer
//! acknowledges what it sees there, and is deleted once everything up to its boundary is
//! acknowledged. So removing, narrowing or widening a route hands every waiting retry on,
//! and replays nothing another consumer already delivered.

use verdict_registry::config::covers_subject as covers;

/// One durable consumer of the group, as ownership sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Its durable name.
    pub durable: String,
    /// Its filter subject (its route's pattern).
    pub filter: String,
    /// The stream's last sequence when it was made: what was published before belongs to
    /// the consumers that existed then (0: made by a version that did not record it).
    pub born_after: u64,
    /// Retired (its route removed): the last stream sequence it is responsible for.
    pub retired_through: Option<u64>,
    /// Whether its route is consumed now.
    pub active: bool,
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

    /// The durable name of the consumer that delivers the message at stream sequence `seq`
    /// on `subject`: among the consumers that were responsible for it - routes consumed now
    /// that existed when it was published, retired ones up to their boundary - the most
    /// specific; when none was (a route made for subjects nobody consumed), the most
    /// specific route consumed now. `None` when no consumer covers the subject.
    pub(crate) fn owner(&self, subject: &str, seq: u64) -> Option<&str> {
        let covering = || self.members.iter().filter(|m| covers(&m.filter, subject));
        let responsible = covering().filter(|m| {
            (m.active && seq > m.born_after) || m.retired_through.is_some_and(|t| seq <= t)
        });
        most_specific(responsible)
            .or_else(|| most_specific(covering().filter(|m| m.active)))
            .map(|m| m.durable.as_str())
    }
}

/// The member with the most specific filter; the first of equals.
fn most_specific<'a>(members: impl Iterator<Item = &'a Member>) -> Option<&'a Member> {
    members.fold(None, |best, m| match best {
        Some(b) if !more_specific(&m.filter, &b.filter) => Some(b),
        _ => Some(m),
    })
}

/// What the gateway records in a consumer's description (`nats consumer info` shows it):
/// when the consumer was made, and up to where a retired one still delivers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    /// See [`Member::born_after`].
    pub born_after: Option<u64>,
    /// See [`Member::retired_through`].
    pub retired_through: Option<u64>,
}

impl Marks {
    /// The marks in a description the gateway wrote (none in any other).
    pub(crate) fn parse(description: Option<&str>) -> Marks {
        let number = |key: &str| {
            description?
                .split([' ', ';'])
                .find_map(|word| word.strip_prefix(key)?.parse::<u64>().ok())
        };
        Marks {
            born_after: number("born-after="),
            retired_through: number("retired-through="),
        }
    }

    /// The description of the consumer of `route` with these marks.
    pub(crate) fn describe(&self, route: &str) -> String {
        let mut text = format!("verdict: consumer of route {route}");
        if let Some(n) = self.born_after {
            text.push_str(&format!("; born-after={n}"));
        }
        if let Some(n) = self.retired_through {
            text.push_str(&format!(
                "; retired-through={n} (route removed: delivers what it holds up to there, then is deleted)"
            ));
        }
        text
    }
}

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
            born_after,
            retired_through: None,
            active: true,
        }
    }

    fn retired(filter: &str, through: u64) -> Member {
        Member {
            durable: format!("gw-{filter}"),
            filter: filter.into(),
            born_after: 0,
            retired_through: Some(through),
            active: false,
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
    fn marks_survive_a_round_trip_through_the_description() {
        let marks = Marks {
            born_after: Some(12),
            retired_through: Some(40),
        };
        assert_eq!(Marks::parse(Some(&marks.describe("orders.>"))), marks);
        assert_eq!(
            Marks::parse(Some("someone else's consumer")),
            Marks::default()
        );
        assert_eq!(Marks::parse(None), Marks::default());
    }
}
