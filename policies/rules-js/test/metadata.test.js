import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { decider } from '../src/index.js';

const read = (path) => readFileSync(new URL(path, import.meta.url), 'utf8');

test('describe matches package.json and the Rust crate', () => {
  const pkg = JSON.parse(read('../package.json'));
  const cargo = read('../../rules/Cargo.toml');
  const field = (name) => new RegExp(`^${name} = "(.*)"$`, 'm').exec(cargo)?.[1];
  const info = decider.describe();
  assert.deepEqual(info, { name: pkg.name, version: pkg.version, description: pkg.description });
  assert.deepEqual(info, { name: field('name'), version: field('version'), description: field('description') });
});

test('the entry named in package.json is the one exporting decider', async () => {
  const pkg = JSON.parse(read('../package.json'));
  const entry = await import(new URL(`../${pkg.verdict.entry}`, import.meta.url));
  assert.equal(entry.decider, decider);
});
