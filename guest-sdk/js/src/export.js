// The glue between the component model and a policy class: what `exportPolicy` returns is
// the `decider` interface the world exports (contract `verdict:policy@0.2`).

import { SplitMix64 } from './backoff.js';
import { ConfigError } from './config.js';
import { Failure } from './failure.js';
import { hostDetails } from './host.js';
import { Level, log } from './log.js';
import { instantiate } from './policy.js';
import { Class, Severity } from './verdict.js';

const ACTIONS = ['retry', 'delay', 'pause', 'dead-letter', 'discard'];
const CLASSES = Object.values(Class);
const SEVERITIES = Object.values(Severity);
const U64_MAX = (1n << 64n) - 1n;

/**
 * The policy's name, version and description, as `describe` returns them. Keep them the
 * package's own: `{ name: 'rules', version: '0.1.0', description: '...' }`.
 * @typedef {{name: string, version: string, description: string}} Info
 */

/**
 * The `verdict:policy/decider` interface as the bindings call it. A failure's on-demand
 * parts are asked of the instance's one `details` resource by its position in the call.
 * @typedef {object} Decider
 * @property {(config: string) => {tag: 'ok', val: undefined} | {tag: 'err', val: string}} init
 * @property {() => Info} describe
 * @property {(failure: object) => object} decide
 * @property {(failures: object[]) => object[]} decideBatch
 */

/**
 * Export a policy class as the component's `decider`. Use it once, in the entry module:
 *
 * ```js
 * export const decider = exportPolicy(Orders, { name: 'orders', version: '1.0.0', description: '...' });
 * ```
 *
 * `init` parses the config and builds the policy; a `ConfigError` (from the config schema or
 * the constructor) comes back as init's error string. `decide` answers one failure (position
 * 0 of `details`), `decideBatch` each failure of its list as `decide` would, in
 * order (failure `i` at position `i`). Any other exception, in any of the functions, is
 * logged through the host as `panic: ...` and then traps, so the host falls back with the
 * cause recorded, as it does for a Rust panic; a batch that traps is decided again one
 * failure at a time, so only the faulty failure gets the fallback.
 *
 * @param {import('./policy.js').PolicyClass} Policy
 * @param {Info} info
 * @returns {Decider}
 */
export function exportPolicy(Policy, info) {
  if (typeof Policy !== 'function' || typeof Policy.prototype?.decide !== 'function') {
    throw new TypeError('exportPolicy(Policy, info): Policy must be a class with a decide(failure) method');
  }
  for (const field of ['name', 'version', 'description']) {
    if (typeof info?.[field] !== 'string' || info[field] === '') {
      throw new TypeError(`exportPolicy(Policy, info): info.${field} must be a non-empty string`);
    }
  }
  const described = Object.freeze({ name: info.name, version: info.version, description: info.description });
  let policy;
  return Object.freeze({
    init(config) {
      let built;
      try {
        built = instantiate(Policy, config);
      } catch (e) {
        if (e instanceof ConfigError) return { tag: 'err', val: e.message };
        panic(e);
      }
      // A refused config leaves the previous policy in place, as the Rust glue does.
      policy = built;
      return { tag: 'ok', val: undefined };
    },

    describe() {
      return { ...described };
    },

    decide(record) {
      if (policy === undefined) panic(new Error('decide called before a successful init'));
      try {
        return decideOne(policy, record, 0);
      } catch (e) {
        panic(e);
      }
    },

    decideBatch(records) {
      if (policy === undefined) panic(new Error('decide-batch called before a successful init'));
      try {
        return records.map((record, i) => decideOne(policy, record, i));
      } catch (e) {
        panic(e);
      }
    },
  });
}

/**
 * One failure of a call, decided as if alone: its lazy parts asked of the host's `details`
 * at `position`.
 * @param {{decide: (f: Failure) => object}} policy
 * @param {object} record the contract's `failure` record
 * @param {number} position
 */
function decideOne(policy, record, position) {
  // The engine's own generator keeps its state in the instance, which serves many
  // decisions (and a batch many failures): drawn from each failure's jitter seed instead,
  // the same failure gets the same numbers, batched or not.
  Math.random = seededRandom(record.jitterSeed);
  return lower(policy.decide(Failure.fromRecord(record, hostDetails, position)));
}

/**
 * `Math.random` from SplitMix64: uniform in [0, 1) with 53 random bits.
 * @param {bigint} seed
 * @returns {() => number}
 */
function seededRandom(seed) {
  const rng = new SplitMix64(BigInt.asUintN(64, BigInt(seed)));
  return () => Number(rng.nextU64() >> 11n) / 2 ** 53;
}

/**
 * Log the cause through the host, then trap. The bindings turn a thrown value that is not an
 * Error into init's error string, so a fresh Error is thrown whatever the policy threw.
 * @returns {never}
 */
function panic(e) {
  let cause = String(e);
  if (e instanceof Error) {
    // V8 starts a stack with the message, SpiderMonkey (inside the component) does not.
    const head = `${e.name}: ${e.message}`;
    const stack = (e.stack ?? '').trimEnd();
    cause = stack.startsWith(head) ? stack : stack ? `${head}\n${stack}` : head;
  }
  try {
    log(Level.Error, `panic: ${cause}`);
  } catch {
    // Logging must not hide the panic itself.
  }
  throw new Error(`policy panicked: ${e instanceof Error ? e.message : String(e)}`);
}

// The verdict as the bindings take it, checked so a malformed one is a clear panic rather
// than an opaque TypeError inside the bindings.
function lower(v) {
  if (v === null || typeof v !== 'object') throw new TypeError(`decide must return a Verdict, got ${v === null ? 'null' : typeof v}`);
  const { action } = v;
  if (!action || !ACTIONS.includes(action.tag)) {
    throw new TypeError(`verdict.action must be one of ${ACTIONS.map((a) => `{tag: '${a}'}`).join(', ')}`);
  }
  let lowered;
  if (action.tag === 'retry' || action.tag === 'delay' || action.tag === 'pause') {
    if (typeof action.val !== 'bigint' || action.val < 0n || action.val > U64_MAX) {
      throw new TypeError(`verdict.action.val must be a u64 BigInt, got ${String(action.val)}`);
    }
    lowered = { tag: action.tag, val: action.val };
  } else {
    lowered = { tag: action.tag };
  }
  if (!CLASSES.includes(v.class)) throw new TypeError(`verdict.class must be one of ${CLASSES.join(', ')}, got ${String(v.class)}`);
  if (!SEVERITIES.includes(v.alert)) throw new TypeError(`verdict.alert must be one of ${SEVERITIES.join(', ')}, got ${String(v.alert)}`);
  if (typeof v.reason !== 'string') throw new TypeError('verdict.reason must be a string');
  if (!Array.isArray(v.labels)) throw new TypeError('verdict.labels must be an array of [key, value] pairs');
  const labels = v.labels.map((pair, i) => {
    if (!Array.isArray(pair) || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') {
      throw new TypeError(`verdict.labels[${i}] must be a [key, value] pair of strings`);
    }
    return { key: pair[0], value: pair[1] };
  });
  // Contract 0.2 lifts a reason only when there is one: an empty reason crosses as none, as
  // the Rust SDK lowers it.
  return { action: lowered, class: v.class, reason: v.reason === '' ? undefined : v.reason, alert: v.alert, labels };
}
