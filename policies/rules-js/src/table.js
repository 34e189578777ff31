// The rules used when a config names none: the standard error-type table, extended with the
// HTTP and transport kinds the gateway produces. The same table as policies/rules/src/table.rs.

import { Backoff, Class, Jitter, Severity } from '@verdict/sdk';

/** A rule as the config writes it, every field present (serde's `Rule::default()` filled in). */
export function rule(fields = {}) {
  return {
    name: undefined,
    match: [],
    retry: undefined,
    max_attempts: undefined,
    dead_letter: undefined,
    discard: false,
    alert: undefined,
    ...fields,
  };
}

const named = (name, match, outcome) => rule({ ...outcome, name, match });
const deadLetter = (cls, alert) => ({ dead_letter: cls, alert });
const retry = (backoff, maxAttempts) => ({ retry: backoff, max_attempts: maxAttempts });

/**
 * The standard table: format errors and auth failures are never retried; deadlocks get a
 * random delay and 3 attempts; business exceptions a fixed delay and 2; timeouts and other
 * transient kinds exponential backoff up to the config's `max_attempts` (5 by default).
 */
export function defaultRules() {
  return [
    named('format', ['json.*', 'schema.*', 'format.*', 'decode.*'], deadLetter(Class.Poison, Severity.Warning)),
    named(
      'permanent',
      ['auth.*', 'validation.*', 'http.400', 'http.401', 'http.403', 'http.404', 'http.422'],
      deadLetter(Class.Permanent, Severity.Warning),
    ),
    named('deadlock', ['db.deadlock'], retry(Backoff.random(100, 1_000), 3)),
    named('business', ['biz.*'], retry(Backoff.fixed(1_000, Jitter.None), 2)),
    named('rate-limited', ['http.429', '*.rate_limited'], retry(Backoff.exponential(1_000, 60_000, Jitter.Equal), undefined)),
    named(
      'transient',
      ['*.timeout', 'http.5*', 'transport.*', 'db.*', 'net.*'],
      retry(Backoff.exponential(500, 60_000, Jitter.Full), undefined),
    ),
  ];
}
