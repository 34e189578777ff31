"""The policy's answer: an action, a class, a reason, an alert severity and labels.

Mirrors `verdict_types::Verdict`. A verdict is immutable: every builder returns a new one,
so a verdict kept in a table (or returned by `never_retry`) can be refined per decision
without one decision leaking into the next.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, replace

__all__ = [
    "Action",
    "Class",
    "DeadLetter",
    "Delay",
    "Discard",
    "Pause",
    "Retry",
    "Severity",
    "Verdict",
]

U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


def _check_ms(ms: int) -> int:
    # The contract carries delays as u64: refusing here points at the policy line that
    # computed a bad delay, instead of a lowering trap with no context.
    if type(ms) is not int or not 0 <= ms <= U64_MAX:
        raise ValueError(f"a delay is a u64 number of milliseconds, got {ms!r}")
    return ms


@dataclass(frozen=True, slots=True)
class Retry:
    """Redeliver after `ms` milliseconds (0 means now); spends one attempt."""

    ms: int

    def __post_init__(self) -> None:
        _check_ms(self.ms)


@dataclass(frozen=True, slots=True)
class Delay:
    """Redeliver after `ms` milliseconds without spending an attempt (rate limits, an open
    circuit, a downstream known to be down). The host bounds how often and how long."""

    ms: int

    def __post_init__(self) -> None:
        _check_ms(self.ms)


@dataclass(frozen=True, slots=True)
class Pause:
    """Stop the whole route for `ms` milliseconds, for a dependency down for every message:
    deliveries in flight finish, the route takes no new message until then, and one probe
    delivery at the end decides between resuming and pausing again. This message is
    redelivered after the pause without spending an attempt (it counts as a deferral)."""

    ms: int

    def __post_init__(self) -> None:
        _check_ms(self.ms)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Move the message to its dead-letter queue with its whole history."""


@dataclass(frozen=True, slots=True)
class Discard:
    """Drop the message; the host keeps an audit record with the reason."""


Action = Retry | Delay | Pause | DeadLetter | Discard
"""What to do with the message; use `match` on it (`case Retry(ms): ...`)."""


class Class(enum.Enum):
    """Why the message failed, in the vocabulary shared by alerts, metrics and envelopes.

    Values are the names used in JSON configs and vector files."""

    TRANSIENT = "transient"
    """Will probably succeed later: timeouts, 503, rate limits, deadlocks."""
    PERMANENT = "permanent"
    """Will never succeed: a validation or business rule failure, a missing entity, auth."""
    POISON = "poison"
    """The message itself is broken: does not parse, unknown schema version."""
    EXHAUSTED = "exhausted"
    """A transient failure that kept failing past its attempt limit."""
    EXPIRED = "expired"
    """The message outlived its TTL or business deadline."""
    REJECTED = "rejected"
    """The consumer explicitly asked for the message to be dead-lettered."""
    UNKNOWN = "unknown"
    """The policy cannot tell."""


@functools.total_ordering
class Severity(enum.Enum):
    """How loudly operators should hear about a verdict. Ordered, as in Rust, so that
    `max(a, b)` picks the louder one."""

    NONE = "none"
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return _SEVERITY_ORDER.index(self) < _SEVERITY_ORDER.index(other)


_SEVERITY_ORDER = (Severity.NONE, Severity.INFO, Severity.WARNING, Severity.CRITICAL)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A policy's verdict on one failed delivery.

    Build one with a constructor for the action and refine it with the chainable builders::

        Verdict.dead_letter(Class.PERMANENT).because("amount is negative") \\
            .alert(Severity.CRITICAL).label("rule", "negative-amount")

    The fields are `action`, `class_`, `reason`, `severity` (what `alert(...)` set; Python
    cannot name a field and a method alike) and `labels`, a tuple of `(key, value)` pairs in
    the order they were added.
    """

    action: Action
    class_: Class
    reason: str = ""
    severity: Severity = Severity.NONE
    labels: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def retry_after(ms: int) -> Verdict:
        """Retry after `ms` milliseconds, spending one attempt. Class: transient."""
        return Verdict(Retry(ms), Class.TRANSIENT)

    @staticmethod
    def retry_now() -> Verdict:
        """Retry at once, spending one attempt. Class: transient."""
        return Verdict.retry_after(0)

    @staticmethod
    def delay(ms: int) -> Verdict:
        """Redeliver after `ms` milliseconds without spending an attempt. Class: transient."""
        return Verdict(Delay(ms), Class.TRANSIENT)

    @staticmethod
    def pause(ms: int) -> Verdict:
        """Pause the whole route for `ms` milliseconds (see `Pause`); this message is
        redelivered after it without spending an attempt. Class: transient."""
        return Verdict(Pause(ms), Class.TRANSIENT)

    @staticmethod
    def dead_letter(class_: Class) -> Verdict:
        """Dead-letter the message with the given class."""
        return Verdict(DeadLetter(), _check_class(class_))

    @staticmethod
    def discard(class_: Class) -> Verdict:
        """Drop the message (the host audits it). Give a reason with `because`."""
        return Verdict(Discard(), _check_class(class_))

    def because(self, reason: str) -> Verdict:
        """Set the reason operators read."""
        if not isinstance(reason, str):
            raise TypeError(f"a reason is a str, got {type(reason).__name__}")
        return replace(self, reason=reason)

    def alert(self, severity: Severity) -> Verdict:
        """Set the alert severity (read back as `severity`)."""
        if not isinstance(severity, Severity):
            raise TypeError(f"alert takes a Severity, got {severity!r}")
        return replace(self, severity=severity)

    def with_class(self, class_: Class) -> Verdict:
        """Override the class (Rust's `Verdict::class`)."""
        return replace(self, class_=_check_class(class_))

    def label(self, key: str, value: str) -> Verdict:
        """Add a key/value label; order is kept and duplicates are allowed."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"a label is two str, got {key!r}, {value!r}")
        return replace(self, labels=(*self.labels, (key, value)))

    @property
    def delay_ms(self) -> int | None:
        """When the message is delivered again (a retry, a delay or a pause), `None` for the
        terminal actions."""
        if isinstance(self.action, (Retry, Delay, Pause)):
            return self.action.ms
        return None


def _check_class(class_: Class) -> Class:
    if not isinstance(class_, Class):
        raise TypeError(f"expected a Class, got {class_!r}")
    return class_
