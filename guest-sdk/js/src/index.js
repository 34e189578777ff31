// @verdict/sdk: write Verdict retry/dead-letter policies in JavaScript. See README.md.

import { backoffSchema, jitterSchema } from './backoff.js';
import * as config from './config.js';
import { classSchema, severitySchema } from './verdict.js';

export { Backoff, Jitter, SplitMix64, jitterSeed } from './backoff.js';
export { ConfigError, DecodeError, fromJson, parseConfig } from './config.js';
export { exportPolicy } from './export.js';
export { Failure, TopicStats } from './failure.js';
export { NEVER_RETRY_KINDS, firstMatch, kindMatches, neverRetry } from './kinds.js';
export { Level, info, log, warn } from './log.js';
export { instantiate } from './policy.js';
export { Class, Severity, Verdict } from './verdict.js';

/**
 * Schemas for typed config and payloads: the building blocks (`u32`, `u64`, `bool`,
 * `string`, `any`, `option`, `vec`, `withDefault`, `unitEnum`, `struct`, `tagged`) and the
 * contract's own types (`backoff`, `jitter`, `class`, `severity`), read as the Rust SDK
 * reads them.
 */
export const schema = Object.freeze({
  u32: config.u32,
  u64: config.u64,
  bool: config.bool,
  string: config.string,
  any: config.any,
  option: config.option,
  vec: config.vec,
  withDefault: config.withDefault,
  unitEnum: config.unitEnum,
  struct: config.struct,
  tagged: config.tagged,
  backoff: backoffSchema,
  jitter: jitterSchema,
  class: classSchema,
  severity: severitySchema,
});
