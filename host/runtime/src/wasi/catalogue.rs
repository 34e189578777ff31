//! Which WASI interfaces a policy may import, and what each one grants: nothing that
//! reaches outside the failure being decided.

/// A WASI interface the host links for policies, and what its stub does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasiInterface {
    /// The interface without its version, e.g. `wasi:clocks/wall-clock`.
    pub name: &'static str,
    /// What a call gets, in one line (shown by `verdict inspect`).
    pub grants: &'static str,
}

const fn stub(name: &'static str, grants: &'static str) -> WasiInterface {
    WasiInterface { name, grants }
}

/// Every WASI interface a policy may import (any `0.2.x` version): the ones
/// `componentize-py` and ComponentizeJS link. Anything else is refused at load.
pub const WASI_INTERFACES: [WasiInterface; 27] = [
    stub(
        "wasi:cli/environment",
        "no variables, no arguments, no working directory",
    ),
    stub(
        "wasi:cli/exit",
        "exit traps: the call fails and the topic's fallback decides",
    ),
    stub("wasi:cli/stdin", "an empty, closed stream"),
    stub(
        "wasi:cli/stdout",
        "lines go to the policy log (info), bounded like host.log",
    ),
    stub(
        "wasi:cli/stderr",
        "lines go to the policy log (warn), bounded like host.log",
    ),
    stub("wasi:cli/terminal-input", "no terminal"),
    stub("wasi:cli/terminal-output", "no terminal"),
    stub("wasi:cli/terminal-stdin", "no terminal"),
    stub("wasi:cli/terminal-stdout", "no terminal"),
    stub("wasi:cli/terminal-stderr", "no terminal"),
    stub(
        "wasi:clocks/wall-clock",
        "the failure's now-ms, 1 us later on each read",
    ),
    stub(
        "wasi:clocks/monotonic-clock",
        "the failure's now-ms in ns, 1 us later on each read; timers fire at once",
    ),
    stub(
        "wasi:random/random",
        "SplitMix64 seeded by the failure's jitter seed",
    ),
    stub(
        "wasi:random/insecure",
        "SplitMix64 seeded by the failure's jitter seed",
    ),
    stub(
        "wasi:random/insecure-seed",
        "derived from the failure's jitter seed",
    ),
    stub("wasi:io/error", "no error details"),
    stub("wasi:io/poll", "everything is ready at once"),
    stub(
        "wasi:io/streams",
        "stdout and stderr only; reads see a closed stream",
    ),
    stub("wasi:filesystem/preopens", "no directories"),
    stub("wasi:filesystem/types", "no files: every call traps"),
    stub("wasi:sockets/network", "no network: every call traps"),
    stub(
        "wasi:sockets/instance-network",
        "no network: every call traps",
    ),
    stub("wasi:sockets/tcp", "no sockets: every call traps"),
    stub(
        "wasi:sockets/tcp-create-socket",
        "no sockets: every call traps",
    ),
    stub("wasi:sockets/udp", "no sockets: every call traps"),
    stub(
        "wasi:sockets/udp-create-socket",
        "no sockets: every call traps",
    ),
    stub(
        "wasi:sockets/ip-name-lookup",
        "no name lookups: every call traps",
    ),
];

/// True for an import in the `wasi` namespace (any interface, any version).
pub(crate) fn is_wasi(import: &str) -> bool {
    import.starts_with("wasi:")
}

/// `wasi:clocks/wall-clock@0.2.3` -> `wasi:clocks/wall-clock`.
pub(crate) fn wasi_interface(import: &str) -> &str {
    import.split_once('@').map_or(import, |(name, _)| name)
}

/// The stub that serves `import` (with or without a version), if the host links it.
pub fn describe(import: &str) -> Option<&'static WasiInterface> {
    let name = wasi_interface(import);
    WASI_INTERFACES.iter().find(|i| i.name == name)
}

/// A stable id for a resource type, so that every function handing out or taking that
/// resource agrees on its type (FNV-1a of the name). By name alone: an interface that
/// `use`s another's resource (`wasi:clocks/monotonic-clock` returning `wasi:io/poll`'s
/// `pollable`) lists it under the same name, and WASI 0.2's resource names are unique.
pub(crate) fn resource_id(resource: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in resource.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_linked_interface_is_described_once_with_or_without_a_version() {
        for i in &WASI_INTERFACES {
            assert_eq!(describe(i.name), Some(i));
            assert_eq!(describe(&format!("{}@0.2.9", i.name)), Some(i));
        }
        assert_eq!(describe("wasi:http/outgoing-handler@0.2.0"), None);
        assert_eq!(describe("wasi:clocks"), None);
    }

    #[test]
    fn each_resource_name_gets_its_own_id() {
        let names = [
            "error",
            "pollable",
            "input-stream",
            "output-stream",
            "terminal-input",
            "terminal-output",
            "descriptor",
            "directory-entry-stream",
            "network",
            "tcp-socket",
            "udp-socket",
            "incoming-datagram-stream",
            "outgoing-datagram-stream",
            "resolve-address-stream",
        ];
        let mut ids: Vec<u32> = names.iter().map(|n| resource_id(n)).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), names.len());
    }
}
