//! The console's HTML: the page frame and the forms, written with `maud`, which escapes
//! every interpolated string (message ids, headers, payloads and reasons come from
//! producers, consumers and policies) unless it is marked as markup, and rejects
//! malformed markup at compile time. Control characters an outside string may carry are
//! replaced once for the whole page. Everything a page needs ships in the binary: one
//! stylesheet, no script, no CDN.

use std::fmt::Write as _;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

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

/// A whole page: `title` around `body`, with who is looking in the header.
pub(crate) fn page(title: &str, viewer: &Viewer, body: Markup) -> Response {
    frame(title, viewer, false, body)
}

/// A page that reloads itself every second (a running job's), with no script.
pub(crate) fn refreshing_page(title: &str, viewer: &Viewer, body: Markup) -> Response {
    frame(title, viewer, true, body)
}

/// A page that only says something (`message`, plain text) under `title`, with `status`.
pub(crate) fn message_page(
    status: StatusCode,
    title: &str,
    viewer: &Viewer,
    message: &str,
) -> Response {
    let body = html! {
        h1 { (title) }
        p { (message) }
        p { a href="/" { "Back to the gateway" } }
    };
    let mut response = page(title, viewer, body);
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
    let body = html! {
        h1 { (title) }
        p { (why) }
        p { a href="/login" { "Log in" } }
    };
    let mut response = page(title, viewer, body);
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    Some(response)
}

fn frame(title: &str, viewer: &Viewer, refreshing: bool, body: Markup) -> Response {
    let account = match viewer.session() {
        Some(s) => html! {
            span.who { "Signed in as " strong { (s.who) } " (" (s.role) ")" }
            (form("/logout", Some(s), "inline", html! {}, "Log out"))
        },
        None => html! { a.who href="/login" { "Log in" } },
    };
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if refreshing {
                    meta http-equiv="refresh" content="1";
                }
                title { (title) " - Verdict" }
                link rel="stylesheet" href=(STYLESHEET_PATH);
            }
            body {
                header {
                    a.brand href="/" { "Verdict" }
                    nav {
                        a href="/" { "Gateway" }
                        a href="/policies" { "Policies" }
                    }
                    div.account { (account) }
                }
                main { (body) }
            }
        }
    };
    with_headers(
        without_controls(page.into_string()),
        "text/html; charset=utf-8",
    )
}

/// `html` with every control character but newline and tab replaced by U+FFFD: escaping
/// keeps an outside string from becoming markup, this keeps a NUL or an escape sequence in
/// one from reaching the browser (or a terminal the page is saved to).
fn without_controls(html: String) -> String {
    if !html.chars().any(is_stray_control) {
        return html;
    }
    html.chars()
        .map(|c| if is_stray_control(c) { '\u{fffd}' } else { c })
        .collect()
}

fn is_stray_control(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// A form that posts to `action` (a path of ours) with `fields` and a button. It carries
/// the session's CSRF token; without a session it is still shown (the action then asks
/// for a login), with an empty one.
pub(crate) fn form(
    action: &str,
    session: Option<&Session>,
    class: &str,
    fields: Markup,
    button: &str,
) -> Markup {
    html! {
        form method="post" action=(action) class=(class) {
            input type="hidden" name="csrf" value=(session.map_or("", |s| &s.csrf));
            (fields)
            button type="submit" { (button) }
        }
    }
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

/// A table: `head` cells (plain text) and `rows` of cells.
pub(crate) fn table(head: &[&str], rows: &[Vec<Markup>]) -> Markup {
    html! {
        table {
            thead { tr { @for h in head { th { (h) } } } }
            tbody {
                @for row in rows {
                    tr { @for cell in row { td { (cell) } } }
                }
            }
        }
    }
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

    async fn body_of(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn hostile_text_cannot_become_markup_or_carry_control_characters() {
        let hostile = "<script>alert('x')</script>\"><img src=x>a&b\u{0}\u{1b}[31mc\nd\te";
        let response = message_page(StatusCode::NOT_FOUND, hostile, &Viewer::Anonymous, hostile);
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let page = body_of(response).await;
        assert!(
            !page.contains("<script") && !page.contains("<img"),
            "{page}"
        );
        assert!(
            page.contains(
                "<p>&lt;script&gt;alert('x')&lt;/script&gt;&quot;&gt;&lt;img src=x&gt;\
                 a&amp;b\u{fffd}\u{fffd}[31mc\nd\te</p>"
            ),
            "{page}"
        );
        assert!(!page.chars().any(is_stray_control), "{page}");
        // The title is escaped the same way.
        assert!(page.contains("<title>&lt;script&gt;"), "{page}");
    }

    #[test]
    fn a_form_carries_the_csrf_token_and_escapes_its_attributes() {
        let form = form("/x?a=\"b\"", None, "action", html! { span { "<b>" } }, "Go").into_string();
        assert_eq!(
            form,
            "<form method=\"post\" action=\"/x?a=&quot;b&quot;\" class=\"action\">\
             <input type=\"hidden\" name=\"csrf\" value=\"\"><span>&lt;b&gt;</span>\
             <button type=\"submit\">Go</button></form>"
        );
    }

    #[test]
    fn a_hex_dump_shows_offsets_and_says_what_it_left_out() {
        let dump = hex_dump(&(0..40).collect::<Vec<u8>>(), 32);
        assert!(dump.starts_with("00000000  00 01 02"), "{dump}");
        assert!(dump.contains("\n00000010  10 11"), "{dump}");
        assert!(dump.ends_with("... 8 more bytes\n"), "{dump}");
    }
}
