// The host's interface (`verdict:policy/host`), reachable only inside the component.
//
// The SDK never imports the host module itself: that import exists only in a component,
// and Node cannot resolve it, which would make every policy untestable natively. The build
// (bin/verdict-build-js.mjs) instead bundles a first module that imports the host and hands
// it over here, before the policy's own modules run. Natively nothing is bound, and the SDK
// falls back to what a test gave (log lines go to stderr).
//
// Through the bound module the SDK writes `log` lines and makes the instance's one `details`
// resource, on the first on-demand part of a failure a policy reads, then keeps it: every
// method answers about the call in progress, so no call lends a handle.

/**
 * The `verdict:policy/host` interface as the component's bindings present it.
 * @typedef {object} Host
 * @property {(level: 'trace' | 'debug' | 'info' | 'warn' | 'error', message: string) => void} log
 * @property {new () => Details} Details the resource's class: a new handle per construction
 */

/**
 * The `details` resource: every method answers about the call in progress and names the
 * failure by its position in it (0 in `decide`, the index into the list in `decide-batch`).
 * @typedef {object} Details
 * @property {(failure: number) => string} topic
 * @property {(failure: number) => string} messageId
 * @property {(failure: number) => string} consumerGroup
 * @property {(failure: number) => string} errorMessage
 * @property {(failure: number) => bigint | undefined} publishedAtMs
 * @property {(failure: number) => bigint} firstFailedAtMs
 * @property {(failure: number) => string | undefined} contentType
 * @property {(failure: number) => number} payloadSize
 * @property {(failure: number) => Array<{name: string, value: string}>} headers
 * @property {(failure: number) => Uint8Array} payload
 * @property {(failure: number) => Array<{atMs: bigint, kind: string, message: string}>} history
 * @property {(failure: number, key: string) => string | undefined} extension
 */

/** @type {Host | undefined} */
let bound;
/** @type {Details | undefined} the instance's one handle, made on first use */
let handle;

/**
 * Hand the SDK the host's interface. The build does it inside the component; a test may do
 * it to run the export glue against a fake host. `undefined` unbinds.
 * @param {Host | undefined} host
 */
export function bindHost(host) {
  bound = host;
  handle = undefined;
}

/**
 * The instance's `details` resource: made the first time it is asked for (a policy that
 * reads no on-demand part never makes one), then the same handle for every call.
 * `undefined` outside a component.
 * @returns {Details | undefined}
 */
export function hostDetails() {
  if (handle === undefined && bound?.Details !== undefined) handle = new bound.Details();
  return handle;
}

/** The bound host, or `undefined` outside a component. @returns {Host | undefined} */
export function boundHost() {
  return bound;
}
