//! Dead letters grouped by cause and acted on a group at a time, through the admin API of a
//! running gateway: the groups, a dry run, a replay job with its cut-off (letters that
//! arrive while it runs stay), a cancelled job, and parking - a letter that keeps coming
//! back is left out of bulk replays until it is replayed by itself.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use verdict_cli::client::ClientError;
use verdict_tests::consumer::{Behaviour, Consumer};
use verdict_tests::gateway::{Gateway, Route, TestConfig};
use verdict_tests::{fixtures, scratch_dir, wait_for};

use super::gateway::RULES_CONFIG;

/// `orders` and `invoices` to one consumer.
fn config(consumer_url: &str) -> TestConfig {
    let route = |topic: &str| {
        Route::new(topic, "rules")
            .config(RULES_CONFIG)
            .consumer(consumer_url)
            .set("consumer.concurrency", 8)
    };
    TestConfig::new()
        .set("gateway.instance", "gw-groups")
        .policy("rules", fixtures::RULES)
        .route(route("orders"))
        .route(route("invoices"))
}

/// A consumer that refuses every id (422 `schema.unknown-version`) until it is in `fixed`.
fn consumer(runtime: &tokio::runtime::Runtime) -> (Consumer, Arc<Mutex<HashSet<String>>>) {
    let fixed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let known = fixed.clone();
    let consumer = Consumer::start(runtime, move |id| {
        if known.lock().unwrap().contains(id) {
            Behaviour::Ok
        } else {
            Behaviour::Permanent
        }
    });
    (consumer, fixed)
}

fn publish(gw: &Gateway, topic: &str, ids: &[String]) {
    let batch: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "payload": {"id": id}}))
        .collect();
    let _: Value = gw
        .admin
        .post(&format!("/v1/topics/{topic}/messages"), &batch)
        .expect("publish");
}

fn ids(prefix: &str, range: std::ops::Range<u32>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

fn depth(gw: &Gateway) -> usize {
    gw.admin.get::<Vec<Value>>("/v1/dlq").unwrap().len()
}

fn groups(gw: &Gateway) -> Vec<Value> {
    gw.admin.get("/v1/dlq/groups").unwrap()
}

/// Wait for job `id` to end; its last view.
fn finished(gw: &Gateway, id: &str) -> Value {
    let mut last = Value::Null;
    let ended = wait_for(Duration::from_secs(60), || {
        last = gw.admin.get(&format!("/v1/jobs/{id}")).unwrap();
        last["state"] != "running"
    });
    assert!(ended, "job {id} still running: {last}");
    last
}

fn status_of<T: std::fmt::Debug>(result: Result<T, ClientError>) -> (u16, String) {
    match result {
        Err(ClientError::Api { status, code, .. }) => (status, code),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[test]
fn dead_letters_group_by_cause_and_a_group_is_replayed_by_a_job_with_a_cut_off() {
    let dir = scratch_dir("dlq-groups");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (consumer, fixed) = consumer(&runtime);
    let gw = config(&consumer.url()).start_on(runtime, &dir, "groups-token");
    let orders = ids("order", 0..6);
    publish(&gw, "orders", &orders);
    publish(&gw, "invoices", &ids("invoice", 0..3));
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 9));

    // Two causes, largest first, each with what an operator reads before acting.
    let all = groups(&gw);
    assert_eq!(all.len(), 2, "{all:#?}");
    let (group, other) = (&all[0], &all[1]);
    assert_eq!(
        (group["topic"].as_str(), group["count"].as_u64()),
        (Some("orders"), Some(6))
    );
    assert_eq!(
        (other["topic"].as_str(), other["count"].as_u64()),
        (Some("invoices"), Some(3))
    );
    assert_eq!(group["class"], "poison");
    assert_eq!(group["kind"], "schema.unknown-version");
    assert_eq!(group["sources"], json!(["embedded"]));
    assert_eq!(group["dlqs"], json!(["orders.DLQ"]));
    assert_eq!(group["parked"], 0);
    let versions = group["policy_versions"].as_array().unwrap();
    assert!(
        versions.len() == 1 && versions[0].as_str().unwrap().starts_with("rules@"),
        "{versions:?}"
    );
    assert!(group["first_seen_ms"].as_u64() <= group["last_seen_ms"].as_u64());
    assert!(orders.contains(&group["sample"]["message_id"].as_str().unwrap().to_string()));
    let id = group["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 16);
    // A page at a time: one group a page, largest first, the cursor walking both once.
    let (first, next): (Vec<Value>, _) = gw.admin.get_page("/v1/dlq/groups?limit=1").unwrap();
    assert_eq!((first.len(), first[0]["id"].as_str()), (1, Some(&*id)));
    let next = next.expect("a second page");
    let (second, last): (Vec<Value>, _) = gw
        .admin
        .get_page(&format!("/v1/dlq/groups?limit=1&after={next}"))
        .unwrap();
    assert_eq!((second[0]["id"].clone(), last), (other["id"].clone(), None));
    assert_eq!(
        status_of(gw.admin.get::<Value>("/v1/dlq/groups?limit=many")).0,
        400
    );
    let members: Vec<Value> = gw.admin.get(&format!("/v1/dlq?group={id}")).unwrap();
    assert_eq!(members.len(), 6);
    assert!(members.iter().all(|m| m["topic"] == "orders"));

    // Actions need the token; bad requests say what is wrong.
    let replay = format!("/v1/dlq/groups/{id}/replay");
    assert_eq!(
        status_of(gw.anonymous.post::<Value>(&replay, &json!({}))),
        (401, "unauthorized".to_string())
    );
    for (path, body, want) in [
        ("/v1/dlq/groups/not-hex/replay", json!({}), 400),
        (&*format!("/v1/dlq/groups/{id}/delete"), json!({}), 404),
        (&*format!("/v1/dlq/groups/{id}/discard"), json!({}), 400),
        (
            &*format!("/v1/dlq/groups/{id}/dry-run"),
            json!({"canary": 2}),
            400,
        ),
        (&*replay, json!({"rate": 5}), 400),
    ] {
        assert_eq!(
            status_of(gw.admin.post::<Value>(path, &body)).0,
            want,
            "{path} {body}"
        );
    }

    // A dry run: what the current policy decides for each member now.
    let job: Value = gw
        .admin
        .post(&format!("/v1/dlq/groups/{id}/dry-run"), &json!({}))
        .unwrap();
    let done = finished(&gw, job["id"].as_str().unwrap());
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(
        (done["total"].as_u64(), done["done"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(done["decisions"], json!({"dead-letter": 6}));
    assert_eq!(done["percent"], 100);
    assert_eq!(depth(&gw), 9, "a dry run moves nothing");

    // Fixed: replay the group, slowly. Two more letters of the same cause arrive while the
    // job runs and stay (the store contract pins the cut-off itself:
    // `a_job_leaves_letters_dead_lettered_after_its_start`).
    fixed.lock().unwrap().extend(orders.iter().cloned());
    let job: Value = gw
        .admin
        .post(
            &replay,
            &json!({"rate_per_s": 4, "canary": 1, "note": "schema v9 deployed"}),
        )
        .unwrap();
    let job_id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["state"], "running");
    assert!(job["filter"]["dead_before_ms"].is_u64(), "{job}");
    let late = ids("order-late", 0..2);
    publish(&gw, "orders", &late);
    let done = finished(&gw, &job_id);
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(
        (done["total"].as_u64(), done["done"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(done["canary"]["passed"], true, "{done}");
    assert!(wait_for(Duration::from_secs(30), || {
        orders
            .iter()
            .all(|o| gw.store.state_of(o).unwrap().as_deref() == Some("delivered"))
    }));
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 5));
    let left: Vec<Value> = gw.admin.get(&format!("/v1/dlq?group={id}")).unwrap();
    let left: HashSet<&str> = left
        .iter()
        .map(|e| e["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(left, late.iter().map(String::as_str).collect());
    let listed: Vec<Value> = gw.admin.get("/v1/jobs").unwrap();
    assert_eq!(listed[0]["id"], json!(job_id), "newest first");

    // A job cancelled while it runs stops; what it did stays done.
    let invoices = other["id"].as_str().unwrap();
    let job: Value = gw
        .admin
        .post(
            &format!("/v1/dlq/groups/{invoices}/replay"),
            &json!({"rate_per_s": 0.5}),
        )
        .unwrap();
    let cancel = format!("/v1/jobs/{}/cancel", job["id"].as_str().unwrap());
    assert_eq!(
        status_of(gw.anonymous.post::<Value>(&cancel, &json!({}))).0,
        401
    );
    let _: Value = gw.admin.post(&cancel, &json!({})).unwrap();
    let done = finished(&gw, job["id"].as_str().unwrap());
    assert_eq!(done["state"], "cancelled", "{done}");
    assert!(done["done"].as_u64().unwrap() < 3, "{done}");
    // The job list is bounded too: `limit` of them, newest first.
    let newest: Vec<Value> = gw.admin.get("/v1/jobs?limit=1").unwrap();
    assert_eq!((newest.len(), &newest[0]["id"]), (1, &job["id"]));
    assert!(gw.admin.get::<Vec<Value>>("/v1/jobs").unwrap().len() > 1);
    assert_eq!(status_of(gw.admin.get::<Value>("/v1/jobs?limit=-1")).0, 400);
    assert_eq!(
        status_of(gw.admin.post::<Value>(&cancel, &json!({}))),
        (409, "job_ended".to_string())
    );
    assert_eq!(
        status_of(gw.admin.get::<Value>("/v1/jobs/job-999")),
        (404, "no_such_job".to_string())
    );
}

#[test]
fn a_letter_that_keeps_coming_back_is_parked_and_left_out_of_bulk_replays() {
    let dir = scratch_dir("dlq-parking");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (consumer, _) = consumer(&runtime);
    let gw = config(&consumer.url())
        .set("gateway.park_after_repeats", 2)
        .start_on(runtime, &dir, "groups-token");
    publish(&gw, "orders", &ids("stuck", 0..2));
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 2));
    let bulk = |gw: &Gateway| -> Value {
        gw.admin
            .post("/v1/dlq/replay", &json!({"filter": {}}))
            .unwrap()
    };
    // Each bulk replay brings both back, dead again, one repeat more.
    for round in 1..=2 {
        assert_eq!(bulk(&gw)["replayed"], 2, "round {round}");
        assert!(wait_for(Duration::from_secs(30), || {
            let entries: Vec<Value> = gw.admin.get("/v1/dlq").unwrap();
            entries.len() == 2 && entries.iter().all(|e| e["repeats"] == round)
        }));
    }
    let all = groups(&gw);
    assert_eq!(
        (all[0]["count"].as_u64(), all[0]["parked"].as_u64()),
        (Some(2), Some(2))
    );

    // Parked: a bulk replay leaves them, a group replay too.
    assert_eq!(bulk(&gw)["matched"], 0);
    let job: Value = gw
        .admin
        .post(
            &format!("/v1/dlq/groups/{}/replay", all[0]["id"].as_str().unwrap()),
            &json!({}),
        )
        .unwrap();
    let done = finished(&gw, job["id"].as_str().unwrap());
    assert_eq!(
        (done["state"].as_str(), done["total"].as_u64()),
        (Some("succeeded"), Some(0))
    );
    assert_eq!(depth(&gw), 2);

    // One by one, by its number, a parked letter is replayed.
    let entries: Vec<Value> = gw.admin.get("/v1/dlq").unwrap();
    let seq = entries[0]["seq"].as_i64().unwrap();
    let one: Value = gw
        .admin
        .post("/v1/dlq/replay", &json!({"filter": {"seq": seq}}))
        .unwrap();
    assert_eq!(
        (one["matched"].as_u64(), one["replayed"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(wait_for(Duration::from_secs(30), || {
        let entries: Vec<Value> = gw.admin.get("/v1/dlq").unwrap();
        entries.len() == 2 && entries.iter().any(|e| e["repeats"] == 3)
    }));
}

#[test]
fn a_repair_is_refused_unless_allowed_and_is_audited_with_who_changed_what() {
    let dir = scratch_dir("dlq-repair");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (consumer, fixed) = consumer(&runtime);
    // Repairs allowed on `invoices` only.
    let gw = config(&consumer.url())
        .set("console.allow_edit_topics", vec!["invoices"])
        .start_on(runtime, &dir, "groups-token");
    publish(&gw, "orders", &ids("order", 0..1));
    publish(&gw, "invoices", &ids("invoice", 0..1));
    assert!(wait_for(Duration::from_secs(30), || depth(&gw) == 2));
    let entries: Vec<Value> = gw.admin.get("/v1/dlq").unwrap();
    let seq_of = |topic: &str| {
        entries.iter().find(|e| e["topic"] == topic).unwrap()["seq"]
            .as_i64()
            .unwrap()
    };
    let (order, invoice) = (seq_of("orders"), seq_of("invoices"));
    let fix = json!({
        "payload": {"id": "invoice-0", "schema": 2},
        "headers": {"x-schema": "2"},
        "note": "schema v2 by hand, ticket 4711"
    });

    // Without the token, for a topic not allowed, with a bad body: refused, nothing moves.
    let path = |seq: i64| format!("/v1/dlq/{seq}/repair");
    assert_eq!(
        status_of(gw.anonymous.post::<Value>(&path(invoice), &fix)).0,
        401
    );
    assert_eq!(
        status_of(gw.admin.post::<Value>(&path(order), &fix)),
        (403, "edit_disabled".to_string())
    );
    for bad in [
        json!({"note": "nothing to change"}),
        json!({"payload": 1}),
        json!({"payload": 1, "payload_base64": "AA==", "note": "n"}),
        json!({"payload_base64": "not base64!", "note": "n"}),
        json!({"headers": {"bad name": "v"}, "note": "n"}),
        json!({"headers": {"x-ok": "line\r\nbreak"}, "note": "n"}),
        json!({"payload": 1, "note": "n", "who": "me"}),
    ] {
        assert_eq!(
            status_of(gw.admin.post::<Value>(&path(invoice), &bad)).0,
            400,
            "{bad}"
        );
    }
    assert_eq!(
        status_of(gw.admin.post::<Value>(&path(999_999), &fix)),
        (404, "no_such_dead_letter".to_string())
    );
    assert_eq!(depth(&gw), 2);

    // Allowed: the repaired message is delivered as written; the dead letter keeps the
    // original; the audit says who changed what.
    fixed.lock().unwrap().insert("invoice-0".to_string());
    let done: Value = gw.admin.post(&path(invoice), &fix).unwrap();
    assert_eq!(done["message_id"], "invoice-0");
    let audit = done["audit"].as_str().unwrap();
    assert!(audit.starts_with("by admin (api): payload "), "{audit}");
    assert!(
        audit.contains("headers set: x-schema; removed: none"),
        "{audit}"
    );
    assert!(
        audit.ends_with("note: schema v2 by hand, ticket 4711"),
        "{audit}"
    );
    assert!(wait_for(Duration::from_secs(30), || {
        gw.store.state_of("invoice-0").unwrap().as_deref() == Some("delivered")
    }));
    assert_eq!(depth(&gw), 1);
    assert_eq!(gw.store.audit_count("repaired").unwrap(), 1);
    assert_eq!(
        status_of(gw.admin.post::<Value>(&path(invoice), &fix)),
        (404, "no_such_dead_letter".to_string()),
        "a dead letter is repaired once"
    );
}
