//! The `rules` policy exactly as its crate writes it, exported for `verdict:policy@0.1`:
//! the `contract-v0-1` feature of the SDK swaps the export glue and nothing else. The test
//! build compiles it beside the 0.2 build of the same crate, and the mixed-contract tests
//! check that both give the same verdicts in one gateway.

// Linking the crate is what brings its export (the component's `decider` functions) in.
pub use rules::*;
