// The export glue, driven as the component's bindings drive it, against a fake host.

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';

import { Backoff, Class, ConfigError, Severity, Verdict, exportPolicy, info, schema as s } from '../src/index.js';
import { bindHost } from '../src/host.js';

class Orders {
  static config = s.struct('Config', { max_attempts: s.u32 }, { default: () => ({ max_attempts: 5 }) });

  constructor(config) {
    if (config.max_attempts === 0) throw new ConfigError('config.max_attempts: must be at least 1');
    if (config.max_attempts === 13) throw new Error('unlucky');
    this.max = config.max_attempts;
    this.backoff = Backoff.exponential(200, 30_000);
  }

  decide(f) {
    if (f.kind() === 'boom') throw new RangeError('kaboom');
    if (f.kind() === 'bad') return { action: { tag: 'retry', val: 5 }, class: 'transient', reason: '', alert: 'none', labels: [] };
    const dead = f.neverRetry();
    if (dead) return dead;
    if (f.attempt() >= this.max) return Verdict.deadLetter(Class.Exhausted).because(`${f.kind()} on ${f.topic()}`).withAlert(Severity.Warning);
    return Verdict.retryAfter(this.backoff.delayMs(f.attempt(), f.jitterSeed())).label('topic', f.topic()).label('t', f.topic());
  }
}

const INFO = { name: 'orders', version: '1.2.0', description: 'Orders retry 5 times.' };

function fakeHost() {
  const calls = [];
  const logs = [];
  const host = {
    log: (level, message) => logs.push([level, message]),
    topic: () => (calls.push('topic'), 'orders.created'),
    messageId: () => 'm-1',
    consumerGroup: () => 'g',
    errorMessage: () => 'e',
    publishedAtMs: () => undefined,
    contentType: () => undefined,
    payloadSize: () => 0,
    headers: () => [],
    payload: () => new Uint8Array(),
    history: () => [],
    extension: () => undefined,
  };
  return { host, calls, logs };
}

function record(kind, attempt = 1) {
  return {
    attempt,
    deferrals: 0,
    firstFailedAtMs: 0n,
    nowMs: 10n,
    deadlineMs: undefined,
    error: { kind, retryAfterMs: undefined, rejected: false },
    jitterSeed: 7n,
    stats: { windowMs: 0n, deliveries: 0, failures: 0, consecutiveFailures: 0 },
  };
}

afterEach(() => bindHost(undefined));

test('describe returns the given info', () => {
  assert.deepEqual(exportPolicy(Orders, INFO).describe(), INFO);
});

test('init returns ok, or the config error as err', () => {
  const d = exportPolicy(Orders, INFO);
  assert.deepEqual(d.init(''), { tag: 'ok', val: undefined });
  assert.deepEqual(d.init('{"max_attempts": 0}'), { tag: 'err', val: 'config.max_attempts: must be at least 1' });
  assert.deepEqual(d.init('{"max_atempts": 3}'), {
    tag: 'err',
    val: 'config.max_atempts: unknown field `max_atempts`, expected `max_attempts`',
  });
});

test('decide lifts the record, fetches details once, and lowers the verdict', () => {
  const { host, calls } = fakeHost();
  bindHost(host);
  const d = exportPolicy(Orders, INFO);
  d.init('{"max_attempts": 3}');
  assert.deepEqual(d.decide(record('db.timeout', 1)), {
    action: { tag: 'retry', val: 200n },
    class: 'transient',
    reason: '',
    alert: 'none',
    labels: [
      { key: 'topic', value: 'orders.created' },
      { key: 't', value: 'orders.created' },
    ],
  });
  assert.deepEqual(calls, ['topic'], 'the topic is fetched once per decision');
  assert.deepEqual(d.decide(record('db.timeout', 3)), {
    action: { tag: 'dead-letter' },
    class: 'exhausted',
    reason: 'db.timeout on orders.created',
    alert: 'warning',
    labels: [],
  });
  assert.deepEqual(d.decide(record('auth.denied')).action, { tag: 'dead-letter' });
});

test('a refused config keeps the previous policy', () => {
  const d = exportPolicy(Orders, INFO);
  d.init('{"max_attempts": 2}');
  assert.equal(d.init('{"max_attempts": 0}').tag, 'err');
  assert.equal(d.decide(record('db.timeout', 2)).class, 'exhausted');
});

test('panics are logged through the host, then trap', () => {
  const { host, logs } = fakeHost();
  bindHost(host);
  const d = exportPolicy(Orders, INFO);
  assert.throws(() => d.decide(record('db.timeout')), (e) => e instanceof Error && !('payload' in e));
  assert.match(logs.at(-1)[1], /^panic: Error: decide called before a successful init/);
  assert.throws(() => d.init('{"max_attempts": 13}'), /policy panicked: unlucky/);
  assert.equal(logs.at(-1)[0], 'error');
  assert.match(logs.at(-1)[1], /^panic: Error: unlucky\n/);
  d.init('{}');
  assert.throws(() => d.decide(record('boom')), /policy panicked: kaboom/);
  assert.match(logs.at(-1)[1], /^panic: RangeError: kaboom/);
  assert.throws(() => d.decide(record('bad')), /verdict.action.val must be a u64 BigInt/);
});

test('log goes to the host when bound', () => {
  const { host, logs } = fakeHost();
  bindHost(host);
  info('hello');
  assert.deepEqual(logs, [['info', 'hello']]);
});

test('exportPolicy checks its arguments', () => {
  assert.throws(() => exportPolicy({}, INFO), /must be a class with a decide/);
  assert.throws(() => exportPolicy(Orders, { name: 'x', version: '1' }), /info.description/);
});

test('Math.random inside decide is drawn from the failure: the same seed, the same numbers', () => {
  class Dice {
    static config = s.struct('Config', {}, { default: () => ({}) });
    decide() {
      return Verdict.retryAfter(Math.floor(Math.random() * 1_000_000)).because(String(Math.random()));
    }
  }
  const { host } = fakeHost();
  bindHost(host);
  const decider = exportPolicy(Dice, INFO);
  assert.deepEqual(decider.init('{}'), { tag: 'ok', val: undefined });
  const seeded = (seed) => decider.decide({ ...record('db.timeout'), jitterSeed: seed });
  const first = seeded(7n);
  Math.random(); // whatever happens between decisions does not carry over
  assert.deepEqual(seeded(7n), first);
  assert.notDeepEqual(seeded(8n), first);
});
