//! The console's actions, posted as a browser posts them, to a running gateway: nothing
//! changes without a login with a token whose identity has the action's role, a live
//! session, the session's CSRF token and the console's own origin; a group replayed from the console is a job with a canary
//! and a cut-off, audited with who did it; a repair is refused unless `[console]` allows
//! edits on the topic, and is audited with who changed what; one letter is replayed by
//! itself; a session unused for `session_idle_s` acts no more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use verdict_gateway::admin::identity::{Role, tokens_file_line};
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, wait_for};

use super::gateway::RULES_CONFIG;

const TOKEN: &str = "console-actions-token";

/// The identities of the tokens file: each one's token is `token-of-<name>`.
const IDENTITIES: [(&str, Role); 3] = [
    ("rita", Role::Read),
    ("ada", Role::Operate),
    ("grace", Role::Edit),
];

/// Start a gateway on `config` with [`IDENTITIES`] in its tokens file.
fn start(runtime: tokio::runtime::Runtime, dir: &std::path::Path, config: TestConfig) -> Gateway {
    let lines: Vec<String> = IDENTITIES
        .iter()
        .map(|(name, role)| tokens_file_line(name, *role, &format!("token-of-{name}")))
        .collect();
    std::fs::write(dir.join("tokens"), lines.join("\n")).unwrap();
    config.start_on(runtime, dir, TOKEN)
}

/// `orders` and `invoices` to one consumer; `console` (TOML lines) goes into `[console]`.
fn config(consumer_url: &str, console: &str) -> TestConfig {
    let route = |topic: &str| {
        Route::new(topic, "rules")
            .config(RULES_CONFIG)
            .set("consumer.url", consumer_url)
            .set("consumer.timeout_ms", 2000)
    };
    TestConfig::new()
        .set("admin.tokens_file", "tokens")
        .merge("console", console)
        .policy("rules", fixtures::RULES)
        .route(route("orders"))
        .route(route("invoices"))
}

/// A consumer that refuses everything (422 `schema.unknown-version`) until `fixed`.
fn consumer(runtime: &tokio::runtime::Runtime) -> (Consumer, Arc<AtomicBool>) {
    let fixed = Arc::new(AtomicBool::new(false));
    let known = fixed.clone();
    let consumer = Consumer::start(runtime, move |_| {
        if known.load(Ordering::SeqCst) {
            Behaviour::Ok
        } else {
            Behaviour::Permanent
        }
    });
    (consumer, fixed)
}

/// An answer: status, `Location`, `Set-Cookie` and the body.
struct Answer {
    status: u16,
    location: String,
    set_cookie: String,
    body: String,
}

/// A browser without one: cookies and origin sent by hand, redirects not followed.
struct Browser<'a> {
    gw: &'a Gateway,
    cookie: Option<String>,
    origin: String,
}

impl<'a> Browser<'a> {
    fn new(gw: &'a Gateway) -> Self {
        let origin = gw.url.trim_end_matches('/').to_string();
        Browser {
            gw,
            cookie: None,
            origin,
        }
    }

    fn answer(mut response: ureq::http::Response<ureq::Body>) -> Answer {
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let (location, set_cookie) = (header("location"), header("set-cookie"));
        Answer {
            status: response.status().as_u16(),
            location,
            set_cookie,
            body: response.body_mut().read_to_string().unwrap(),
        }
    }

    fn get(&self, path: &str) -> Answer {
        let mut request = ureq::get(&format!("{}{path}", self.gw.url))
            .config()
            .http_status_as_error(false)
            .max_redirects(0)
            .build();
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        Self::answer(request.call().unwrap())
    }

    fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        let mut request = ureq::post(&format!("{}{path}", self.gw.url))
            .config()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .header("origin", &self.origin);
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        Self::answer(request.send_form(form.iter().copied()).unwrap())
    }

    /// Log in as the identity `name` (with its token); the session cookie is kept.
    fn log_in(&mut self, name: &str) -> Answer {
        let token = format!("token-of-{name}");
        let answer = self.post("/login", &[("token", &token)]);
        assert_eq!(answer.status, 303, "{}", answer.body);
        let pair = answer.set_cookie.split(';').next().unwrap().to_string();
        self.cookie = Some(pair);
        answer
    }

    /// The CSRF token the forms of `path` carry.
    fn csrf(&self, path: &str) -> String {
        let page = self.get(path).body;
        let at = page.find("name=\"csrf\" value=\"").expect("a form") + 19;
        page[at..].split('"').next().unwrap().to_string()
    }
}

fn depth(gw: &Gateway) -> usize {
    gw.admin.get::<Vec<Value>>("/v1/dlq").unwrap().len()
}

fn job(gw: &Gateway, location: &str) -> Value {
    let id = location.strip_prefix("/jobs/").expect("a job page");
    gw.admin.get(&format!("/v1/jobs/{id}")).unwrap()
}

fn ended(gw: &Gateway, location: &str) -> Value {
    let mut last = Value::Null;
    assert!(
        wait_for(Duration::from_secs(30), || {
            last = job(gw, location);
            last["state"] != "running"
        }),
        "{last}"
    );
    last
}

#[test]
fn a_group_is_replayed_from_the_console_only_by_a_logged_in_operator_from_its_own_pages() {
    let dir = scratch_dir("console-actions");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (consumer, fixed) = consumer(&runtime);
    let gw = start(runtime, &dir, config(&consumer.url(), ""));
    let batch: Vec<Value> = (0..4)
        .map(|i| json!({"id": format!("order-{i}"), "payload": {"n": i}}))
        .collect();
    let _: Value = gw.admin.post("/v1/topics/orders/messages", &batch).unwrap();
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 4));
    let groups: Vec<Value> = gw.admin.get("/v1/dlq/groups").unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let group = groups[0]["id"].as_str().unwrap().to_string();
    let dry_run = format!("/groups/{group}/dry-run");

    // The group's page shows message content: not without a login.
    let mut browser = Browser::new(&gw);
    let page = browser.get(&format!("/groups/{group}"));
    assert_eq!(page.status, 401, "{}", page.body);
    assert!(
        page.body.contains("This page needs a login") && !page.body.contains("order-0"),
        "{}",
        page.body
    );

    // Anonymous: refused, nothing started.
    let refused = browser.post(&dry_run, &[("csrf", "")]);
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(
        refused.body.contains("This needs a login"),
        "{}",
        refused.body
    );

    // A wrong token: refused, no cookie.
    let wrong = browser.post("/login", &[("token", "guess")]);
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("That token belongs to no identity."));
    assert!(wrong.set_cookie.is_empty(), "{}", wrong.set_cookie);

    // A reader sees the group but may not act on it: 403 naming the role, nothing started.
    browser.log_in("rita");
    let page = browser.get(&format!("/groups/{group}")).body;
    assert!(page.contains("4 dead letters"), "{page}");
    let csrf = browser.csrf(&format!("/groups/{group}"));
    let not_yours = browser.post(&dry_run, &[("csrf", &csrf)]);
    assert_eq!(not_yours.status, 403, "{}", not_yours.body);
    assert!(
        not_yours.body.contains("this needs the role operate")
            && not_yours.body.contains("rita has the role read"),
        "{}",
        not_yours.body
    );

    // The login: an HttpOnly, SameSite=Strict cookie; the token never in a page.
    let login = browser.log_in("ada");
    assert_eq!(login.location, "/");
    assert!(
        login.set_cookie.contains("HttpOnly") && login.set_cookie.contains("SameSite=Strict"),
        "{}",
        login.set_cookie
    );
    let page = browser.get(&format!("/groups/{group}")).body;
    assert!(
        page.contains("Signed in as <strong>ada</strong> (operate)"),
        "{page}"
    );
    assert!(!page.contains("token-of-ada"));
    let csrf = browser.csrf(&format!("/groups/{group}"));
    assert_eq!(csrf.len(), 64);

    // A forged CSRF token, or a post from another site's page: refused.
    let forged = browser.post(&dry_run, &[("csrf", &"0".repeat(64))]);
    assert_eq!(forged.status, 403, "{}", forged.body);
    browser.origin = "http://evil.example".into();
    let elsewhere = browser.post(&dry_run, &[("csrf", &csrf)]);
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.body);
    browser.origin = gw.url.trim_end_matches('/').to_string();
    assert!(
        gw.admin.get::<Vec<Value>>("/v1/jobs").unwrap().is_empty(),
        "a refused action starts nothing"
    );

    // A dry run: what the policy decides now, on the job's own page.
    let started = browser.post(&dry_run, &[("csrf", &csrf)]);
    assert_eq!(started.status, 303, "{}", started.body);
    let done = ended(&gw, &started.location);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["decisions"]["dead-letter"], 4, "{done}");
    let page = browser.get(&started.location).body;
    assert!(
        page.contains("What the current policy decides now"),
        "{page}"
    );
    assert!(page.contains("id=\"job-percent\">100%"), "{page}");

    // A bad number is named; nothing starts.
    let replay = format!("/groups/{group}/replay");
    let bad = browser.post(&replay, &[("csrf", &csrf), ("canary", "two")]);
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body.contains("canary: `two` is not a number"),
        "{}",
        bad.body
    );

    // The consumer is fixed: a replay with a canary of 1 reaches 100% and the DLQ empties;
    // the note says who.
    fixed.store(true, Ordering::SeqCst);
    let started = browser.post(
        &replay,
        &[("csrf", &csrf), ("canary", "1"), ("note", "schema fixed")],
    );
    assert_eq!(started.status, 303, "{}", started.body);
    let done = ended(&gw, &started.location);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["percent"], 100, "{done}");
    assert_eq!(done["canary"]["passed"], true, "{done}");
    assert_eq!(done["note"], "schema fixed (by ada, console)");
    assert!(done["filter"]["dead_before_ms"].is_u64(), "cut off: {done}");
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 0));
    let page = browser.get(&started.location).body;
    assert!(page.contains("Canary passed: 1 of 1 delivered"), "{page}");
    assert!(page.contains("schema fixed (by ada, console)"), "{page}");

    // Logging out ends the session: the old cookie acts no more.
    let out = browser.post("/logout", &[("csrf", &csrf)]);
    assert_eq!(out.status, 303, "{}", out.body);
    assert!(out.set_cookie.contains("Max-Age=0"), "{}", out.set_cookie);
    let after = browser.post(&dry_run, &[("csrf", &csrf)]);
    assert_eq!(after.status, 401, "{}", after.body);
    assert!(after.body.contains("Your login expired"), "{}", after.body);
}

#[test]
fn a_repair_from_the_console_is_audited_and_refused_where_edits_are_off() {
    let dir = scratch_dir("console-repair");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (consumer, fixed) = consumer(&runtime);
    let console = "allow_edit_topics = [\"orders\"]";
    let gw = start(runtime, &dir, config(&consumer.url(), console));
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "order-1", "headers": {"x-schema": "9"}, "payload": {"schema": 9}}),
        )
        .unwrap();
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/invoices/messages",
            &json!({"id": "invoice-1", "payload": {"schema": 9}}),
        )
        .unwrap();
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 2));
    let entries: Vec<Value> = gw.admin.get("/v1/dlq").unwrap();
    let seq_of = |topic: &str| {
        entries.iter().find(|e| e["topic"] == topic).unwrap()["seq"]
            .as_i64()
            .unwrap()
    };
    let (order, invoice) = (seq_of("orders"), seq_of("invoices"));

    // An operator replays and discards; changing a letter's content needs `edit`.
    let mut operator = Browser::new(&gw);
    operator.log_in("ada");
    let csrf = operator.csrf(&format!("/letters/{order}"));
    let refused = operator.post(
        &format!("/letters/{order}/repair"),
        &[("csrf", csrf.as_str()), ("payload", "{\"schema\": 2}")],
    );
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("needs the role edit"),
        "{}",
        refused.body
    );

    let mut browser = Browser::new(&gw);
    browser.log_in("grace");
    let page = browser.get(&format!("/letters/{order}")).body;
    assert!(page.contains("<textarea name=\"payload\""), "{page}");
    assert!(page.contains("x-schema: 9"), "{page}");
    let page = browser.get(&format!("/letters/{invoice}")).body;
    assert!(page.contains("Repairs are off for this topic"), "{page}");
    let csrf = browser.csrf(&format!("/letters/{order}"));
    let repair = |seq: i64, payload: &str, headers: &str| {
        browser.post(
            &format!("/letters/{seq}/repair"),
            &[
                ("csrf", csrf.as_str()),
                ("payload", payload),
                ("content_type", "application/json"),
                ("headers", headers),
                ("note", "schema 9 is 2, ticket 4711"),
            ],
        )
    };

    // Edits off for the topic, nothing changed, not JSON: refused, nothing moves.
    let off = repair(invoice, "{\"schema\": 2}", "");
    assert_eq!(off.status, 403, "{}", off.body);
    assert!(
        off.body.contains("repairs are off for topic"),
        "{}",
        off.body
    );
    let same = repair(order, "{\r\n  \"schema\": 9\r\n}", "x-schema: 9");
    assert_eq!(same.status, 400, "{}", same.body);
    assert!(same.body.contains("nothing changed"), "{}", same.body);
    let broken = repair(order, "{\"schema\": ", "x-schema: 9");
    assert_eq!(broken.status, 400, "{}", broken.body);
    assert!(broken.body.contains("payload: not JSON"), "{}", broken.body);
    assert_eq!(depth(&gw), 2);
    assert_eq!(gw.store.audit_count("repaired").unwrap(), 0);

    // The repair: delivered as edited, audited with who changed what.
    fixed.store(true, Ordering::SeqCst);
    let done = repair(order, "{\"schema\": 2}", "x-schema: 2\r\nx-fixed-by: grace");
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body.contains("by grace (console): payload"),
        "{}",
        done.body
    );
    assert!(
        done.body
            .contains("headers set: x-fixed-by, x-schema; removed: none"),
        "{}",
        done.body
    );
    assert!(wait_for(Duration::from_secs(30), || {
        gw.store.state_of("order-1").unwrap().as_deref() == Some("delivered")
    }));
    assert_eq!(gw.store.audit_count("repaired").unwrap(), 1);
    assert_eq!(depth(&gw), 1);

    // One letter replayed by itself (as a parked one must be): delivered, and gone.
    let replayed = browser.post(
        &format!("/letters/{invoice}/replay"),
        &[("csrf", &csrf), ("note", "schema 9 is 2 now")],
    );
    assert_eq!(replayed.status, 303, "{}", replayed.body);
    assert!(wait_for(Duration::from_secs(30), || {
        gw.store.state_of("invoice-1").unwrap().as_deref() == Some("delivered")
    }));
    assert_eq!(depth(&gw), 0);
    let again = browser.post(
        &format!("/letters/{invoice}/replay"),
        &[("csrf", &csrf), ("note", "twice")],
    );
    assert_eq!(again.status, 409, "{}", again.body);
}

#[test]
fn a_session_idle_past_session_idle_s_acts_no_more() {
    let dir = scratch_dir("console-idle");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (consumer, _) = consumer(&runtime);
    let gw = start(runtime, &dir, config(&consumer.url(), "session_idle_s = 1"));
    let _: Value = gw
        .admin
        .post(
            "/v1/topics/orders/messages",
            &json!({"id": "o-1", "payload": {}}),
        )
        .unwrap();
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 1));
    let seq = gw.admin.get::<Vec<Value>>("/v1/dlq").unwrap()[0]["seq"]
        .as_i64()
        .unwrap();
    let mut browser = Browser::new(&gw);
    browser.log_in("grace");
    let csrf = browser.csrf(&format!("/letters/{seq}"));
    std::thread::sleep(Duration::from_millis(1_500));
    let late = browser.post(
        &format!("/letters/{seq}/discard"),
        &[("csrf", &csrf), ("reason", "stale")],
    );
    assert_eq!(late.status, 401, "{}", late.body);
    assert!(late.body.contains("Your login expired"), "{}", late.body);
    assert_eq!(depth(&gw), 1, "nothing was discarded");
}
