// The policy's answer: an action, a class, a reason, an alert and labels. The string values
// are the contract's own (`dead-letter`, `transient`, `warning`), so a verdict crosses into
// the component as it is.

import { toU64 } from './backoff.js';
import { unitEnum } from './config.js';

/**
 * Why the message failed, in the vocabulary shared by alerts, metrics and envelopes.
 * @readonly
 * @enum {'transient' | 'permanent' | 'poison' | 'exhausted' | 'expired' | 'rejected' | 'unknown'}
 */
export const Class = Object.freeze({
  /** Will probably succeed later: timeouts, 503, rate limits, deadlocks. */
  Transient: 'transient',
  /** Will never succeed: a validation or business rule failure, a missing entity, auth. */
  Permanent: 'permanent',
  /** The message itself is broken: does not parse, unknown schema version. */
  Poison: 'poison',
  /** A transient failure that kept failing past its attempt limit. */
  Exhausted: 'exhausted',
  /** The message outlived its TTL or business deadline. */
  Expired: 'expired',
  /** The consumer explicitly asked for the message to be dead-lettered. */
  Rejected: 'rejected',
  /** The policy cannot tell. */
  Unknown: 'unknown',
});

/**
 * How loudly operators should hear about a verdict.
 * @readonly
 * @enum {'none' | 'info' | 'warning' | 'critical'}
 */
export const Severity = Object.freeze({
  /** No alert. */
  None: 'none',
  /** Worth a look. */
  Info: 'info',
  /** Someone should look today. */
  Warning: 'warning',
  /** Someone should look now. */
  Critical: 'critical',
});

/**
 * What to do with the message: the contract's `action` variant as its bindings shape it.
 * @typedef {{tag: 'retry', val: bigint} | {tag: 'delay', val: bigint} | {tag: 'pause', val: bigint}
 *   | {tag: 'dead-letter'} | {tag: 'discard'}} Action
 */

const CLASSES = Object.values(Class);
const SEVERITIES = Object.values(Severity);

function check(value, allowed, what) {
  if (!allowed.includes(value)) {
    throw new TypeError(`${what} must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * A policy's verdict on one failed delivery. Build one with a static constructor for the
 * action and refine it with the chainable setters:
 *
 * ```js
 * Verdict.deadLetter(Class.Permanent)
 *   .because('amount is negative')
 *   .withAlert(Severity.Critical)
 *   .label('rule', 'negative-amount');
 * ```
 */
export class Verdict {
  /** @param {Action} action @param {Class} cls */
  constructor(action, cls) {
    /** What to do. @type {Action} */
    this.action = action;
    /** Why the message failed. @type {Class} */
    this.class = check(cls, CLASSES, 'class');
    /** A short explanation for humans. */
    this.reason = '';
    /** How loudly to alert. @type {Severity} */
    this.alert = Severity.None;
    /** Context for the dead-letter envelope and logs, in order, duplicates allowed.
     * @type {Array<[string, string]>} */
    this.labels = [];
  }

  /** Retry after `ms` milliseconds, spending one attempt. Class: transient.
   * @param {bigint | number} ms */
  static retryAfter(ms) {
    return new Verdict({ tag: 'retry', val: toU64(ms, 'retry delay') }, Class.Transient);
  }

  /** Retry at once, spending one attempt. Class: transient. */
  static retryNow() {
    return Verdict.retryAfter(0n);
  }

  /** Redeliver after `ms` milliseconds without spending an attempt. Class: transient.
   * @param {bigint | number} ms */
  static delay(ms) {
    return new Verdict({ tag: 'delay', val: toU64(ms, 'delay') }, Class.Transient);
  }

  /** Pause the whole route for `ms` milliseconds, for a dependency down for every message:
   * deliveries in flight finish, the route takes no new message until then, and one probe
   * delivery at the end decides between resuming and pausing again. This message is
   * redelivered after the pause without spending an attempt. Class: transient.
   * @param {bigint | number} ms */
  static pause(ms) {
    return new Verdict({ tag: 'pause', val: toU64(ms, 'pause') }, Class.Transient);
  }

  /** Dead-letter the message with the given class. @param {Class} cls */
  static deadLetter(cls) {
    return new Verdict({ tag: 'dead-letter' }, cls);
  }

  /** Drop the message (the host audits it); give a reason with `because`. @param {Class} cls */
  static discard(cls) {
    return new Verdict({ tag: 'discard' }, cls);
  }

  /** Set the reason operators read. @param {string} reason */
  because(reason) {
    this.reason = String(reason);
    return this;
  }

  /** Set the alert severity. @param {Severity} severity */
  withAlert(severity) {
    this.alert = check(severity, SEVERITIES, 'alert');
    return this;
  }

  /** Override the class. @param {Class} cls */
  withClass(cls) {
    this.class = check(cls, CLASSES, 'class');
    return this;
  }

  /** Add a key/value label. @param {string} key @param {string} value */
  label(key, value) {
    this.labels.push([String(key), String(value)]);
    return this;
  }

  /** When the message is delivered again (a retry, a delay or a pause), `undefined` for
   * the terminal actions. @returns {bigint | undefined} */
  delayMs() {
    const { tag } = this.action;
    return tag === 'retry' || tag === 'delay' || tag === 'pause' ? this.action.val : undefined;
  }
}

/** Schema of a {@link Class} in a config: `"poison"`. */
export const classSchema = unitEnum('Class', CLASSES);

/** Schema of a {@link Severity} in a config: `"warning"`. */
export const severitySchema = unitEnum('Severity', SEVERITIES);
