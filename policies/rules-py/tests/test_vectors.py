"""The Rust policy's vector files (policies/rules/vectors/*.json), decided natively by the
Python port: the same expectations must hold, with the same expansion of `each` and the
same failure defaults as `verdict test` (tests/conformance/README.md).

Natively there is no host, so nothing here applies guardrails; a case that asks about the
host (`settings`, `clamps`, an expected fallback) is reported as skipped, never passed."""

from __future__ import annotations

import copy
import json
import unittest
from typing import Any

from rules_support import RUST_POLICY, failure_from_spec
from rules_policy import Rules
from verdict_sdk import DeadLetter, Delay, Discard, Retry, Verdict, instantiate

ACTIONS = {Retry: "retry", Delay: "delay", DeadLetter: "dead-letter", Discard: "discard"}


def merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    """Deep merge, as the conformance runner does: objects merge, anything else replaces."""
    for key, value in over.items():
        if isinstance(base.get(key), dict) and isinstance(value, dict):
            merge(base[key], value)
        else:
            base[key] = value


def mismatches(expect: dict[str, Any], v: Verdict) -> list[str]:
    out = []
    action = ACTIONS[type(v.action)]
    if expect.get("action") is not None and expect["action"] != action:
        out.append(f"action: expected {expect['action']}, got {action}")
    spec = expect.get("delay_ms")
    if spec is not None:
        got = v.delay_ms
        if isinstance(spec, int):
            ok = got == spec
        else:
            low, high = spec.get("min"), spec.get("max")
            ok = got is not None and (low is None or got >= low) and (high is None or got <= high)
        if not ok:
            out.append(f"delay_ms: expected {spec}, got {got}")
    if expect.get("class") is not None and expect["class"] != v.class_.value:
        out.append(f"class: expected {expect['class']}, got {v.class_.value}")
    if expect.get("alert") is not None and expect["alert"] != v.severity.value:
        out.append(f"alert: expected {expect['alert']}, got {v.severity.value}")
    needle = expect.get("reason_contains")
    if needle is not None and needle not in v.reason:
        out.append(f"reason: expected to contain {needle!r}, got {v.reason!r}")
    labels = dict(reversed(v.labels))  # the first label with a key wins, as in the runner
    for key, want in (expect.get("labels") or {}).items():
        if labels.get(key) != want:
            out.append(f"labels.{key}: expected {want}, got {labels.get(key, '(absent)')}")
    return out


class RustVectorsTest(unittest.TestCase):
    def test_vector_files(self) -> None:
        files = sorted((RUST_POLICY / "vectors").glob("*.json"))
        self.assertTrue(files, f"no vector files in {RUST_POLICY / 'vectors'}")
        runs = 0
        for path in files:
            suite = json.loads(path.read_text(encoding="utf-8"))
            if suite.get("settings"):
                with self.subTest(file=path.name):
                    self.skipTest("suite settings need the host's guardrails")
                continue
            default_config = json.dumps(suite.get("config", {}))
            for case in suite["cases"]:
                config = json.dumps(case["config"]) if "config" in case else default_config
                policy = instantiate(Rules, config)
                for params in case.get("each") or [{}]:
                    params = copy.deepcopy(params)
                    over = params.pop("expect", None)
                    failure = copy.deepcopy(case["failure"])
                    merge(failure, params)
                    expect = copy.deepcopy(case.get("expect", {}))
                    if over:
                        merge(expect, over)
                    name = f"{path.name}: {case['name']} {params or ''}".rstrip()
                    with self.subTest(name):
                        if expect.get("clamps") or expect.get("fallback"):
                            self.skipTest("clamps and fallbacks need the host")
                        verdict = policy.decide(failure_from_spec(failure))
                        self.assertEqual(mismatches(expect, verdict), [], str(verdict))
                    runs += 1
        self.assertGreater(runs, 20)


if __name__ == "__main__":
    unittest.main()
