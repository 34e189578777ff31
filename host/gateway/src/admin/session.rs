//! Console logins. An operator proves they hold the admin token once, on the login form;
//! the gateway answers with a session: a random id in an `HttpOnly; SameSite=Strict`
//! cookie (no script can read it, no other site's page can send it) and a CSRF token that
//! every form of the console carries and every action checks. The admin token itself never
//! reaches a URL, a page or a cookie.
//!
//! Sessions live in the gateway's memory: a restart logs everyone out. A session unused for
//! `[console] session_idle_s` is gone; at most [`MAX_SESSIONS`] exist, the least recently
//! used giving way to a new one.

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};

/// The cookie that carries the session id.
pub(crate) const COOKIE: &str = "verdict_session";

/// Sessions kept at once.
pub(crate) const MAX_SESSIONS: usize = 64;

/// Longest name an operator may give at login (it goes into audit notes).
pub(crate) const MAX_NAME_CHARS: usize = 64;

/// One login, as a handler sees it.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The name the operator gave at login, bounded and on one line: who, in audit notes.
    pub(crate) who: Arc<str>,
    /// What every form of this session carries, and every action checks.
    pub(crate) csrf: Arc<str>,
}

/// Who sent a request.
#[derive(Debug, Clone)]
pub(crate) enum Viewer {
    /// No session cookie (or one this gateway never issued).
    Anonymous,
    /// A session cookie whose session has been idle too long.
    Expired,
    /// A logged-in operator.
    Operator(Session),
}

impl Viewer {
    /// The session, when logged in.
    pub(crate) fn session(&self) -> Option<&Session> {
        match self {
            Viewer::Operator(s) => Some(s),
            _ => None,
        }
    }
}

struct Entry {
    session: Session,
    last_used: Instant,
}

/// The gateway's sessions.
#[derive(Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Entry>>,
}

impl Sessions {
    /// A new session for `who`; its id (the cookie's value). `None` when the system's
    /// random source cannot be read: better no login than a guessable one.
    pub(crate) fn create(&self, who: &str) -> Option<(String, Session)> {
        let id = random_hex()?;
        let session = Session {
            who: Arc::from(name(who)),
            csrf: Arc::from(random_hex()?),
        };
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(id, _)| id.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(
            id.clone(),
            Entry {
                session: session.clone(),
                last_used: Instant::now(),
            },
        );
        Some((id, session))
    }

    /// Who sent `headers`: the session named by its cookie, if it is still live (using it
    /// keeps it live for another `idle`).
    pub(crate) fn viewer(&self, headers: &HeaderMap, idle: Duration) -> Viewer {
        let Some(id) = cookie(headers) else {
            return Viewer::Anonymous;
        };
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.retain(|_, e| now.duration_since(e.last_used) < idle);
        match sessions.get_mut(id) {
            Some(entry) => {
                entry.last_used = now;
                Viewer::Operator(entry.session.clone())
            }
            None => Viewer::Expired,
        }
    }

    /// End the session named by `headers`' cookie, if any.
    pub(crate) fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers) {
            self.by_id
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }
    }
}

/// The `Set-Cookie` value that hands out session `id`.
pub(crate) fn set_cookie(id: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict"))
        .unwrap_or_else(|_| clear_cookie())
}

/// The `Set-Cookie` value that removes the session cookie.
pub(crate) fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static("verdict_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// The session id in `headers`' cookies, if one looks like an id this gateway issues.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// An operator's name for audit notes: one line, bounded, `operator` when blank.
fn name(who: &str) -> String {
    let who = verdict_runtime::text::one_line(who.trim(), MAX_NAME_CHARS);
    if who.trim().is_empty() {
        "operator".into()
    } else {
        who
    }
}

/// 32 random bytes from the system, as hex.
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_only_by_it() {
        let sessions = Sessions::default();
        let (id, session) = sessions.create("  ada\nlovelace ").unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(&*session.csrf, id.as_str());
        let idle = Duration::from_secs(60);
        let found = sessions.viewer(&with_cookie(&format!("a=b; {COOKIE}={id}")), idle);
        assert_eq!(&*found.session().unwrap().who, "ada lovelace");
        assert!(matches!(
            sessions.viewer(&HeaderMap::new(), idle),
            Viewer::Anonymous
        ));
        assert!(matches!(
            sessions.viewer(&with_cookie(&format!("{COOKIE}=<script>")), idle),
            Viewer::Anonymous
        ));
        let forged = "0".repeat(64);
        assert!(matches!(
            sessions.viewer(&with_cookie(&format!("{COOKIE}={forged}")), idle),
            Viewer::Expired
        ));
        sessions.end(&with_cookie(&format!("{COOKIE}={id}")));
        assert!(matches!(
            sessions.viewer(&with_cookie(&format!("{COOKIE}={id}")), idle),
            Viewer::Expired
        ));
    }

    #[test]
    fn an_idle_session_expires_and_the_oldest_gives_way() {
        let sessions = Sessions::default();
        let (id, _) = sessions.create("").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(
            sessions.viewer(
                &with_cookie(&format!("{COOKIE}={id}")),
                Duration::from_millis(5)
            ),
            Viewer::Expired
        ));
        let first = sessions.create("first").unwrap().0;
        std::thread::sleep(Duration::from_millis(2));
        for _ in 0..MAX_SESSIONS {
            sessions.create("later").unwrap();
        }
        assert!(matches!(
            sessions.viewer(
                &with_cookie(&format!("{COOKIE}={first}")),
                Duration::from_secs(60)
            ),
            Viewer::Expired
        ));
        let (_, blank) = sessions.create(" \t").unwrap();
        assert_eq!(&*blank.who, "operator");
    }

    #[test]
    fn the_cookie_is_http_only_and_same_site_strict() {
        let set = set_cookie(&"a".repeat(64));
        let set = set.to_str().unwrap();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(clear_cookie().to_str().unwrap().contains("Max-Age=0"));
    }
}
