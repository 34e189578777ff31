//! Topic patterns and the router: which route a topic belongs to.
//!
//! Patterns are dot-separated tokens, NATS style: `*` matches exactly one token, `>` (last
//! token only) matches one or more. An exact pattern beats any wildcard; among wildcards the
//! most specific wins (more literal tokens, then more tokens, then no `>`); the default route
//! catches the rest. Two patterns of equal specificity that can match the same topic are
//! ambiguous and refused when the router is built, with a topic that shows it.
//!
//! Resolution walks a token trie: no locks, no allocation, and its cost depends on the
//! topic's depth, not on how many routes exist.

use std::collections::HashMap;

/// A validated topic pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPattern {
    text: String,
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    Star,
    Rest,
}

/// Why a pattern or a set of routes is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The pattern is malformed.
    #[error("topic pattern `{pattern}`: {message}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        message: String,
    },
    /// Two routes claim the same topics with the same specificity.
    #[error(
        "routes `{first}` and `{second}` are ambiguous: both match `{example}` with the same specificity"
    )]
    Ambiguous {
        /// One pattern.
        first: String,
        /// The other.
        second: String,
        /// A topic both match.
        example: String,
    },
}

impl TopicPattern {
    /// Parse and validate a pattern.
    pub fn parse(text: &str) -> Result<Self, RouteError> {
        let bad = |message: &str| RouteError::Pattern {
            pattern: text.to_string(),
            message: message.to_string(),
        };
        if text.is_empty() {
            return Err(bad("is empty"));
        }
        let parts: Vec<&str> = text.split('.').collect();
        let mut tokens = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            tokens.push(match *part {
                "" => {
                    return Err(bad(
                        "has an empty token (two dots, or a leading/trailing dot)",
                    ));
                }
                "*" => Token::Star,
                ">" if i + 1 == parts.len() => Token::Rest,
                ">" => return Err(bad("`>` may only be the last token")),
                p if p.contains(['*', '>']) => return Err(bad("`*` and `>` must be whole tokens")),
                p => Token::Literal(p.to_string()),
            });
        }
        Ok(TopicPattern {
            text: text.to_string(),
            tokens,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when the pattern has no wildcard.
    pub fn is_exact(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Literal(_)))
    }

    /// Whether `topic` matches.
    pub fn matches(&self, topic: &str) -> bool {
        let mut parts = topic.split('.');
        for token in &self.tokens {
            match (token, parts.next()) {
                (Token::Rest, Some(_)) => return true,
                (Token::Star, Some(_)) => {}
                (Token::Literal(l), Some(p)) if l == p => {}
                _ => return false,
            }
        }
        parts.next().is_none()
    }

    /// Ordering key: more literal tokens, then more tokens, then no `>`.
    fn specificity(&self) -> (usize, usize, bool) {
        let literals = self
            .tokens
            .iter()
            .filter(|t| matches!(t, Token::Literal(_)))
            .count();
        (
            literals,
            self.tokens.len(),
            !matches!(self.tokens.last(), Some(Token::Rest)),
        )
    }

    /// A topic both patterns match, if any, and whether it is the only one.
    fn overlap(&self, other: &TopicPattern) -> Option<(String, bool)> {
        let mut out = Vec::new();
        let mut single = true;
        let (mut a, mut b) = (self.tokens.iter(), other.tokens.iter());
        loop {
            match (a.next(), b.next()) {
                (None, None) => return Some((out.join("."), single)),
                // `>` absorbs whatever the other has left (at least one token).
                (Some(Token::Rest), other) => {
                    return Some((absorb(out, other.into_iter().chain(b)), false));
                }
                (other, Some(Token::Rest)) => {
                    return Some((absorb(out, other.into_iter().chain(a)), false));
                }
                (Some(Token::Literal(x)), Some(Token::Literal(y))) if x != y => return None,
                (Some(x), Some(y)) => {
                    single &= matches!(x, Token::Literal(_)) || matches!(y, Token::Literal(_));
                    out.push(if matches!(x, Token::Literal(_)) {
                        example_token(x)
                    } else {
                        example_token(y)
                    });
                }
                _ => return None,
            }
        }
    }
}

/// Finish a witness topic: the other side's remaining tokens, or one token for `>` to take.
fn absorb<'a>(mut out: Vec<String>, rest: impl Iterator<Item = &'a Token>) -> String {
    let before = out.len();
    out.extend(rest.map(example_token));
    if out.len() == before {
        out.push("x".to_string());
    }
    out.join(".")
}

fn example_token(t: &Token) -> String {
    match t {
        Token::Literal(l) => l.clone(),
        Token::Star | Token::Rest => "x".to_string(),
    }
}

/// Maps topics to route indices. Build once per configuration generation.
#[derive(Debug, Default)]
pub struct Router {
    exact: HashMap<String, usize>,
    root: Node,
    default: Option<usize>,
    patterns: Vec<TopicPattern>,
}

#[derive(Debug, Default)]
struct Node {
    literal: HashMap<String, Node>,
    star: Option<Box<Node>>,
    /// Route ending here with `>` (matches one or more further tokens).
    rest: Option<usize>,
    /// Route ending exactly here.
    end: Option<usize>,
}

impl Router {
    /// Build a router over `patterns` (route `i` is `patterns[i]`) with an optional default
    /// route index. Refuses duplicates and ambiguous pairs.
    pub fn new(patterns: Vec<TopicPattern>, default: Option<usize>) -> Result<Router, RouteError> {
        for (i, a) in patterns.iter().enumerate() {
            for b in &patterns[i + 1..] {
                if a.tokens == b.tokens {
                    return Err(RouteError::Ambiguous {
                        first: a.text.clone(),
                        second: b.text.clone(),
                        example: a.text.clone(),
                    });
                }
                if a.specificity() != b.specificity() {
                    continue;
                }
                // Overlapping in a single topic that an exact route takes is not ambiguous.
                match a.overlap(b) {
                    Some((only, true))
                        if patterns.iter().any(|p| p.is_exact() && p.text == only) => {}
                    Some((example, _)) => {
                        return Err(RouteError::Ambiguous {
                            first: a.text.clone(),
                            second: b.text.clone(),
                            example,
                        });
                    }
                    None => {}
                }
            }
        }
        let mut router = Router {
            default,
            ..Router::default()
        };
        for (index, pattern) in patterns.iter().enumerate() {
            if pattern.is_exact() {
                router.exact.insert(pattern.text.clone(), index);
                continue;
            }
            let mut node = &mut router.root;
            for token in &pattern.tokens {
                match token {
                    Token::Literal(l) => node = node.literal.entry(l.clone()).or_default(),
                    Token::Star => node = node.star.get_or_insert_with(Default::default),
                    Token::Rest => {
                        node.rest = Some(index);
                        break;
                    }
                }
            }
            if !matches!(pattern.tokens.last(), Some(Token::Rest)) {
                node.end = Some(index);
            }
        }
        router.patterns = patterns;
        Ok(router)
    }

    /// The route for `topic`: exact, else the most specific wildcard, else the default.
    pub fn resolve(&self, topic: &str) -> Option<usize> {
        if let Some(&index) = self.exact.get(topic) {
            return Some(index);
        }
        let mut best: Option<usize> = None;
        self.walk(&self.root, topic, &mut best);
        best.or(self.default)
    }

    fn walk(&self, node: &Node, rest: &str, best: &mut Option<usize>) {
        let (token, tail) = match rest.split_once('.') {
            Some((t, tail)) => (t, Some(tail)),
            None => (rest, None),
        };
        if let Some(index) = node.rest {
            self.consider(index, best);
        }
        for child in [node.literal.get(token), node.star.as_deref()]
            .into_iter()
            .flatten()
        {
            match tail {
                Some(tail) => self.walk(child, tail, best),
                None => {
                    if let Some(index) = child.end {
                        self.consider(index, best);
                    }
                }
            }
        }
    }

    fn consider(&self, candidate: usize, best: &mut Option<usize>) {
        let better = best.is_none_or(|current| {
            self.patterns[candidate].specificity() > self.patterns[current].specificity()
        });
        if better {
            *best = Some(candidate);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(patterns: &[&str], default: bool) -> Result<Router, RouteError> {
        let parsed = patterns
            .iter()
            .map(|p| TopicPattern::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        Router::new(parsed, default.then_some(usize::MAX))
    }

    #[test]
    fn patterns_are_validated() {
        for bad in ["", "a..b", ".a", "a.", "a.>.b", "a*", "a.b>"] {
            assert!(TopicPattern::parse(bad).is_err(), "{bad:?} accepted");
        }
        let p = TopicPattern::parse("orders.*.created").unwrap();
        assert!(p.matches("orders.eu.created"));
        assert!(!p.matches("orders.eu.x.created") && !p.matches("orders.created"));
        let rest = TopicPattern::parse("orders.>").unwrap();
        assert!(rest.matches("orders.a") && rest.matches("orders.a.b") && !rest.matches("orders"));
    }

    #[test]
    fn exact_beats_most_specific_wildcard_beats_default() {
        let r = router(
            &[
                "payments.>",
                "payments.*.captured",
                "payments.eu.captured",
                "*.eu.captured",
            ],
            true,
        )
        .unwrap();
        assert_eq!(r.resolve("payments.eu.captured"), Some(2));
        assert_eq!(r.resolve("payments.us.captured"), Some(1));
        assert_eq!(r.resolve("payments.us.refunded"), Some(0));
        assert_eq!(r.resolve("payments.us.refunded.late"), Some(0));
        assert_eq!(r.resolve("orders.eu.captured"), Some(3));
        assert_eq!(r.resolve("notifications.email"), Some(usize::MAX));
        let no_default = router(&["a.b"], false).unwrap();
        assert_eq!(no_default.resolve("a.c"), None);
    }

    #[test]
    fn ambiguous_routes_are_refused_with_an_example() {
        let err = router(&["a.*", "*.b"], false).unwrap_err();
        assert_eq!(
            err,
            RouteError::Ambiguous {
                first: "a.*".into(),
                second: "*.b".into(),
                example: "a.b".into()
            }
        );
        assert!(matches!(
            router(&["a.b", "a.b"], false),
            Err(RouteError::Ambiguous { .. })
        ));
        assert!(matches!(
            router(&["x.>", "x.>"], false),
            Err(RouteError::Ambiguous { .. })
        ));
        // Same specificity but disjoint: fine.
        assert!(router(&["a.*", "b.*"], false).is_ok());
        // Overlapping but one is more specific: fine.
        assert!(router(&["a.*", "a.b"], false).is_ok());
        // Their only common topic has an exact route: fine; a second common topic: not.
        assert!(router(&["a.*", "*.b", "a.b"], false).is_ok());
        assert!(matches!(
            router(&["a.*.>", "*.b.>", "a.b.c"], false),
            Err(RouteError::Ambiguous { .. })
        ));
    }

    #[test]
    fn resolution_agrees_with_a_brute_force_search() {
        let patterns = [
            "a.>", "a.*", "a.b", "*.b", "a.*.c", "*.*.c", "a.b.>", "x.y.z",
        ];
        // `a.*` vs `*.b` share a specificity and overlap, so leave `*.b` out.
        let usable: Vec<&str> = patterns.iter().copied().filter(|p| *p != "*.b").collect();
        let r = router(&usable, false).unwrap();
        let parsed: Vec<TopicPattern> = usable
            .iter()
            .map(|p| TopicPattern::parse(p).unwrap())
            .collect();
        for topic in [
            "a", "a.b", "a.q", "a.b.c", "a.q.c", "q.q.c", "a.b.c.d", "x.y.z", "x.y", "b",
        ] {
            let brute = parsed
                .iter()
                .enumerate()
                .filter(|(_, p)| p.matches(topic))
                .max_by_key(|(_, p)| (p.is_exact(), p.specificity()))
                .map(|(i, _)| i);
            assert_eq!(r.resolve(topic), brute, "{topic}");
        }
    }
}
