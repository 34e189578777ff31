"""Kind globs and the never-retry list (the Rust crate's tests, types/src/kinds.rs)."""

from __future__ import annotations

import unittest

import sdk_support  # noqa: F401  (puts the SDK on the path)
from verdict_sdk import (
    NEVER_RETRY_KINDS,
    Class,
    DeadLetter,
    Severity,
    first_match,
    kind_matches,
    never_retry,
)


class KindsTest(unittest.TestCase):
    def test_globs(self) -> None:
        cases = [
            ("db.timeout", "db.timeout", True),
            ("db.*", "db.timeout", True),
            ("db.*", "db.", True),
            ("db.*", "db", False),
            ("http.5*", "http.503", True),
            ("http.5*", "http.404", False),
            ("*.timeout", "net.tcp.timeout", True),
            ("*", "", True),
            ("", "", True),
            ("", "a", False),
            ("a?c", "abc", True),
            ("a?c", "ac", False),
            ("*a*b", "xxaxxbxb", True),
            ("*a*b", "xxaxxbx", False),
            ("**", "x", True),
            ("a*", "a*", True),
            ("DB.*", "db.timeout", False),
        ]
        for pattern, kind, want in cases:
            with self.subTest(pattern=pattern, kind=kind):
                self.assertEqual(kind_matches(pattern, kind), want)

    def test_question_mark_is_one_utf8_byte_as_in_rust(self) -> None:
        # "é" is two bytes: Rust's byte-wise glob needs two `?` for it, and so does this one.
        self.assertFalse(kind_matches("a?c", "aéc"))
        self.assertTrue(kind_matches("a??c", "aéc"))
        self.assertTrue(kind_matches("*é", "café"))

    def test_a_hostile_pattern_is_fast(self) -> None:
        self.assertFalse(kind_matches("*a" * 200 + "b", "a" * 400))

    def test_first_match_keeps_order(self) -> None:
        self.assertEqual(first_match(["json.*", "*"], "json.parse"), "json.*")
        self.assertIsNone(first_match(["json.*", "db.*"], "http.503"))

    def test_never_retry_answers_exactly_the_shared_kinds(self) -> None:
        for kind in ["json.parse", "schema.unknown-version", "format.csv", "auth.expired"]:
            v = never_retry(kind)
            self.assertIsNotNone(v, kind)
            assert v is not None
            self.assertEqual(v.action, DeadLetter(), kind)
        for kind in ["db.timeout", "http.503", "jsonx.parse", "authz", ""]:
            self.assertIsNone(never_retry(kind), kind)
        for pattern in NEVER_RETRY_KINDS:
            self.assertIsNotNone(never_retry(pattern.replace("*", "x")))

    def test_never_retry_verdicts_match_rust(self) -> None:
        auth = never_retry("auth.denied")
        poison = never_retry("json.parse")
        assert auth is not None and poison is not None
        self.assertEqual((auth.class_, auth.severity), (Class.PERMANENT, Severity.CRITICAL))
        self.assertEqual(
            auth.reason, "the consumer refuses it: credentials or permissions need fixing"
        )
        self.assertEqual((poison.class_, poison.severity), (Class.POISON, Severity.NONE))
        self.assertEqual(poison.reason, "the message cannot be read as it is")
        self.assertEqual(auth.labels, ())


if __name__ == "__main__":
    unittest.main()
