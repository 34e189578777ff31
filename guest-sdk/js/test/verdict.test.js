import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Class, Severity, Verdict } from '../src/index.js';

test('builders set action and class, setters chain', () => {
  const v = Verdict.deadLetter(Class.Permanent)
    .because('amount is negative')
    .withAlert(Severity.Critical)
    .label('rule', 'negative-amount');
  assert.deepEqual(v.action, { tag: 'dead-letter' });
  assert.equal(v.class, 'permanent');
  assert.equal(v.reason, 'amount is negative');
  assert.equal(v.alert, 'critical');
  assert.deepEqual(v.labels, [['rule', 'negative-amount']]);
  assert.equal(v.delayMs(), undefined);
});

test('retries and delays carry a u64 BigInt and are transient', () => {
  assert.deepEqual(Verdict.retryAfter(1_500).action, { tag: 'retry', val: 1_500n });
  assert.deepEqual(Verdict.retryNow().action, { tag: 'retry', val: 0n });
  assert.deepEqual(Verdict.delay(2n ** 63n).action, { tag: 'delay', val: 2n ** 63n });
  assert.equal(Verdict.delay(5).class, Class.Transient);
  assert.deepEqual(Verdict.pause(15_000).action, { tag: 'pause', val: 15_000n });
  assert.equal(Verdict.pause(15_000).delayMs(), 15_000n);
  assert.equal(Verdict.pause(5).class, Class.Transient);
  assert.equal(Verdict.retryAfter(7).delayMs(), 7n);
  assert.equal(Verdict.discard(Class.Expired).withClass(Class.Permanent).class, 'permanent');
  assert.deepEqual(Verdict.retryAfter(1).label('a', '1').label('a', '2').labels, [['a', '1'], ['a', '2']]);
});

test('bad values fail where they are made', () => {
  assert.throws(() => Verdict.retryAfter(-1), /retry delay must be a u64/);
  assert.throws(() => Verdict.retryAfter(2 ** 60), /retry delay must be a u64/, 'an unsafe Number is refused, not rounded');
  assert.throws(() => Verdict.deadLetter('poisoned'), /class must be one of/);
  assert.throws(() => Verdict.retryNow().withAlert('loud'), /alert must be one of/);
});
