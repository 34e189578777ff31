import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Backoff, Jitter, SplitMix64, fromJson, jitterSeed, schema } from '../src/index.js';

const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

test('splitmix64 gives the reference sequence', () => {
  // Vigna's SplitMix64 from seed 0, as published with the algorithm.
  const r = new SplitMix64(0n);
  assert.equal(r.nextU64(), 0xe220a8397b1dcdafn);
  assert.equal(r.nextU64(), 0x6e789e6aa1b965f4n);
  assert.equal(r.nextU64(), 0x06c45d188009454fn);
});

test('between is inclusive, and lo when hi is not above it', () => {
  const r = new SplitMix64(9n);
  assert.equal(r.between(5n, 5n), 5n);
  assert.equal(r.between(7n, 3n), 7n);
  const max = (1n << 64n) - 1n;
  for (let i = 0; i < 200; i++) {
    const v = r.between(0n, max);
    assert.ok(v >= 0n && v <= max);
  }
});

test('exponential doubles and caps without overflow', () => {
  const b = Backoff.exponential(1_000, 60_000);
  assert.deepEqual(
    range(1, 8).map((a) => b.delayMs(a, 7n)),
    [1_000n, 2_000n, 4_000n, 8_000n, 16_000n, 32_000n, 60_000n, 60_000n],
  );
  assert.equal(b.delayMs(0xffff_ffff, 7n), 60_000n);
  assert.equal(b.delayMs(0, 7n), 1_000n, 'attempt 0 counts as 1');
  assert.ok(b.isMonotone());
  const huge = Backoff.exponential((1n << 64n) - 1n, (1n << 64n) - 1n);
  assert.equal(huge.delayMs(64, 0n), (1n << 64n) - 1n, 'saturates at u64::MAX');
});

test('jitter stays in bounds and is deterministic', () => {
  const full = Backoff.exponential(100, 10_000, Jitter.Full);
  const equal = Backoff.fixed(1_000, Jitter.Equal);
  const deco = Backoff.exponential(100, 5_000, Jitter.Decorrelated);
  const random = Backoff.random(100, 1_000);
  for (let seed = 0n; seed < 2_000n; seed++) {
    const d = full.delayMs(4, seed);
    assert.ok(d <= 800n, `full jitter ${d} > 800`);
    assert.equal(d, full.delayMs(4, seed));
    const e = equal.delayMs(1, seed);
    assert.ok(e >= 500n && e <= 1_000n, `equal jitter ${e}`);
    const c = deco.delayMs(6, seed);
    assert.ok(c >= 100n && c <= 5_000n, `decorrelated ${c}`);
    const r = random.delayMs(2, seed);
    assert.ok(r >= 100n && r <= 1_000n);
  }
});

test('full jitter spreads across the range', () => {
  const b = Backoff.fixed(1_000, Jitter.Full);
  let low = 0;
  let high = 0;
  for (let seed = 0n; seed < 1_000n; seed++) {
    const d = b.delayMs(1, seed);
    if (d < 250n) low++;
    if (d > 750n) high++;
  }
  assert.ok(low > 150 && high > 150, `low ${low} high ${high}: not spread`);
});

test('a ladder repeats its last step', () => {
  const l = Backoff.ladder([1_000, 5_000, 7_200_000]);
  assert.equal(l.delayMs(1, 0n), 1_000n);
  assert.equal(l.delayMs(3, 0n), 7_200_000n);
  assert.equal(l.delayMs(40, 0n), 7_200_000n);
  assert.ok(l.isMonotone());
  assert.equal(l.maxDelayMs(), 7_200_000n);
  assert.equal(Backoff.ladder([]).delayMs(3, 1n), 0n, 'an empty ladder waits 0, as Rust does');
});

test('validation names the field', () => {
  assert.match(Backoff.exponential(500, 100).validate(), /^cap_ms \(100\) must not be below base_ms \(500\)$/);
  assert.match(Backoff.exponential(0, 100).validate(), /^base_ms must be at least 1 \(cap_ms is 100\)$/);
  assert.match(Backoff.random(5, 1).validate(), /^min_ms \(5\) must not be above max_ms \(1\)$/);
  assert.match(Backoff.ladder([]).validate(), /steps_ms/);
  assert.equal(Backoff.fixed(5).validate(), undefined);
});

test('config syntax round-trips', () => {
  const b = fromJson('{"strategy":"exponential","base_ms":100,"cap_ms":900,"jitter":"full"}', schema.backoff);
  assert.deepEqual(b, Backoff.exponential(100, 900, Jitter.Full));
  assert.deepEqual(b.toJSON(), { strategy: 'exponential', base_ms: 100, cap_ms: 900, jitter: 'full' });
  assert.deepEqual(fromJson(JSON.stringify(b), schema.backoff), b);
  assert.throws(() => fromJson('{"strategy":"exponential","base":100}', schema.backoff), /unknown field `base`/);
  assert.deepEqual(fromJson('{"strategy":"fixed","delay_ms":5}', schema.backoff), Backoff.fixed(5, Jitter.None));
  assert.deepEqual(fromJson('{"strategy":"immediate","ignored":1}', schema.backoff), Backoff.immediate());
});

test('jitter seeds are FNV-1a of the id and attempt, then one SplitMix64 step', () => {
  // An independent evaluation of the same definition, step by step.
  const fnv = (bytes) => {
    let h = 0xcbf29ce484222325n;
    for (const b of bytes) h = ((h ^ BigInt(b)) * 0x100000001b3n) & ((1n << 64n) - 1n);
    return h;
  };
  const expected = new SplitMix64(fnv([...Buffer.from('order-17'), 2, 0, 0, 0])).nextU64();
  assert.equal(jitterSeed('order-17', 2), expected);
  assert.notEqual(jitterSeed('order-17', 3), expected);
});

test('u64 arguments are checked', () => {
  assert.throws(() => Backoff.fixed(-1), /delayMs must be a u64/);
  assert.throws(() => Backoff.fixed(1.5), /delayMs must be a u64/);
  assert.throws(() => Backoff.fixed(1n << 64n), /delayMs must be a u64/);
  assert.throws(() => Backoff.immediate().delayMs(-1, 0n), /attempt must be a u32/);
  assert.equal(Backoff.fixed(3).delayMs(1, 5), 3n, 'a Number seed is accepted');
});
