"""A rule, and the rules used when a config names none: the standard error-type table,
extended with the HTTP and transport kinds the gateway produces."""

from __future__ import annotations

from dataclasses import dataclass, field

from verdict_sdk import U32, Backoff, Class, Jitter, Severity

__all__ = ["Rule", "default_rules"]


@dataclass
class Rule:
    """One rule: the kinds it matches and exactly one of `retry`, `dead_letter` or `discard`,
    with optional refinements. The config's `default` has the same shape without `match`."""

    name: str | None = None
    """A name for logs and the `rule` label; defaults to the first pattern."""
    match: list[str] = field(default_factory=list)
    """Error-kind globs (`db.*`, `http.5*`, `*.timeout`)."""
    retry: Backoff | None = None
    """Retry with this backoff."""
    max_attempts: U32 | None = None
    """Overrides the config's `max_attempts` for this rule."""
    dead_letter: Class | None = None
    """Dead-letter at once with this class."""
    discard: bool = False
    """Discard (audited) when true."""
    alert: Severity | None = None
    """Alert severity for this rule's terminal verdicts."""


def _rule(name: str, kinds: list[str], outcome: Rule) -> Rule:
    outcome.name = name
    outcome.match = kinds
    return outcome


def _dead_letter(class_: Class, alert: Severity) -> Rule:
    return Rule(dead_letter=class_, alert=alert)


def _retry(backoff: Backoff, max_attempts: int | None) -> Rule:
    return Rule(retry=backoff, max_attempts=max_attempts)


def default_rules() -> list[Rule]:
    """The standard table: format errors and auth failures are never retried; deadlocks get a
    random delay and 3 attempts; business exceptions a fixed delay and 2; timeouts and other
    transient kinds exponential backoff up to the config's `max_attempts` (5 by default)."""
    return [
        _rule(
            "format",
            ["json.*", "schema.*", "format.*", "decode.*"],
            _dead_letter(Class.POISON, Severity.WARNING),
        ),
        _rule(
            "permanent",
            [
                "auth.*",
                "validation.*",
                "http.400",
                "http.401",
                "http.403",
                "http.404",
                "http.422",
            ],
            _dead_letter(Class.PERMANENT, Severity.WARNING),
        ),
        _rule(
            "deadlock",
            ["db.deadlock"],
            _retry(Backoff.random(min_ms=100, max_ms=1_000), 3),
        ),
        _rule(
            "business",
            ["biz.*"],
            _retry(Backoff.fixed(1_000, Jitter.NONE), 2),
        ),
        _rule(
            "rate-limited",
            ["http.429", "*.rate_limited"],
            _retry(Backoff.exponential(base_ms=1_000, cap_ms=60_000, jitter=Jitter.EQUAL), None),
        ),
        _rule(
            "transient",
            ["*.timeout", "http.5*", "transport.*", "db.*", "net.*"],
            _retry(Backoff.exponential(base_ms=500, cap_ms=60_000, jitter=Jitter.FULL), None),
        ),
    ]
