use verdict_sdk::{Action, Class, Failure, Policy, Severity, instantiate};

use super::Rules;

fn policy(config: &str) -> Rules {
    instantiate(config).unwrap()
}

fn at(kind: &str, attempt: u32) -> Failure {
    Failure::new(kind)
        .with_attempt(attempt)
        .with_jitter_seed(42)
}

#[test]
fn payments_retries_db_timeout_four_times_then_exhausts_at_five() {
    let p = policy(r#"{"max_attempts": 5}"#);
    for attempt in 1..=4 {
        let v = p.decide(&at("db.timeout", attempt));
        assert!(
            matches!(v.action, Action::Retry(_)),
            "attempt {attempt}: {v:?}"
        );
        assert_eq!(v.class, Class::Transient);
    }
    let v = p.decide(&at("db.timeout", 5));
    assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Exhausted));
    assert!(v.reason.contains("limit 5"), "{}", v.reason);
}

#[test]
fn notifications_dead_letter_at_three() {
    let p = policy(r#"{"max_attempts": 3}"#);
    assert!(matches!(
        p.decide(&at("db.timeout", 2)).action,
        Action::Retry(_)
    ));
    let v = p.decide(&at("db.timeout", 3));
    assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Exhausted));
}

#[test]
fn json_parse_is_poison_at_attempt_one_under_any_limit() {
    for config in [r#"{"max_attempts": 5}"#, r#"{"max_attempts": 3}"#, "{}"] {
        let v = policy(config).decide(&at("json.parse", 1));
        assert_eq!(
            (v.action, v.class),
            (Action::DeadLetter, Class::Poison),
            "{config}"
        );
    }
}

#[test]
fn standard_table_limits() {
    let p = policy("{}");
    // deadlock: random delay, 3 attempts
    let v = p.decide(&at("db.deadlock", 2));
    assert!(
        matches!(v.action, Action::Retry(d) if (100..=1_000).contains(&d)),
        "{v:?}"
    );
    assert_eq!(p.decide(&at("db.deadlock", 3)).class, Class::Exhausted);
    // business: fixed 1 s, 2 attempts
    assert_eq!(
        p.decide(&at("biz.stock_locked", 1)).action,
        Action::Retry(1_000)
    );
    assert_eq!(p.decide(&at("biz.stock_locked", 2)).class, Class::Exhausted);
    // auth: permanent, never retried
    let v = p.decide(&at("auth.expired_token", 1));
    assert_eq!(
        (v.action, v.class, v.alert),
        (Action::DeadLetter, Class::Permanent, Severity::Warning)
    );
}

#[test]
fn retry_after_is_honoured_and_can_be_turned_off() {
    let f = at("http.503", 1).with_retry_after_ms(120_000);
    assert_eq!(policy("{}").decide(&f).action, Action::Retry(120_000));
    let v = policy(r#"{"honor_retry_after": false}"#).decide(&f);
    assert!(matches!(v.action, Action::Retry(d) if d <= 500), "{v:?}");
}

#[test]
fn rejects_and_expiry_come_before_rules() {
    let p = policy("{}");
    let v = p.decide(&at("db.timeout", 1).with_rejected(true));
    assert_eq!((v.action, v.class), (Action::DeadLetter, Class::Rejected));
    let expired = at("db.timeout", 1)
        .with_now_ms(10_000)
        .with_deadline_ms(9_000);
    assert_eq!(p.decide(&expired).class, Class::Expired);
    let v = policy(r#"{"on_expired": "discard"}"#).decide(&expired);
    assert_eq!(v.action, Action::Discard);
}

#[test]
fn custom_rules_replace_the_table_and_label_the_verdict() {
    let p = policy(
        r#"{"rules": [{"name": "dup", "match": ["order.duplicate"], "discard": true},
                      {"match": ["inventory.*"], "retry": {"strategy": "fixed", "delay_ms": 250}, "max_attempts": 2}],
            "default": {"dead_letter": "unknown"}}"#,
    );
    let v = p.decide(&at("order.duplicate", 1));
    assert_eq!(v.action, Action::Discard);
    assert!(v.labels.contains(&("rule".into(), "dup".into())));
    assert_eq!(
        p.decide(&at("inventory.locked", 1)).action,
        Action::Retry(250)
    );
    assert_eq!(p.decide(&at("inventory.locked", 2)).class, Class::Exhausted);
    // json.parse is no longer in the table: the default applies.
    assert_eq!(p.decide(&at("json.parse", 1)).class, Class::Unknown);
}

#[test]
fn same_input_same_verdict_jitter_included() {
    let p = policy("{}");
    let a = p.decide(&at("db.timeout", 3));
    let b = p.decide(&at("db.timeout", 3));
    assert_eq!(a, b);
}

#[test]
fn bad_configs_name_the_field() {
    let cases = [
        (r#"{"max_attempts": 0}"#, "config.max_attempts"),
        (r#"{"max_atempts": 3}"#, "max_atempts"),
        (
            r#"{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": 1}, "dead_letter": "poison"}]}"#,
            "config.rules[0]",
        ),
        (
            r#"{"rules": [{"match": [], "discard": true}]}"#,
            "config.rules[0].match",
        ),
        (r#"{"rules": [{"match": ["a"], "retyr": {}}]}"#, "retyr"),
        (
            r#"{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 9, "cap_ms": 1}}]}"#,
            "cap_ms",
        ),
    ];
    for (config, needle) in cases {
        let err = instantiate::<Rules>(config).unwrap_err();
        assert!(err.contains(needle), "{config}: {err}");
    }
}
