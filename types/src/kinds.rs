//! Matching error kinds against patterns.
//!
//! Kinds are dotted, machine-readable names (`db.timeout`, `http.503`, `json.parse`).
//! Patterns are globs where `*` matches any run of characters (dots included) and `?`
//! matches one character: `db.*`, `http.5*`, `*.timeout`, `*`.
//!
//! ```
//! use verdict_types::kind_matches;
//!
//! assert!(kind_matches("http.5*", "http.503"));
//! assert!(kind_matches("*.timeout", "db.timeout"));
//! assert!(!kind_matches("db.*", "dbx.timeout"));
//! ```

/// True when `pattern` matches the whole `kind`. Case-sensitive: kinds are identifiers.
pub fn kind_matches(pattern: &str, kind: &str) -> bool {
    let (p, k) = (pattern.as_bytes(), kind.as_bytes());
    // Iterative glob with single-star backtracking: linear in practice, no recursion, so a
    // hostile pattern in a config cannot blow the stack.
    let (mut pi, mut ki) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ki < k.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ki));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == k[ki] => {
                pi += 1;
                ki += 1;
            }
            _ => match star {
                Some((sp, sk)) => {
                    pi = sp + 1;
                    ki = sk + 1;
                    star = Some((sp, sk + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The first pattern in `patterns` that matches `kind`.
pub fn first_match<'p>(patterns: impl IntoIterator<Item = &'p str>, kind: &str) -> Option<&'p str> {
    patterns.into_iter().find(|p| kind_matches(p, kind))
}

/// Error kinds that never succeed on a retry: a payload that does not parse (`json.*`), a
/// schema or format the consumer does not know (`schema.*`, `format.*`) and a request the
/// consumer refuses to authorise (`auth.*`). Retrying them only delays the dead letter.
///
/// One list, shared by the SDK's [`never_retry`] default, the harness's property check
/// "never-retry kinds are not retried" and the admission gate's default
/// `[admission] never_retry_kinds`, so what a policy starts from is what the gate expects.
pub const NEVER_RETRY_KINDS: [&str; 4] = ["json.*", "schema.*", "format.*", "auth.*"];

/// The dead-letter verdict for a kind in [`NEVER_RETRY_KINDS`], `None` for any other kind:
/// poison (warning) for a payload, schema or format error, permanent (critical: someone has
/// to fix credentials or permissions) for an `auth.*` refusal.
///
/// ```
/// use verdict_types::{Class, never_retry};
///
/// assert_eq!(never_retry("json.parse").map(|v| v.class), Some(Class::Poison));
/// assert_eq!(never_retry("auth.denied").map(|v| v.class), Some(Class::Permanent));
/// assert!(never_retry("db.timeout").is_none());
/// ```
pub fn never_retry(kind: &str) -> Option<crate::Verdict> {
    use crate::{Class, Severity, Verdict};
    let pattern = NEVER_RETRY_KINDS
        .iter()
        .find(|pattern| kind_matches(pattern, kind))?;
    Some(if *pattern == "auth.*" {
        Verdict::dead_letter(Class::Permanent)
            .alert(Severity::Critical)
            .because("the consumer refuses it: credentials or permissions need fixing")
    } else {
        Verdict::dead_letter(Class::Poison).because("the message cannot be read as it is")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("db.timeout", "db.timeout", true),
            ("db.*", "db.timeout", true),
            ("db.*", "db.", true),
            ("db.*", "db", false),
            ("http.5*", "http.503", true),
            ("http.5*", "http.404", false),
            ("*.timeout", "net.tcp.timeout", true),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*a*b", "xxaxxbxb", true),
            ("*a*b", "xxaxxbx", false),
        ];
        for (p, k, want) in cases {
            assert_eq!(kind_matches(p, k), want, "{p:?} vs {k:?}");
        }
    }

    #[test]
    fn first_match_keeps_order() {
        assert_eq!(first_match(["json.*", "*"], "json.parse"), Some("json.*"));
        assert_eq!(first_match(["json.*", "db.*"], "http.503"), None);
    }

    #[test]
    fn never_retry_answers_exactly_the_shared_kinds() {
        for kind in [
            "json.parse",
            "schema.unknown-version",
            "format.csv",
            "auth.expired",
        ] {
            let v = never_retry(kind).expect(kind);
            assert_eq!(v.action, crate::Action::DeadLetter, "{kind}");
        }
        for kind in ["db.timeout", "http.503", "jsonx.parse", "authz", ""] {
            assert!(never_retry(kind).is_none(), "{kind}");
        }
        assert!(
            NEVER_RETRY_KINDS
                .iter()
                .all(|p| never_retry(&p.replace('*', "x")).is_some())
        );
    }
}
