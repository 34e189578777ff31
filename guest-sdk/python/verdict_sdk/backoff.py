"""Retry delays: immediate, fixed, exponential with a cap, random in a range and a stepped
ladder, with full, equal and decorrelated jitter.

Every delay is a pure function of the attempt and the failure's jitter seed, and it is the
same number, bit for bit, as `verdict_types::Backoff::delay_ms` computes in Rust: the host's
fallback, a Rust policy and a Python policy all agree on a replayed decision. That is why
the arithmetic below is written out with explicit 64-bit masks and saturation instead of
Python's unbounded integers.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from . import config as _config

__all__ = [
    "Backoff",
    "Exponential",
    "Fixed",
    "Immediate",
    "Jitter",
    "Ladder",
    "Random",
    "SplitMix64",
    "jitter_seed",
]

_MASK = 0xFFFF_FFFF_FFFF_FFFF
_U32_MAX = 0xFFFF_FFFF

# Decorrelated jitter walks one generator step per attempt. Past this many attempts only the
# last `_WINDOW` steps are walked (see `_decorrelated`), so a huge attempt costs no more
# than a small one while the result stays exact.
_WINDOW = 4096


class SplitMix64:
    """The contract's deterministic generator (Vigna's SplitMix64), identical on every
    platform: the host and every policy derive the same numbers from the same seed."""

    __slots__ = ("state",)

    GAMMA: ClassVar[int] = 0x9E37_79B9_7F4A_7C15

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK

    def next_u64(self) -> int:
        """The next 64 random bits."""
        self.state = (self.state + self.GAMMA) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK
        return z ^ (z >> 31)

    def between(self, lo: int, hi: int) -> int:
        """Uniform in `[lo, hi]` (inclusive); `lo` when `hi < lo`, drawing nothing then."""
        if hi <= lo:
            return lo
        span = hi - lo + 1
        return lo + ((self.next_u64() * span) >> 64)


def jitter_seed(message_id: str, attempt: int) -> int:
    """The jitter seed the host gives a delivery: FNV-1a over the message id's UTF-8 bytes
    and the attempt's 4 little-endian bytes, then one SplitMix64 step. Natively it lets a
    test use the seed the host would have used."""
    h = 0xCBF2_9CE4_8422_2325
    data = message_id.encode("utf-8") + _u32(attempt, "attempt").to_bytes(4, "little")
    for byte in data:
        h = ((h ^ byte) * 0x0000_0100_0000_01B3) & _MASK
    return SplitMix64(h).next_u64()


class Jitter(enum.Enum):
    """How to spread delays so that many messages failing together do not retry together."""

    NONE = "none"
    """Exactly the computed delay."""
    FULL = "full"
    """Uniform in `[0, delay]`: the least work overall."""
    EQUAL = "equal"
    """`delay // 2` plus uniform in `[0, delay - delay // 2]`: never much shorter than planned."""
    DECORRELATED = "decorrelated"
    """`min(cap, uniform(base, previous * 3))`, walked from the first attempt (exponential
    only; elsewhere it acts as full jitter)."""


def _u64(value: int, name: str) -> int:
    if type(value) is not int or not 0 <= value <= _MASK:
        raise ValueError(f"{name} must be a u64 (0..=2^64-1), got {value!r}")
    return value


def _u32(value: int, name: str) -> int:
    if type(value) is not int or not 0 <= value <= _U32_MAX:
        raise ValueError(f"{name} must be a u32 (0..=2^32-1), got {value!r}")
    return value


def _sat_mul(a: int, b: int) -> int:
    return min(a * b, _MASK)


def _apply(jitter: Jitter, delay: int, rng: SplitMix64) -> int:
    if jitter is Jitter.NONE:
        return delay
    if jitter is Jitter.EQUAL:
        return delay // 2 + rng.between(0, delay - delay // 2)
    return rng.between(0, delay)


class Backoff:
    """A retry delay strategy: `Immediate`, `Fixed`, `Exponential`, `Random` or `Ladder`.

    Build one with the constructors (`Backoff.exponential(base_ms=100, cap_ms=60_000,
    jitter=Jitter.FULL)`) or, in a config class, declare a field of type `Backoff`: it then
    reads the same JSON as Rust, tagged by `strategy`:
    `{"strategy": "exponential", "base_ms": 100, "cap_ms": 60000, "jitter": "full"}`.
    """

    __slots__ = ()

    #: The `strategy` tags, in Rust's declaration order (the order serde lists them in when
    #: it refuses an unknown one).
    STRATEGIES: ClassVar[tuple[str, ...]] = ("immediate", "fixed", "exponential", "random", "ladder")

    @staticmethod
    def immediate() -> Immediate:
        """Retry at once (pair it with the host's retry budget)."""
        return Immediate()

    @staticmethod
    def fixed(delay_ms: int, jitter: Jitter = Jitter.NONE) -> Fixed:
        """The same delay every time."""
        return Fixed(delay_ms, jitter)

    @staticmethod
    def exponential(base_ms: int, cap_ms: int, jitter: Jitter = Jitter.NONE) -> Exponential:
        """`base * 2^(attempt - 1)`, capped."""
        return Exponential(base_ms, cap_ms, jitter)

    @staticmethod
    def random(min_ms: int, max_ms: int) -> Random:
        """Uniformly random in `[min_ms, max_ms]` (e.g. for deadlocks)."""
        return Random(min_ms, max_ms)

    @staticmethod
    def ladder(steps_ms: Sequence[int], jitter: Jitter = Jitter.NONE) -> Ladder:
        """A stepped ladder: attempt N waits `steps_ms[N - 1]`, the last step repeating."""
        return Ladder(tuple(steps_ms), jitter)

    def delay_ms(self, attempt: int, seed: int) -> int:
        """The delay before the next delivery after failed attempt `attempt` (1-based)."""
        attempt = max(_u32(attempt, "attempt"), 1)
        return self._delay(attempt, SplitMix64(_u64(seed, "seed")))

    def _delay(self, attempt: int, rng: SplitMix64) -> int:
        raise NotImplementedError

    def validate(self) -> None:
        """Check the parameters; raises `ValueError` naming the offending field."""

    def is_monotone(self) -> bool:
        """True when, for a fixed seed, delays never shrink as attempts grow (no jitter and a
        non-decreasing ladder)."""
        raise NotImplementedError

    def max_delay_ms(self) -> int:
        """The largest delay this strategy can produce."""
        raise NotImplementedError

    @classmethod
    def __verdict_decode__(cls, value: Any, at: _config.Path) -> Backoff:
        """Read the config form exactly as serde reads Rust's internally tagged `Backoff`, in
        the same order, so the same first error is reported: the `strategy` tag (anywhere in
        the object, or first in an array) is checked where it stands while the other entries
        are only parsed; then the variant reads its fields, refusing unknown ones, except
        `immediate`, which ignores them as serde's unit variants do."""
        if isinstance(value, _config.JsonObject):
            variant: type[Backoff] | None = None
            rest: Any = _config.JsonObject()
            for key, item in value:
                if key == "strategy":
                    if variant is not None:
                        raise _config.DecodeError(at, "duplicate field `strategy`")
                    variant = cls._variant(item, at.key("strategy"))
                else:
                    _config.check_ignored(item, at.key(key))
                    rest.append((key, item))
            if variant is None:
                raise _config.DecodeError(at, "missing field `strategy`")
            first = 0
        elif type(value) is list:
            if not value:
                raise _config.DecodeError(at, "missing field `strategy`")
            variant = cls._variant(value[0], at.index(0))
            rest = value[1:]
            for i, item in enumerate(rest, start=1):
                _config.check_ignored(item, at.index(i))
            # The tag was element 0, so the fields' paths start at index 1.
            first = 1
        else:
            raise _config.invalid_type(value, "internally tagged enum Backoff", at)
        if variant is Immediate:
            return Immediate()
        name = f"struct variant Backoff::{variant.__name__}"
        return _config.decode_struct(variant, rest, at, first_index=first, name=name)

    @classmethod
    def _variant(cls, tag: Any, at: _config.Path) -> type[Backoff]:
        if isinstance(tag, str):
            _config.check_ignored(tag, at)
            if tag in _VARIANTS:
                return _VARIANTS[tag]
            raise _config.DecodeError(at, _config.unknown("variant", tag, cls.STRATEGIES))
        _config.check_ignored(tag, at)
        raise _config.invalid_type(tag, "variant identifier", at)


@dataclass(frozen=True, slots=True)
class Immediate(Backoff):
    """Retry at once."""

    def _delay(self, attempt: int, rng: SplitMix64) -> int:
        return 0

    def is_monotone(self) -> bool:
        return True

    def max_delay_ms(self) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class Fixed(Backoff):
    """The same delay every time. The delay is the `delay_ms_` attribute (`delay_ms` in JSON):
    `delay_ms` is the method every strategy has."""

    delay_ms_: _config.U64
    jitter: Jitter = Jitter.NONE

    def __post_init__(self) -> None:
        _u64(self.delay_ms_, "delay_ms")

    def _delay(self, attempt: int, rng: SplitMix64) -> int:
        return _apply(self.jitter, self.delay_ms_, rng)

    def is_monotone(self) -> bool:
        return self.jitter is Jitter.NONE

    def max_delay_ms(self) -> int:
        return self.delay_ms_


@dataclass(frozen=True, slots=True)
class Exponential(Backoff):
    """`base * 2^(attempt - 1)`, capped."""

    base_ms: _config.U64
    cap_ms: _config.U64
    jitter: Jitter = Jitter.NONE

    def __post_init__(self) -> None:
        _u64(self.base_ms, "base_ms")
        _u64(self.cap_ms, "cap_ms")

    def validate(self) -> None:
        if self.base_ms == 0:
            raise ValueError(f"base_ms must be at least 1 (cap_ms is {self.cap_ms})")
        if self.cap_ms < self.base_ms:
            raise ValueError(f"cap_ms ({self.cap_ms}) must not be below base_ms ({self.base_ms})")

    def _delay(self, attempt: int, rng: SplitMix64) -> int:
        if self.jitter is Jitter.DECORRELATED:
            return _decorrelated(self.base_ms, max(self.cap_ms, self.base_ms), attempt, rng)
        shift = min(attempt - 1, 63)
        raw = min(_sat_mul(self.base_ms, 1 << shift), self.cap_ms)
        return _apply(self.jitter, raw, rng)

    def is_monotone(self) -> bool:
        return self.jitter is Jitter.NONE

    def max_delay_ms(self) -> int:
        return self.cap_ms


def _decorrelated(base: int, cap: int, attempt: int, rng: SplitMix64) -> int:
    """`attempt` steps of `delay = min(cap, between(base, delay * 3))` from `delay = base`.

    Each step is a non-decreasing function of the previous delay, and every delay lies in
    `[base, cap]`. So for a large attempt, running only the last `_WINDOW` steps from both
    bounds gives an exact answer whenever the two runs end equal (coupling from the past):
    any real history lies between them. SplitMix64 is a counter, so the generator is
    positioned at step `attempt - _WINDOW` directly. In the rare case the runs have not met,
    the full walk is done.
    """

    def step(delay: int, draw: int) -> int:
        # `rng.between(base, sat_mul(delay, 3))` with the draw made explicit; the bound is
        # above `base` whenever base >= 1, so every step draws exactly once.
        span = _sat_mul(delay, 3) - base + 1
        return min(base + ((draw * span) >> 64), cap)

    if base == 0:
        # `between(0, 0)` returns 0 without drawing: the walk never leaves 0.
        return 0
    if attempt > _WINDOW:
        skipped = attempt - _WINDOW
        window = SplitMix64((rng.state + skipped * SplitMix64.GAMMA) & _MASK)
        low, high = base, cap
        for _ in range(_WINDOW):
            draw = window.next_u64()
            low, high = step(low, draw), step(high, draw)
        if low == high:
            return low
    delay = base
    for _ in range(attempt):
        delay = step(delay, rng.next_u64())
    return delay


@dataclass(frozen=True, slots=True)
class Random(Backoff):
    """Uniformly random in `[min_ms, max_ms]`."""

    min_ms: _config.U64
    max_ms: _config.U64

    def __post_init__(self) -> None:
        _u64(self.min_ms, "min_ms")
        _u64(self.max_ms, "max_ms")

    def validate(self) -> None:
        if self.min_ms > self.max_ms:
            raise ValueError(f"min_ms ({self.min_ms}) must not be above max_ms ({self.max_ms})")

    def _delay(self, attempt: int, rng: SplitMix64) -> int:
        return rng.between(self.min_ms, max(self.max_ms, self.min_ms))

    def is_monotone(self) -> bool:
        return self.min_ms == self.max_ms

    def max_delay_ms(self) -> int:
        return self.max_ms


@dataclass(frozen=True, slots=True)
class Ladder(Backoff):
    """Attempt N waits `steps_ms[N - 1]`, the last step repeating."""

    steps_ms: tuple[_config.U64, ...]
    jitter: Jitter = Jitter.NONE

    def __post_init__(self) -> None:
        # A list from a caller becomes a tuple so the strategy stays hashable and immutable.
        object.__setattr__(self, "steps_ms", tuple(self.steps_ms))
        for step in self.steps_ms:
            _u64(step, "steps_ms")

    def validate(self) -> None:
        if not self.steps_ms:
            raise ValueError("steps_ms must name at least one step")

    def _delay(self, attempt: int, rng: SplitMix64) -> int:
        index = min(attempt - 1, max(len(self.steps_ms) - 1, 0))
        step = self.steps_ms[index] if index < len(self.steps_ms) else 0
        return _apply(self.jitter, step, rng)

    def is_monotone(self) -> bool:
        steps = self.steps_ms
        return self.jitter is Jitter.NONE and all(a <= b for a, b in zip(steps, steps[1:]))

    def max_delay_ms(self) -> int:
        return max(self.steps_ms, default=0)


_VARIANTS: dict[str, type[Backoff]] = {
    "immediate": Immediate,
    "fixed": Fixed,
    "exponential": Exponential,
    "random": Random,
    "ladder": Ladder,
}
