// `rules`: a table-driven retry/dead-letter policy, the JavaScript port of policies/rules.
//
// Error-kind patterns map to an outcome (retry with a backoff strategy and an attempt limit,
// dead-letter with a class, or discard). The first matching rule wins; kinds no rule matches
// take `default`. Explicit rejects and expired messages are dead-lettered before any rule is
// consulted. With an empty config the rules are the standard error-type table, so
// `{"max_attempts": 3}` is all a topic needs to retry 3 times.
//
// Every verdict, reason string and config error matches the Rust policy's; the tests hold
// both to the same vectors.

import { Backoff, Class, ConfigError, Jitter, Severity, Verdict, schema as s } from '@verdict/sdk';

import { defaultRules, rule } from './table.js';

const ruleSchema = s.struct('Rule', {
  name: s.withDefault(s.option(s.string), () => undefined),
  match: s.withDefault(s.vec(s.string), () => []),
  retry: s.withDefault(s.option(s.backoff), () => undefined),
  max_attempts: s.withDefault(s.option(s.u32), () => undefined),
  dead_letter: s.withDefault(s.option(s.class), () => undefined),
  discard: s.withDefault(s.bool, () => false),
  alert: s.withDefault(s.option(s.severity), () => undefined),
});

/** The config with nothing set: 5 attempts, the standard table, exponential 1-60 s default. */
export function defaultConfig() {
  return {
    max_attempts: 5,
    rules: defaultRules(),
    default: rule({ retry: Backoff.exponential(1_000, 60_000, Jitter.Full) }),
    honor_retry_after: true,
    on_expired: 'dead_letter',
    reject_alert: Severity.Warning,
  };
}

/** Per-topic configuration; omitted fields take {@link defaultConfig}'s values. */
export const configSchema = s.struct(
  'Config',
  {
    max_attempts: s.u32,
    rules: s.vec(ruleSchema),
    default: ruleSchema,
    honor_retry_after: s.bool,
    on_expired: s.unitEnum('OnExpired', ['dead_letter', 'discard']),
    reject_alert: s.severity,
  },
  { default: defaultConfig },
);

// Validate one rule into what decide needs; `field` names it in errors (`rules[2]`).
function compile(field, o, maxAttempts) {
  const name = o.name ?? o.match[0] ?? field;
  let then;
  if (o.retry !== undefined && o.dead_letter === undefined && !o.discard) {
    const problem = o.retry.validate();
    if (problem !== undefined) throw new ConfigError(`config.${field}.retry: ${problem}`);
    const max = o.max_attempts ?? maxAttempts;
    if (max === 0) throw new ConfigError(`config.${field}.max_attempts: must be at least 1`);
    then = { retry: o.retry, maxAttempts: max };
  } else if (o.retry === undefined && o.dead_letter !== undefined && !o.discard) {
    then = { deadLetter: o.dead_letter };
  } else if (o.retry === undefined && o.dead_letter === undefined && o.discard) {
    then = { discard: true };
  } else {
    throw new ConfigError(`config.${field}: give exactly one of \`retry\`, \`dead_letter\` or \`discard: true\``);
  }
  return { name, kinds: o.match, then, alert: o.alert };
}

/** The policy. */
export class Rules {
  static config = configSchema;

  /** @param {ReturnType<typeof defaultConfig>} c */
  constructor(c) {
    if (c.max_attempts === 0) throw new ConfigError('config.max_attempts: must be at least 1');
    this.rules = c.rules.map((r, i) => {
      if (r.match.length === 0) throw new ConfigError(`config.rules[${i}].match: needs at least one kind pattern`);
      return compile(`rules[${i}]`, r, c.max_attempts);
    });
    if (c.default.match.length > 0) {
      throw new ConfigError('config.default.match: the default applies to every kind; remove `match`');
    }
    this.default = compile('default', c.default, c.max_attempts);
    this.honorRetryAfter = c.honor_retry_after;
    this.onExpired = c.on_expired;
    this.rejectAlert = c.reject_alert;
  }

  /** @param {import('@verdict/sdk').Failure} f */
  decide(f) {
    if (f.rejected()) {
      return Verdict.deadLetter(Class.Rejected).because('the consumer rejected the message').withAlert(this.rejectAlert);
    }
    if (f.isExpired()) {
      const v = this.onExpired === 'discard' ? Verdict.discard(Class.Expired) : Verdict.deadLetter(Class.Expired);
      return v.because('the message passed its deadline');
    }
    const r = this.rules.find((candidate) => candidate.kinds.some((k) => f.kindIs(k))) ?? this.default;
    const { then } = r;
    let verdict;
    if (then.retry && f.attempt() >= then.maxAttempts) {
      verdict = Verdict.deadLetter(Class.Exhausted)
        .because(`${f.kind()} failed ${f.attempt()} times (limit ${then.maxAttempts})`)
        .withAlert(r.alert ?? Severity.Warning);
    } else if (then.retry) {
      let delay = then.retry.delayMs(f.attempt(), f.jitterSeed());
      if (this.honorRetryAfter) {
        const hint = f.retryAfterMs() ?? 0n;
        if (hint > delay) delay = hint;
      }
      verdict = Verdict.retryAfter(delay).because(`${f.kind()} is transient`);
    } else if (then.deadLetter) {
      verdict = Verdict.deadLetter(then.deadLetter)
        .because(`${f.kind()} is not retryable`)
        .withAlert(r.alert ?? Severity.None);
    } else {
      verdict = Verdict.discard(Class.Permanent)
        .because(`${f.kind()} is discarded by rule`)
        .withAlert(r.alert ?? Severity.None);
    }
    return verdict.label('rule', r.name);
  }
}
