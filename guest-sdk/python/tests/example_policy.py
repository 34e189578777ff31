"""The policy the SDK's README teaches with (the Rust SDK's crate example, ported)."""

from __future__ import annotations

from dataclasses import dataclass

import sdk_support  # noqa: F401  (puts the SDK on the path)
import verdict_sdk
from verdict_sdk import U32, Backoff, Class, ConfigError, Failure, Jitter, Verdict


@dataclass
class Config:
    """Per-topic config: `{"max_attempts": 5}`."""

    max_attempts: U32 = 5


class Orders(verdict_sdk.Policy):
    name = "orders"
    version = "1.0.0"
    description = "Retries transient order failures, dead-letters the rest."
    Config = Config

    def __init__(self, config: Config) -> None:
        if config.max_attempts == 0:
            raise ConfigError("config.max_attempts: must be at least 1")
        self.max_attempts = config.max_attempts
        self.backoff = Backoff.exponential(base_ms=200, cap_ms=30_000, jitter=Jitter.FULL)

    def decide(self, f: Failure) -> Verdict:
        # Payload, schema, format and auth errors never heal: dead-letter them at once.
        if (dead := f.never_retry()) is not None:
            return dead
        if f.attempt >= self.max_attempts:
            return Verdict.dead_letter(Class.EXHAUSTED).because(
                f"{f.kind} failed {f.attempt} times"
            )
        backoff = self.backoff.delay_ms(f.attempt, f.jitter_seed)
        # Honour the consumer's Retry-After when it asks for longer (up to a minute).
        hint = min(f.retry_after_ms or 0, 60_000)
        return Verdict.retry_after(max(backoff, hint))


Decider = verdict_sdk.export(Orders)
