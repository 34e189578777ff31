"""A whole policy, tested natively the way the README shows (the Rust SDK's crate example)."""

from __future__ import annotations

import unittest

import sdk_support  # noqa: F401  (puts the SDK on the path)
from example_policy import Orders
from verdict_sdk import Class, ConfigError, Failure, instantiate


class ExamplePolicyTest(unittest.TestCase):
    def test_decisions(self) -> None:
        policy = instantiate(Orders, '{"max_attempts": 3}')
        self.assertEqual(policy.decide(Failure("json.parse")).class_, Class.POISON)
        self.assertEqual(policy.decide(Failure("auth.denied")).class_, Class.PERMANENT)
        self.assertEqual(policy.decide(Failure("db.timeout", attempt=3)).class_, Class.EXHAUSTED)
        v = policy.decide(Failure("db.timeout", attempt=1, retry_after_ms=9_000))
        self.assertEqual(v.delay_ms, 9_000)

    def test_a_bad_config_is_refused_with_the_field(self) -> None:
        with self.assertRaises(ConfigError) as caught:
            instantiate(Orders, '{"max_atempts": 3}')
        self.assertIn("max_atempts", str(caught.exception))
        with self.assertRaisesRegex(ConfigError, r"^config\.max_attempts: must be at least 1$"):
            instantiate(Orders, '{"max_attempts": 0}')


if __name__ == "__main__":
    unittest.main()
