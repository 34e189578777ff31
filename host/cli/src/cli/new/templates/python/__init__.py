"""The retry and dead-letter policy for `{{name}}`.

`decide` answers every failed delivery: the kinds that never heal go to the dead-letter
queue at once, then your rules, then retries with exponential backoff until
`max_attempts`. Change the part marked "your rules"; the rest is what the admission gate
checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import verdict_sdk
from verdict_sdk import U32, U64, Backoff, Class, ConfigError, Failure, Jitter, Verdict

__all__ = ["Config", "Decider", "{{Type}}"]


@dataclass
class Config:
    """The route's `config = { ... }` in `verdict.toml`. Every field has a default; an
    unknown field is refused with its name when the policy is loaded."""

    max_attempts: U32 = 5
    """Failed deliveries, this one included, after which a message is dead-lettered as
    exhausted."""
    base_delay_ms: U64 = 200
    """The first retry's delay; each retry waits up to twice as long (with full jitter)."""
    max_delay_ms: U64 = 60_000
    """The longest a retry waits, a consumer's `Retry-After` included."""


class {{Type}}(verdict_sdk.Policy):
    """The policy: its config, checked once when the route is loaded."""

    # What `describe` reports; keep them equal to pyproject.toml's.
    name = "{{name}}"
    version = "0.1.0"
    description = "Retry and dead-letter policy for {{name}}."
    Config = Config

    def __init__(self, config: Config) -> None:
        # A ConfigError refuses the config; its message names the field.
        if config.max_attempts == 0:
            raise ConfigError("config.max_attempts: must be at least 1")
        if config.base_delay_ms == 0 or config.base_delay_ms > config.max_delay_ms:
            raise ConfigError("config.base_delay_ms: must be at least 1 and at most max_delay_ms")
        self.config = config
        self.backoff = Backoff.exponential(
            base_ms=config.base_delay_ms, cap_ms=config.max_delay_ms, jitter=Jitter.FULL
        )

    def decide(self, f: Failure) -> Verdict:
        # Payload, schema, format and auth errors never heal: dead-letter them at once.
        if (dead := f.never_retry()) is not None:
            return dead
        # The consumer said it can never take this message.
        if f.rejected:
            return Verdict.dead_letter(Class.PERMANENT).because("rejected by the consumer")

        # ---- Your rules go here. For example:
        # if f.kind_is("http.429"):
        #     # Rate limited: wait as long as the consumer asks, without spending an attempt.
        #     asked = f.retry_after_ms if f.retry_after_ms is not None else 5_000
        #     return Verdict.delay(min(asked, self.config.max_delay_ms))
        # ---- End of your rules.

        if f.attempt >= self.config.max_attempts:
            return Verdict.dead_letter(Class.EXHAUSTED).because(
                f"{f.kind} failed {f.attempt} times"
            )
        backoff = self.backoff.delay_ms(f.attempt, f.jitter_seed)
        # Wait at least as long as the consumer asked (`Retry-After`), within max_delay_ms.
        asked = min(f.retry_after_ms or 0, self.config.max_delay_ms)
        return Verdict.retry_after(max(backoff, asked))


Decider = verdict_sdk.export({{Type}})
"""The component's export: componentize-py looks for `Decider` in this module."""
