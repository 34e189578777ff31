"""Verdict builders: immutable, chainable, checked."""

from __future__ import annotations

import unittest

import sdk_support  # noqa: F401  (puts the SDK on the path)
from verdict_sdk import Class, DeadLetter, Delay, Discard, Pause, Retry, Severity, Verdict


class VerdictTest(unittest.TestCase):
    def test_builders_chain_and_keep_label_order(self) -> None:
        v = (
            Verdict.dead_letter(Class.PERMANENT)
            .because("amount is negative")
            .alert(Severity.CRITICAL)
            .label("rule", "negative-amount")
            .label("rule", "again")
        )
        self.assertEqual(v.action, DeadLetter())
        self.assertEqual(v.class_, Class.PERMANENT)
        self.assertEqual(v.reason, "amount is negative")
        self.assertEqual(v.severity, Severity.CRITICAL)
        self.assertEqual(v.labels, (("rule", "negative-amount"), ("rule", "again")))
        self.assertIsNone(v.delay_ms)

    def test_constructors(self) -> None:
        self.assertEqual(Verdict.retry_after(5).action, Retry(5))
        self.assertEqual(Verdict.retry_now().action, Retry(0))
        self.assertEqual(Verdict.delay(7).action, Delay(7))
        self.assertEqual(Verdict.delay(7).delay_ms, 7)
        self.assertEqual(Verdict.pause(9).action, Pause(9))
        self.assertEqual(Verdict.pause(9).delay_ms, 9)
        self.assertEqual(Verdict.pause(9).class_, Class.TRANSIENT)
        with self.assertRaises(ValueError):
            Verdict.pause(-1)
        self.assertEqual(Verdict.retry_after(5).class_, Class.TRANSIENT)
        self.assertEqual(Verdict.discard(Class.PERMANENT).action, Discard())
        self.assertEqual(Verdict.retry_after(1).with_class(Class.UNKNOWN).class_, Class.UNKNOWN)
        v = Verdict.retry_after(1)
        self.assertEqual((v.reason, v.severity, v.labels), ("", Severity.NONE, ()))

    def test_builders_never_change_the_original(self) -> None:
        base = Verdict.dead_letter(Class.POISON)
        base.because("x").label("a", "b").alert(Severity.INFO)
        self.assertEqual(base, Verdict.dead_letter(Class.POISON))

    def test_actions_support_match(self) -> None:
        match Verdict.retry_after(250).action:
            case Retry(ms):
                self.assertEqual(ms, 250)
            case _:
                self.fail("not a retry")

    def test_bad_values_are_refused_where_they_are_made(self) -> None:
        with self.assertRaises(ValueError):
            Verdict.retry_after(-1)
        with self.assertRaises(ValueError):
            Verdict.delay(2**64)
        with self.assertRaises(ValueError):
            Verdict.retry_after(1.5)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Verdict.dead_letter("poison")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Verdict.retry_after(1).alert("critical")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Verdict.retry_after(1).label("k", 1)  # type: ignore[arg-type]

    def test_severity_is_ordered(self) -> None:
        self.assertLess(Severity.NONE, Severity.INFO)
        self.assertLess(Severity.WARNING, Severity.CRITICAL)
        self.assertEqual(max(Severity.INFO, Severity.CRITICAL, Severity.NONE), Severity.CRITICAL)


if __name__ == "__main__":
    unittest.main()
