import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Failure, TopicStats, schema as s } from '../src/index.js';

test('neutral defaults', () => {
  const f = new Failure('db.timeout');
  assert.equal(f.kind(), 'db.timeout');
  assert.equal(f.attempt(), 1);
  assert.equal(f.deferrals(), 0);
  assert.equal(f.nowMs(), 0n);
  assert.equal(f.deadlineMs(), undefined);
  assert.equal(f.retryAfterMs(), undefined);
  assert.equal(f.rejected(), false);
  assert.equal(f.jitterSeed(), 0n);
  assert.equal(f.topic(), '');
  assert.deepEqual(f.headers(), []);
  assert.equal(f.payload().length, 0);
  assert.equal(f.payloadSize(), 0);
  assert.equal(f.extension('source'), undefined);
  assert.equal(f.stats().successRate(), 1);
});

test('success rate handles empty and inconsistent windows', () => {
  assert.equal(new TopicStats().successRate(), 1);
  assert.ok(Math.abs(new TopicStats({ deliveries: 10, failures: 7 }).successRate() - 0.3) < 1e-9);
  assert.equal(new TopicStats({ deliveries: 2, failures: 5 }).successRate(), 0);
});

test('expiry and age follow the given clock', () => {
  let f = new Failure('x').withNowMs(1_000).withDeadlineMs(1_000).withFirstFailedAtMs(400);
  assert.ok(f.isExpired());
  assert.equal(f.timeLeftMs(), 0n);
  assert.equal(f.ageMs(), 600n);
  f = new Failure('x').withNowMs(999).withDeadlineMs(1_000).withPublishedAtMs(100);
  assert.ok(!f.isExpired());
  assert.equal(f.timeLeftMs(), 1n);
  assert.equal(f.ageMs(), 899n);
  assert.equal(new Failure('x').withNowMs(5).withFirstFailedAtMs(9).ageMs(), 0n, 'saturates');
});

test('headers are ASCII case-insensitive and payloadJson names the path', () => {
  const f = new Failure('x').withHeader('Content-Type', 'json').withPayload('{"a":{"b":"x"}}');
  assert.equal(f.header('content-type'), 'json');
  assert.equal(f.header('CONTENT-TYPE'), 'json');
  assert.equal(f.header('missing'), undefined);
  assert.equal(f.payloadSize(), 15);
  const P = s.struct('P', { a: s.struct('Inner', { b: s.u32 }, { denyUnknownFields: false }) }, { denyUnknownFields: false });
  assert.throws(() => f.payloadJson(P), { name: 'DecodeError', message: 'a.b: invalid type: string "x", expected u32' });
  assert.deepEqual(new Failure('x').withPayload('{"a":{"b":7}}').payloadJson(P), { a: { b: 7 } });
  assert.deepEqual(new Failure('x').withPayload('[1, 18446744073709551615]').payloadJson(s.any), [1, 18446744073709551615n]);
});

test('kindIs, neverRetry and the setters', () => {
  const f = new Failure('http.503')
    .withAttempt(3)
    .withDeferrals(2)
    .withRetryAfterMs(2_000)
    .withRejected(true)
    .withJitterSeed(42n)
    .withStats({ windowMs: 60_000, deliveries: 10, failures: 4, consecutiveFailures: 3 })
    .withTopic('orders')
    .withMessageId('m-1')
    .withConsumerGroup('g')
    .withErrorMessage('upstream down')
    .withContentType('application/json')
    .withExtension('source', 'nats')
    .withHistory([{ atMs: 5, kind: 'http.503' }]);
  assert.ok(f.kindIs('http.5*'));
  assert.ok(!f.kindIs('http.4*'));
  assert.equal(f.neverRetry(), undefined);
  assert.equal(new Failure('json.parse').neverRetry().class, 'poison');
  assert.equal(f.retryAfterMs(), 2_000n);
  assert.equal(f.deferrals(), 2);
  assert.equal(f.jitterSeed(), 42n);
  assert.equal(f.stats().windowMs, 60_000n);
  assert.equal(f.stats().consecutiveFailures, 3);
  assert.equal(f.topic(), 'orders');
  assert.equal(f.messageId(), 'm-1');
  assert.equal(f.consumerGroup(), 'g');
  assert.equal(f.errorMessage(), 'upstream down');
  assert.equal(f.contentType(), 'application/json');
  assert.equal(f.extension('source'), 'nats');
  assert.deepEqual(f.history(), [{ atMs: 5n, kind: 'http.503', message: '' }]);
  assert.throws(() => f.withAttempt(-1), /attempt must be a u32/);
});

test('details from the host are fetched on first use, once per decision, at the failure\'s position', () => {
  const calls = [];
  // The `details` resource: every method takes the failure's position first.
  const details = new Proxy(
    {},
    {
      get: (_, name) => (...args) => {
        calls.push([name, ...args]);
        return {
          topic: 'orders',
          headers: [{ name: 'X-Trace', value: 't-1' }],
          payload: new Uint8Array([123, 125]),
          publishedAtMs: 100n,
          firstFailedAtMs: 50n,
          extension: args[1] === 'source' ? 'embedded' : undefined,
        }[name];
      },
    },
  );
  const record = {
    attempt: 2,
    deferrals: 0,
    nowMs: 1_000n,
    deadlineMs: undefined,
    error: { kind: 'db.timeout', retryAfterMs: undefined, rejected: false },
    jitterSeed: 9n,
    stats: { windowMs: 0n, deliveries: 0, failures: 0, consecutiveFailures: 0 },
  };
  const f = Failure.fromRecord(record, () => details, 3);
  assert.equal(f.attempt(), 2);
  assert.deepEqual(calls, [], 'nothing fetched up front');
  assert.equal(f.topic(), 'orders');
  assert.equal(f.topic(), 'orders');
  assert.equal(f.header('x-trace'), 't-1');
  assert.equal(f.headers().length, 1);
  assert.equal(f.ageMs(), 900n);
  assert.equal(f.ageMs(), 900n);
  assert.equal(f.extension('source'), 'embedded');
  assert.equal(f.extension('source'), 'embedded');
  assert.equal(f.extension('route'), undefined);
  assert.deepEqual(calls, [['topic', 3], ['headers', 3], ['publishedAtMs', 3], ['extension', 3, 'source'], ['extension', 3, 'route']]);
  // Asked of the host on first use, like every detail (published time known: not needed
  // for the age).
  calls.length = 0;
  assert.equal(f.firstFailedAtMs(), 50n);
  assert.equal(f.firstFailedAtMs(), 50n);
  assert.deepEqual(calls, [['firstFailedAtMs', 3]]);
  // `decide`'s failure is the call's only one, at position 0.
  calls.length = 0;
  assert.equal(Failure.fromRecord(record, () => details).topic(), 'orders');
  assert.deepEqual(calls, [['topic', 0]]);
  assert.throws(() => Failure.fromRecord(record, () => details, -1), /position must be a u32/);
});
