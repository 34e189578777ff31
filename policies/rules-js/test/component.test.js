// The built component, run in Node through jco's transpiler, against the native policy:
// what it imports, and that init, describe, decide and decide-batch answer identically
// across the bindings. Build first (npm run build), or point VERDICT_COMPONENT at a
// component.

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { Failure, instantiate } from '@verdict/sdk';

import { decider as native } from '../src/index.js';
import { Rules } from '../src/rules.js';
import { failureFromSpec, mismatches, runsOf } from './support/vectors.js';

const COMPONENT = process.env.VERDICT_COMPONENT ?? fileURLToPath(new URL('../dist/rules.component.wasm', import.meta.url));
const built = existsSync(COMPONENT);
const skip = built ? false : `no component at ${COMPONENT}: run \`npm run build\` first`;

let dir;
let component;
const logs = [];
const fetched = [];

// The host's interface as jco's bindings take it: `log`, and the `details` resource class a
// policy makes its one handle from (every method takes the failure's position).
class Details {
  topic(i) {
    fetched.push(['topic', i]);
    return 'orders';
  }
  messageId(i) {
    fetched.push(['messageId', i]);
    return 'm-1';
  }
  consumerGroup() {
    return 'g';
  }
  errorMessage() {
    return 'e';
  }
  publishedAtMs() {
    return undefined;
  }
  firstFailedAtMs() {
    return 0n;
  }
  contentType() {
    return undefined;
  }
  payloadSize() {
    return 0;
  }
  headers() {
    return [];
  }
  payload() {
    return new Uint8Array();
  }
  history() {
    return [];
  }
  extension() {
    return undefined;
  }
}

const host = {
  log: (level, message) => logs.push([level, message]),
  Details,
};

before(async () => {
  if (!built) return;
  const { transpile } = await import('@bytecodealliance/jco');
  const { files } = await transpile(readFileSync(COMPONENT), { name: 'rules', instantiation: 'async', noTypescript: true, quiet: true });
  dir = mkdtempSync(join(tmpdir(), 'rules-component-'));
  writeFileSync(join(dir, 'package.json'), '{"type": "module"}');
  for (const [name, bytes] of Object.entries(files)) {
    if (name.includes('/')) continue;
    writeFileSync(join(dir, name), bytes);
  }
  const { instantiate: load } = await import(pathToFileURL(join(dir, 'rules.js')).href);
  // The WASI interfaces the engine imports come from jco's own shim here (the gateway links
  // deterministic stubs instead): `wasi:cli/terminal-input` is the shim's `cli.terminalInput`.
  const shim = await import('@bytecodealliance/preview2-shim');
  const imports = new Proxy({ 'verdict:policy/host': host }, {
    get(given, name) {
      if (name in given) return given[name];
      const wasi = /^wasi:([a-z]+)\/([a-z-]+)$/.exec(String(name));
      return wasi ? shim[wasi[1]]?.[wasi[2].replace(/-([a-z])/g, (_, c) => c.toUpperCase())] : undefined;
    },
  });
  const instance = await load((name) => WebAssembly.compile(readFileSync(join(dir, name))), imports);
  component = instance.decider;
});

after(() => dir && rmSync(dir, { recursive: true, force: true }));

function init(d, config) {
  try {
    const r = d.init(config);
    return r?.tag === 'err' ? r.val : 'ok';
  } catch (e) {
    if (e.payload !== undefined) return e.payload;
    throw e;
  }
}

function record(f) {
  return {
    attempt: f.attempt(),
    deferrals: f.deferrals(),
    nowMs: f.nowMs(),
    deadlineMs: f.deadlineMs(),
    error: { kind: f.kind(), retryAfterMs: f.retryAfterMs(), rejected: f.rejected() },
    jitterSeed: f.jitterSeed(),
    stats: { windowMs: 0n, deliveries: 0, failures: 0, consecutiveFailures: 0 },
  };
}

// The native verdict as the component lowers it: labels as records, and a reason only when
// the policy gave one (contract 0.2's reason is an option).
function lowered(v) {
  return {
    action: v.action,
    class: v.class,
    reason: v.reason === '' ? undefined : v.reason,
    alert: v.alert,
    labels: v.labels.map(([key, value]) => ({ key, value })),
  };
}

test('the component imports the contract and no WASI beyond what the host stubs', { skip }, async () => {
  const { componentWit } = await import('@bytecodealliance/jco');
  const wit = await componentWit(readFileSync(COMPONENT));
  const all = wit.split('\n').map((l) => l.trim()).filter((l) => /^(import|export) /.test(l));
  // The engine's clocks, randomness and stdio: served deterministically by the host.
  const wasi = all.filter((l) => l.startsWith('import wasi:'));
  for (const line of wasi) {
    assert.match(line, /^import wasi:(io|clocks|random|cli|filesystem)\/[a-z-]+@0\.2\.\d+;$/);
  }
  const lines = all.filter((l) => !l.startsWith('import wasi:'));
  assert.deepEqual(lines.sort(), [
    'export verdict:policy/decider@0.2.0;',
    'import verdict:policy/host@0.2.0;',
    'import verdict:policy/types@0.2.0;',
  ]);
});

test('describe and init answer as the native policy does', { skip }, () => {
  assert.deepEqual(component.describe(), native.describe());
  for (const config of [
    '{"max_attempts": 0}',
    '{"max_atempts": 3}',
    '{"rules": [{"match": ["a"], "retry": {"strategy": "exponential", "base_ms": 9, "cap_ms": 1}}]}',
    '{"rules": [{"match": ["a"], "retry": {"strategy": "fixed"}}]}',
    '{"max_attempts": }',
    '{"rules": [{"match": ["a"], "dead_letter": "posion"}]}',
  ]) {
    const want = native.init(config);
    assert.equal(want.tag, 'err');
    assert.equal(init(component, config), want.val, config);
  }
  assert.equal(init(component, ''), 'ok');
});

test('decide and decideBatch answer as the native policy does, across a sweep', { skip }, () => {
  const configs = [
    '',
    '{"max_attempts": 3, "honor_retry_after": false, "on_expired": "discard", "reject_alert": "critical"}',
    readFileSync(new URL('../../rules/examples/error-table.json', import.meta.url), 'utf8'),
    `{"rules": [{"match": ["a.*"], "retry": {"strategy": "exponential", "base_ms": 100, "cap_ms": 18446744073709551615, "jitter": "decorrelated"}},
                {"match": ["b.*"], "retry": {"strategy": "ladder", "steps_ms": [5, 9007199254740993, 1], "jitter": "equal"}, "max_attempts": 40},
                {"match": ["c.?"], "retry": {"strategy": "immediate"}}],
      "default": {"discard": true, "alert": "info"}}`,
  ];
  const kinds = ['db.timeout', 'http.503', 'http.429', 'db.deadlock', 'biz.x', 'json.parse', 'auth.x', 'a.b', 'b.c', 'c.d', 'zzz', 'net.timeout'];
  const seeds = [0n, 1n, 42n, 0xffff_ffff_ffff_ffffn, 0x8000_0000_0000_0000n];
  let compared = 0;
  let batches = 0;
  for (const config of configs) {
    const policy = instantiate(Rules, config);
    assert.equal(init(component, config), 'ok');
    for (const kind of kinds) {
      const failures = [];
      for (const attempt of [1, 2, 3, 5, 39]) {
        for (const seed of seeds) {
          const make = () => new Failure(kind).withAttempt(attempt).withJitterSeed(seed).withNowMs(1_000);
          for (const f of [make(), make().withRetryAfterMs(90_000), make().withRejected(true), make().withDeadlineMs(1_000)]) {
            const want = lowered(policy.decide(f));
            const got = component.decide(record(f));
            assert.deepEqual(got, want, `${config.slice(0, 40)} ${kind} attempt ${attempt} seed ${seed}`);
            failures.push([f, want]);
            compared++;
          }
        }
      }
      // The kind's failures again as batches of up to 64, the most the host sends at once.
      for (let at = 0; at < failures.length; at += 64) {
        const batch = failures.slice(at, at + 64);
        const got = component.decideBatch(batch.map(([f]) => record(f)));
        assert.deepEqual(got, batch.map(([, want]) => want), `${config.slice(0, 40)} ${kind} batch at ${at}`);
        batches++;
      }
    }
  }
  assert.ok(compared > 1_000);
  assert.ok(batches > 50);
  assert.deepEqual(fetched, [], 'rules reads no detail from the host');
  assert.deepEqual(logs, []);
});

test('the Rust vector files pass through the component', { skip }, () => {
  const vectors = new URL('../../rules/vectors/', import.meta.url);
  const wrong = [];
  for (const file of ['classes.json', 'error-table.json', 'limits.json']) {
    for (const run of runsOf(fileURLToPath(new URL(file, vectors)))) {
      assert.equal(init(component, run.config), 'ok');
      const got = component.decide(record(failureFromSpec(run.failure)));
      for (const m of mismatches(got, run.expect)) wrong.push(`${file}: ${run.name}: ${m}`);
    }
  }
  assert.deepEqual(wrong, []);
});
