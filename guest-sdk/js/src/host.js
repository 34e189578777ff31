// The host's functions (`verdict:policy/host`), reachable only inside the component.
//
// The SDK never imports the host module itself: that import exists only in a component,
// and Node cannot resolve it, which would make every policy untestable natively. The build
// (bin/verdict-build-js.mjs) instead bundles a first module that imports the host and hands
// it over here, before the policy's own modules run. Natively nothing is bound, and the SDK
// falls back to what a test gave (log lines go to stderr).

/**
 * The `verdict:policy/host` interface as the component's bindings present it.
 * @typedef {object} Host
 * @property {(level: 'trace' | 'debug' | 'info' | 'warn' | 'error', message: string) => void} log
 * @property {() => string} topic
 * @property {() => string} messageId
 * @property {() => string} consumerGroup
 * @property {() => string} errorMessage
 * @property {() => bigint | undefined} publishedAtMs
 * @property {() => string | undefined} contentType
 * @property {() => number} payloadSize
 * @property {() => Array<{name: string, value: string}>} headers
 * @property {() => Uint8Array} payload
 * @property {() => Array<{atMs: bigint, kind: string, message: string}>} history
 * @property {(key: string) => string | undefined} extension
 */

/** @type {Host | undefined} */
let bound;

/**
 * Hand the SDK the host's functions. The build does it inside the component; a test may do
 * it to run the export glue against a fake host. `undefined` unbinds.
 * @param {Host | undefined} host
 */
export function bindHost(host) {
  bound = host;
}

/** The bound host, or `undefined` outside a component. @returns {Host | undefined} */
export function boundHost() {
  return bound;
}
