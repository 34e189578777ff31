"""The failure a policy reads (guest-sdk/src/failure.rs): native construction, derived facts,
and parts fetched from the host at most once per decision."""

from __future__ import annotations

import unittest
from dataclasses import dataclass

import sdk_support  # noqa: F401  (puts the SDK on the path)
from verdict_sdk import U32, AttemptRecord, Class, DecodeError, Failure, Header, TopicStats


@dataclass
class Inner:
    b: U32


@dataclass
class Payload:
    a: Inner


class CountingHost:
    """A host whose every getter counts its calls."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def topic(self) -> str:
        self._count("topic")
        return "orders"

    def message_id(self) -> str:
        self._count("message_id")
        return "m-9"

    def consumer_group(self) -> str:
        self._count("consumer_group")
        return "g"

    def error_message(self) -> str:
        self._count("error_message")
        return "it broke"

    def content_type(self) -> str | None:
        self._count("content_type")
        return None

    def published_at_ms(self) -> int | None:
        self._count("published_at_ms")
        return 100

    def payload_size(self) -> int:
        self._count("payload_size")
        return 2

    def headers(self) -> tuple[Header, ...]:
        self._count("headers")
        return (Header("X-Id", "7"),)

    def payload(self) -> bytes:
        self._count("payload")
        return b"{}"

    def history(self) -> tuple[AttemptRecord, ...]:
        self._count("history")
        return (AttemptRecord(1, "db.timeout", "x"),)

    def extension(self, key: str) -> str | None:
        self._count(f"extension:{key}")
        return "nats" if key == "source" else None


class FailureTest(unittest.TestCase):
    def test_success_rate_handles_empty_and_inconsistent_windows(self) -> None:
        self.assertEqual(TopicStats().success_rate, 1.0)
        self.assertAlmostEqual(TopicStats(deliveries=10, failures=7).success_rate, 0.3)
        self.assertEqual(TopicStats(deliveries=2, failures=5).success_rate, 0.0)

    def test_expiry_and_age_follow_the_given_clock(self) -> None:
        f = Failure("x").with_now_ms(1_000).with_deadline_ms(1_000).with_first_failed_at_ms(400)
        self.assertTrue(f.is_expired)
        self.assertEqual(f.time_left_ms, 0)
        self.assertEqual(f.age_ms, 600)
        f = Failure("x").with_now_ms(999).with_deadline_ms(1_000).with_published_at_ms(100)
        self.assertFalse(f.is_expired)
        self.assertEqual(f.time_left_ms, 1)
        self.assertEqual(f.age_ms, 899)
        self.assertIsNone(Failure("x").time_left_ms)
        self.assertEqual(Failure("x", now_ms=5, first_failed_at_ms=9).age_ms, 0)

    def test_headers_are_ascii_case_insensitive_and_payload_json_names_the_path(self) -> None:
        f = Failure("x").with_header("Content-Type", "json").with_payload(b'{"a":{"b":"x"}}')
        self.assertEqual(f.header("content-type"), "json")
        self.assertIsNone(f.header("content-typ"))
        self.assertEqual(f.payload_size, 15)
        with self.assertRaises(DecodeError) as caught:
            f.payload_json(Payload)
        self.assertTrue(str(caught.exception).startswith("a.b:"), caught.exception)
        self.assertEqual(f.payload_json(), {"a": {"b": "x"}})
        # Only ASCII letters fold, as Rust's eq_ignore_ascii_case.
        g = Failure("x", headers=[("Ä-Id", "1")])
        self.assertIsNone(g.header("ä-id"))
        self.assertEqual(g.header("Ä-ID"), "1")

    def test_defaults_are_neutral(self) -> None:
        f = Failure("db.timeout")
        self.assertEqual(
            (f.kind, f.attempt, f.deferrals, f.now_ms, f.deadline_ms, f.jitter_seed),
            ("db.timeout", 1, 0, 0, None, 0),
        )
        self.assertEqual((f.retry_after_ms, f.rejected, f.stats), (None, False, TopicStats()))
        self.assertEqual((f.topic, f.message_id, f.payload, f.headers, f.history), ("", "", b"", (), ()))
        self.assertEqual((f.content_type, f.published_at_ms, f.payload_size), (None, None, 0))
        self.assertIsNone(f.extension("source"))

    def test_with_setters_return_new_failures(self) -> None:
        base = Failure("db.timeout")
        f = (
            base.with_attempt(3)
            .with_deferrals(2)
            .with_retry_after_ms(9)
            .with_rejected(True)
            .with_jitter_seed(5)
            .with_stats(TopicStats(deliveries=4))
            .with_topic("t")
            .with_message_id("m")
            .with_error_message("e")
            .with_history([AttemptRecord(1, "k")])
            .with_extension("source", "nats")
            .with_header("a", "1")
            .with_header("b", "2")
        )
        self.assertEqual(base.attempt, 1)
        self.assertEqual((f.attempt, f.deferrals, f.retry_after_ms, f.rejected, f.jitter_seed), (3, 2, 9, True, 5))
        self.assertEqual((f.topic, f.message_id, f.error_message), ("t", "m", "e"))
        self.assertEqual(f.headers, (Header("a", "1"), Header("b", "2")))
        self.assertEqual(f.history, (AttemptRecord(1, "k", ""),))
        self.assertEqual(f.extension("source"), "nats")
        self.assertEqual(f.stats.deliveries, 4)
        self.assertEqual(Failure("x", attempt=3, retry_after_ms=2_000).attempt, 3)

    def test_kind_helpers(self) -> None:
        f = Failure("http.503")
        self.assertTrue(f.kind_is("http.5*"))
        self.assertFalse(f.kind_is("http.4*"))
        self.assertIsNone(f.never_retry())
        verdict = Failure("json.parse").never_retry()
        assert verdict is not None
        self.assertEqual(verdict.class_, Class.POISON)

    def test_host_parts_are_fetched_lazily_and_at_most_once(self) -> None:
        host = CountingHost()
        f = Failure("db.timeout", now_ms=1_000, host=host)
        self.assertEqual(host.calls, {}, "nothing is fetched before it is read")
        for _ in range(3):
            self.assertEqual(f.topic, "orders")
            self.assertEqual(f.message_id, "m-9")
            self.assertEqual(f.header("x-id"), "7")
            self.assertEqual(f.payload_json(), {})
            self.assertEqual(f.age_ms, 900)
            self.assertEqual(f.extension("source"), "nats")
            self.assertIsNone(f.extension("route"))
            self.assertIsNone(f.content_type)
        self.assertEqual(
            host.calls,
            {
                "topic": 1,
                "message_id": 1,
                "headers": 1,
                "payload": 1,
                "published_at_ms": 1,
                "extension:source": 1,
                "extension:route": 1,
                "content_type": 1,
            },
        )


if __name__ == "__main__":
    unittest.main()
