//! stub
pub use wasmtime;
