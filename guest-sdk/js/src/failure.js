// The failed delivery a policy decides on.
//
// Small facts (attempt, kind, clock, seed, statistics) arrive with every call. The bulky or
// rarely needed parts (topic, ids, error message, headers, payload, history) are fetched
// from the host the first time a policy asks for them, through the instance's `details`
// resource, then kept for the decision: a policy that reads only the kind and the attempt
// never pays for copying a payload, nor for making the handle.

import { toU64 } from './backoff.js';
import { fromJson } from './config.js';
import { kindMatches, neverRetry } from './kinds.js';

const U32_MAX = 0xffff_ffff;

function toU32(value, what) {
  if (!Number.isInteger(value) || value < 0 || value > U32_MAX) {
    throw new TypeError(`${what} must be a u32 (an integer from 0 to 4294967295), got ${String(value)}`);
  }
  return value;
}

/** Recent statistics of the topic, over a window chosen by the host. */
export class TopicStats {
  /**
   * @param {{windowMs?: bigint | number, deliveries?: number, failures?: number,
   *   consecutiveFailures?: number}} [stats]
   */
  constructor({ windowMs = 0n, deliveries = 0, failures = 0, consecutiveFailures = 0 } = {}) {
    /** Length of the window in milliseconds. */
    this.windowMs = toU64(windowMs, 'windowMs');
    /** Deliveries attempted in the window (successful and failed). */
    this.deliveries = toU32(deliveries, 'deliveries');
    /** Failed deliveries in the window. */
    this.failures = toU32(failures, 'failures');
    /** Failures in a row on this topic, this one included; reset by any success. */
    this.consecutiveFailures = toU32(consecutiveFailures, 'consecutiveFailures');
    Object.freeze(this);
  }

  /** Share of successful deliveries in the window, from 0 to 1; 1 when the window saw no
   * delivery (no evidence of trouble). */
  successRate() {
    if (this.deliveries === 0) return 1;
    const failures = Math.min(this.failures, this.deliveries);
    return (this.deliveries - failures) / this.deliveries;
  }
}

/** @typedef {{name: string, value: string}} Header */
/** @typedef {{atMs: bigint, kind: string, message: string}} AttemptRecord */

// What a detail is when nobody gave it: the neutral values of the Rust SDK's test failures.
const NEUTRAL = {
  topic: '',
  messageId: '',
  consumerGroup: '',
  errorMessage: '',
  contentType: undefined,
  publishedAtMs: undefined,
  firstFailedAtMs: 0n,
  payloadSize: 0,
  headers: [],
  payload: new Uint8Array(0),
  history: [],
};

// Rust's `eq_ignore_ascii_case`: only ASCII letters fold.
function asciiLower(s) {
  return s.replace(/[A-Z]/g, (c) => c.toLowerCase());
}

/**
 * One failed delivery.
 *
 * Inside a component the host fills it in. In native unit tests, build one with
 * `new Failure(kind)` and the `with*` setters; everything not set has a neutral default
 * (attempt 1, no deadline, empty payload, clock at 0):
 *
 * ```js
 * const f = new Failure('http.503').withAttempt(3).withRetryAfterMs(2_000);
 * f.kind();         // 'http.503'
 * f.retryAfterMs(); // 2000n
 * ```
 *
 * u64 values (times, durations, the seed) are BigInts; setters also take safe integers.
 */
export class Failure {
  #kind;
  #retryAfterMs;
  #rejected = false;
  #attempt = 1;
  #deferrals = 0;
  #nowMs = 0n;
  #deadlineMs;
  #jitterSeed = 0n;
  #stats = new TopicStats();
  /** @type {Map<string, unknown>} details known so far */
  #known = new Map();
  /** @type {(() => import('./host.js').Details | undefined) | undefined} where unknown details come from */
  #details;
  /** This failure's position in the call, which every `details` method takes first. */
  #position = 0;
  /** @type {Map<string, string | undefined>} */
  #extensions = new Map();

  /** A failure of the given error kind at attempt 1, with every other field neutral.
   * @param {string} kind */
  constructor(kind) {
    if (typeof kind !== 'string') throw new TypeError(`kind must be a string, got ${typeof kind}`);
    this.#kind = kind;
  }

  /**
   * A failure the host passed to `decide` or `decide-batch`, with the details fetched on
   * first use from the `details` resource `details()` gives (made when first asked for),
   * at the failure's position in the call (0 in `decide`, its index in `decide-batch`).
   * Used by the export glue; the host answers about the call in progress, so the failure
   * means nothing once its call returns.
   * @param {object} record the contract's `failure` record as the bindings lift it
   * @param {() => import('./host.js').Details | undefined} details
   * @param {number} [position]
   * @returns {Failure}
   */
  static fromRecord(record, details, position = 0) {
    const f = new Failure(record.error.kind);
    f.#retryAfterMs = record.error.retryAfterMs;
    f.#rejected = record.error.rejected;
    f.#attempt = record.attempt;
    f.#deferrals = record.deferrals;
    f.#nowMs = record.nowMs;
    f.#deadlineMs = record.deadlineMs;
    f.#jitterSeed = record.jitterSeed;
    f.#stats = new TopicStats(record.stats);
    f.#details = details;
    f.#position = toU32(position, 'position');
    return f;
  }

  #detail(name) {
    if (!this.#known.has(name)) {
      const details = this.#details?.();
      this.#known.set(name, details ? details[name](this.#position) : NEUTRAL[name]);
    }
    return this.#known.get(name);
  }

  /** The machine-readable error kind, e.g. `db.timeout`. */
  kind() {
    return this.#kind;
  }

  /** True when the glob `pattern` (`*` any run, `?` one character) matches the kind.
   * @param {string} pattern */
  kindIs(pattern) {
    return kindMatches(pattern, this.#kind);
  }

  /**
   * The dead letter for a kind that never succeeds on a retry (payload, schema and format
   * errors: poison; `auth.*`: permanent, alert critical), `undefined` for any other kind.
   * Start `decide` with it and the admission gate's "never-retry kinds are not retried"
   * check holds whatever the rest of the policy does.
   */
  neverRetry() {
    return neverRetry(this.#kind);
  }

  /** The consumer's `Retry-After` hint in milliseconds. @returns {bigint | undefined} */
  retryAfterMs() {
    return this.#retryAfterMs;
  }

  /** True when the consumer explicitly asked for dead-lettering. */
  rejected() {
    return this.#rejected;
  }

  /** 1-based count of failed deliveries, this one included. */
  attempt() {
    return this.#attempt;
  }

  /** How many `delay` verdicts this message already received. */
  deferrals() {
    return this.#deferrals;
  }

  /** When the first delivery failed (ms since the epoch; fetched on first use).
   * @returns {bigint} */
  firstFailedAtMs() {
    return this.#detail('firstFailedAtMs');
  }

  /** The host's clock for this decision (ms since the epoch); use it, never `Date.now()`.
   * @returns {bigint} */
  nowMs() {
    return this.#nowMs;
  }

  /** When the message was published, if known (fetched on first use). @returns {bigint | undefined} */
  publishedAtMs() {
    return this.#detail('publishedAtMs');
  }

  /** The message's deadline (TTL), if it has one. @returns {bigint | undefined} */
  deadlineMs() {
    return this.#deadlineMs;
  }

  /** True when the message has a deadline and now has reached it. */
  isExpired() {
    return this.#deadlineMs !== undefined && this.#nowMs >= this.#deadlineMs;
  }

  /** Milliseconds left before the deadline (0 once expired), `undefined` without one.
   * @returns {bigint | undefined} */
  timeLeftMs() {
    if (this.#deadlineMs === undefined) return undefined;
    return this.#deadlineMs > this.#nowMs ? this.#deadlineMs - this.#nowMs : 0n;
  }

  /** Age of the message: since publication when known, else since its first failure.
   * @returns {bigint} */
  ageMs() {
    const since = this.publishedAtMs() ?? this.firstFailedAtMs();
    return this.#nowMs > since ? this.#nowMs - since : 0n;
  }

  /** The seed for deterministic jitter. @returns {bigint} */
  jitterSeed() {
    return this.#jitterSeed;
  }

  /** Recent statistics of the topic. */
  stats() {
    return this.#stats;
  }

  /** Size of the payload in bytes, known without fetching the payload. @returns {number} */
  payloadSize() {
    return this.#detail('payloadSize');
  }

  /** The topic (fetched on first use). @returns {string} */
  topic() {
    return this.#detail('topic');
  }

  /** The message id (fetched on first use). @returns {string} */
  messageId() {
    return this.#detail('messageId');
  }

  /** The consumer group (fetched on first use). @returns {string} */
  consumerGroup() {
    return this.#detail('consumerGroup');
  }

  /** The human-readable error message (fetched on first use). Classify by `kind()`, not by
   * this text. @returns {string} */
  errorMessage() {
    return this.#detail('errorMessage');
  }

  /** The payload's content type (fetched on first use). @returns {string | undefined} */
  contentType() {
    return this.#detail('contentType');
  }

  /** All headers (fetched on first use). @returns {readonly Header[]} */
  headers() {
    return this.#detail('headers');
  }

  /** One header by name, ASCII case-insensitive. @param {string} name @returns {string | undefined} */
  header(name) {
    const wanted = asciiLower(name);
    return this.headers().find((h) => asciiLower(h.name) === wanted)?.value;
  }

  /** The payload bytes (fetched on first use). @returns {Uint8Array} */
  payload() {
    return this.#detail('payload');
  }

  /**
   * The payload decoded as JSON with `schema` (see `schema` in the SDK); throws a
   * `DecodeError` naming the failing path (`a.b: invalid type: ...`).
   * @template T @param {import('./config.js').Schema<T>} schema @returns {T}
   */
  payloadJson(schema) {
    return fromJson(this.payload(), schema);
  }

  /** Earlier failed attempts, oldest first (fetched on first use). @returns {readonly AttemptRecord[]} */
  history() {
    return this.#detail('history');
  }

  /**
   * A named fact the host adds without changing the contract's records; `undefined` for a key
   * it does not know. The gateway fills `source` (`embedded`, `nats` or `rabbitmq`), `route`
   * (the route's topic pattern) and `gateway` (its instance name).
   * @param {string} key @returns {string | undefined}
   */
  extension(key) {
    const details = this.#extensions.has(key) ? undefined : this.#details?.();
    if (details) this.#extensions.set(key, details.extension(this.#position, key));
    return this.#extensions.get(key);
  }

  // Setters for native tests and tools; a component never needs them.

  /** Add an extension fact. @param {string} key @param {string} value */
  withExtension(key, value) {
    this.#extensions.set(String(key), String(value));
    return this;
  }

  /** Set the attempt (1-based). @param {number} attempt */
  withAttempt(attempt) {
    this.#attempt = toU32(attempt, 'attempt');
    return this;
  }

  /** Set the number of earlier deferrals. @param {number} deferrals */
  withDeferrals(deferrals) {
    this.#deferrals = toU32(deferrals, 'deferrals');
    return this;
  }

  /** Set the `Retry-After` hint. @param {bigint | number} ms */
  withRetryAfterMs(ms) {
    this.#retryAfterMs = toU64(ms, 'retryAfterMs');
    return this;
  }

  /** Mark the failure as an explicit reject by the consumer. @param {boolean} rejected */
  withRejected(rejected) {
    this.#rejected = Boolean(rejected);
    return this;
  }

  /** Set the clock. @param {bigint | number} ms */
  withNowMs(ms) {
    this.#nowMs = toU64(ms, 'nowMs');
    return this;
  }

  /** Set when the first delivery failed. @param {bigint | number} ms */
  withFirstFailedAtMs(ms) {
    this.#known.set('firstFailedAtMs', toU64(ms, 'firstFailedAtMs'));
    return this;
  }

  /** Set the publication time. @param {bigint | number} ms */
  withPublishedAtMs(ms) {
    this.#known.set('publishedAtMs', toU64(ms, 'publishedAtMs'));
    return this;
  }

  /** Set the deadline (TTL). @param {bigint | number} ms */
  withDeadlineMs(ms) {
    this.#deadlineMs = toU64(ms, 'deadlineMs');
    return this;
  }

  /** Set the jitter seed. @param {bigint | number} seed */
  withJitterSeed(seed) {
    this.#jitterSeed = toU64(seed, 'jitterSeed');
    return this;
  }

  /** Set the topic statistics. @param {TopicStats | ConstructorParameters<typeof TopicStats>[0]} stats */
  withStats(stats) {
    this.#stats = stats instanceof TopicStats ? stats : new TopicStats(stats);
    return this;
  }

  /** Set the topic. @param {string} topic */
  withTopic(topic) {
    this.#known.set('topic', String(topic));
    return this;
  }

  /** Set the message id. @param {string} id */
  withMessageId(id) {
    this.#known.set('messageId', String(id));
    return this;
  }

  /** Set the consumer group. @param {string} group */
  withConsumerGroup(group) {
    this.#known.set('consumerGroup', String(group));
    return this;
  }

  /** Set the error message. @param {string} message */
  withErrorMessage(message) {
    this.#known.set('errorMessage', String(message));
    return this;
  }

  /** Set the payload's content type. @param {string} type */
  withContentType(type) {
    this.#known.set('contentType', String(type));
    return this;
  }

  /** Add a header. @param {string} name @param {string} value */
  withHeader(name, value) {
    const headers = [...(this.#known.get('headers') ?? [])];
    headers.push({ name: String(name), value: String(value) });
    this.#known.set('headers', headers);
    return this;
  }

  /** Set the payload (and its size); a string is taken as UTF-8 text.
   * @param {Uint8Array | string | ArrayLike<number>} payload */
  withPayload(payload) {
    const bytes = typeof payload === 'string' ? new TextEncoder().encode(payload) : Uint8Array.from(payload);
    this.#known.set('payload', bytes);
    this.#known.set('payloadSize', Math.min(bytes.length, U32_MAX));
    return this;
  }

  /** Set the history of earlier attempts. @param {Array<{atMs: bigint | number, kind: string, message?: string}>} history */
  withHistory(history) {
    this.#known.set(
      'history',
      history.map((a) => ({ atMs: toU64(a.atMs, 'atMs'), kind: String(a.kind), message: String(a.message ?? '') })),
    );
    return this;
  }
}
