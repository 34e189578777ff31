//! A deterministic, capability-free WASI for policies built by interpreter toolchains.
//!
//! `componentize-py` (and ComponentizeJS with its features on) produce components that
//! import WASI 0.2 interfaces: an interpreter wants a clock, some randomness, stdout and
//! stderr, and links file and socket functions it never calls. A policy must stay a pure,
//! replayable function of the failure, so Verdict links each of those interfaces to a stub
//! that grants nothing ([`catalogue`]): no preopened directories, no environment or
//! arguments, no sockets; stdout and stderr go to the policy log; both clocks read the
//! failure's `now-ms`, advancing by a microsecond per read; random bytes come from a
//! generator seeded by the failure's jitter seed. The same failure therefore gives the same
//! verdict in any host, any time, however the policy was written.
//!
//! The stubs are defined per component, under the exact names (and versions) it imports,
//! with the component's own function types: nothing is linked that the component does not
//! ask for, and a WASI interface outside the catalogue is refused at load by the contract
//! check, naming it. Rust policies import no WASI and never see any of this.

mod catalogue;
mod ops;
mod state;

pub use catalogue::{WASI_INTERFACES, WasiInterface, describe};
pub(crate) use catalogue::{is_wasi, wasi_interface};
pub(crate) use state::{CallInputs, WasiState};

use wasmtime::Engine;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, ResourceType};

use crate::wit::types::Level;

/// What the stubs need from a store's data: the per-call WASI state, and the policy log
/// that stdout and stderr lines go to.
pub(crate) trait WasiHost: Send + 'static {
    fn wasi(&mut self) -> &mut WasiState;
    fn policy_log(&mut self, level: Level, line: String);
}

/// The linker for one component: the shared contract linker, plus a deterministic stub for
/// every WASI function the component imports.
pub(crate) fn linker_for<T: WasiHost>(
    base: &Linker<T>,
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<Linker<T>> {
    let ty = component.component_type();
    let wasi: Vec<_> = ty
        .imports(engine)
        .filter(|(name, _)| is_wasi(name))
        .collect();
    if wasi.is_empty() {
        return Ok(base.clone());
    }
    let mut linker = base.clone();
    for (import, item) in wasi {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            wasmtime::bail!("{import}: expected an interface, found a bare item");
        };
        let interface = wasi_interface(import);
        let mut scope = linker.instance(import)?;
        for (name, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::Resource(_) => {
                    let id = catalogue::resource_id(name);
                    scope.resource(name, ResourceType::host_dynamic(id), |_, _| Ok(()))?;
                }
                ComponentItem::ComponentFunc(_) => {
                    let op = ops::Op::of(interface, name);
                    let qualified = format!("{import}#{name}");
                    scope.func_new(name, move |store, ty, params, results| {
                        op.run(store, &ty, params, results, &qualified)
                    })?;
                }
                _ => {}
            }
        }
    }
    Ok(linker)
}
