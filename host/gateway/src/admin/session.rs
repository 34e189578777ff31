//! Console logins. An operator proves once, on the login form, that they hold the token of
//! an identity; the gateway answers with a session: a random id in an `HttpOnly;
//! SameSite=Strict` cookie (no script can read it, no other site's page can send it) and a
//! CSRF token that every form of the console carries and every action checks. The token
//! itself never reaches a URL, a page or a cookie. A session keeps only the identity's
//! name: its role is looked up on every request, so an identity removed from the tokens
//! file (or given another role) is logged out (or limited) at once.
//!
//! Sessions live in the gateway's memory: a restart logs everyone out. A session unused for
//! `[console] session_idle_s` is gone; at most [`MAX_SESSIONS`] exist, the least recently
//! used giving way to a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};

use super::identity::{Identities, Identity, Role};

/// The cookie that carries the session id.
pub(crate) const COOKIE: &str = "verdict_session";

/// Sessions kept at once.
pub(crate) const MAX_SESSIONS: usize = 64;

/// One login, as a handler sees it.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The identity's name: who, in audit notes.
    pub(crate) who: Arc<str>,
    /// Its role, as the identities are now.
    pub(crate) role: Role,
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

    /// Whether this viewer may do what `needed` allows (logged in with that role or a
    /// stronger one).
    pub(crate) fn may(&self, needed: Role) -> bool {
        self.session().is_some_and(|s| s.role >= needed)
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
    /// A new session for `identity`; its id (the cookie's value). `None` when the system's
    /// random source cannot be read: better no login than a guessable one.
    pub(crate) fn create(&self, identity: &Identity) -> Option<(String, Session)> {
        let id = random_hex()?;
        let session = Session {
            who: identity.name.clone(),
            role: identity.role,
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
    /// keeps it live for another `idle`) and its identity is still one of `identities`
    /// (with the role it has there now).
    pub(crate) fn viewer(
        &self,
        headers: &HeaderMap,
        idle: Duration,
        identities: &Identities,
    ) -> Viewer {
        let Some(id) = cookie(headers) else {
            return Viewer::Anonymous;
        };
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.retain(|_, e| {
            now.duration_since(e.last_used) < idle && identities.named(&e.session.who).is_some()
        });
        match sessions.get_mut(id) {
            Some(entry) => {
                entry.last_used = now;
                if let Some(identity) = identities.named(&entry.session.who) {
                    entry.session.role = identity.role;
                }
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

/// The `Set-Cookie` value that hands out session `id`; `secure` (the listener serves
/// HTTPS) keeps the browser from ever sending it over plain HTTP.
pub(crate) fn set_cookie(id: &str, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}"
    ))
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

/// 32 random bytes from the system, as hex.
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 32];
    verdict_runtime::fsutil::random_bytes(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::super::identity::tokens_file_line;
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn identities(lines: &[(&str, Role)]) -> Identities {
        let text: Vec<String> = lines
            .iter()
            .map(|(name, role)| tokens_file_line(name, *role, &format!("token-of-{name}")))
            .collect();
        Identities::parse(&text.join("\n")).unwrap()
    }

    fn ada() -> Identity {
        Identity {
            name: Arc::from("ada"),
            role: Role::Operate,
        }
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_only_by_it() {
        let known = identities(&[("ada", Role::Operate)]);
        let sessions = Sessions::default();
        let (id, session) = sessions.create(&ada()).unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(&*session.csrf, id.as_str());
        let idle = Duration::from_secs(60);
        let found = sessions.viewer(&with_cookie(&format!("a=b; {COOKIE}={id}")), idle, &known);
        assert_eq!(&*found.session().unwrap().who, "ada");
        assert!(found.may(Role::Operate) && !found.may(Role::Edit));
        assert!(matches!(
            sessions.viewer(&HeaderMap::new(), idle, &known),
            Viewer::Anonymous
        ));
        assert!(matches!(
            sessions.viewer(&with_cookie(&format!("{COOKIE}=<script>")), idle, &known),
            Viewer::Anonymous
        ));
        let forged = "0".repeat(64);
        assert!(matches!(
            sessions.viewer(&with_cookie(&format!("{COOKIE}={forged}")), idle, &known),
            Viewer::Expired
        ));
        sessions.end(&with_cookie(&format!("{COOKIE}={id}")));
        assert!(matches!(
            sessions.viewer(&with_cookie(&format!("{COOKIE}={id}")), idle, &known),
            Viewer::Expired
        ));
    }

    #[test]
    fn a_session_follows_its_identity_out_of_the_tokens_file() {
        let sessions = Sessions::default();
        let (id, _) = sessions.create(&ada()).unwrap();
        let cookie = with_cookie(&format!("{COOKIE}={id}"));
        let idle = Duration::from_secs(60);
        let demoted = sessions.viewer(&cookie, idle, &identities(&[("ada", Role::Read)]));
        assert!(demoted.may(Role::Read) && !demoted.may(Role::Operate));
        let gone = sessions.viewer(&cookie, idle, &identities(&[("bob", Role::Admin)]));
        assert!(matches!(gone, Viewer::Expired));
        let back = sessions.viewer(&cookie, idle, &identities(&[("ada", Role::Admin)]));
        assert!(
            matches!(back, Viewer::Expired),
            "a removed identity's login is over"
        );
    }

    #[test]
    fn an_idle_session_expires_and_the_oldest_gives_way() {
        let known = identities(&[("ada", Role::Operate)]);
        let sessions = Sessions::default();
        let (id, _) = sessions.create(&ada()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(
            sessions.viewer(
                &with_cookie(&format!("{COOKIE}={id}")),
                Duration::from_millis(5),
                &known
            ),
            Viewer::Expired
        ));
        let first = sessions.create(&ada()).unwrap().0;
        std::thread::sleep(Duration::from_millis(2));
        for _ in 0..MAX_SESSIONS {
            sessions.create(&ada()).unwrap();
        }
        assert!(matches!(
            sessions.viewer(
                &with_cookie(&format!("{COOKIE}={first}")),
                Duration::from_secs(60),
                &known
            ),
            Viewer::Expired
        ));
    }

    #[test]
    fn the_cookie_is_http_only_and_same_site_strict() {
        let set = set_cookie(&"a".repeat(64), false);
        let set = set.to_str().unwrap();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict") && !set.contains("Secure"),
            "{set}"
        );
        let secure = set_cookie(&"a".repeat(64), true);
        assert!(secure.to_str().unwrap().ends_with("; Secure"));
        assert!(clear_cookie().to_str().unwrap().contains("Max-Age=0"));
    }
}
