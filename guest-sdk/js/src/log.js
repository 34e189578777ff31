// Logging through the host. Inside a component lines go to the host's structured log,
// tagged with the policy; natively (in unit tests) they go to stderr.
//
// `console` works too inside a component (the host turns stdout and stderr into policy log
// lines), but carries no level.

import { boundHost } from './host.js';

/**
 * Log severity.
 * @readonly
 * @enum {'trace' | 'debug' | 'info' | 'warn' | 'error'}
 */
export const Level = Object.freeze({
  Trace: 'trace',
  Debug: 'debug',
  Info: 'info',
  Warn: 'warn',
  Error: 'error',
});

const NAMES = Object.fromEntries(Object.entries(Level).map(([name, value]) => [value, name]));

/**
 * Write one log line.
 * @param {Level} level @param {string} message
 */
export function log(level, message) {
  if (!(level in NAMES)) {
    throw new TypeError(`log level must be one of ${Object.values(Level).join(', ')}, got ${JSON.stringify(level)}`);
  }
  const host = boundHost();
  if (host) host.log(level, String(message));
  else console.error(`[${NAMES[level]}] ${message}`);
}

/** Log at info level. @param {string} message */
export function info(message) {
  log(Level.Info, message);
}

/** Log at warn level. @param {string} message */
export function warn(message) {
  log(Level.Warn, message);
}
