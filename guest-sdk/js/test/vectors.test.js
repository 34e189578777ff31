// Bit-identical proof: delays computed by the Rust `verdict_types::Backoff::delay_ms` and
// committed as guest-sdk/vectors/backoff.json, recomputed here.

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { fromJson, schema as s } from '../src/index.js';

const FILE = fileURLToPath(new URL('../../vectors/backoff.json', import.meta.url));

// Read with the SDK's own decoder: JSON.parse would round u64 parameters above 2^53.
const vectors = s.struct(
  'Vectors',
  {
    description: s.withDefault(s.string, () => ''),
    cases: s.vec(
      s.struct(
        'Case',
        { backoff: s.backoff, attempt: s.u32, seed: s.string, delay_ms: s.string },
        { denyUnknownFields: false },
      ),
    ),
  },
  { denyUnknownFields: false },
);

test('delays match the Rust vectors in guest-sdk/vectors/backoff.json', () => {
  assert.ok(
    existsSync(FILE),
    `${FILE} is missing: it is generated from the Rust verdict_types::Backoff::delay_ms and committed with the SDK`,
  );
  const { cases } = fromJson(readFileSync(FILE, 'utf8'), vectors);
  assert.ok(cases.length > 0, `${FILE} holds no cases`);
  const wrong = [];
  for (const [i, c] of cases.entries()) {
    const got = c.backoff.delayMs(c.attempt, BigInt(c.seed));
    if (got !== BigInt(c.delay_ms)) {
      wrong.push(`cases[${i}]: ${JSON.stringify(c.backoff)} attempt ${c.attempt} seed ${c.seed}: want ${c.delay_ms}, got ${got}`);
    }
  }
  assert.deepEqual(wrong, [], `${wrong.length} of ${cases.length} cases differ`);
});
