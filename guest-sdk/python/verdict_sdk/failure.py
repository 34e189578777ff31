"""The failed delivery a policy decides on.

Small facts (attempt, kind, clock, seed, statistics) arrive with every call. The bulky or
rarely needed parts (topic, ids, error message, headers, payload, history, extensions) are
fetched from the host the first time a policy reads them, then kept for the rest of the
decision: a policy that reads only the kind and the attempt never pays for copying a payload,
and one that reads the payload twice pays once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from . import config as _config
from .kinds import kind_matches, never_retry
from .verdict import Verdict

__all__ = ["AttemptRecord", "Failure", "Header", "TopicStats"]


@dataclass(frozen=True, slots=True)
class TopicStats:
    """Recent statistics of the topic, over a window chosen by the host."""

    window_ms: int = 0
    """Length of the window in milliseconds."""
    deliveries: int = 0
    """Deliveries attempted in the window (successful and failed)."""
    failures: int = 0
    """Failed deliveries in the window."""
    consecutive_failures: int = 0
    """Failures in a row on this topic, this one included; reset by any success."""

    @property
    def success_rate(self) -> float:
        """Share of successful deliveries in the window, from 0.0 to 1.0; 1.0 when the window
        saw no delivery (no evidence of trouble)."""
        if self.deliveries == 0:
            return 1.0
        failures = min(self.failures, self.deliveries)
        return (self.deliveries - failures) / self.deliveries


@dataclass(frozen=True, slots=True)
class Header:
    """One message header."""

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One earlier failed attempt of the same message."""

    at_ms: int
    """When it failed, in ms since the Unix epoch."""
    kind: str
    """Its error kind."""
    message: str = ""
    """Its error message."""


class HostDetails(Protocol):
    """Where the lazily fetched parts of one failure come from inside a component: the export
    glue provides it, asking the instance's one `details` resource about the
    failure's position in it, so a failure of a batch reads its own parts. Natively they are
    given to `Failure` directly."""

    def topic(self) -> str: ...
    def message_id(self) -> str: ...
    def consumer_group(self) -> str: ...
    def error_message(self) -> str: ...
    def content_type(self) -> str | None: ...
    def published_at_ms(self) -> int | None: ...
    def first_failed_at_ms(self) -> int: ...
    def payload_size(self) -> int: ...
    def headers(self) -> tuple[Header, ...]: ...
    def payload(self) -> bytes: ...
    def history(self) -> tuple[AttemptRecord, ...]: ...
    def extension(self, key: str) -> str | None: ...


# The lazily fetched parts and their values when neither the host nor a test gave one.
_DETAIL_DEFAULTS: dict[str, Any] = {
    "topic": "",
    "message_id": "",
    "consumer_group": "",
    "error_message": "",
    "content_type": None,
    "published_at_ms": None,
    "first_failed_at_ms": 0,
    "payload_size": 0,
    "headers": (),
    "payload": b"",
    "history": (),
}

_FACTS = (
    "retry_after_ms",
    "rejected",
    "attempt",
    "deferrals",
    "now_ms",
    "deadline_ms",
    "jitter_seed",
    "stats",
)


class Failure:
    """One failed delivery.

    Inside a component the host fills it in. In native unit tests build one with keywords,
    or with the `with_*` methods that Rust tests use; everything not set has a neutral
    default (attempt 1, no deadline, empty payload, clock at 0)::

        f = Failure("http.503", attempt=3, retry_after_ms=2_000)
        f = Failure("http.503").with_attempt(3).with_retry_after_ms(2_000)   # the same

    Every fact is a read-only property; the lazily fetched ones (`topic`, `message_id`,
    `consumer_group`, `error_message`, `content_type`, `published_at_ms`,
    `first_failed_at_ms`, `payload_size`,
    `headers`, `payload`, `history`, and `extension(key)`) are fetched from the host at most
    once per decision.
    """

    __slots__ = (
        "_kind",
        *(f"_{name}" for name in _FACTS),
        "_given",
        "_extensions",
        "_host",
    )

    def __init__(
        self,
        kind: str,
        *,
        retry_after_ms: int | None = None,
        rejected: bool = False,
        attempt: int = 1,
        deferrals: int = 0,
        first_failed_at_ms: int | None = None,
        now_ms: int = 0,
        deadline_ms: int | None = None,
        jitter_seed: int = 0,
        stats: TopicStats = TopicStats(),
        topic: str | None = None,
        message_id: str | None = None,
        consumer_group: str | None = None,
        error_message: str | None = None,
        content_type: str | None = None,
        published_at_ms: int | None = None,
        headers: Iterable[Header | tuple[str, str]] | None = None,
        payload: bytes | str | None = None,
        history: Iterable[AttemptRecord] | None = None,
        extensions: Mapping[str, str] | None = None,
        host: HostDetails | None = None,
    ) -> None:
        if not isinstance(kind, str):
            raise TypeError(f"a failure's kind is a str, got {kind!r}")
        self._kind = kind
        self._retry_after_ms = retry_after_ms
        self._rejected = rejected
        self._attempt = attempt
        self._deferrals = deferrals
        self._now_ms = now_ms
        self._deadline_ms = deadline_ms
        self._jitter_seed = jitter_seed
        self._stats = stats
        self._host = host
        # Values given up front (tests) or already fetched from the host (this decision).
        given: dict[str, Any] = {}
        for name, value in (
            ("topic", topic),
            ("message_id", message_id),
            ("consumer_group", consumer_group),
            ("error_message", error_message),
            ("content_type", content_type),
            ("published_at_ms", published_at_ms),
            ("first_failed_at_ms", first_failed_at_ms),
        ):
            if value is not None:
                given[name] = value
        if headers is not None:
            given["headers"] = tuple(h if isinstance(h, Header) else Header(*h) for h in headers)
        if payload is not None:
            body = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
            given["payload"] = body
            given["payload_size"] = min(len(body), 0xFFFF_FFFF)
        if history is not None:
            given["history"] = tuple(history)
        self._given = given
        self._extensions: dict[str, str | None] = dict(extensions or {})

    # --- the facts every call carries ---

    @property
    def kind(self) -> str:
        """The machine-readable error kind, e.g. `db.timeout`."""
        return self._kind

    def kind_is(self, pattern: str) -> bool:
        """True when `pattern` (a kind glob, see `kind_matches`) matches the kind."""
        return kind_matches(pattern, self._kind)

    def never_retry(self) -> Verdict | None:
        """The dead letter for a kind that never succeeds on a retry (payload, schema and
        format errors: poison; `auth.*`: permanent, alert critical), `None` for any other
        kind. Start `decide` with it and the admission gate's "never-retry kinds are not
        retried" check holds whatever the rest of the policy does."""
        return never_retry(self._kind)

    @property
    def retry_after_ms(self) -> int | None:
        """The consumer's `Retry-After` hint in milliseconds."""
        return self._retry_after_ms

    @property
    def rejected(self) -> bool:
        """True when the consumer explicitly asked for dead-lettering."""
        return self._rejected

    @property
    def attempt(self) -> int:
        """1-based count of failed deliveries, this one included."""
        return self._attempt

    @property
    def deferrals(self) -> int:
        """How many `delay` verdicts this message already received."""
        return self._deferrals


    @property
    def now_ms(self) -> int:
        """The host's clock for this decision (ms since the epoch). Use it, never a clock of
        your own: decisions must replay exactly."""
        return self._now_ms

    @property
    def deadline_ms(self) -> int | None:
        """The message's deadline (TTL), if it has one."""
        return self._deadline_ms

    @property
    def is_expired(self) -> bool:
        """True when the message has a deadline and `now` has reached it."""
        return self._deadline_ms is not None and self._now_ms >= self._deadline_ms

    @property
    def time_left_ms(self) -> int | None:
        """Milliseconds left before the deadline (0 once expired), `None` without one."""
        if self._deadline_ms is None:
            return None
        return max(self._deadline_ms - self._now_ms, 0)

    @property
    def age_ms(self) -> int:
        """Age of the message: since publication when known, else since its first failure."""
        published = self.published_at_ms
        start = self.first_failed_at_ms if published is None else published
        return max(self._now_ms - start, 0)

    @property
    def jitter_seed(self) -> int:
        """The seed for deterministic jitter (pass it to `Backoff.delay_ms`)."""
        return self._jitter_seed

    @property
    def stats(self) -> TopicStats:
        """Recent statistics of the topic."""
        return self._stats

    # --- the parts fetched on first use ---

    def _detail(self, name: str) -> Any:
        try:
            return self._given[name]
        except KeyError:
            pass
        value = getattr(self._host, name)() if self._host is not None else _DETAIL_DEFAULTS[name]
        self._given[name] = value
        return value

    @property
    def published_at_ms(self) -> int | None:
        """When the message was published, if known."""
        return self._detail("published_at_ms")

    @property
    def first_failed_at_ms(self) -> int:
        """When the first delivery failed (ms since the epoch)."""
        return self._detail("first_failed_at_ms")

    @property
    def payload_size(self) -> int:
        """Size of the payload in bytes, known without fetching the payload."""
        return self._detail("payload_size")

    @property
    def topic(self) -> str:
        """The topic."""
        return self._detail("topic")

    @property
    def message_id(self) -> str:
        """The message id."""
        return self._detail("message_id")

    @property
    def consumer_group(self) -> str:
        """The consumer group."""
        return self._detail("consumer_group")

    @property
    def error_message(self) -> str:
        """The human-readable error message. Classify by `kind`, not by this text."""
        return self._detail("error_message")

    @property
    def content_type(self) -> str | None:
        """The payload's content type, if the publisher set one."""
        return self._detail("content_type")

    @property
    def headers(self) -> tuple[Header, ...]:
        """All headers, as published."""
        return self._detail("headers")

    def header(self, name: str) -> str | None:
        """One header's value by name, ASCII case-insensitive (as Rust's
        `eq_ignore_ascii_case`: non-ASCII letters must match exactly)."""
        wanted = _ascii_fold(name)
        for h in self.headers:
            if _ascii_fold(h.name) == wanted:
                return h.value
        return None

    @property
    def payload(self) -> bytes:
        """The payload bytes."""
        return self._detail("payload")

    def payload_json(self, into: Any = Any) -> Any:
        """The payload parsed as JSON: plain values, or an instance of the dataclass `into`.
        Raises `DecodeError` (a `ValueError`) naming the failing path, e.g. `a.b: ...`."""
        return _config.from_json(self.payload, into)

    @property
    def history(self) -> tuple[AttemptRecord, ...]:
        """Earlier failed attempts, oldest first."""
        return self._detail("history")

    def extension(self, key: str) -> str | None:
        """A named fact the host adds without changing the contract's records; `None` for a
        key it does not know. The gateway fills `source` (`embedded`, `nats` or
        `rabbitmq`), `route` (the route's topic pattern) and `gateway` (its instance name)."""
        if key in self._extensions:
            return self._extensions[key]
        value = self._host.extension(key) if self._host is not None else None
        if self._host is not None:
            self._extensions[key] = value
        return value

    # --- setters for native tests, as in the Rust SDK; each returns a new failure ---

    def _with(self, **changes: Any) -> Failure:
        fields: dict[str, Any] = {name: getattr(self, f"_{name}") for name in _FACTS}
        fields.update(
            {k: v for k, v in self._given.items() if k != "payload_size"},
            extensions={k: v for k, v in self._extensions.items() if v is not None},
            host=self._host,
        )
        fields.update(changes)
        return Failure(self._kind, **fields)

    def with_attempt(self, attempt: int) -> Failure:
        """Set the attempt (1-based)."""
        return self._with(attempt=attempt)

    def with_deferrals(self, deferrals: int) -> Failure:
        """Set the number of earlier deferrals."""
        return self._with(deferrals=deferrals)

    def with_retry_after_ms(self, ms: int) -> Failure:
        """Set the `Retry-After` hint."""
        return self._with(retry_after_ms=ms)

    def with_rejected(self, rejected: bool) -> Failure:
        """Mark the failure as an explicit reject by the consumer."""
        return self._with(rejected=rejected)

    def with_now_ms(self, now_ms: int) -> Failure:
        """Set the clock."""
        return self._with(now_ms=now_ms)

    def with_first_failed_at_ms(self, ms: int) -> Failure:
        """Set when the first delivery failed."""
        return self._with(first_failed_at_ms=ms)

    def with_published_at_ms(self, ms: int) -> Failure:
        """Set the publication time."""
        return self._with(published_at_ms=ms)

    def with_deadline_ms(self, ms: int) -> Failure:
        """Set the deadline (TTL)."""
        return self._with(deadline_ms=ms)

    def with_jitter_seed(self, seed: int) -> Failure:
        """Set the jitter seed."""
        return self._with(jitter_seed=seed)

    def with_stats(self, stats: TopicStats) -> Failure:
        """Set the topic statistics."""
        return self._with(stats=stats)

    def with_topic(self, topic: str) -> Failure:
        """Set the topic."""
        return self._with(topic=topic)

    def with_message_id(self, message_id: str) -> Failure:
        """Set the message id."""
        return self._with(message_id=message_id)

    def with_error_message(self, message: str) -> Failure:
        """Set the error message."""
        return self._with(error_message=message)

    def with_header(self, name: str, value: str) -> Failure:
        """Add a header."""
        return self._with(headers=(*self._given.get("headers", ()), Header(name, value)))

    def with_payload(self, payload: bytes | str) -> Failure:
        """Set the payload (and its size)."""
        return self._with(payload=payload)

    def with_history(self, history: Iterable[AttemptRecord]) -> Failure:
        """Set the history of earlier attempts."""
        return self._with(history=tuple(history))

    def with_extension(self, key: str, value: str) -> Failure:
        """Add an extension fact (see `extension`)."""
        extensions = {k: v for k, v in self._extensions.items() if v is not None}
        return self._with(extensions={**extensions, key: value})

    def __repr__(self) -> str:
        facts = ", ".join(f"{name}={getattr(self, '_' + name)!r}" for name in _FACTS)
        return f"Failure({self._kind!r}, {facts})"


def _ascii_fold(text: str) -> bytes:
    # bytes.lower() folds A-Z only, exactly Rust's eq_ignore_ascii_case.
    return text.encode("utf-8", "surrogatepass").lower()
