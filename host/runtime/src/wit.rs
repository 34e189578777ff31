//! The contract's types and world, generated from `wit/policy.wit`: what every other module
//! of the runtime speaks to a component in.

#[allow(missing_docs, unused_qualifications, clippy::all)]
pub(crate) mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "policy",
    });
}

pub(crate) use generated::Policy as PolicyBindings;
pub(crate) use generated::PolicyPre as PolicyBindingsPre;
pub(crate) use generated::verdict::policy::types;
