// policies/rules/src/tests.rs, ported.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Class, ConfigError, Failure, Severity, instantiate } from '@verdict/sdk';

import { Rules } from '../src/rules.js';

const policy = (config) => instantiate(Rules, config);
const at = (kind, attempt) => new Failure(kind).withAttempt(attempt).withJitterSeed(42n);

test('payments retries db.timeout four times then exhausts at five', () => {
  const p = policy('{"max_attempts": 5}');
  for (let attempt = 1; attempt <= 4; attempt++) {
    const v = p.decide(at('db.timeout', attempt));
    assert.equal(v.action.tag, 'retry', `attempt ${attempt}`);
    assert.equal(v.class, Class.Transient);
  }
  const v = p.decide(at('db.timeout', 5));
  assert.deepEqual([v.action.tag, v.class], ['dead-letter', Class.Exhausted]);
  assert.ok(v.reason.includes('limit 5'), v.reason);
});

test('notifications dead-letter at three', () => {
  const p = policy('{"max_attempts": 3}');
  assert.equal(p.decide(at('db.timeout', 2)).action.tag, 'retry');
  const v = p.decide(at('db.timeout', 3));
  assert.deepEqual([v.action.tag, v.class], ['dead-letter', Class.Exhausted]);
});

test('json.parse is poison at attempt one under any limit', () => {
  for (const config of ['{"max_attempts": 5}', '{"max_attempts": 3}', '{}']) {
    const v = policy(config).decide(at('json.parse', 1));
    assert.deepEqual([v.action.tag, v.class], ['dead-letter', Class.Poison], config);
  }
});

test('standard table limits', () => {
  const p = policy('{}');
  const v = p.decide(at('db.deadlock', 2));
  assert.ok(v.action.tag === 'retry' && v.action.val >= 100n && v.action.val <= 1_000n, JSON.stringify(v.labels));
  assert.equal(p.decide(at('db.deadlock', 3)).class, Class.Exhausted);
  assert.deepEqual(p.decide(at('biz.stock_locked', 1)).action, { tag: 'retry', val: 1_000n });
  assert.equal(p.decide(at('biz.stock_locked', 2)).class, Class.Exhausted);
  const auth = p.decide(at('auth.expired_token', 1));
  assert.deepEqual([auth.action.tag, auth.class, auth.alert], ['dead-letter', Class.Permanent, Severity.Warning]);
});

test('Retry-After is honoured and can be turned off', () => {
  const f = () => at('http.503', 1).withRetryAfterMs(120_000);
  assert.deepEqual(policy('{}').decide(f()).action, { tag: 'retry', val: 120_000n });
  const v = policy('{"honor_retry_after": false}').decide(f());
  assert.ok(v.action.tag === 'retry' && v.action.val <= 500n);
});

test('rejects and expiry come before rules', () => {
  const p = policy('{}');
  const v = p.decide(at('db.timeout', 1).withRejected(true));
  assert.deepEqual([v.action.tag, v.class], ['dead-letter', Class.Rejected]);
  const expired = () => at('db.timeout', 1).withNowMs(10_000).withDeadlineMs(9_000);
  assert.equal(p.decide(expired()).class, Class.Expired);
  assert.equal(policy('{"on_expired": "discard"}').decide(expired()).action.tag, 'discard');
});

test('custom rules replace the table and label the verdict', () => {
  const p = policy(`{"rules": [{"name": "dup", "match": ["order.duplicate"], "discard": true},
                    {"match": ["inventory.*"], "retry": {"strategy": "fixed", "delay_ms": 250}, "max_attempts": 2}],
          "default": {"dead_letter": "unknown"}}`);
  const v = p.decide(at('order.duplicate', 1));
  assert.equal(v.action.tag, 'discard');
  assert.deepEqual(v.labels, [['rule', 'dup']]);
  assert.deepEqual(p.decide(at('inventory.locked', 1)).action, { tag: 'retry', val: 250n });
  assert.equal(p.decide(at('inventory.locked', 2)).class, Class.Exhausted);
  // json.parse is no longer in the table: the default applies.
  assert.equal(p.decide(at('json.parse', 1)).class, Class.Unknown);
});

test('same input, same verdict, jitter included', () => {
  const p = policy('{}');
  assert.deepEqual(p.decide(at('db.timeout', 3)), p.decide(at('db.timeout', 3)));
});

test('bad configs name the field', () => {
  const cases = [
    ['{"max_attempts": 0}', 'config.max_attempts'],
    ['{"max_atempts": 3}', 'max_atempts'],
    ['{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": 1}, "dead_letter": "poison"}]}', 'config.rules[0]'],
    ['{"rules": [{"match": [], "discard": true}]}', 'config.rules[0].match'],
    ['{"rules": [{"match": ["a"], "retyr": {}}]}', 'retyr'],
    ['{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 9, "cap_ms": 1}}]}', 'cap_ms'],
  ];
  for (const [config, needle] of cases) {
    assert.throws(() => instantiate(Rules, config), (e) => e instanceof ConfigError && e.message.includes(needle), config);
  }
});

// Beyond tests.rs: the exact messages, derived from the Rust policy's code and serde's rules.
test('config errors say exactly what the Rust policy says', () => {
  const cases = [
    ['{"max_attempts": 0}', 'config.max_attempts: must be at least 1'],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": 1}, "dead_letter": "poison"}]}',
      'config.rules[0]: give exactly one of `retry`, `dead_letter` or `discard: true`',
    ],
    ['{"rules": [{"match": ["a"]}]}', 'config.rules[0]: give exactly one of `retry`, `dead_letter` or `discard: true`'],
    ['{"rules": [{"match": [], "discard": true}]}', 'config.rules[0].match: needs at least one kind pattern'],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 500, "cap_ms": 100}}]}',
      'config.rules[0].retry: cap_ms (100) must not be below base_ms (500)',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 0, "cap_ms": 100}}]}',
      'config.rules[0].retry: base_ms must be at least 1 (cap_ms is 100)',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "random", "min_ms": 9, "max_ms": 1}}]}',
      'config.rules[0].retry: min_ms (9) must not be above max_ms (1)',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "ladder", "steps_ms": []}}]}',
      'config.rules[0].retry: steps_ms must name at least one step',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": 1}, "max_attempts": 0}]}',
      'config.rules[0].max_attempts: must be at least 1',
    ],
    ['{"default": {"match": ["a"], "discard": true}}', 'config.default.match: the default applies to every kind; remove `match`'],
    ['{"default": {"discard": false}}', 'config.default: give exactly one of `retry`, `dead_letter` or `discard: true`'],
    [
      '{"max_atempts": 3}',
      'config.max_atempts: unknown field `max_atempts`, expected one of `max_attempts`, `rules`, `default`, ' +
        '`honor_retry_after`, `on_expired`, `reject_alert`',
    ],
    [
      '{"rules": [{"match": ["a"], "retyr": {}}]}',
      'config.rules[0].retyr: unknown field `retyr`, expected one of `name`, `match`, `retry`, `max_attempts`, ' +
        '`dead_letter`, `discard`, `alert`',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "fixd"}}]}',
      'config.rules[0].retry.strategy: unknown variant `fixd`, expected one of `immediate`, `fixed`, `exponential`, `random`, `ladder`',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base": 100}}]}',
      'config.rules[0].retry: unknown field `base`, expected one of `base_ms`, `cap_ms`, `jitter`',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": "1s"}}]}',
      'config.rules[0].retry: invalid type: string "1s", expected u64',
    ],
    [
      '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed", "delay_ms": 1, "jitter": "fast"}}]}',
      'config.rules[0].retry: unknown variant `fast`, expected one of `none`, `full`, `equal`, `decorrelated`',
    ],
    [
      '{"rules": [{"match": ["a"], "dead_letter": "posion"}]}',
      'config.rules[0].dead_letter: unknown variant `posion`, expected one of `transient`, `permanent`, `poison`, ' +
        '`exhausted`, `expired`, `rejected`, `unknown`',
    ],
    ['{"rules": [{"match": ["a"], "discard": "yes"}]}', 'config.rules[0].discard: invalid type: string "yes", expected a boolean'],
    ['{"rules": [{"match": "a", "discard": true}]}', 'config.rules[0].match: invalid type: string "a", expected a sequence'],
    ['{"rules": [{"match": [1], "discard": true}]}', 'config.rules[0].match[0]: invalid type: integer `1`, expected a string'],
    ['{"on_expired": "drop"}', 'config.on_expired: unknown variant `drop`, expected one of `dead_letter`, `discard`'],
    ['{"reject_alert": "loud"}', 'config.reject_alert: unknown variant `loud`, expected one of `none`, `info`, `warning`, `critical`'],
    ['{"max_attempts": "five"}', 'config.max_attempts: invalid type: string "five", expected u32'],
    ['{"default": null}', 'config.default: invalid type: null, expected struct Rule'],
  ];
  for (const [config, want] of cases) {
    assert.throws(() => instantiate(Rules, config), (e) => e instanceof ConfigError && e.message === want, `${config}\nwant: ${want}`);
  }
  // Both SDKs add advice to a missing field, each naming its own way to give a default.
  for (const [config, want] of [
    ['{"rules": [{"match": ["a"], "retry": {"strategy": "fixed"}}]}', 'config.rules[0].retry: missing field `delay_ms`'],
    ['{"rules": [{"match": ["a"], "retry": {"delay_ms": 5}}]}', 'config.rules[0].retry: missing field `strategy`'],
  ]) {
    assert.throws(
      () => instantiate(Rules, config),
      (e) => e.message.startsWith(`${want}; set it in the route's config`),
      config,
    );
  }
});

test('the default rule is named `default`, a rule without a name its first pattern', () => {
  const p = policy('{"rules": [{"match": ["a.*", "b.*"], "discard": true}]}');
  assert.deepEqual(p.decide(at('b.x', 1)).labels, [['rule', 'a.*']]);
  assert.deepEqual(p.decide(at('zzz', 1)).labels, [['rule', 'default']]);
  assert.deepEqual(p.decide(at('zzz', 5)).labels, [['rule', 'default']]);
});

test('reasons, alerts and labels byte for byte', () => {
  const p = policy('{}');
  const check = (f, want) => {
    const v = p.decide(f);
    assert.deepEqual(
      { action: v.action, class: v.class, reason: v.reason, alert: v.alert, labels: v.labels },
      want,
    );
  };
  check(at('db.timeout', 1).withRejected(true), {
    action: { tag: 'dead-letter' },
    class: 'rejected',
    reason: 'the consumer rejected the message',
    alert: 'warning',
    labels: [],
  });
  check(at('db.timeout', 1).withNowMs(5).withDeadlineMs(5), {
    action: { tag: 'dead-letter' },
    class: 'expired',
    reason: 'the message passed its deadline',
    alert: 'none',
    labels: [],
  });
  check(at('http.503', 5), {
    action: { tag: 'dead-letter' },
    class: 'exhausted',
    reason: 'http.503 failed 5 times (limit 5)',
    alert: 'warning',
    labels: [['rule', 'transient']],
  });
  check(at('biz.x', 1), {
    action: { tag: 'retry', val: 1_000n },
    class: 'transient',
    reason: 'biz.x is transient',
    alert: 'none',
    labels: [['rule', 'business']],
  });
  check(at('json.parse', 1), {
    action: { tag: 'dead-letter' },
    class: 'poison',
    reason: 'json.parse is not retryable',
    alert: 'warning',
    labels: [['rule', 'format']],
  });
  const d = policy('{"rules": [{"match": ["x"], "discard": true, "alert": "info"}]}').decide(at('x', 1));
  assert.deepEqual([d.class, d.reason, d.alert], ['permanent', 'x is discarded by rule', 'info']);
});
