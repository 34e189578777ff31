// The shape of a policy, and building one from a config as `init` does.

import { parseConfig, struct } from './config.js';

/**
 * A retry/dead-letter policy: a class whose constructor takes the decoded config and whose
 * `decide` answers one failure.
 *
 * - `static config`: the schema of the operator's per-topic config (see `schema`); the
 *   constructor receives the decoded value. Without it only an empty config (`{}`) is valid.
 * - `constructor(config)`: checks what the schema cannot (ranges, consistency) and throws a
 *   `ConfigError` naming the field to refuse the config. Any other exception is a bug: inside
 *   the component it is logged and traps, as a Rust panic does.
 * - `decide(failure)`: a pure function of the failure, returning a `Verdict`; no clock or
 *   randomness of its own (the failure carries both).
 *
 * @typedef {{
 *   new (config: any): {decide(failure: import('./failure.js').Failure): import('./verdict.js').Verdict},
 *   config?: import('./config.js').Schema<any>,
 * }} PolicyClass
 */

const EMPTY = struct('Config', {});

/**
 * Parse `configJson` and build the policy, exactly as the host's `init` call does inside the
 * component. Use it in native tests.
 * @template {PolicyClass} P
 * @param {P} Policy @param {string} configJson
 * @returns {InstanceType<P>}
 * @throws {import('./config.js').ConfigError} when the config is refused
 */
export function instantiate(Policy, configJson) {
  if (typeof Policy !== 'function') {
    throw new TypeError('instantiate(Policy, configJson): Policy must be a class with a decide method');
  }
  return new Policy(parseConfig(configJson, Policy.config ?? EMPTY));
}
