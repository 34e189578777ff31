"""Test support: puts the policy and the SDK (from this checkout, unless installed) on the
path, and reads `verdict decide`-style failure JSON the way the host does."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

POLICY_ROOT = Path(__file__).resolve().parents[1]
REPO = POLICY_ROOT.parents[1]
RUST_POLICY = REPO / "policies" / "rules"

for path in (POLICY_ROOT, REPO / "guest-sdk" / "python"):
    if path.is_dir() and str(path) not in sys.path:
        sys.path.insert(0, str(path))

from verdict_sdk import AttemptRecord, Failure, TopicStats, jitter_seed  # noqa: E402


def failure_from_spec(spec: dict[str, Any]) -> Failure:
    """A failure from the JSON `verdict decide` and vector files take, with the host's
    defaults (host/runtime/src/failure.rs `FailureSpec::into_failure`): attempt 1, the clock
    at the first failure, the jitter seed derived from the message id and the attempt."""
    error = spec["error"]
    stats = spec.get("stats", {})
    message_id = spec.get("message-id", "")
    attempt = spec.get("attempt", 1)
    first = spec.get("first-failed-at-ms", 0)
    seed = spec.get("jitter-seed")
    payload = spec.get("payload")
    if payload is None:
        body = b""
    elif isinstance(payload, str):
        body = payload.encode("utf-8")
    else:
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return Failure(
        error["kind"],
        retry_after_ms=error.get("retry-after-ms"),
        rejected=error.get("rejected", False),
        attempt=attempt,
        deferrals=spec.get("deferrals", 0),
        first_failed_at_ms=first,
        now_ms=spec["now-ms"] if spec.get("now-ms") is not None else first,
        deadline_ms=spec.get("deadline-ms"),
        jitter_seed=seed if seed is not None else jitter_seed(message_id, attempt),
        stats=TopicStats(
            stats.get("window-ms", 0),
            stats.get("deliveries", 0),
            stats.get("failures", 0),
            stats.get("consecutive-failures", 0),
        ),
        topic=spec.get("topic", ""),
        message_id=message_id,
        consumer_group=spec.get("consumer-group", ""),
        error_message=error.get("message", ""),
        content_type=spec.get("content-type"),
        published_at_ms=spec.get("published-at-ms"),
        headers=sorted(spec.get("headers", {}).items()),
        payload=body,
        history=[
            AttemptRecord(h["at-ms"], h["kind"], h.get("message", ""))
            for h in spec.get("history", [])
        ],
        extensions=spec.get("extensions", {}),
    )
