"""The policy's logic, natively: no Wasm, no host. From the project's directory:
`python3 -m unittest discover -s tests`."""

from __future__ import annotations

import unittest

import verdict_path  # noqa: F401  (puts the policy and the SDK on the module path)
from verdict_sdk import Class, ConfigError, Failure, instantiate

from {{module}} import {{Type}}


def policy(config: str) -> {{Type}}:
    """The policy with `config`, parsed exactly as the host's `init` parses it."""
    return instantiate({{Type}}, config)


class {{Type}}Test(unittest.TestCase):
    def test_kinds_that_never_heal_are_dead_lettered_at_once(self) -> None:
        p = policy("{}")
        self.assertIs(p.decide(Failure("json.parse")).class_, Class.POISON)
        self.assertIs(p.decide(Failure("auth.denied")).class_, Class.PERMANENT)

    def test_transient_failures_are_retried_until_max_attempts(self) -> None:
        p = policy('{"max_attempts": 3}')
        first = p.decide(Failure("db.timeout").with_attempt(1))
        self.assertTrue(first.delay_ms is not None and first.delay_ms <= 60_000, first)
        last = p.decide(Failure("db.timeout").with_attempt(3))
        self.assertIs(last.class_, Class.EXHAUSTED)

    def test_retry_after_is_honoured_within_max_delay(self) -> None:
        p = policy('{"max_delay_ms": 10000}')
        v = p.decide(Failure("http.503").with_retry_after_ms(8_000))
        self.assertTrue(v.delay_ms is not None and v.delay_ms >= 8_000, v)
        v = p.decide(Failure("http.503").with_retry_after_ms(3_600_000))
        self.assertEqual(v.delay_ms, 10_000)

    def test_a_bad_config_is_refused_by_name(self) -> None:
        with self.assertRaisesRegex(ConfigError, "max_atempts"):
            policy('{"max_atempts": 3}')
        with self.assertRaisesRegex(ConfigError, "max_attempts"):
            policy('{"max_attempts": 0}')


if __name__ == "__main__":
    unittest.main()
