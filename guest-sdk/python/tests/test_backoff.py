"""Backoff strategies and the generator: the Rust crate's own tests (types/src/backoff.rs),
reference values of SplitMix64, and the checks that make a huge attempt cheap yet exact."""

from __future__ import annotations

import unittest
from dataclasses import dataclass

import sdk_support  # noqa: F401  (puts the SDK on the path)
from verdict_sdk import Backoff, ConfigError, Jitter, SplitMix64, jitter_seed, parse_config
from verdict_sdk import backoff as backoff_module
from verdict_sdk.config import DecodeError, from_json

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


@dataclass
class RetryConfig:
    retry: Backoff | None = None


class SplitMix64Test(unittest.TestCase):
    def test_matches_the_reference_generator(self) -> None:
        # Vigna's splitmix64.c: state 0 gives 0xe220a8397b1dcdaf first; seed 1234567 is the
        # sequence widely used to check ports.
        rng = SplitMix64(0)
        self.assertEqual(rng.next_u64(), 0xE220A8397B1DCDAF)
        rng = SplitMix64(1234567)
        self.assertEqual(
            [rng.next_u64() for _ in range(5)],
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821,
            ],
        )

    def test_state_wraps_at_64_bits(self) -> None:
        rng = SplitMix64(U64_MAX)
        value = rng.next_u64()
        self.assertLessEqual(value, U64_MAX)
        self.assertEqual(rng.state, (U64_MAX + SplitMix64.GAMMA) % 2**64)

    def test_between_is_inclusive_and_degenerate_ranges_draw_nothing(self) -> None:
        rng = SplitMix64(9)
        self.assertEqual(rng.between(5, 5), 5)
        self.assertEqual(rng.between(7, 3), 7)
        self.assertEqual(rng.state, 9, "an empty range must not advance the generator")
        seen = {SplitMix64(s).between(0, 1) for s in range(64)}
        self.assertEqual(seen, {0, 1})
        # The full u64 range: the span is 2^64, the product needs 128 bits.
        self.assertLessEqual(SplitMix64(3).between(0, U64_MAX), U64_MAX)

    def test_between_is_the_high_half_of_a_128_bit_product(self) -> None:
        draw = SplitMix64(11).next_u64()
        self.assertEqual(SplitMix64(11).between(10, 109), 10 + ((draw * 100) >> 64))

    def test_jitter_seed_is_stable_and_depends_on_id_and_attempt(self) -> None:
        self.assertEqual(jitter_seed("m1", 1), jitter_seed("m1", 1))
        self.assertNotEqual(jitter_seed("m1", 1), jitter_seed("m1", 2))
        self.assertNotEqual(jitter_seed("m1", 1), jitter_seed("m2", 1))
        # FNV-1a of b"" + (0).to_le_bytes(), then one SplitMix64 step, computed by hand.
        h = 0xCBF29CE484222325
        for byte in b"\0\0\0\0":
            h = ((h ^ byte) * 0x100000001B3) % 2**64
        self.assertEqual(jitter_seed("", 0), SplitMix64(h).next_u64())


class BackoffTest(unittest.TestCase):
    def test_exponential_doubles_and_caps_without_overflow(self) -> None:
        b = Backoff.exponential(base_ms=1_000, cap_ms=60_000, jitter=Jitter.NONE)
        got = [b.delay_ms(a, 7) for a in range(1, 9)]
        self.assertEqual(got, [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000])
        self.assertEqual(b.delay_ms(U32_MAX, 7), 60_000)
        self.assertTrue(b.is_monotone())

    def test_exponential_saturates_like_u64(self) -> None:
        b = Backoff.exponential(base_ms=U64_MAX // 2, cap_ms=U64_MAX)
        self.assertEqual(b.delay_ms(3, 0), U64_MAX)
        self.assertEqual(b.delay_ms(U32_MAX, 0), U64_MAX)

    def test_attempt_zero_counts_as_one(self) -> None:
        b = Backoff.exponential(base_ms=100, cap_ms=1_000)
        self.assertEqual(b.delay_ms(0, 5), b.delay_ms(1, 5))

    def test_jitter_stays_in_bounds_and_is_deterministic(self) -> None:
        full = Backoff.exponential(base_ms=100, cap_ms=10_000, jitter=Jitter.FULL)
        equal = Backoff.fixed(1_000, Jitter.EQUAL)
        deco = Backoff.exponential(base_ms=100, cap_ms=5_000, jitter=Jitter.DECORRELATED)
        random = Backoff.random(min_ms=100, max_ms=1_000)
        for seed in range(2_000):
            d = full.delay_ms(4, seed)
            self.assertLessEqual(d, 800)
            self.assertEqual(d, full.delay_ms(4, seed))
            self.assertTrue(500 <= equal.delay_ms(1, seed) <= 1_000)
            self.assertTrue(100 <= deco.delay_ms(6, seed) <= 5_000)
            self.assertTrue(100 <= random.delay_ms(2, seed) <= 1_000)

    def test_full_jitter_spreads_across_the_range(self) -> None:
        b = Backoff.fixed(1_000, Jitter.FULL)
        delays = [b.delay_ms(1, seed) for seed in range(1_000)]
        low = sum(d < 250 for d in delays)
        high = sum(d > 750 for d in delays)
        self.assertTrue(low > 150 and high > 150, f"low {low} high {high}: not spread")

    def test_a_ladder_repeats_its_last_step(self) -> None:
        ladder = Backoff.ladder([1_000, 5_000, 7_200_000])
        self.assertEqual(ladder.delay_ms(1, 0), 1_000)
        self.assertEqual(ladder.delay_ms(3, 0), 7_200_000)
        self.assertEqual(ladder.delay_ms(40, 0), 7_200_000)
        self.assertTrue(ladder.is_monotone())
        self.assertEqual(ladder.max_delay_ms(), 7_200_000)
        self.assertEqual(Backoff.ladder([]).delay_ms(3, 9), 0)
        self.assertFalse(Backoff.ladder([5, 1]).is_monotone())

    def test_each_strategy_draws_as_rust_does(self) -> None:
        seed = 123_456_789
        draw = SplitMix64(seed).next_u64()
        self.assertEqual(Backoff.immediate().delay_ms(9, seed), 0)
        self.assertEqual(Backoff.fixed(1_000, Jitter.FULL).delay_ms(1, seed), (draw * 1_001) >> 64)
        self.assertEqual(
            Backoff.fixed(1_001, Jitter.EQUAL).delay_ms(1, seed), 500 + ((draw * 502) >> 64)
        )
        self.assertEqual(
            Backoff.ladder([300], Jitter.DECORRELATED).delay_ms(2, seed), (draw * 301) >> 64
        )
        self.assertEqual(Backoff.random(10, 5).delay_ms(1, seed), 10)

    def test_decorrelated_walks_one_step_per_attempt(self) -> None:
        b = Backoff.exponential(base_ms=100, cap_ms=5_000, jitter=Jitter.DECORRELATED)
        rng = SplitMix64(77)
        delay = 100
        for attempt in range(1, 30):
            delay = min(rng.between(100, delay * 3), 5_000)
            self.assertEqual(b.delay_ms(attempt, 77), delay, f"attempt {attempt}")
        # A cap below the base acts as the base, and a zero base never moves.
        self.assertEqual(
            Backoff.exponential(base_ms=300, cap_ms=10, jitter=Jitter.DECORRELATED).delay_ms(5, 1),
            300,
        )
        self.assertEqual(
            Backoff.exponential(base_ms=0, cap_ms=10, jitter=Jitter.DECORRELATED).delay_ms(5, 1), 0
        )

    def test_decorrelated_shortcut_for_huge_attempts_is_exact(self) -> None:
        """Past the window the result comes from the last steps only; it must equal the
        full walk for every strategy shape, including caps far above the base."""
        window = backoff_module._WINDOW
        shapes = [
            (100, 60_000), (1, 1), (1, U64_MAX), (500, 501), (7, 2**40), (2**62, U64_MAX), (U64_MAX, U64_MAX)
        ]
        for base, cap in shapes:
            for seed in (0, 1, 42, U64_MAX):
                for attempt in (window + 1, window + 2, window + 777):
                    rng = SplitMix64(seed)
                    delay = base
                    for _ in range(attempt):
                        delay = min(rng.between(base, min(delay * 3, U64_MAX)), cap)
                    b = Backoff.exponential(base_ms=base, cap_ms=cap, jitter=Jitter.DECORRELATED)
                    with self.subTest(base=base, cap=cap, seed=seed, attempt=attempt):
                        self.assertEqual(b.delay_ms(attempt, seed), delay)
        # And the largest attempt answers at once.
        deco = Backoff.exponential(base_ms=100, cap_ms=60_000, jitter=Jitter.DECORRELATED)
        self.assertTrue(100 <= deco.delay_ms(U32_MAX, 5) <= 60_000)

    def test_out_of_range_inputs_are_refused(self) -> None:
        b = Backoff.fixed(10)
        with self.assertRaises(ValueError):
            b.delay_ms(U32_MAX + 1, 0)
        with self.assertRaises(ValueError):
            b.delay_ms(1, -1)
        with self.assertRaises(ValueError):
            Backoff.fixed(U64_MAX + 1)

    def test_validation_names_the_field(self) -> None:
        with self.assertRaisesRegex(ValueError, "cap_ms"):
            Backoff.exponential(base_ms=500, cap_ms=100).validate()
        with self.assertRaisesRegex(ValueError, "base_ms"):
            Backoff.exponential(base_ms=0, cap_ms=100).validate()
        with self.assertRaisesRegex(ValueError, "min_ms"):
            Backoff.random(min_ms=5, max_ms=1).validate()
        with self.assertRaisesRegex(ValueError, "steps_ms"):
            Backoff.ladder([]).validate()
        Backoff.immediate().validate()

    def test_max_delay(self) -> None:
        self.assertEqual(Backoff.immediate().max_delay_ms(), 0)
        self.assertEqual(Backoff.fixed(7).max_delay_ms(), 7)
        self.assertEqual(Backoff.exponential(1, 9).max_delay_ms(), 9)
        self.assertEqual(Backoff.random(1, 8).max_delay_ms(), 8)


class BackoffConfigSyntaxTest(unittest.TestCase):
    """The JSON form, as serde reads Rust's `#[serde(tag = "strategy")]` enum."""

    def read(self, text: str) -> Backoff:
        return from_json(text, Backoff)

    def test_config_syntax(self) -> None:
        self.assertEqual(
            self.read('{"strategy":"exponential","base_ms":100,"cap_ms":900,"jitter":"full"}'),
            Backoff.exponential(100, 900, Jitter.FULL),
        )
        self.assertEqual(self.read('{"delay_ms": 5, "strategy": "fixed"}'), Backoff.fixed(5))
        self.assertEqual(
            self.read('{"strategy":"ladder","steps_ms":[1,2],"jitter":"equal"}'),
            Backoff.ladder([1, 2], Jitter.EQUAL),
        )
        self.assertEqual(self.read('{"strategy":"random","min_ms":1,"max_ms":2}'), Backoff.random(1, 2))
        # serde's other forms: a struct as an array (tag first), an enum as a one-key map.
        self.assertEqual(self.read('["fixed", 250]'), Backoff.fixed(250))
        self.assertEqual(
            self.read('{"strategy":"fixed","delay_ms":1,"jitter":{"full":null}}'),
            Backoff.fixed(1, Jitter.FULL),
        )
        # A unit variant ignores other fields, as serde's internally tagged unit variants do.
        self.assertEqual(self.read('{"strategy":"immediate","base_ms":1}'), Backoff.immediate())

    def test_errors_name_the_field(self) -> None:
        cases = [
            ('{"strategy":"exponential","base":100}', "unknown field `base`"),
            ('{"base_ms":100}', "missing field `strategy`"),
            ('{"strategy":"fixed","strategy":"fixed","delay_ms":1}', "duplicate field `strategy`"),
            # The tag is checked where it stands, before a later duplicate is seen.
            ('{"strategy":"expo","strategy":"fixed"}', "strategy: unknown variant `expo`"),
            ('{"delay_ms":NaN,"strategy":"expo"}', "delay_ms: expected value"),
            ('{"strategy":"expo"}', "strategy: unknown variant `expo`"),
            ('{"strategy":1}', "strategy: invalid type: integer `1`"),
            ('{"strategy":"exponential","base_ms":100}', "missing field `cap_ms`"),
            ('{"strategy":"fixed","delay_ms":-1}', "delay_ms: invalid value: integer `-1`, expected u64"),
            ('{"strategy":"fixed","delay_ms":1.5}', "delay_ms: invalid type: floating point"),
            ('{"strategy":"fixed","delay_ms":1,"jitter":"some"}', "jitter: unknown variant `some`"),
            ('{"strategy":"ladder","steps_ms":[1,"2"]}', "steps_ms[1]: invalid type: string"),
            ('["exponential", 100]', "invalid length 1, expected struct variant Backoff::Exponential"),
            ("[]", "missing field `strategy`"),
            ('"fixed"', "expected internally tagged enum Backoff"),
        ]
        for text, needle in cases:
            with self.subTest(text=text):
                with self.assertRaises(DecodeError) as caught:
                    self.read(text)
                self.assertIn(needle, str(caught.exception))

    def test_inside_a_config_the_path_is_complete(self) -> None:
        with self.assertRaises(ConfigError) as caught:
            parse_config(RetryConfig, '{"retry": {"strategy": "exponential", "base_ms": "x", "cap_ms": 1}}')
        self.assertTrue(str(caught.exception).startswith("config.retry.base_ms: "), caught.exception)


if __name__ == "__main__":
    unittest.main()
