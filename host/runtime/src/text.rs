//! Strings from outside - consumer answers, producer headers, policy output - made safe
//! before they reach a header, a metric label, a log line or an envelope: bounded in
//! length and free of control characters (a CR/LF in a header value would let a consumer
//! inject headers, and some clients refuse such a value with a panic).

use std::fmt;

/// The longest error kind the gateway accepts from a consumer.
pub const MAX_KIND_BYTES: usize = 128;
/// The longest error message kept from a consumer (or a policy fault).
pub const MAX_MESSAGE_BYTES: usize = 512;
/// The longest name or version a policy may describe itself with.
pub const MAX_NAME_BYTES: usize = 128;
/// The longest string written to a log line in one field.
pub const MAX_LOG_BYTES: usize = 256;

/// `text` cut to at most `max` bytes (on a character boundary) with every control
/// character (CR, LF, TAB, NUL, ...) replaced by a space: one line, safe for a header value.
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// Whether `kind` is a usable error kind: 1 to [`MAX_KIND_BYTES`] bytes of ASCII letters,
/// digits and `. _ - : / +`, which every broker header, metric label and policy pattern
/// takes as it is.
pub fn is_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= MAX_KIND_BYTES
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:/+".contains(&b))
}

/// `text` safe inside an HTML element or a quoted attribute, for pages that show what
/// producers, consumers and policies wrote: markup characters become entities, control
/// characters other than newline and tab become U+FFFD.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A string for a log field: one line, at most [`MAX_LOG_BYTES`] (with `...` when cut).
pub struct Clean<'a>(pub &'a str);

impl fmt::Display for Clean<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = one_line(self.0, MAX_LOG_BYTES);
        if line.len() < self.0.len() && self.0.len() > MAX_LOG_BYTES {
            write!(f, "{line}...")
        } else {
            f.write_str(&line)
        }
    }
}

/// `scheme://user:password@host/...` with the password replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    match password_of(url) {
        Some(password) if !password.is_empty() => url.replacen(password, "***", 1),
        _ => url.to_string(),
    }
}

/// `text` with every URL in it stripped of what may be a credential: its user information
/// (`https://***@host/`) and the values of its query (`?api_key=***&sig=***`). An error from
/// an HTTP client quotes the URL it was given, and a consumer URL may carry an API key or a
/// signed token in either place; the text then goes to envelopes, attempt histories,
/// policies, pages and logs. Paths and hosts stay, so the error still says where.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | '`' | ']'))
            .unwrap_or(rest.len());
        out.push_str(&redact_url_tail(&rest[..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A URL after its `://`, redacted as [`redact_urls`] says.
fn redact_url_tail(url: &str) -> String {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, path) = url.split_at(authority_end);
    let mut out = match authority.rfind('@') {
        Some(at) => format!("***{}", &authority[at..]),
        None => authority.to_string(),
    };
    let (before_fragment, fragment) = match path.find('#') {
        Some(at) => path.split_at(at),
        None => (path, ""),
    };
    match before_fragment.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) => format!("{name}=***"),
                    None if pair.is_empty() => String::new(),
                    None => "***".to_string(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        None => out.push_str(before_fragment),
    }
    if !fragment.is_empty() {
        out.push_str("#***");
    }
    out
}

/// The password in a URL's user information, if it has one.
fn password_of(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let userinfo = &rest[..rest.find('@')?];
    let (_, password) = userinfo.split_once(':')?;
    Some(password)
}

/// Cut `s` to at most `max` bytes on a character boundary.
pub(crate) fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_spaces_and_length_is_bounded_on_a_char_boundary() {
        assert_eq!(
            one_line("schema.bad\r\nx-injected: 1", 100),
            "schema.bad  x-injected: 1"
        );
        assert_eq!(one_line("\0\t\u{7f}", 10), "   ");
        // 'é' is two bytes: never split.
        assert_eq!(one_line("éééé", 5), "éé");
        assert_eq!(one_line(&"x".repeat(2_000_000), 512).len(), 512);
    }

    #[test]
    fn kinds_are_plain_tokens() {
        for good in [
            "http.503",
            "schema.unknown-version",
            "db:timeout",
            "a/b+c_d",
        ] {
            assert!(is_kind(good), "{good}");
        }
        for bad in [
            "",
            "schema.bad\r\nx-injected: 1",
            "with space",
            "ünïcode",
            &"x".repeat(129),
        ] {
            assert!(!is_kind(bad), "{bad:?}");
        }
    }

    #[test]
    fn passwords_in_urls_are_never_shown() {
        assert_eq!(
            redact_url("amqp://guest:s3cret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }

    #[test]
    fn credentials_in_quoted_urls_are_removed_where_they_are_found() {
        let error = "error sending request for url (http://ops:pa55@127.0.0.1:9669/hook?api_key=SUPERSECRET123&v=2): connection refused";
        let clean = redact_urls(error);
        assert_eq!(
            clean,
            "error sending request for url (http://***@127.0.0.1:9669/hook?api_key=***&v=***): connection refused"
        );
        assert_eq!(
            redact_urls("see https://h/x?TOKEN#frag and ftp://h2/y"),
            "see https://h/x?***#*** and ftp://h2/y"
        );
        assert_eq!(redact_urls("no url at all"), "no url at all");
        assert_eq!(
            redact_urls("http://host:8080/path"),
            "http://host:8080/path"
        );
        assert_eq!(redact_urls("`amqp://u:p@h/%2f`"), "`amqp://***@h/%2f`");
        // Whatever the text, no panic on a boundary.
        for odd in ["://", "x://@", "é://ü?=&", "a://b?c=d=e&&"] {
            let _ = redact_urls(odd);
        }
    }

    #[test]
    fn log_fields_are_one_bounded_line() {
        let long = format!("a\nb{}", "c".repeat(1_000));
        let shown = Clean(&long).to_string();
        assert!(!shown.contains('\n'));
        assert!(shown.len() <= MAX_LOG_BYTES + 3 && shown.ends_with("..."));
        assert_eq!(Clean("short").to_string(), "short");
    }
}
