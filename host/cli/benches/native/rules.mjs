// The `rules` policy's JavaScript port decided by Node itself, no Wasm: the floor the
// JavaScript component's decisions are compared with (`cargo bench -p verdict-cli --bench
// languages` runs it). Each call builds a `Failure` from the record, as the component's glue
// does, then decides. Prints one JSON line: p50 and p99 of single calls, in nanoseconds.

import { Failure, TopicStats, instantiate } from '../../../../guest-sdk/js/src/index.js';
import { Rules } from '../../../../policies/rules-js/src/rules.js';

const CALLS = 5_000;

// The benched failure: what the host's spec in `languages.rs` becomes.
const failure = () =>
  new Failure('db.timeout')
    .withAttempt(2)
    .withNowMs(61_000n)
    .withFirstFailedAtMs(0n)
    .withJitterSeed(42n)
    .withStats(new TopicStats())
    .withTopic('payments.captured')
    .withMessageId('m-000123');

const policy = instantiate(Rules, '{"max_attempts": 5}');
for (let i = 0; i < 200; i++) policy.decide(failure());
const samples = [];
for (let i = 0; i < CALLS; i++) {
  const start = process.hrtime.bigint();
  policy.decide(failure());
  samples.push(Number(process.hrtime.bigint() - start));
}
samples.sort((a, b) => a - b);
console.log(JSON.stringify({ p50_ns: samples[CALLS >> 1], p99_ns: samples[Math.floor((CALLS * 99) / 100)] }));
