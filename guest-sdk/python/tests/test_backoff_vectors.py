"""Bit-for-bit agreement with Rust: every case of guest-sdk/vectors/backoff.json, written by
the Rust `verdict_types::Backoff::delay_ms`, must come out identical here."""

from __future__ import annotations

import json
import unittest
from pathlib import Path

import sdk_support  # noqa: F401  (puts the SDK on the path)
from verdict_sdk import Backoff, from_json

VECTORS = Path(__file__).resolve().parent / ".." / ".." / "vectors" / "backoff.json"


class BackoffVectorsTest(unittest.TestCase):
    def test_every_rust_delay_is_reproduced(self) -> None:
        path = VECTORS.resolve()
        if not path.is_file():
            self.fail(
                f"missing {path}: the Rust-generated backoff vectors "
                "(guest-sdk/vectors/backoff.json) are what proves the Python delays bit-identical"
            )
        cases = json.loads(path.read_text(encoding="utf-8"))["cases"]
        self.assertTrue(cases, f"{path} has no cases")
        mismatches = []
        for i, case in enumerate(cases):
            # Seeds and delays are decimal strings: a u64 does not survive every JSON reader.
            backoff = from_json(json.dumps(case["backoff"]), Backoff)
            attempt, seed, want = case["attempt"], int(case["seed"]), int(case["delay_ms"])
            got = backoff.delay_ms(attempt, seed)
            if got != want:
                mismatches.append(
                    f"cases[{i}]: {case['backoff']} attempt {attempt} seed {seed}: "
                    f"Rust {want}, Python {got}"
                )
        self.assertEqual(
            mismatches,
            [],
            f"{len(mismatches)} of {len(cases)} cases differ:\n" + "\n".join(mismatches[:20]),
        )


if __name__ == "__main__":
    unittest.main()
