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
}
