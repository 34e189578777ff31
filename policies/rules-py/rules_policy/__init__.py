"""`rules`: a table-driven retry/dead-letter policy, in Python.

The Python port of `policies/rules` (Rust), verdict for verdict: same config, same
decisions, same reasons and labels, config errors naming the same fields.

Error-kind patterns map to an outcome (retry with a backoff strategy and an attempt limit,
dead-letter with a class, or discard). The first matching rule wins; kinds no rule matches
take `default`. Explicit rejects and expired messages are dead-lettered before any rule is
consulted. With an empty config the rules are the standard error-type table (see the
README), so `{"max_attempts": 3}` is all a topic needs to retry 3 times.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import verdict_sdk
from verdict_sdk import (
    U32,
    Backoff,
    Class,
    ConfigError,
    Failure,
    Jitter,
    Severity,
    Verdict,
)

from .table import Rule, default_rules

__all__ = ["Config", "Decider", "OnExpired", "Rule", "Rules", "default_rules"]


class OnExpired(enum.Enum):
    """What to do with an expired message."""

    DEAD_LETTER = "dead_letter"
    """Dead-letter it, class expired."""
    DISCARD = "discard"
    """Discard it (audited by the host)."""


def _default_outcome() -> Rule:
    return Rule(retry=Backoff.exponential(base_ms=1_000, cap_ms=60_000, jitter=Jitter.FULL))


@dataclass
class Config:
    """Per-topic configuration."""

    max_attempts: U32 = 5
    """Deliveries a message gets before a retrying rule gives up (1-based, this one
    included): 5 means retries after attempts 1-4 and dead-letter at 5."""
    rules: list[Rule] = field(default_factory=default_rules)
    """The rules, first match wins. Omitted: the standard error-type table."""
    default: Rule = field(default_factory=_default_outcome)
    """What kinds no rule matches get (a rule without `match`)."""
    honor_retry_after: bool = True
    """Wait at least as long as the consumer's `Retry-After` hint."""
    on_expired: OnExpired = OnExpired.DEAD_LETTER
    """What happens to a message past its deadline: `dead_letter` (class expired) or
    `discard`."""
    reject_alert: Severity = Severity.WARNING
    """Alert severity for explicit rejects."""


@dataclass(frozen=True)
class _Retry:
    backoff: Backoff
    max_attempts: int


@dataclass(frozen=True)
class _DeadLetter:
    class_: Class


@dataclass(frozen=True)
class _Discard:
    pass


@dataclass(frozen=True)
class _Compiled:
    """A validated rule: what `Rule` resolves to once exactly one outcome is known."""

    name: str
    kinds: tuple[str, ...]
    then: _Retry | _DeadLetter | _Discard
    alert: Severity | None


def _compile(where: str, rule: Rule, max_attempts: int) -> _Compiled:
    if rule.name is not None:
        name = rule.name
    elif rule.match:
        name = rule.match[0]
    else:
        name = where
    then: _Retry | _DeadLetter | _Discard
    if rule.retry is not None and rule.dead_letter is None and not rule.discard:
        try:
            rule.retry.validate()
        except ValueError as e:
            raise ConfigError(f"config.{where}.retry: {e}") from None
        limit = rule.max_attempts if rule.max_attempts is not None else max_attempts
        if limit == 0:
            raise ConfigError(f"config.{where}.max_attempts: must be at least 1")
        then = _Retry(rule.retry, limit)
    elif rule.retry is None and rule.dead_letter is not None and not rule.discard:
        then = _DeadLetter(rule.dead_letter)
    elif rule.retry is None and rule.dead_letter is None and rule.discard:
        then = _Discard()
    else:
        raise ConfigError(
            f"config.{where}: give exactly one of `retry`, `dead_letter` or `discard: true`"
        )
    return _Compiled(name, tuple(rule.match), then, rule.alert)


class Rules(verdict_sdk.Policy):
    """The policy."""

    name = "rules"
    version = "0.1.0"
    description = (
        "Table-driven retry and dead-letter rules by error kind "
        "(the standard error-type table by default)."
    )
    Config = Config

    def __init__(self, c: Config) -> None:
        if c.max_attempts == 0:
            raise ConfigError("config.max_attempts: must be at least 1")
        rules = []
        for i, rule in enumerate(c.rules):
            if not rule.match:
                raise ConfigError(f"config.rules[{i}].match: needs at least one kind pattern")
            rules.append(_compile(f"rules[{i}]", rule, c.max_attempts))
        if c.default.match:
            raise ConfigError(
                "config.default.match: the default applies to every kind; remove `match`"
            )
        self._rules = tuple(rules)
        self._default = _compile("default", c.default, c.max_attempts)
        self._honor_retry_after = c.honor_retry_after
        self._on_expired = c.on_expired
        self._reject_alert = c.reject_alert

    def decide(self, f: Failure) -> Verdict:
        if f.rejected:
            return (
                Verdict.dead_letter(Class.REJECTED)
                .because("the consumer rejected the message")
                .alert(self._reject_alert)
            )
        if f.is_expired:
            if self._on_expired is OnExpired.DEAD_LETTER:
                v = Verdict.dead_letter(Class.EXPIRED)
            else:
                v = Verdict.discard(Class.EXPIRED)
            return v.because("the message passed its deadline")
        rule = next(
            (r for r in self._rules if any(f.kind_is(k) for k in r.kinds)),
            self._default,
        )
        match rule.then:
            case _Retry(max_attempts=limit) if f.attempt >= limit:
                verdict = (
                    Verdict.dead_letter(Class.EXHAUSTED)
                    .because(f"{f.kind} failed {f.attempt} times (limit {limit})")
                    .alert(rule.alert if rule.alert is not None else Severity.WARNING)
                )
            case _Retry(backoff=backoff):
                delay = backoff.delay_ms(f.attempt, f.jitter_seed)
                if self._honor_retry_after:
                    hint = f.retry_after_ms
                    delay = max(delay, hint if hint is not None else 0)
                verdict = Verdict.retry_after(delay).because(f"{f.kind} is transient")
            case _DeadLetter(class_=class_):
                verdict = (
                    Verdict.dead_letter(class_)
                    .because(f"{f.kind} is not retryable")
                    .alert(rule.alert if rule.alert is not None else Severity.NONE)
                )
            case _Discard():
                verdict = (
                    Verdict.discard(Class.PERMANENT)
                    .because(f"{f.kind} is discarded by rule")
                    .alert(rule.alert if rule.alert is not None else Severity.NONE)
                )
        return verdict.label("rule", rule.name)


Decider = verdict_sdk.export(Rules)
