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

// The host side of a call: its `log` import, and the `details` resource class, answering for
// failure `i` from `failures[i]` (a position past them answers empty values, as the host
// does), recording every method call with the position it named and every handle made.
function fakeHost(failures = [{ topic: 'orders.created', messageId: 'm-1' }]) {
  const calls = [];
  const asked = [];
  const logs = [];
  const made = [];
  const at = (i) => failures[i] ?? { topic: '', messageId: '' };
  const methods = {
    topic: (i) => (calls.push('topic'), asked.push(['topic', i]), at(i).topic),
    messageId: (i) => (asked.push(['messageId', i]), at(i).messageId),
    consumerGroup: () => 'g',
    errorMessage: () => 'e',
    publishedAtMs: () => undefined,
    firstFailedAtMs: () => 0n,
    contentType: () => undefined,
    payloadSize: () => 0,
    headers: () => [],
    payload: () => new Uint8Array(),
    history: () => [],
    extension: (i, key) => (asked.push(['extension', i, key]), at(i).extensions?.[key]),
  };
  class Details {
    constructor() {
      made.push(this);
      Object.assign(this, methods);
    }
  }
  const host = { log: (level, message) => logs.push([level, message]), Details };
  return { host, calls, asked, logs, made };
}

function record(kind, attempt = 1) {
  return {
    attempt,
    deferrals: 0,
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

test('decide lifts the record, fetches details once at position 0, and lowers the verdict', () => {
  const { host, calls, asked, made } = fakeHost();
  bindHost(host);
  const d = exportPolicy(Orders, INFO);
  d.init('{"max_attempts": 3}');
  assert.deepEqual(d.decide(record('db.timeout', 1)), {
    action: { tag: 'retry', val: 200n },
    class: 'transient',
    reason: undefined,
    alert: 'none',
    labels: [
      { key: 'topic', value: 'orders.created' },
      { key: 't', value: 'orders.created' },
    ],
  });
  assert.deepEqual(calls, ['topic'], 'the topic is fetched once per decision');
  assert.deepEqual(asked, [['topic', 0]], "decide's failure is at position 0");
  assert.deepEqual(d.decide(record('db.timeout', 3)), {
    action: { tag: 'dead-letter' },
    class: 'exhausted',
    reason: 'db.timeout on orders.created',
    alert: 'warning',
    labels: [],
  });
  assert.deepEqual(calls, ['topic', 'topic'], 'a new decision fetches afresh');
  assert.deepEqual(d.decide(record('auth.denied')).action, { tag: 'dead-letter' });
  assert.equal(made.length, 1, 'one handle, made on first use, serves every call');
});

test('a policy that reads no on-demand part makes no handle', () => {
  const { host, made } = fakeHost();
  bindHost(host);
  const d = exportPolicy(Orders, INFO);
  d.init('{"max_attempts": 3}');
  d.decide(record('auth.denied'));
  d.decideBatch([record('json.parse'), record('auth.denied')]);
  assert.equal(made.length, 0);
});

test('a verdict without a reason lowers it as none', () => {
  class Terse {
    static config = s.struct('Config', {}, { default: () => ({}) });
    decide(f) {
      if (f.kind() === 'blank') return Verdict.retryNow().because('');
      if (f.kind() === 'said') return Verdict.discard(Class.Permanent).because('duplicate');
      if (f.kind() === 'down') return Verdict.pause(15_000);
      return Verdict.delay(30_000);
    }
  }
  const d = exportPolicy(Terse, INFO);
  d.init('{}');
  // Contract 0.2's reason is an option: none unless the policy gave one, as in Rust.
  assert.equal(d.decide(record('db.timeout')).reason, undefined);
  assert.ok('reason' in d.decide(record('db.timeout')), 'the field is there, empty');
  assert.equal(d.decide(record('blank')).reason, undefined);
  assert.equal(d.decide(record('said')).reason, 'duplicate');
  assert.deepEqual(d.decide(record('down')).action, { tag: 'pause', val: 15_000n });
  assert.deepEqual(
    d.decideBatch([record('db.timeout'), record('said')]).map((v) => v.reason),
    [undefined, 'duplicate'],
  );
});

test('decideBatch answers each failure in order, each reading its own position', () => {
  const { host, asked } = fakeHost([
    { topic: 'orders.created', messageId: 'm-1', extensions: { source: 'nats' } },
    { topic: 'invoices.paid', messageId: 'm-2', extensions: { source: 'kafka' } },
  ]);
  bindHost(host);
  class Echo {
    static config = s.struct('Config', {}, { default: () => ({}) });
    decide(f) {
      return Verdict.retryAfter(f.jitterSeed())
        .because(`${f.topic()} ${f.messageId()}`)
        .label('source', f.extension('source') ?? '-')
        .label('again', f.topic());
    }
  }
  const d = exportPolicy(Echo, INFO);
  d.init('{}');
  const batch = d.decideBatch([{ ...record('db.timeout'), jitterSeed: 5n }, { ...record('http.503'), jitterSeed: 6n }]);
  assert.deepEqual(
    batch.map((v) => [v.action.val, v.reason, v.labels.map((l) => l.value)]),
    [
      [5n, 'orders.created m-1', ['nats', 'orders.created']],
      [6n, 'invoices.paid m-2', ['kafka', 'invoices.paid']],
    ],
  );
  assert.deepEqual(asked, [
    ['topic', 0],
    ['messageId', 0],
    ['extension', 0, 'source'],
    ['topic', 1],
    ['messageId', 1],
    ['extension', 1, 'source'],
  ]);
  assert.deepEqual(d.decideBatch([]), []);
});

test('a batch answers as each failure alone', () => {
  const d = exportPolicy(Orders, INFO);
  d.init('{"max_attempts": 3}');
  const records = [];
  for (const kind of ['db.timeout', 'json.parse', 'http.503']) {
    for (const attempt of [1, 2, 3]) {
      for (const jitterSeed of [0n, 7n, (1n << 64n) - 1n]) records.push({ ...record(kind, attempt), jitterSeed });
    }
  }
  const topics = records.map((_, i) => ({ topic: `orders.${i}`, messageId: `m-${i}` }));
  const alone = records.map((r, i) => {
    bindHost(fakeHost([topics[i]]).host);
    return d.decide(r);
  });
  bindHost(fakeHost(topics).host);
  assert.deepEqual(d.decideBatch(records), alone);
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
  assert.throws(() => d.decideBatch([record('db.timeout')]), /policy panicked: decide-batch called before a successful init/);
  assert.throws(() => d.init('{"max_attempts": 13}'), /policy panicked: unlucky/);
  assert.equal(logs.at(-1)[0], 'error');
  assert.match(logs.at(-1)[1], /^panic: Error: unlucky\n/);
  d.init('{}');
  assert.throws(() => d.decide(record('boom')), /policy panicked: kaboom/);
  assert.match(logs.at(-1)[1], /^panic: RangeError: kaboom/);
  assert.throws(() => d.decide(record('bad')), /verdict.action.val must be a u64 BigInt/);
});

test('an exception in any failure of a batch is logged, then traps the whole call', () => {
  const { host, logs } = fakeHost();
  bindHost(host);
  const d = exportPolicy(Orders, INFO);
  d.init('{}');
  assert.throws(() => d.decideBatch([record('db.timeout'), record('boom'), record('db.timeout')]), /policy panicked: kaboom/);
  assert.equal(logs.length, 1);
  assert.match(logs[0][1], /^panic: RangeError: kaboom/);
  assert.throws(() => d.decideBatch([record('bad')]), /verdict.action.val must be a u64 BigInt/);
  // The instance keeps serving: the host asks again one failure at a time.
  assert.equal(d.decide(record('db.timeout')).action.tag, 'retry');
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
  // In a batch, each failure draws from its own seed.
  const batch = decider.decideBatch([7n, 8n, 7n].map((jitterSeed) => ({ ...record('db.timeout'), jitterSeed })));
  assert.deepEqual(batch[0], first);
  assert.deepEqual(batch[2], first);
  assert.deepEqual(batch[1], seeded(8n));
});
