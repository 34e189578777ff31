// The policy's logic, natively: no Wasm, no host. `node --test test/` (or `npm test`).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Class, ConfigError, Failure, instantiate } from '@verdict/sdk';

import { {{Type}} } from '../src/policy.js';

// The policy with `config`, parsed exactly as the host's `init` parses it.
const policy = (config) => instantiate({{Type}}, config);

test('kinds that never heal are dead-lettered at once', () => {
  const p = policy('{}');
  assert.equal(p.decide(new Failure('json.parse')).class, Class.Poison);
  assert.equal(p.decide(new Failure('auth.denied')).class, Class.Permanent);
});

test('transient failures are retried until max_attempts', () => {
  const p = policy('{"max_attempts": 3}');
  const first = p.decide(new Failure('db.timeout').withAttempt(1));
  assert.ok(first.delayMs() !== undefined && first.delayMs() <= 60_000n, `${first.action.tag} ${first.delayMs()}`);
  const last = p.decide(new Failure('db.timeout').withAttempt(3));
  assert.equal(last.class, Class.Exhausted);
});

test('Retry-After is honoured within max_delay_ms', () => {
  const p = policy('{"max_delay_ms": 10000}');
  const v = p.decide(new Failure('http.503').withRetryAfterMs(8_000));
  assert.ok(v.delayMs() !== undefined && v.delayMs() >= 8_000n, `${v.action.tag} ${v.delayMs()}`);
  assert.equal(p.decide(new Failure('http.503').withRetryAfterMs(3_600_000)).delayMs(), 10_000n);
});

test('a bad config is refused by name', () => {
  assert.throws(() => policy('{"max_atempts": 3}'), (e) => e instanceof ConfigError && e.message.includes('max_atempts'));
  assert.throws(() => policy('{"max_attempts": 0}'), (e) => e instanceof ConfigError && e.message.includes('max_attempts'));
});
