"""The `rules` policy's Python port decided by CPython itself, no Wasm: the floor the
Python component's decisions are compared with (`cargo bench -p verdict-cli --bench
languages` runs it). Each call does what the component's glue does around the policy - a
`Failure` built from the record, `random` reseeded from the failure's seed - then `decide`.

Prints one JSON line: p50 and p99 of single calls, in nanoseconds."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(REPO / "policies" / "rules-py"), str(REPO / "guest-sdk" / "python")]

from rules_policy import Rules  # noqa: E402
from verdict_sdk import Failure, TopicStats, instantiate  # noqa: E402

CALLS = 5_000


def failure() -> Failure:
    """The benched failure: what the host's spec in `languages.rs` becomes."""
    return Failure(
        "db.timeout",
        attempt=2,
        now_ms=61_000,
        first_failed_at_ms=0,
        jitter_seed=42,
        stats=TopicStats(0, 0, 0, 0),
        topic="payments.captured",
        message_id="m-000123",
    )


def main() -> None:
    policy = instantiate(Rules, '{"max_attempts": 5}')
    for _ in range(200):
        policy.decide(failure())
    samples = []
    for _ in range(CALLS):
        start = time.perf_counter_ns()
        f = failure()
        random.seed(f.jitter_seed)
        policy.decide(f)
        samples.append(time.perf_counter_ns() - start)
    samples.sort()
    print(json.dumps({"p50_ns": samples[CALLS // 2], "p99_ns": samples[CALLS * 99 // 100]}))


main()
