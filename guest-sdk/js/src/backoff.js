// Retry delays: immediate, fixed, exponential with a cap, random in a range and a stepped
// ladder, with full, equal and decorrelated jitter.
//
// Every delay is a pure function of the attempt and the failure's jitter seed, computed in
// u64 arithmetic on BigInt exactly as `verdict_types::Backoff::delay_ms` does, so a JS policy
// and the host (or a Rust policy) give the same failure the same delay, bit for bit.

import { tagged, u64, unitEnum, vec, withDefault } from './config.js';

const MASK = (1n << 64n) - 1n;
const U32_MAX = 0xffff_ffff;

/**
 * A u64 from a BigInt or a safe integer Number.
 * @param {bigint | number} value @param {string} what names the value in the error
 * @returns {bigint}
 */
export function toU64(value, what) {
  if (typeof value === 'number' && Number.isSafeInteger(value)) value = BigInt(value);
  if (typeof value !== 'bigint' || value < 0n || value > MASK) {
    throw new TypeError(`${what} must be a u64 (a BigInt or safe integer from 0 to 2^64-1), got ${describe(value)}`);
  }
  return value;
}

function toU32(value, what) {
  if (typeof value === 'bigint' && value >= 0n && value <= BigInt(U32_MAX)) value = Number(value);
  if (!Number.isInteger(value) || value < 0 || value > U32_MAX) {
    throw new TypeError(`${what} must be a u32 (an integer from 0 to 4294967295), got ${describe(value)}`);
  }
  return value;
}

function describe(value) {
  return typeof value === 'bigint' ? `${value}n` : typeof value === 'string' ? JSON.stringify(value) : String(value);
}

/**
 * Vigna's SplitMix64: the contract's deterministic generator, identical on every platform
 * (the Rust `verdict_types::SplitMix64`).
 */
export class SplitMix64 {
  /** @param {bigint | number} seed */
  constructor(seed) {
    this.state = toU64(seed, 'seed');
  }

  /** The next 64 random bits. @returns {bigint} */
  nextU64() {
    this.state = (this.state + 0x9e37_79b9_7f4a_7c15n) & MASK;
    let z = this.state;
    z = ((z ^ (z >> 30n)) * 0xbf58_476d_1ce4_e5b9n) & MASK;
    z = ((z ^ (z >> 27n)) * 0x94d0_49bb_1331_11ebn) & MASK;
    return z ^ (z >> 31n);
  }

  /**
   * Uniform in `[lo, hi]` (inclusive); `lo` when `hi < lo`. Lemire's multiply-shift, as Rust
   * computes it in u128.
   * @param {bigint} lo @param {bigint} hi @returns {bigint}
   */
  between(lo, hi) {
    if (hi <= lo) return lo;
    const span = hi - lo + 1n;
    return lo + ((this.nextU64() * span) >> 64n);
  }
}

/**
 * The jitter seed the host gives a delivery: FNV-1a over the message id's UTF-8 bytes and
 * the attempt's 4 little-endian bytes, then one SplitMix64 step (`verdict_types::jitter_seed`).
 * @param {string} messageId @param {number} attempt @returns {bigint}
 */
export function jitterSeed(messageId, attempt) {
  const n = toU32(attempt, 'attempt');
  const bytes = [...new TextEncoder().encode(messageId), n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, n >>> 24];
  let h = 0xcbf2_9ce4_8422_2325n;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = (h * 0x0000_0100_0000_01b3n) & MASK;
  }
  return new SplitMix64(h).nextU64();
}

/**
 * How to spread delays so that messages failing together do not retry together.
 * @readonly
 * @enum {'none' | 'full' | 'equal' | 'decorrelated'}
 */
export const Jitter = Object.freeze({
  /** Exactly the computed delay. */
  None: 'none',
  /** Uniform in `[0, delay]`. */
  Full: 'full',
  /** `delay / 2` plus uniform in `[0, delay / 2]`. */
  Equal: 'equal',
  /** `min(cap, uniform(base, previous * 3))` walked from the first attempt (exponential
   * only; elsewhere it acts as full jitter). */
  Decorrelated: 'decorrelated',
});

const JITTERS = Object.values(Jitter);

function toJitter(jitter) {
  if (!JITTERS.includes(jitter)) {
    throw new TypeError(`jitter must be one of ${JITTERS.join(', ')}, got ${describe(jitter)}`);
  }
  return jitter;
}

const min = (a, b) => (a < b ? a : b);
const max = (a, b) => (a > b ? a : b);

/**
 * A retry delay strategy. Build one with the static constructors, or let a config schema
 * decode it from the config form `{"strategy": "exponential", "base_ms": 100, "cap_ms":
 * 60000, "jitter": "full"}` (`schema.backoff`). Its fields are the config form's
 * (`strategy`, `delay_ms`, `base_ms`, `cap_ms`, `min_ms`, `max_ms`, `steps_ms`, `jitter`),
 * which also keeps them apart from the `delayMs()` method; durations are BigInt milliseconds.
 */
export class Backoff {
  /** @private */
  constructor(strategy, params) {
    /** @type {'immediate' | 'fixed' | 'exponential' | 'random' | 'ladder'} */
    this.strategy = strategy;
    Object.assign(this, params);
    Object.freeze(this);
  }

  /** Retry at once. */
  static immediate() {
    return new Backoff('immediate', {});
  }

  /** The same delay every time. @param {bigint | number} delayMs @param {Jitter} [jitter] */
  static fixed(delayMs, jitter = Jitter.None) {
    return new Backoff('fixed', { delay_ms: toU64(delayMs, 'delayMs'), jitter: toJitter(jitter) });
  }

  /**
   * `base * 2^(attempt - 1)`, capped.
   * @param {bigint | number} baseMs @param {bigint | number} capMs @param {Jitter} [jitter]
   */
  static exponential(baseMs, capMs, jitter = Jitter.None) {
    return new Backoff('exponential', {
      base_ms: toU64(baseMs, 'baseMs'),
      cap_ms: toU64(capMs, 'capMs'),
      jitter: toJitter(jitter),
    });
  }

  /** Uniformly random in `[minMs, maxMs]`. @param {bigint | number} minMs @param {bigint | number} maxMs */
  static random(minMs, maxMs) {
    return new Backoff('random', { min_ms: toU64(minMs, 'minMs'), max_ms: toU64(maxMs, 'maxMs') });
  }

  /**
   * Attempt N waits `stepsMs[N - 1]`, the last step repeating.
   * @param {Array<bigint | number>} stepsMs @param {Jitter} [jitter]
   */
  static ladder(stepsMs, jitter = Jitter.None) {
    const steps = Object.freeze(stepsMs.map((s, i) => toU64(s, `stepsMs[${i}]`)));
    return new Backoff('ladder', { steps_ms: steps, jitter: toJitter(jitter) });
  }

  /**
   * What is wrong with the parameters, naming the field; `undefined` when nothing is.
   * @returns {string | undefined}
   */
  validate() {
    switch (this.strategy) {
      case 'exponential':
        if (this.base_ms === 0n) return `base_ms must be at least 1 (cap_ms is ${this.cap_ms})`;
        if (this.cap_ms < this.base_ms) return `cap_ms (${this.cap_ms}) must not be below base_ms (${this.base_ms})`;
        return undefined;
      case 'random':
        if (this.min_ms > this.max_ms) return `min_ms (${this.min_ms}) must not be above max_ms (${this.max_ms})`;
        return undefined;
      case 'ladder':
        return this.steps_ms.length === 0 ? 'steps_ms must name at least one step' : undefined;
      default:
        return undefined;
    }
  }

  /** True when, for a fixed seed, delays never shrink as attempts grow. */
  isMonotone() {
    switch (this.strategy) {
      case 'immediate':
        return true;
      case 'fixed':
      case 'exponential':
        return this.jitter === Jitter.None;
      case 'random':
        return this.min_ms === this.max_ms;
      default:
        return this.jitter === Jitter.None && this.steps_ms.every((s, i) => i === 0 || this.steps_ms[i - 1] <= s);
    }
  }

  /** The largest delay this strategy can produce. @returns {bigint} */
  maxDelayMs() {
    switch (this.strategy) {
      case 'immediate':
        return 0n;
      case 'fixed':
        return this.delay_ms;
      case 'exponential':
        return this.cap_ms;
      case 'random':
        return this.max_ms;
      default:
        return this.steps_ms.reduce(max, 0n);
    }
  }

  /**
   * The delay before the next delivery after failed attempt `attempt` (1-based), jittered
   * with `seed` (the failure's jitter seed).
   * @param {number} attempt a u32
   * @param {bigint | number} seed a u64
   * @returns {bigint}
   */
  delayMs(attempt, seed) {
    const a = Math.max(toU32(attempt, 'attempt'), 1);
    const rng = new SplitMix64(seed);
    switch (this.strategy) {
      case 'immediate':
        return 0n;
      case 'fixed':
        return apply(this.jitter, this.delay_ms, rng);
      case 'exponential': {
        if (this.jitter === Jitter.Decorrelated) {
          const base = this.base_ms;
          const cap = max(this.cap_ms, base);
          let delay = base;
          for (let i = 0; i < a; i++) delay = min(rng.between(base, min(delay * 3n, MASK)), cap);
          return delay;
        }
        const shift = BigInt(Math.min(a - 1, 63));
        const raw = min(min(this.base_ms << shift, MASK), this.cap_ms);
        return apply(this.jitter, raw, rng);
      }
      case 'random':
        return rng.between(this.min_ms, max(this.max_ms, this.min_ms));
      default: {
        const index = Math.min(a - 1, Math.max(this.steps_ms.length - 1, 0));
        return apply(this.jitter, this.steps_ms[index] ?? 0n, rng);
      }
    }
  }

  /** The config form, with u64s as decimal strings when they exceed 2^53. */
  toJSON() {
    const n = (v) => (v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : String(v));
    switch (this.strategy) {
      case 'immediate':
        return { strategy: 'immediate' };
      case 'fixed':
        return { strategy: 'fixed', delay_ms: n(this.delay_ms), jitter: this.jitter };
      case 'exponential':
        return { strategy: 'exponential', base_ms: n(this.base_ms), cap_ms: n(this.cap_ms), jitter: this.jitter };
      case 'random':
        return { strategy: 'random', min_ms: n(this.min_ms), max_ms: n(this.max_ms) };
      default:
        return { strategy: 'ladder', steps_ms: this.steps_ms.map(n), jitter: this.jitter };
    }
  }
}

function apply(jitter, delay, rng) {
  switch (jitter) {
    case Jitter.None:
      return delay;
    case Jitter.Equal:
      return delay / 2n + rng.between(0n, delay - delay / 2n);
    default:
      return rng.between(0n, delay);
  }
}

/** Schema of a {@link Jitter} in a config: `"full"`. */
export const jitterSchema = unitEnum('Jitter', JITTERS);
const jitterField = withDefault(jitterSchema, () => Jitter.None);

/**
 * Schema of a {@link Backoff} in a config, as the Rust SDK reads it: a `strategy` tag and
 * snake_case fields, unknown fields refused, `jitter` defaulting to `none`.
 */
export const backoffSchema = tagged(
  'Backoff',
  'strategy',
  {
    immediate: null,
    fixed: { delay_ms: u64, jitter: jitterField },
    exponential: { base_ms: u64, cap_ms: u64, jitter: jitterField },
    random: { min_ms: u64, max_ms: u64 },
    ladder: { steps_ms: vec(u64), jitter: jitterField },
  },
  (strategy, f) => {
    switch (strategy) {
      case 'immediate':
        return Backoff.immediate();
      case 'fixed':
        return Backoff.fixed(f.delay_ms, f.jitter);
      case 'exponential':
        return Backoff.exponential(f.base_ms, f.cap_ms, f.jitter);
      case 'random':
        return Backoff.random(f.min_ms, f.max_ms);
      default:
        return Backoff.ladder(f.steps_ms, f.jitter);
    }
  },
);
