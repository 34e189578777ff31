import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Class, NEVER_RETRY_KINDS, firstMatch, kindMatches, neverRetry } from '../src/index.js';

test('globs', () => {
  const cases = [
    ['db.timeout', 'db.timeout', true],
    ['db.*', 'db.timeout', true],
    ['db.*', 'db.', true],
    ['db.*', 'db', false],
    ['http.5*', 'http.503', true],
    ['http.5*', 'http.404', false],
    ['*.timeout', 'net.tcp.timeout', true],
    ['*', '', true],
    ['', '', true],
    ['', 'a', false],
    ['a?c', 'abc', true],
    ['a?c', 'ac', false],
    ['*a*b', 'xxaxxbxb', true],
    ['*a*b', 'xxaxxbx', false],
    ['DB.*', 'db.timeout', false],
    ['**', 'x', true],
  ];
  for (const [p, k, want] of cases) assert.equal(kindMatches(p, k), want, `${p} vs ${k}`);
});

test('? matches one UTF-8 byte, as the Rust matcher does', () => {
  assert.equal(kindMatches('caf?', 'café'), false, 'é is two bytes');
  assert.equal(kindMatches('caf??', 'café'), true);
  assert.equal(kindMatches('caf*', 'café'), true);
  assert.equal(kindMatches('café', 'café'), true);
});

test('a hostile pattern stays linear', () => {
  const started = Date.now();
  assert.equal(kindMatches('*a*a*a*a*a*a*a*a*b', 'a'.repeat(5_000)), false);
  assert.ok(Date.now() - started < 2_000);
});

test('firstMatch keeps order', () => {
  assert.equal(firstMatch(['json.*', '*'], 'json.parse'), 'json.*');
  assert.equal(firstMatch(['json.*', 'db.*'], 'http.503'), undefined);
});

test('neverRetry answers exactly the shared kinds', () => {
  for (const kind of ['json.parse', 'schema.unknown-version', 'format.csv', 'auth.expired']) {
    assert.equal(neverRetry(kind)?.action.tag, 'dead-letter', kind);
  }
  for (const kind of ['db.timeout', 'http.503', 'jsonx.parse', 'authz', '']) assert.equal(neverRetry(kind), undefined, kind);
  assert.ok(NEVER_RETRY_KINDS.every((p) => neverRetry(p.replace('*', 'x'))));
  assert.equal(neverRetry('auth.denied').class, Class.Permanent);
  assert.equal(neverRetry('auth.denied').alert, 'critical');
  assert.equal(neverRetry('auth.denied').reason, 'the consumer refuses it: credentials or permissions need fixing');
  assert.equal(neverRetry('json.parse').class, Class.Poison);
  assert.equal(neverRetry('json.parse').reason, 'the message cannot be read as it is');
});
