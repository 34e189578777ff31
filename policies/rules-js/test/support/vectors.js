// Runs the conformance vector files (tests/conformance/README.md) against a policy natively:
// the same cases `verdict test` runs against the component, minus the host's guardrails,
// which these files do not exercise.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { Failure, fromJson, instantiate, jitterSeed, schema as s } from '@verdict/sdk';

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

function merge(base, over) {
  if (!isObject(base) || !isObject(over)) return over;
  const out = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = k in base ? merge(base[k], v) : v;
  return out;
}

/** A failure from the JSON `verdict decide` takes, defaulted as the host defaults it. */
export function failureFromSpec(spec) {
  const attempt = spec.attempt ?? 1;
  const messageId = spec['message-id'] ?? '';
  const first = BigInt(spec['first-failed-at-ms'] ?? 0);
  const f = new Failure(spec.error.kind)
    .withAttempt(attempt)
    .withDeferrals(spec.deferrals ?? 0)
    .withFirstFailedAtMs(first)
    .withNowMs(spec['now-ms'] !== undefined ? BigInt(spec['now-ms']) : first)
    .withJitterSeed(spec['jitter-seed'] !== undefined ? BigInt(spec['jitter-seed']) : jitterSeed(messageId, attempt))
    .withRejected(spec.error.rejected ?? false)
    .withTopic(spec.topic ?? '')
    .withMessageId(messageId)
    .withConsumerGroup(spec['consumer-group'] ?? '')
    .withErrorMessage(spec.error.message ?? '');
  if (spec['deadline-ms'] !== undefined) f.withDeadlineMs(BigInt(spec['deadline-ms']));
  if (spec['published-at-ms'] !== undefined) f.withPublishedAtMs(BigInt(spec['published-at-ms']));
  if (spec.error['retry-after-ms'] !== undefined) f.withRetryAfterMs(BigInt(spec.error['retry-after-ms']));
  if (spec['content-type'] !== undefined) f.withContentType(spec['content-type']);
  if (spec.payload !== undefined) f.withPayload(typeof spec.payload === 'string' ? spec.payload : JSON.stringify(spec.payload));
  for (const [name, value] of Object.entries(spec.headers ?? {}).sort(([a], [b]) => (a < b ? -1 : 1))) f.withHeader(name, value);
  for (const [key, value] of Object.entries(spec.extensions ?? {})) f.withExtension(key, value);
  if (spec.history) f.withHistory(spec.history.map((h) => ({ atMs: BigInt(h['at-ms']), kind: h.kind, message: h.message })));
  if (spec.stats) {
    f.withStats({
      windowMs: BigInt(spec.stats['window-ms'] ?? 0),
      deliveries: spec.stats.deliveries ?? 0,
      failures: spec.stats.failures ?? 0,
      consecutiveFailures: spec.stats['consecutive-failures'] ?? 0,
    });
  }
  return f;
}

/** Every run of a vector file: its name, config, failure spec and expectations. */
export function runsOf(file) {
  const suite = fromJson(readFileSync(file, 'utf8'), s.any);
  assert.equal(suite.settings, undefined, `${file}: settings (guardrails) need the host; run it with verdict test`);
  const runs = [];
  for (const c of suite.cases) {
    const config = JSON.stringify(c.config ?? suite.config ?? {});
    const entries = c.each ?? [{}];
    for (const entry of entries) {
      const { expect: own, ...failure } = entry;
      const expect = merge(c.expect ?? {}, own ?? {});
      assert.equal(expect.clamps, undefined, `${file}: ${c.name}: clamps need the host; run it with verdict test`);
      const label = Object.entries(failure).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ');
      runs.push({ name: label ? `${c.name} [${label}]` : c.name, config, failure: merge(c.failure, failure), expect });
    }
  }
  return runs;
}

/** The mismatches between a verdict (as the SDK or the bindings shape it) and `expect`. */
export function mismatches(v, expect) {
  const out = [];
  const labels = (v.labels ?? []).map((l) => (Array.isArray(l) ? l : [l.key, l.value]));
  const delay = v.action.tag === 'retry' || v.action.tag === 'delay' ? v.action.val : undefined;
  if (expect.action !== undefined && v.action.tag !== expect.action) out.push(`action: expected ${expect.action}, got ${v.action.tag}`);
  if (expect.class !== undefined && v.class !== expect.class) out.push(`class: expected ${expect.class}, got ${v.class}`);
  if (expect.alert !== undefined && v.alert !== expect.alert) out.push(`alert: expected ${expect.alert}, got ${v.alert}`);
  if (expect.reason_contains !== undefined && !(v.reason ?? '').includes(expect.reason_contains)) {
    out.push(`reason: expected to contain ${expect.reason_contains}, got ${v.reason}`);
  }
  if ('delay_ms' in expect) {
    const d = expect.delay_ms;
    if (d === null) {
      if (delay !== undefined) out.push(`delay_ms: expected none, got ${delay}`);
    } else if (isObject(d)) {
      if (delay === undefined || (d.min !== undefined && delay < BigInt(d.min)) || (d.max !== undefined && delay > BigInt(d.max))) {
        out.push(`delay_ms: expected ${JSON.stringify(d)}, got ${delay}`);
      }
    } else if (delay !== BigInt(d)) {
      out.push(`delay_ms: expected ${d}, got ${delay}`);
    }
  }
  for (const [k, want] of Object.entries(expect.labels ?? {})) {
    const got = labels.find(([key]) => key === k)?.[1];
    if (got !== want) out.push(`labels.${k}: expected ${want}, got ${got}`);
  }
  return out;
}

export { instantiate };
