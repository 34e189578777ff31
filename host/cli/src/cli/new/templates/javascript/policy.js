// The retry and dead-letter policy for `{{name}}`.
//
// `decide` answers every failed delivery: the kinds that never heal go to the dead-letter
// queue at once, then your rules, then retries with exponential backoff until
// `max_attempts`. Change the part marked "your rules"; the rest is what the admission gate
// checks.

import { Backoff, Class, ConfigError, Jitter, Verdict, exportPolicy, schema as s } from '@verdict/sdk';

/**
 * The route's `config = { ... }` in `verdict.toml`. Every field has a default; an unknown
 * field is refused with its name when the policy is loaded. Milliseconds are BigInts.
 */
export const configSchema = s.struct(
  'Config',
  {
    // Failed deliveries, this one included, after which a message is dead-lettered as
    // exhausted.
    max_attempts: s.u32,
    // The first retry's delay; each retry waits up to twice as long (with full jitter).
    base_delay_ms: s.u64,
    // The longest a retry waits, a consumer's `Retry-After` included.
    max_delay_ms: s.u64,
  },
  { default: () => ({ max_attempts: 5, base_delay_ms: 200n, max_delay_ms: 60_000n }) },
);

/** The policy: its config, checked once when the route is loaded. */
export class {{Type}} {
  static config = configSchema;

  constructor(config) {
    // A ConfigError refuses the config; its message names the field.
    if (config.max_attempts === 0) throw new ConfigError('config.max_attempts: must be at least 1');
    if (config.base_delay_ms === 0n || config.base_delay_ms > config.max_delay_ms) {
      throw new ConfigError('config.base_delay_ms: must be at least 1 and at most max_delay_ms');
    }
    this.config = config;
    this.backoff = Backoff.exponential(config.base_delay_ms, config.max_delay_ms, Jitter.Full);
  }

  decide(f) {
    // Payload, schema, format and auth errors never heal: dead-letter them at once.
    const dead = f.neverRetry();
    if (dead) return dead;
    // The consumer said it can never take this message.
    if (f.rejected()) {
      return Verdict.deadLetter(Class.Permanent).because('rejected by the consumer');
    }

    // ---- Your rules go here. For example:
    // if (f.kindIs('http.429')) {
    //   // Rate limited: wait as long as the consumer asks, without spending an attempt.
    //   const asked = f.retryAfterMs() ?? 5_000n;
    //   return Verdict.delay(asked < this.config.max_delay_ms ? asked : this.config.max_delay_ms);
    // }
    // ---- End of your rules.

    if (f.attempt() >= this.config.max_attempts) {
      return Verdict.deadLetter(Class.Exhausted).because(`${f.kind()} failed ${f.attempt()} times`);
    }
    const backoff = this.backoff.delayMs(f.attempt(), f.jitterSeed());
    // Wait at least as long as the consumer asked (`Retry-After`), within max_delay_ms.
    let asked = f.retryAfterMs() ?? 0n;
    if (asked > this.config.max_delay_ms) asked = this.config.max_delay_ms;
    return Verdict.retryAfter(asked > backoff ? asked : backoff);
  }
}

// The component's export: the build looks for `decider`. `describe` reports these; keep
// them equal to package.json's.
export const decider = exportPolicy({{Type}}, {
  name: '{{name}}',
  version: '0.1.0',
  description: 'Retry and dead-letter policy for {{name}}.',
});
