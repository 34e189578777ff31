"""Kind globs agree with Rust: every case of guest-sdk/vectors/kinds.json, written by the
Rust `verdict_types::kind_matches`, must match here (`?` is one byte of the UTF-8 text)."""

from __future__ import annotations

import json
import unittest
from pathlib import Path

import sdk_support  # noqa: F401  (puts the SDK on the path)
from verdict_sdk import kind_matches

VECTORS = Path(__file__).resolve().parent / ".." / ".." / "vectors" / "kinds.json"


class KindVectorsTest(unittest.TestCase):
    def test_every_rust_match_is_reproduced(self) -> None:
        cases = json.loads(VECTORS.resolve().read_text(encoding="utf-8"))["cases"]
        self.assertTrue(cases)
        wrong = [
            f"{c['pattern']!r} vs {c['kind']!r}: Rust {c['matches']}"
            for c in cases
            if kind_matches(c["pattern"], c["kind"]) != c["matches"]
        ]
        self.assertEqual(wrong, [], f"{len(wrong)} of {len(cases)} differ")


if __name__ == "__main__":
    unittest.main()
