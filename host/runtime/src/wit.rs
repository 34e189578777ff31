//! The contract's types and worlds, generated from `wit/policy.wit` (the current contract,
//! 0.2) and `wit/v0.1/policy.wit` (the previous one, frozen): what every other module of the
//! runtime speaks to a component in. The host links both, so a component built for 0.1
//! runs unchanged beside 0.2 ones.

#[allow(missing_docs, unused_qualifications, clippy::all)]
pub(crate) mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "policy",
        with: {
            "verdict:policy/host.details": super::Lent,
        },
        // A policy that makes `details` handles without end is stopped (see
        // `bindings::MAX_DETAILS_HANDLES`).
        imports: {
            "verdict:policy/host.[constructor]details": trappable,
        },
    });
}

#[allow(missing_docs, unused_qualifications, clippy::all)]
pub(crate) mod generated_v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1",
        world: "policy",
    });
}

/// The `details` resource a 0.2 policy makes once and keeps: a handle onto the failures of
/// the call in progress, named by their position in it (the store keeps them).
pub struct Lent;

pub(crate) use generated::Policy as PolicyBindings;
pub(crate) use generated::PolicyPre as PolicyBindingsPre;
pub(crate) use generated::verdict::policy::types;

/// The 0.1 contract's world and types.
pub(crate) mod v0_1 {
    pub(crate) use super::generated_v0_1::Policy as PolicyBindings;
    pub(crate) use super::generated_v0_1::PolicyPre as PolicyBindingsPre;
    pub(crate) use super::generated_v0_1::verdict::policy::types;
}
