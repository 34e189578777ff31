// The Rust policy's vector files (policies/rules/vectors), run against the JS port.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { instantiate } from '@verdict/sdk';

import { Rules } from '../src/rules.js';
import { failureFromSpec, mismatches, runsOf } from './support/vectors.js';

const RUST = fileURLToPath(new URL('../../rules/', import.meta.url));
const files = readdirSync(`${RUST}vectors`).filter((f) => f.endsWith('.json'));

test('the vector files are there', () => assert.ok(files.length >= 3, `${RUST}vectors holds ${files}`));

for (const file of files) {
  test(`vectors/${file}`, () => {
    const wrong = [];
    for (const run of runsOf(`${RUST}vectors/${file}`)) {
      const v = instantiate(Rules, run.config).decide(failureFromSpec(run.failure));
      for (const m of mismatches(v, run.expect)) wrong.push(`${run.name}: ${m}`);
    }
    assert.deepEqual(wrong, []);
  });
}

test('the example configs are accepted and decide as the README says', () => {
  for (const f of ['payments.json', 'notifications.json', 'error-table.json']) {
    assert.doesNotThrow(() => instantiate(Rules, readFileSync(`${RUST}examples/${f}`, 'utf8')), f);
  }
  const failure = failureFromSpec(JSON.parse(readFileSync(`${RUST}examples/db-timeout.json`, 'utf8')));
  const v = instantiate(Rules, readFileSync(`${RUST}examples/payments.json`, 'utf8')).decide(failure);
  assert.deepEqual([v.action.tag, v.class, v.reason], ['dead-letter', 'exhausted', 'db.timeout failed 5 times (limit 5)']);
});
