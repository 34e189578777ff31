//! The one redactor. Every text that leaves the gateway - an error answered by the admin
//! API or shown by the console, an attempt's error kept in a history or an envelope, the
//! message a policy sees, a log line, what `verdict check` prints - passes through
//! [`redact`], which removes:
//!
//! - the user information and query values of every URL in it (see
//!   [`crate::text::redact_urls`]): a consumer URL may carry an API key in either place;
//! - every secret the process was configured with, wherever it appears, raw or
//!   percent-encoded: broker and database passwords, the admin token. Loading a config
//!   remembers its secrets ([`remember`]), so a driver's error that quotes a password
//!   without its URL is caught too.
//!
//! Secrets shorter than [`MIN_SECRET_CHARS`] are not searched for: they would blank out
//! ordinary words, and a password that short is no secret anyway.

use std::sync::{PoisonError, RwLock};

/// Shortest secret searched for.
pub const MIN_SECRET_CHARS: usize = 4;

/// Most secrets remembered (a process has a handful; the bound keeps a reload loop from
/// growing the list).
const MAX_SECRETS: usize = 256;

/// What replaces a secret.
pub const MASK: &str = "***";

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remember `secret` (and its percent-decoded form, if different) for [`redact`].
pub fn remember(secret: &str) {
    let decoded = percent_decode(secret);
    let mut secrets = SECRETS.write().unwrap_or_else(PoisonError::into_inner);
    for candidate in [secret, decoded.as_str()] {
        if candidate.chars().count() < MIN_SECRET_CHARS
            || secrets.iter().any(|s| s == candidate)
            || secrets.len() >= MAX_SECRETS
        {
            continue;
        }
        secrets.push(candidate.to_string());
    }
    // Longest first, so a secret that contains another is masked whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Query parameters known to hold no secret (a database URL's TLS mode and the paths of
/// its certificate files): masking them would hide the very file an error names.
const NOT_SECRET: [&str; 10] = [
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "ssl-mode",
    "ssl-ca",
    "ssl-cert",
    "ssl-key",
    "application_name",
    "connect_timeout",
];

/// Remember what in `url` is secret: the password of its user information and the values
/// of its query (but those of [`NOT_SECRET`]).
pub fn remember_url(url: &str) {
    let Some(scheme_end) = url.find("://") else {
        return;
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some(at) = rest[..authority_end].rfind('@')
        && let Some((_, password)) = rest[..at].split_once(':')
    {
        remember(password);
    }
    if let Some((_, query)) = rest.split_once('?') {
        let query = query.split('#').next().unwrap_or("");
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && !NOT_SECRET.contains(&key)
            {
                remember(value);
            }
        }
    }
}

/// `text` without URL credentials and without any remembered secret.
pub fn redact(text: &str) -> String {
    let mut out = crate::text::redact_urls(text);
    let secrets = SECRETS.read().unwrap_or_else(PoisonError::into_inner);
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

/// A writer that redacts what passes through it, line by line: the log's last line of
/// defence (a secret in a field no call site thought of). Lines are buffered until their
/// end, so a secret split across two writes is still found.
pub struct RedactingWriter<W: std::io::Write> {
    inner: W,
    pending: Vec<u8>,
}

impl<W: std::io::Write> RedactingWriter<W> {
    /// Redact what is written to `inner`.
    pub fn new(inner: W) -> Self {
        RedactingWriter {
            inner,
            pending: Vec::new(),
        }
    }

    fn write_lines(&mut self, all: bool) -> std::io::Result<()> {
        let end = if all {
            self.pending.len()
        } else {
            match self.pending.iter().rposition(|b| *b == b'\n') {
                Some(at) => at + 1,
                None => return Ok(()),
            }
        };
        let lines: Vec<u8> = self.pending.drain(..end).collect();
        let text = String::from_utf8_lossy(&lines);
        self.inner.write_all(redact(&text).as_bytes())
    }
}

impl<W: std::io::Write> std::io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        self.write_lines(false)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_lines(true)?;
        self.inner.flush()
    }
}

impl<W: std::io::Write> Drop for RedactingWriter<W> {
    fn drop(&mut self) {
        let _ = std::io::Write::flush(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn remembered_secrets_are_masked_raw_and_decoded_wherever_they_appear() {
        remember_url("amqp://verdict:p%40ss-CANARY-1@broker:5672/%2f");
        remember("ADMIN-CANARY-TOKEN-1");
        remember("abc");
        let text = "connection refused by broker (user verdict, password p@ss-CANARY-1); \
                    header ADMIN-CANARY-TOKEN-1; url amqp://verdict:p%40ss-CANARY-1@broker:5672";
        let clean = redact(text);
        assert!(!clean.contains("CANARY"), "{clean}");
        assert!(clean.contains("amqp://***@broker:5672"), "{clean}");
        assert!(redact("abc").contains("abc"), "too short to search for");
    }

    #[test]
    fn query_values_of_a_remembered_url_are_secrets_too() {
        remember_url("https://hooks.example/in?api_key=QUERY-CANARY-2&sig=SIG-CANARY-2#x");
        let clean = redact("the key QUERY-CANARY-2 and SIG-CANARY-2#x were refused");
        assert!(!clean.contains("CANARY"), "{clean}");
    }

    #[test]
    fn the_writer_masks_a_secret_split_across_writes() {
        remember("WRITER-CANARY-3");
        let mut out = Vec::new();
        {
            let mut writer = RedactingWriter::new(&mut out);
            writer.write_all(b"a line with WRITER-CA").unwrap();
            writer.write_all(b"NARY-3 in it\nand a second ").unwrap();
            writer.write_all(b"line\n").unwrap();
        }
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out, "a line with *** in it\nand a second line\n");
    }
}
