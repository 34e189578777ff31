"""The Rust policy's own tests (policies/rules/src/tests.rs), ported one for one, plus the
exact reasons, labels and alerts the Rust code writes."""

from __future__ import annotations

import unittest

import rules_support  # noqa: F401  (puts the policy and the SDK on the path)
from rules_policy import Rules
from verdict_sdk import (
    Class,
    ConfigError,
    DeadLetter,
    Discard,
    Failure,
    Retry,
    Severity,
    Verdict,
    instantiate,
)


def policy(config: str) -> Rules:
    return instantiate(Rules, config)


def at(kind: str, attempt: int) -> Failure:
    return Failure(kind).with_attempt(attempt).with_jitter_seed(42)


class RulesTest(unittest.TestCase):
    def test_payments_retries_db_timeout_four_times_then_exhausts_at_five(self) -> None:
        p = policy('{"max_attempts": 5}')
        for attempt in range(1, 5):
            v = p.decide(at("db.timeout", attempt))
            self.assertIsInstance(v.action, Retry, f"attempt {attempt}: {v}")
            self.assertEqual(v.class_, Class.TRANSIENT)
        v = p.decide(at("db.timeout", 5))
        self.assertEqual((v.action, v.class_), (DeadLetter(), Class.EXHAUSTED))
        self.assertIn("limit 5", v.reason)

    def test_notifications_dead_letter_at_three(self) -> None:
        p = policy('{"max_attempts": 3}')
        self.assertIsInstance(p.decide(at("db.timeout", 2)).action, Retry)
        v = p.decide(at("db.timeout", 3))
        self.assertEqual((v.action, v.class_), (DeadLetter(), Class.EXHAUSTED))

    def test_json_parse_is_poison_at_attempt_one_under_any_limit(self) -> None:
        for config in ['{"max_attempts": 5}', '{"max_attempts": 3}', "{}"]:
            v = policy(config).decide(at("json.parse", 1))
            self.assertEqual((v.action, v.class_), (DeadLetter(), Class.POISON), config)

    def test_standard_table_limits(self) -> None:
        p = policy("{}")
        # deadlock: random delay, 3 attempts
        v = p.decide(at("db.deadlock", 2))
        self.assertIsInstance(v.action, Retry)
        self.assertTrue(100 <= v.action.ms <= 1_000, v)
        self.assertEqual(p.decide(at("db.deadlock", 3)).class_, Class.EXHAUSTED)
        # business: fixed 1 s, 2 attempts
        self.assertEqual(p.decide(at("biz.stock_locked", 1)).action, Retry(1_000))
        self.assertEqual(p.decide(at("biz.stock_locked", 2)).class_, Class.EXHAUSTED)
        # auth: permanent, never retried
        v = p.decide(at("auth.expired_token", 1))
        self.assertEqual(
            (v.action, v.class_, v.severity), (DeadLetter(), Class.PERMANENT, Severity.WARNING)
        )

    def test_retry_after_is_honoured_and_can_be_turned_off(self) -> None:
        f = at("http.503", 1).with_retry_after_ms(120_000)
        self.assertEqual(policy("{}").decide(f).action, Retry(120_000))
        v = policy('{"honor_retry_after": false}').decide(f)
        self.assertIsInstance(v.action, Retry)
        self.assertLessEqual(v.action.ms, 500, v)

    def test_rejects_and_expiry_come_before_rules(self) -> None:
        p = policy("{}")
        v = p.decide(at("db.timeout", 1).with_rejected(True))
        self.assertEqual((v.action, v.class_), (DeadLetter(), Class.REJECTED))
        expired = at("db.timeout", 1).with_now_ms(10_000).with_deadline_ms(9_000)
        self.assertEqual(p.decide(expired).class_, Class.EXPIRED)
        v = policy('{"on_expired": "discard"}').decide(expired)
        self.assertEqual(v.action, Discard())

    def test_custom_rules_replace_the_table_and_label_the_verdict(self) -> None:
        p = policy(
            """{"rules": [{"name": "dup", "match": ["order.duplicate"], "discard": true},
                          {"match": ["inventory.*"], "retry": {"strategy": "fixed", "delay_ms": 250}, "max_attempts": 2}],
                "default": {"dead_letter": "unknown"}}"""
        )
        v = p.decide(at("order.duplicate", 1))
        self.assertEqual(v.action, Discard())
        self.assertIn(("rule", "dup"), v.labels)
        self.assertEqual(p.decide(at("inventory.locked", 1)).action, Retry(250))
        self.assertEqual(p.decide(at("inventory.locked", 2)).class_, Class.EXHAUSTED)
        # json.parse is no longer in the table: the default applies.
        self.assertEqual(p.decide(at("json.parse", 1)).class_, Class.UNKNOWN)

    def test_same_input_same_verdict_jitter_included(self) -> None:
        p = policy("{}")
        self.assertEqual(p.decide(at("db.timeout", 3)), p.decide(at("db.timeout", 3)))

    def test_bad_configs_name_the_field(self) -> None:
        cases = [
            ('{"max_attempts": 0}', "config.max_attempts"),
            ('{"max_atempts": 3}', "max_atempts"),
            (
                '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": 1}, "dead_letter": "poison"}]}',
                "config.rules[0]",
            ),
            ('{"rules": [{"match": [], "discard": true}]}', "config.rules[0].match"),
            ('{"rules": [{"match": ["a"], "retyr": {}}]}', "retyr"),
            (
                '{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 9, "cap_ms": 1}}]}',
                "cap_ms",
            ),
        ]
        for config, needle in cases:
            with self.subTest(config=config):
                with self.assertRaises(ConfigError) as caught:
                    instantiate(Rules, config)
                self.assertIn(needle, str(caught.exception))


class ExactlyAsRustTest(unittest.TestCase):
    """What the Rust code writes, byte for byte: reasons, labels, alerts and the errors that
    `Rules::new` itself produces (as opposed to serde's, whose wording may differ)."""

    def test_reasons_labels_and_alerts(self) -> None:
        p = policy("{}")
        f = Failure("db.timeout", attempt=1, jitter_seed=42)
        self.assertEqual(
            p.decide(f),
            Verdict.retry_after(p.decide(f).action.ms)
            .because("db.timeout is transient")
            .label("rule", "transient"),
        )
        self.assertEqual(
            p.decide(Failure("db.timeout", attempt=5)),
            Verdict.dead_letter(Class.EXHAUSTED)
            .because("db.timeout failed 5 times (limit 5)")
            .alert(Severity.WARNING)
            .label("rule", "transient"),
        )
        self.assertEqual(
            p.decide(Failure("json.parse")),
            Verdict.dead_letter(Class.POISON)
            .because("json.parse is not retryable")
            .alert(Severity.WARNING)
            .label("rule", "format"),
        )
        self.assertEqual(
            p.decide(Failure("x", rejected=True)),
            Verdict.dead_letter(Class.REJECTED)
            .because("the consumer rejected the message")
            .alert(Severity.WARNING),
        )
        self.assertEqual(
            p.decide(Failure("x", now_ms=5, deadline_ms=5)),
            Verdict.dead_letter(Class.EXPIRED).because("the message passed its deadline"),
        )
        self.assertEqual(
            policy('{"on_expired": "discard"}').decide(Failure("x", now_ms=5, deadline_ms=5)),
            Verdict.discard(Class.EXPIRED).because("the message passed its deadline"),
        )
        custom = policy(
            """{"rules": [{"match": ["a.*"], "discard": true},
                          {"match": ["b"], "dead_letter": "poison", "alert": "info", "name": ""},
                          {"match": ["c"], "retry": {"strategy": "immediate"}, "max_attempts": 2, "alert": "critical"}],
                "reject_alert": "none", "default": {"discard": true, "alert": "info"}}"""
        )
        self.assertEqual(
            custom.decide(Failure("a.b")),
            Verdict.discard(Class.PERMANENT).because("a.b is discarded by rule").label("rule", "a.*"),
        )
        # An empty name is a name (Rust's `Some("")`), not a missing one.
        self.assertEqual(
            custom.decide(Failure("b")),
            Verdict.dead_letter(Class.POISON)
            .because("b is not retryable")
            .alert(Severity.INFO)
            .label("rule", ""),
        )
        self.assertEqual(
            custom.decide(Failure("c", attempt=2)).severity, Severity.CRITICAL
        )
        self.assertEqual(custom.decide(Failure("c")).action, Retry(0))
        self.assertEqual(
            custom.decide(Failure("zzz")),
            Verdict.discard(Class.PERMANENT)
            .because("zzz is discarded by rule")
            .alert(Severity.INFO)
            .label("rule", "default"),
        )
        self.assertEqual(custom.decide(Failure("c", rejected=True)).severity, Severity.NONE)

    def test_the_default_default_is_exponential_full_jitter(self) -> None:
        p = policy('{"rules": []}')
        v = p.decide(Failure("anything", attempt=3, jitter_seed=7))
        self.assertEqual(v.labels, (("rule", "default"),))
        self.assertTrue(0 <= v.action.ms <= 4_000)

    def test_a_rule_may_name_a_limit_only_for_retries(self) -> None:
        # max_attempts on a dead-letter rule is ignored, as in Rust.
        p = policy('{"rules": [{"match": ["x"], "dead_letter": "poison", "max_attempts": 0}]}')
        self.assertEqual(p.decide(Failure("x")).class_, Class.POISON)

    def test_errors_from_the_policy_itself_are_word_for_word(self) -> None:
        cases = {
            '{"max_attempts": 0}': "config.max_attempts: must be at least 1",
            '{"rules": [{"match": [], "discard": true}]}': "config.rules[0].match: needs at least one kind pattern",
            '{"rules": [{"match": ["a"]}]}': "config.rules[0]: give exactly one of `retry`, `dead_letter` or `discard: true`",
            '{"rules": [{"match": ["a"], "discard": true, "dead_letter": "poison"}]}': "config.rules[0]: give exactly one of `retry`, `dead_letter` or `discard: true`",
            '{"default": {"match": ["a"], "discard": true}}': "config.default.match: the default applies to every kind; remove `match`",
            '{"default": {}}': "config.default: give exactly one of `retry`, `dead_letter` or `discard: true`",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 500, "cap_ms": 100}}]}': "config.rules[0].retry: cap_ms (100) must not be below base_ms (500)",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 0, "cap_ms": 100}}]}': "config.rules[0].retry: base_ms must be at least 1 (cap_ms is 100)",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "random", "min_ms": 5, "max_ms": 1}}]}': "config.rules[0].retry: min_ms (5) must not be above max_ms (1)",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "ladder", "steps_ms": []}}]}': "config.rules[0].retry: steps_ms must name at least one step",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "immediate"}, "max_attempts": 0}]}': "config.rules[0].max_attempts: must be at least 1",
            '{"default": {"retry": {"strategy": "fixed", "delay_ms": 1}, "max_attempts": 0}}': "config.default.max_attempts: must be at least 1",
        }
        for config, want in cases.items():
            with self.subTest(config=config):
                with self.assertRaises(ConfigError) as caught:
                    instantiate(Rules, config)
                self.assertEqual(str(caught.exception), want)

    def test_serde_errors_name_the_same_path(self) -> None:
        # The path is what both SDKs agree on; inside a backoff this one is more precise
        # (`retry.base_ms`) where serde stops at `retry`, so it still contains Rust's path.
        cases = {
            '{"max_attempts": "five"}': "config.max_attempts: ",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": "x"}}]}': "config.rules[0].retry",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed"}}]}': "config.rules[0].retry: missing field `delay_ms`",
            '{"rules": [{"match": ["a"], "retry": {"strategy": "fixd"}}]}': "config.rules[0].retry.strategy: unknown variant `fixd`",
            '{"rules": [{"match": ["a"], "dead_letter": "gone"}]}': "config.rules[0].dead_letter: unknown variant `gone`",
            '{"rules": [{"match": "a", "discard": true}]}': "config.rules[0].match: invalid type: string",
            '{"rules": [{"match": ["a"], "discard": 1}]}': "config.rules[0].discard: invalid type: integer `1`",
            '{"rules": [{"match": ["a"], "discard": true, "max_attempts": -1}]}': "config.rules[0].max_attempts: invalid value: integer `-1`, expected u32",
            '{"default": {"dead_letter": "poison", "name": 5}}': "config.default.name: invalid type: integer `5`",
            '{"on_expired": "drop"}': "config.on_expired: unknown variant `drop`, expected one of `dead_letter`, `discard`",
            '{"reject_alert": "loud"}': "config.reject_alert: unknown variant `loud`",
            '{"honor_retry_after": "yes"}': "config.honor_retry_after: invalid type: string",
            '{"rules": null}': "config.rules: invalid type: null",
            '{"max_attempts": 3, "max_attempts": 3}': "config: duplicate field `max_attempts`",
        }
        for config, want in cases.items():
            with self.subTest(config=config):
                with self.assertRaises(ConfigError) as caught:
                    instantiate(Rules, config)
                self.assertIn(want, str(caught.exception))

    def test_serde_accepts_what_rust_accepts(self) -> None:
        # Forms serde reads besides the obvious ones: a struct as an array of its fields, a
        # unit enum as a one-key map, a null optional.
        p = policy('[3, [["dup", ["x.*"], null, null, null, true]]]')
        self.assertEqual(p.decide(Failure("x.y")).action, Discard())
        self.assertEqual(p.decide(Failure("db.timeout", attempt=3)).class_, Class.EXHAUSTED)
        p = policy('{"on_expired": {"discard": null}, "rules": [{"match": ["a"], "retry": ["fixed", 5], "alert": null}]}')
        self.assertEqual(p.decide(Failure("a")).action, Retry(5))
        self.assertEqual(p.decide(Failure("a", now_ms=1, deadline_ms=1)).action, Discard())


if __name__ == "__main__":
    unittest.main()
