// Kind globs agree with Rust: every case of guest-sdk/vectors/kinds.json, written by the
// Rust `verdict_types::kind_matches`, must match here (`?` is one byte of the UTF-8 text).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { kindMatches } from '../src/index.js';

const FILE = fileURLToPath(new URL('../../vectors/kinds.json', import.meta.url));

test('kind globs match the Rust vectors in guest-sdk/vectors/kinds.json', () => {
  const { cases } = JSON.parse(readFileSync(FILE, 'utf8'));
  assert.ok(cases.length > 0);
  const wrong = cases
    .filter((c) => kindMatches(c.pattern, c.kind) !== c.matches)
    .map((c) => `${JSON.stringify(c.pattern)} vs ${JSON.stringify(c.kind)}: Rust ${c.matches}`);
  assert.deepEqual(wrong, []);
});
