//! What each stubbed WASI function does. Chosen once per import when a policy loads, run on
//! every call with the component's own types: values are built as `Val`s, so one stub
//! serves every `0.2.x` version of an interface.

use wasmtime::component::types::{ComponentFunc, Type};
use wasmtime::component::{ResourceAny, ResourceDynamic, Val};
use wasmtime::{StoreContextMut, bail};

use super::WasiHost;
use super::catalogue::resource_id;
use super::state::take_lines;
use crate::wit::types::Level;

/// Most random bytes one call may ask for (CPython asks for a few KiB at start-up; the
/// answer is a list of values on the host, tens of bytes each, so the bound is small).
const MAX_RANDOM_BYTES: u64 = 64 << 10;
/// What `check-write` allows at once: one line of the policy log.
const WRITE_BUDGET_BYTES: u64 = 4 << 10;

/// The stream reps `get-stdin`, `get-stdout` and `get-stderr` hand out.
const STDIN: u32 = 0;
const STDOUT: u32 = 1;
const STDERR: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// The empty answer of the function's type: nothing, `ok`, `none`, `[]`, `""`.
    Empty,
    /// A trap naming the import: the policy reached for a capability it does not have.
    Deny,
    Exit,
    WallNow,
    WallResolution,
    MonoNow,
    MonoResolution,
    /// A pollable that is ready at once (timers fire immediately: nothing waits).
    Pollable,
    PollableReady,
    PollAll,
    RandomBytes,
    RandomU64,
    InsecureSeed,
    Stream(u32),
    CheckWrite,
    Write,
    Closed,
}

impl Op {
    /// The stub for `function` of `interface` (unversioned).
    pub(crate) fn of(interface: &str, function: &str) -> Op {
        use Op::*;
        match (interface, function) {
            ("wasi:cli/environment", _) => Empty,
            ("wasi:cli/exit", _) => Exit,
            ("wasi:cli/stdin", "get-stdin") => Stream(STDIN),
            ("wasi:cli/stdout", "get-stdout") => Stream(STDOUT),
            ("wasi:cli/stderr", "get-stderr") => Stream(STDERR),
            (
                "wasi:cli/terminal-stdin" | "wasi:cli/terminal-stdout" | "wasi:cli/terminal-stderr",
                _,
            ) => Empty,
            ("wasi:clocks/wall-clock", "now") => WallNow,
            ("wasi:clocks/wall-clock", "resolution") => WallResolution,
            ("wasi:clocks/monotonic-clock", "now") => MonoNow,
            ("wasi:clocks/monotonic-clock", "resolution") => MonoResolution,
            ("wasi:clocks/monotonic-clock", "subscribe-instant" | "subscribe-duration") => Pollable,
            ("wasi:random/random", "get-random-bytes")
            | ("wasi:random/insecure", "get-insecure-random-bytes") => RandomBytes,
            ("wasi:random/random", "get-random-u64")
            | ("wasi:random/insecure", "get-insecure-random-u64") => RandomU64,
            ("wasi:random/insecure-seed", "insecure-seed") => InsecureSeed,
            ("wasi:io/error", "[method]error.to-debug-string") => Empty,
            ("wasi:io/poll", "[method]pollable.ready") => PollableReady,
            ("wasi:io/poll", "[method]pollable.block") => Empty,
            ("wasi:io/poll", "poll") => PollAll,
            ("wasi:io/streams", f) => match f.split_once('.').map_or(f, |(_, m)| m) {
                "check-write" => CheckWrite,
                "write" | "blocking-write-and-flush" => Write,
                "flush" | "blocking-flush" | "write-zeroes" | "blocking-write-zeroes-and-flush" => {
                    Empty
                }
                "subscribe" => Pollable,
                _ => Closed,
            },
            ("wasi:filesystem/preopens", "get-directories") => Empty,
            ("wasi:filesystem/types", "filesystem-error-code") => Empty,
            _ => Deny,
        }
    }

    pub(crate) fn run<T: WasiHost>(
        self,
        mut store: StoreContextMut<'_, T>,
        ty: &ComponentFunc,
        params: &[Val],
        results: &mut [Val],
        import: &str,
    ) -> wasmtime::Result<()> {
        // Every borrowed handle must be let go before returning, used or not.
        let reps = release(&mut store, params)?;
        let result_ty = ty.results().next();
        let value = match self {
            Op::Empty => match &result_ty {
                Some(t) => empty(t, import)?,
                None => return Ok(()),
            },
            Op::Deny => bail!(
                "the policy called {import}, which policies may not use (no files, sockets, \
                 environment or exit: a verdict depends on the failure alone)"
            ),
            Op::Exit => bail!("the policy called {import}"),
            Op::WallNow => {
                let ns = store.data_mut().wasi().read_clock_ns();
                Val::Record(vec![
                    ("seconds".into(), Val::U64(ns / 1_000_000_000)),
                    ("nanoseconds".into(), Val::U32((ns % 1_000_000_000) as u32)),
                ])
            }
            Op::WallResolution => Val::Record(vec![
                ("seconds".into(), Val::U64(0)),
                ("nanoseconds".into(), Val::U32(1_000)),
            ]),
            Op::MonoNow => Val::U64(store.data_mut().wasi().read_clock_ns()),
            Op::MonoResolution => Val::U64(1_000),
            Op::Pollable => own(&mut store, "pollable", 0)?,
            Op::PollableReady => Val::Bool(true),
            Op::PollAll => {
                let count = match params.first() {
                    Some(Val::List(items)) => items.len(),
                    _ => 0,
                };
                Val::List((0..count as u32).map(Val::U32).collect())
            }
            Op::RandomBytes => {
                let len = match params.first() {
                    Some(Val::U64(n)) => *n,
                    _ => bail!("{import}: expected a length"),
                };
                if len > MAX_RANDOM_BYTES {
                    bail!("{import}: asked for {len} random bytes (at most {MAX_RANDOM_BYTES})");
                }
                let mut bytes = vec![0u8; len as usize];
                store.data_mut().wasi().fill(&mut bytes);
                Val::List(bytes.into_iter().map(Val::U8).collect())
            }
            Op::RandomU64 => Val::U64(store.data_mut().wasi().next_u64()),
            Op::InsecureSeed => {
                let wasi = store.data_mut().wasi();
                Val::Tuple(vec![Val::U64(wasi.next_u64()), Val::U64(wasi.next_u64())])
            }
            Op::Stream(rep) => {
                let resource = if rep == STDIN {
                    "input-stream"
                } else {
                    "output-stream"
                };
                own(&mut store, resource, rep)?
            }
            Op::CheckWrite => Val::Result(Ok(Some(Box::new(Val::U64(WRITE_BUDGET_BYTES))))),
            Op::Write => {
                let Some(Some(rep)) = reps.first().copied() else {
                    bail!("{import}: expected a stream");
                };
                let bytes: Vec<u8> = match params.get(1) {
                    Some(Val::List(items)) => {
                        // WASI lets a writer send only what `check-write` allowed; more is
                        // refused before it is copied again.
                        within_write_budget(import, items.len())?;
                        items
                            .iter()
                            .filter_map(|v| if let Val::U8(b) = v { Some(*b) } else { None })
                            .collect()
                    }
                    _ => bail!("{import}: expected bytes"),
                };
                write(store.data_mut(), rep, &bytes);
                Val::Result(Ok(None))
            }
            Op::Closed => Val::Result(Err(Some(Box::new(Val::Variant("closed".into(), None))))),
        };
        match results.first_mut() {
            Some(slot) => *slot = value,
            None => bail!("{import}: the component expects no result"),
        }
        Ok(())
    }
}

/// A write of `len` bytes is refused past what `check-write` allowed.
fn within_write_budget(import: &str, len: usize) -> wasmtime::Result<()> {
    if len as u64 > WRITE_BUDGET_BYTES {
        bail!(
            "{import}: wrote {len} bytes at once, more than check-write allowed \
             ({WRITE_BUDGET_BYTES})"
        );
    }
    Ok(())
}

/// The empty value of `ty`: what a stub answers when the honest answer is "nothing".
fn empty(ty: &Type, import: &str) -> wasmtime::Result<Val> {
    Ok(match ty {
        Type::Result(_) => Val::Result(Ok(None)),
        Type::Option(_) => Val::Option(None),
        Type::List(_) => Val::List(Vec::new()),
        Type::String => Val::String(String::new()),
        Type::Bool => Val::Bool(false),
        other => bail!("{import}: no empty answer for a {other:?}"),
    })
}

fn own<T: WasiHost>(
    store: &mut StoreContextMut<'_, T>,
    resource: &str,
    rep: u32,
) -> wasmtime::Result<Val> {
    let handle = ResourceDynamic::new_own(rep, resource_id(resource));
    Ok(Val::Resource(handle.try_into_resource_any(store)?))
}

/// Let go of the handles among `params` (a borrow must not outlive the call), returning
/// the rep of each top-level handle (`None` for a parameter that is not one).
fn release<T: WasiHost>(
    store: &mut StoreContextMut<'_, T>,
    params: &[Val],
) -> wasmtime::Result<Vec<Option<u32>>> {
    let mut reps = Vec::with_capacity(params.len());
    for param in params {
        reps.push(match param {
            Val::Resource(r) => Some(rep_of(store, *r)?),
            Val::List(items) => {
                for item in items {
                    if let Val::Resource(r) = item {
                        rep_of(store, *r)?;
                    }
                }
                None
            }
            _ => None,
        });
    }
    Ok(reps)
}

fn rep_of<T: WasiHost>(
    store: &mut StoreContextMut<'_, T>,
    r: ResourceAny,
) -> wasmtime::Result<u32> {
    Ok(ResourceDynamic::try_from_resource_any(r, store)?.rep())
}

/// Stdout and stderr become policy log lines; anything written to another stream is dropped.
fn write<T: WasiHost>(state: &mut T, rep: u32, bytes: &[u8]) {
    let (pending, level) = match rep {
        STDOUT => (&mut state.wasi().stdout, Level::Info),
        STDERR => (&mut state.wasi().stderr, Level::Warn),
        _ => return,
    };
    let lines = take_lines(pending, bytes);
    for line in lines {
        state.policy_log(level, line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_past_check_write_is_refused_before_it_is_copied() {
        assert!(within_write_budget("w", WRITE_BUDGET_BYTES as usize).is_ok());
        let e = within_write_budget("wasi:io/streams.write", 16 << 20).unwrap_err();
        assert!(
            e.to_string().contains("more than check-write allowed"),
            "{e}"
        );
    }

    #[test]
    fn capabilities_are_denied_and_the_deterministic_parts_are_served() {
        assert_eq!(
            Op::of("wasi:sockets/tcp-create-socket", "create-tcp-socket"),
            Op::Deny
        );
        assert_eq!(
            Op::of("wasi:filesystem/types", "[method]descriptor.read"),
            Op::Deny
        );
        assert_eq!(Op::of("wasi:cli/environment", "get-environment"), Op::Empty);
        assert_eq!(
            Op::of("wasi:filesystem/preopens", "get-directories"),
            Op::Empty
        );
        assert_eq!(Op::of("wasi:clocks/wall-clock", "now"), Op::WallNow);
        assert_eq!(
            Op::of("wasi:random/random", "get-random-bytes"),
            Op::RandomBytes
        );
        assert_eq!(
            Op::of(
                "wasi:io/streams",
                "[method]output-stream.blocking-write-and-flush"
            ),
            Op::Write
        );
        assert_eq!(
            Op::of("wasi:io/streams", "[method]input-stream.read"),
            Op::Closed
        );
        assert_eq!(Op::of("wasi:cli/exit", "exit"), Op::Exit);
        assert_eq!(
            Op::of("wasi:io/streams", "[method]output-stream.splice"),
            Op::Closed
        );
    }
}
