// Matching error kinds against patterns.
//
// Kinds are dotted, machine-readable names (`db.timeout`, `http.503`, `json.parse`).
// Patterns are globs where `*` matches any run of characters (dots included) and `?` one
// character: `db.*`, `http.5*`, `*.timeout`, `*`. Matching is case-sensitive and, like the
// Rust SDK's, works on UTF-8 bytes, so `?` matches one byte of a multi-byte character.

import { Class, Severity, Verdict } from './verdict.js';

const ASCII = /^[\x00-\x7f]*$/;
const utf8 = new TextEncoder();

const STAR = 0x2a;
const QUESTION = 0x3f;

/**
 * True when `pattern` matches the whole `kind`.
 * @param {string} pattern @param {string} kind @returns {boolean}
 */
export function kindMatches(pattern, kind) {
  // Both as bytes, or both as ASCII strings when nothing needs encoding.
  const asBytes = !(ASCII.test(pattern) && ASCII.test(kind));
  const p = asBytes ? utf8.encode(pattern) : pattern;
  const k = asBytes ? utf8.encode(kind) : kind;
  const at = asBytes ? (s, i) => s[i] : (s, i) => s.charCodeAt(i);
  // Iterative glob with single-star backtracking: linear in practice, no recursion, so a
  // hostile pattern in a config cannot blow the stack.
  let pi = 0;
  let ki = 0;
  let starP = -1;
  let starK = 0;
  while (ki < k.length) {
    const c = pi < p.length ? at(p, pi) : undefined;
    if (c === STAR) {
      starP = pi;
      starK = ki;
      pi++;
    } else if (c !== undefined && (c === QUESTION || c === at(k, ki))) {
      pi++;
      ki++;
    } else if (starP >= 0) {
      pi = starP + 1;
      starK++;
      ki = starK;
    } else {
      return false;
    }
  }
  for (; pi < p.length; pi++) if (at(p, pi) !== STAR) return false;
  return true;
}

/**
 * The first pattern in `patterns` that matches `kind`.
 * @param {Iterable<string>} patterns @param {string} kind @returns {string | undefined}
 */
export function firstMatch(patterns, kind) {
  for (const p of patterns) if (kindMatches(p, kind)) return p;
  return undefined;
}

/**
 * Error kinds that never succeed on a retry: a payload that does not parse, a schema or
 * format the consumer does not know, a request the consumer refuses to authorise. The same
 * list as the Rust SDK's, which the admission gate checks by default.
 */
export const NEVER_RETRY_KINDS = Object.freeze(['json.*', 'schema.*', 'format.*', 'auth.*']);

/**
 * The dead letter for a kind in {@link NEVER_RETRY_KINDS}, `undefined` for any other kind:
 * poison for a payload, schema or format error, permanent with a critical alert for `auth.*`.
 * @param {string} kind @returns {Verdict | undefined}
 */
export function neverRetry(kind) {
  const pattern = firstMatch(NEVER_RETRY_KINDS, kind);
  if (pattern === undefined) return undefined;
  if (pattern === 'auth.*') {
    return Verdict.deadLetter(Class.Permanent)
      .withAlert(Severity.Critical)
      .because('the consumer refuses it: credentials or permissions need fixing');
  }
  return Verdict.deadLetter(Class.Poison).because('the message cannot be read as it is');
}
