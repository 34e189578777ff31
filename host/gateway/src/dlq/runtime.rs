//! Where a broker DLQ's asynchronous calls run. The command line gives each connection a
//! runtime of its own; the admin API keeps one connection per broker on the gateway's
//! runtime, and calls it from blocking threads.

use std::future::Future;

/// A runtime owned by the connection, or a handle to the gateway's.
pub(crate) enum Rt {
    /// The command line's: built for this connection, dropped with it.
    Owned(tokio::runtime::Runtime),
    /// The gateway's: calls come from `spawn_blocking` threads, which may block on it.
    Shared(tokio::runtime::Handle),
}

impl Rt {
    /// A one-worker runtime of the connection's own.
    pub(crate) fn own() -> std::io::Result<Rt> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        Ok(Rt::Owned(runtime))
    }

    /// Run `future` to completion on this thread.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        match self {
            Rt::Owned(runtime) => runtime.block_on(future),
            Rt::Shared(handle) => handle.block_on(future),
        }
    }
}
