//! The console's HTML: escaping every string that reaches a page (message ids, headers,
//! payloads and reasons come from producers, consumers and policies), the page frame and
//! the forms. Everything a page needs ships in the binary: one stylesheet, no script, no
//! CDN.

use std::fmt::Write as _;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::admin::identity::Role;
use crate::admin::session::{Session, Viewer};

/// The stylesheet, served at [`STYLESHEET_PATH`].
pub(crate) const STYLESHEET: &str = include_str!("console.css");
/// Where the stylesheet is served.
pub(crate) const STYLESHEET_PATH: &str = "/console.css";

/// No script, no frame, nothing from elsewhere: a page that shows a hostile string can do
/// nothing with it even if escaping were ever missed.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// `text` safe inside an element or a quoted attribute.
pub(crate) use verdict_runtime::text::escape_html as escape;

/// A whole page: `title` (escaped here) around `body` (already HTML), with who is looking
/// in the header.
pub(crate) fn page(title: &str, viewer: &Viewer, body: &str) -> Response {
    frame(title, viewer, "", body)
}

/// A page that reloads itself every second (a running job's), with no script.
pub(crate) fn refreshing_page(title: &str, viewer: &Viewer, body: &str) -> Response {
    frame(
        title,
        viewer,
        "<meta http-equiv=\"refresh\" content=\"1\">",
        body,
    )
}

/// A page that only says something (`message`, plain text) under `title`, with `status`.
pub(crate) fn message_page(
    status: StatusCode,
    title: &str,
    viewer: &Viewer,
    message: &str,
) -> Response {
    let mut response = page(
        title,
        viewer,
        &format!(
            "<h1>{}</h1><p>{}</p><p><a href=\"/\">Back to the gateway</a></p>",
            escape(title),
            escape(message)
        ),
    );
    *response.status_mut() = status;
    response
}

/// The page a viewer gets instead of one that shows message content (or, with
/// `[admin] open_reads = "none"`, any page) without a login: 401, saying why and where to
/// log in. `None` when `viewer` may read.
pub(crate) fn unless_reader(viewer: &Viewer) -> Option<Response> {
    if viewer.may(Role::Read) {
        return None;
    }
    let (title, why) = match viewer {
        Viewer::Expired => ("Your login expired", "Log in again with your token."),
        _ => (
            "This page needs a login",
            "It shows message content (or this gateway opens nothing without a login): log \
             in with a token of the role read or a stronger one.",
        ),
    };
    let mut response = page(
        title,
        viewer,
        &format!(
            "<h1>{}</h1><p>{}</p><p><a href=\"/login\">Log in</a></p>",
            escape(title),
            escape(why)
        ),
    );
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    Some(response)
}

fn frame(title: &str, viewer: &Viewer, head: &str, body: &str) -> Response {
    let who = match viewer.session() {
        Some(s) => format!(
            "<span class=\"who\">Signed in as <strong>{}</strong> ({})</span>{}",
            escape(&s.who),
            s.role,
            form("/logout", Some(s), "inline", "", "Log out")
        ),
        None => "<a class=\"who\" href=\"/login\">Log in</a>".into(),
    };
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{head}\
         <title>{} - Verdict</title><link rel=\"stylesheet\" href=\"{STYLESHEET_PATH}\"></head>\
         <body><header><a href=\"/\" class=\"brand\">Verdict</a>\
         <nav><a href=\"/\">Gateway</a><a href=\"/policies\">Policies</a></nav>\
         <div class=\"account\">{who}</div></header><main>{body}</main>\
         </body></html>\n",
        escape(title)
    );
    with_headers(html, "text/html; charset=utf-8")
}

/// A form that posts to `action` (a path of ours) with `fields` (already HTML) and a
/// button. It carries the session's CSRF token; without a session it is still shown (the
/// action then asks for a login), with an empty one.
pub(crate) fn form(
    action: &str,
    session: Option<&Session>,
    class: &str,
    fields: &str,
    button: &str,
) -> String {
    format!(
        "<form method=\"post\" action=\"{}\" class=\"{}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">{fields}\
         <button type=\"submit\">{}</button></form>",
        escape(action),
        escape(class),
        escape(session.map_or("", |s| &s.csrf)),
        escape(button)
    )
}

/// The stylesheet as a response.
pub(crate) fn stylesheet() -> Response {
    with_headers(STYLESHEET.to_string(), "text/css; charset=utf-8")
}

fn with_headers(body: String, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: under it Chromium sends `Origin: null` with the console's own
        // forms, which the same-origin check must refuse.
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A table: `head` cells (plain text) and `rows` of cells that are already HTML.
pub(crate) fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><thead><tr>");
    for h in head {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// `bytes` as a hex dump, 16 to a line with their offset, at most `max` of them.
pub(crate) fn hex_dump(bytes: &[u8], max: usize) -> String {
    let mut out = String::new();
    for (i, line) in bytes[..bytes.len().min(max)].chunks(16).enumerate() {
        let _ = write!(out, "{:08x} ", i * 16);
        for b in line {
            let _ = write!(out, " {b:02x}");
        }
        out.push('\n');
    }
    if bytes.len() > max {
        let _ = writeln!(out, "... {} more bytes", bytes.len() - max);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_cannot_become_markup() {
        assert_eq!(
            escape("<script>alert('x')</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
        );
        assert_eq!(escape("\"><img src=x>"), "&quot;&gt;&lt;img src=x&gt;");
        assert_eq!(escape("a&b\u{0}\u{1b}c\nd"), "a&amp;b\u{fffd}\u{fffd}c\nd");
    }

    #[test]
    fn a_hex_dump_shows_offsets_and_says_what_it_left_out() {
        let dump = hex_dump(&(0..40).collect::<Vec<u8>>(), 32);
        assert!(dump.starts_with("00000000  00 01 02"), "{dump}");
        assert!(dump.contains("\n00000010  10 11"), "{dump}");
        assert!(dump.ends_with("... 8 more bytes\n"), "{dump}");
    }
}
