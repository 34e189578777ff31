"""Typed configs read as serde reads the Rust SDK's configs (guest-sdk/src/config.rs)."""

from __future__ import annotations

import enum
import unittest
from dataclasses import dataclass, field
from typing import Any

import sdk_support  # noqa: F401  (puts the SDK on the path)
from verdict_sdk import U32, U64, ConfigError, DecodeError, Severity, from_json, parse_config


@dataclass
class Rule:
    kind: str


@dataclass
class Cfg:
    max_attempts: U32 = 0
    rules: list[Rule] = field(default_factory=list)


@dataclass
class NoDefaults:
    max_attempts: U32


class Mode(enum.Enum):
    DEAD_LETTER = "dead_letter"
    DISCARD = "discard"


@dataclass(kw_only=True)
class Kinds:
    flag: bool = False
    count: int = 0
    big: U64 = 0
    ratio: float = 0.0
    text: str = ""
    maybe: U32 | None = 7
    optional_required: str | None
    mode: Mode = Mode.DEAD_LETTER
    severity: Severity = Severity.NONE
    tags: tuple[str, ...] = ()
    limits: dict[str, U32] = field(default_factory=dict)
    extra: Any = None
    class_: str = ""


def error(into: Any, text: str) -> str:
    try:
        parse_config(into, text)
    except ConfigError as e:
        return str(e)
    raise AssertionError(f"{text} was accepted")


class ParseConfigTest(unittest.TestCase):
    def test_empty_means_defaults(self) -> None:
        self.assertEqual(parse_config(Cfg, "  ").max_attempts, 0)
        self.assertEqual(parse_config(Cfg, "").rules, [])
        self.assertEqual(parse_config(Cfg, "\u3000\n").rules, [])
        # Only what Rust's `trim` removes makes a config empty.
        self.assertIn("config: ", error(Cfg, "\x1c"))

    def test_errors_name_the_field(self) -> None:
        e = error(Cfg, '{"max_attempts": "five"}')
        self.assertTrue(e.startswith("config.max_attempts:"), e)
        self.assertIn('invalid type: string "five", expected u32', e)
        e = error(Cfg, '{"rules": [{"kind": "a"}, {"kidn": "b"}]}')
        self.assertTrue(e.startswith("config.rules[1]"), e)
        self.assertIn("kidn", e)
        e = error(Cfg, "{} trailing")
        self.assertTrue(e.startswith("config:"), e)

    def test_a_missing_field_names_both_fixes(self) -> None:
        e = error(NoDefaults, "{}")
        self.assertTrue(e.startswith("config: missing field `max_attempts`"), e)
        self.assertIn("route's config", e)
        self.assertIn("default", e)
        e = error(NoDefaults, '{"max_attempts": "five"}')
        self.assertNotIn("route's config", e)

    def test_unknown_and_duplicate_fields(self) -> None:
        self.assertEqual(
            error(Cfg, '{"max_atempts": 3}'),
            "config: unknown field `max_atempts`, expected one of `max_attempts`, `rules`",
        )
        self.assertEqual(
            error(Cfg, '{"max_attempts": 3, "max_attempts": 4}'),
            "config: duplicate field `max_attempts`",
        )
        self.assertEqual(
            error(Cfg, '{"rules": [{"kind": "a", "x": 1}]}'),
            "config.rules[0]: unknown field `x`, expected `kind`",
        )

    def test_the_first_error_in_document_order_wins(self) -> None:
        self.assertTrue(error(Cfg, '{"max_attempts": -1, "bogus": 1}').startswith("config.max_attempts:"))
        self.assertTrue(error(Cfg, '{"bogus": 1, "max_attempts": -1}').startswith("config: unknown field"))

    def test_integers_are_exact(self) -> None:
        for text, needle in [
            ('{"max_attempts": -1}', "invalid value: integer `-1`, expected u32"),
            ('{"max_attempts": 4294967296}', "invalid value: integer `4294967296`, expected u32"),
            ('{"max_attempts": 1.0}', "invalid type: floating point `1.0`, expected u32"),
            ('{"max_attempts": 1e3}', "invalid type: floating point"),
            ('{"max_attempts": true}', "invalid type: boolean `true`, expected u32"),
            ('{"max_attempts": null}', "invalid type: null, expected u32"),
            ('{"max_attempts": NaN}', "config.max_attempts: expected value"),
            ('{"max_attempts": ' + "9" * 5000 + "}", "config.max_attempts: number out of range"),
            ('{"max_attempts": 1e999}', "config.max_attempts: number out of range"),
        ]:
            with self.subTest(text=text[:40]):
                self.assertIn(needle, error(Cfg, text))
        self.assertEqual(parse_config(Cfg, '{"max_attempts": 4294967295}').max_attempts, 2**32 - 1)
        self.assertEqual(parse_config(Cfg, '{"max_attempts": -0}').max_attempts, 0)

    def test_every_supported_type(self) -> None:
        k = parse_config(
            Kinds,
            """{"flag": true, "count": -5, "big": 18446744073709551615, "ratio": 2,
                "text": "t", "maybe": null, "optional_required": "x", "mode": "discard",
                "severity": "critical", "tags": ["a", "b"], "limits": {"x": 1, "x": 2},
                "extra": {"a": [1, {"b": null}], "a": 3}, "class": "c"}""",
        )
        self.assertEqual(
            (k.flag, k.count, k.big, k.ratio, k.text, k.maybe, k.optional_required),
            (True, -5, 2**64 - 1, 2.0, "t", None, "x"),
        )
        self.assertEqual((k.mode, k.severity, k.tags), (Mode.DISCARD, Severity.CRITICAL, ("a", "b")))
        # Maps and plain JSON keep the last of a repeated key, as serde's maps do.
        self.assertEqual((k.limits, k.extra, k.class_), ({"x": 2}, {"a": 3}, "c"))

    def test_optional_fields_without_default_become_none(self) -> None:
        k = parse_config(Kinds, "{}")
        self.assertIsNone(k.optional_required)
        self.assertEqual(k.maybe, 7)

    def test_enums_accept_serde_map_form_and_name_the_variants(self) -> None:
        self.assertEqual(parse_config(Kinds, '{"mode": {"discard": null}}').mode, Mode.DISCARD)
        self.assertEqual(
            error(Kinds, '{"mode": "drop"}'),
            "config.mode: unknown variant `drop`, expected one of `dead_letter`, `discard`",
        )
        self.assertIn("config.mode.discard: invalid type: integer `1`", error(Kinds, '{"mode": {"discard": 1}}'))
        self.assertIn("config.mode: invalid type", error(Kinds, '{"mode": 1}'))
        self.assertIn("config.mode: invalid type", error(Kinds, '{"mode": {}}'))

    def test_a_struct_can_be_an_array_of_its_fields(self) -> None:
        # serde reads a struct from a sequence too; a Rust config accepts this, so must we.
        c = parse_config(Cfg, '[3, [{"kind": "a"}]]')
        self.assertEqual((c.max_attempts, c.rules), (3, [Rule("a")]))
        self.assertEqual(parse_config(Cfg, "[3]").rules, [])
        # Elements are named by position, as serde_path_to_error names them.
        self.assertIn(
            "config.[1][0]: invalid length 0, expected struct Rule with 1 element",
            error(Cfg, "[3, [[]]]"),
        )
        self.assertIn("config: invalid length 3", error(Cfg, "[1, [], 3]"))
        self.assertIn('config.[1][0]: invalid type: string "x"', error(Cfg, '[1, ["x"]]'))
        # An optional field without default is required in the array form, as in serde.
        self.assertIn("invalid length 6", error(Kinds, "[false, 0, 0, 0.0, \"\", null]"))

    def test_not_an_object_at_all(self) -> None:
        self.assertEqual(error(Cfg, "3"), "config: invalid type: integer `3`, expected struct Cfg")
        self.assertIn("config: ", error(Cfg, '{"max_attempts": 3,}'))
        self.assertIn("nests too deeply", error(Cfg, "[" * 100_000))

    def test_strings_must_be_unicode(self) -> None:
        self.assertIn("config.rules[0].kind: lone surrogate", error(Cfg, r'{"rules": [{"kind": "\ud800"}]}'))
        self.assertEqual(parse_config(Cfg, r'{"rules": [{"kind": "\ud83d\ude00"}]}').rules[0].kind, "\U0001F600")
        self.assertIn("config.extra: lone surrogate", error(Kinds, r'{"extra": "\udc00"}'))
        self.assertIn("config.extra.a[0]: number out of range", error(Kinds, '{"extra": {"a": [1e400]}}'))

    def test_unsupported_types_are_a_programming_error(self) -> None:
        @dataclass
        class Odd:
            x: set[int] = field(default_factory=set)

        with self.assertRaises(TypeError):
            parse_config(Odd, '{"x": []}')


@dataclass
class Inner:
    b: U32


@dataclass
class Outer:
    a: Inner


class FromJsonTest(unittest.TestCase):
    def test_plain_values(self) -> None:
        self.assertEqual(from_json(b'{"a": [1, 2.5, null, true]}'), {"a": [1, 2.5, None, True]})

    def test_typed_errors_name_the_path_without_a_root(self) -> None:
        with self.assertRaises(DecodeError) as caught:
            from_json(b'{"a":{"b":"x"}}', Outer)
        self.assertTrue(str(caught.exception).startswith("a.b:"), caught.exception)
        self.assertEqual(str(caught.exception.path), "a.b")
        with self.assertRaises(DecodeError) as caught:
            from_json(b"{", Outer)
        self.assertIn("line 1 column 2", str(caught.exception))
        with self.assertRaises(DecodeError):
            from_json(b"\xff", Outer)


if __name__ == "__main__":
    unittest.main()
