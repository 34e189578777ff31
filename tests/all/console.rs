//! The operator console's pages, through the admin router of a running gateway, in-process
//! (the same routes, checks and state its listener serves; `console_actions.rs` and the
//! browser tests go over the network): what they show, and that what producers, consumers
//! and policies wrote is shown, never run.

use std::time::Duration;

use serde_json::{Value, json};
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, wait_for};

use super::gateway::RULES_CONFIG;

/// A page: its status, its headers and its body.
fn get(gw: &Gateway, path: &str, cookie: Option<&str>) -> (u16, axum::http::HeaderMap, String) {
    let headers: Vec<(&str, &str)> = cookie.map(|c| ("cookie", c)).into_iter().collect();
    gw.call("GET", path, &headers, Vec::new())
}

#[test]
fn the_console_shows_routes_causes_and_letters_and_never_runs_what_it_shows() {
    let dir = scratch_dir("console");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = Consumer::start(&runtime, |_| Behaviour::Permanent);
    let gw = TestConfig::new()
        .policy("rules", fixtures::RULES)
        .route(
            Route::new("orders", "rules")
                .config(RULES_CONFIG)
                .set("consumer.url", consumer.url())
                .set("consumer.timeout_ms", 2000),
        )
        .start_on(runtime, &dir, "console-token");
    let hostile_id = "<script>alert('id')</script>";
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({
                "id": hostile_id,
                "headers": {"x-evil": "\"><img src=x onerror=alert(1)>"},
                "payload": {"note": "<b>bold</b>", "n": 1}
            }),
        )
        .unwrap();
    assert!(wait_for(Duration::from_secs(30), || {
        gw.admin.get::<Vec<Value>>("/v1/dlq").unwrap().len() == 1
    }));

    // Without a login: the routes and the charts, no message content.
    let (status, _, page) = get(&gw, "/", None);
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<code>orders</code>"), "{page}");
    assert!(
        !page.contains("alert(") && !page.contains("schema.unknown-version"),
        "{page}"
    );
    assert!(page.contains("to see the dead letters by cause"), "{page}");

    // The overview, logged in: the route, the cause, the sample - escaped.
    let (status, headers, _) = gw.call(
        "POST",
        "/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        b"token=console-token".to_vec(),
    );
    assert_eq!(status, 303);
    let cookie = headers["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let me = Some(cookie.as_str());
    let (status, headers, page) = get(&gw, "/", me);
    assert_eq!(status, 200, "{page}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    assert!(page.contains("<code>orders</code>"), "{page}");
    assert!(page.contains("schema.unknown-version"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert('id')&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script"), "{page}");
    assert!(
        page.contains("No jobs since the gateway started."),
        "{page}"
    );
    // The DLQ over time: sampled at start, drawn once a second sample exists.
    assert!(page.contains("<figcaption>Depth"), "{page}");
    assert!(page.contains("<figcaption>Ingress per 10 s"), "{page}");

    // The letter: headers, the payload pretty-printed, the attempt timeline - escaped.
    let seq = gw.admin.get::<Vec<Value>>("/v1/dlq").unwrap()[0]["seq"]
        .as_i64()
        .unwrap();
    assert!(page.contains(&format!("href=\"/letters/{seq}\"")), "{page}");
    let (status, _, anonymous) = get(&gw, &format!("/letters/{seq}"), None);
    assert_eq!(status, 401, "{anonymous}");
    assert!(!anonymous.contains("bold"), "{anonymous}");
    let (status, _, letter) = get(&gw, &format!("/letters/{seq}"), me);
    assert_eq!(status, 200, "{letter}");
    assert!(
        letter.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"),
        "{letter}"
    );
    assert!(
        !letter.contains("<img") && !letter.contains("<script"),
        "{letter}"
    );
    assert!(
        letter.contains("  &quot;n&quot;: 1") && letter.contains("&lt;b&gt;bold&lt;/b&gt;"),
        "the payload pretty-printed as JSON: {letter}"
    );
    assert!(
        letter.contains("<strong>schema.unknown-version</strong>"),
        "{letter}"
    );
    assert!(letter.contains("schema v9 is unknown"), "{letter}");

    // The policies: what is loaded, the generation history, the shadow report.
    let (status, _, policies) = get(&gw, "/policies", None);
    assert_eq!(status, 200, "{policies}");
    assert!(policies.contains("<td>rules</td>"), "{policies}");
    assert!(
        policies.contains("<span class=\"pill\">active</span>"),
        "{policies}"
    );
    assert!(
        policies.contains("No route has a shadow policy."),
        "{policies}"
    );
    assert!(
        page.contains("href=\"/policies\""),
        "every page links the others"
    );

    // What is not there says so.
    for path in ["/letters/999999", "/letters/not-a-number"] {
        let (status, _, body) = get(&gw, path, me);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("<h1>Not found</h1>"), "{body}");
    }
    let (status, headers, css) = get(&gw, "/console.css", None);
    assert_eq!(status, 200);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    assert!(css.contains("ol.timeline"), "{css}");
}
