//! Logging through the host. Inside a component lines go to the host's structured log,
//! tagged with the policy; natively (in unit tests) they go to stderr.

/// Log severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very detailed.
    Trace,
    /// Detailed.
    Debug,
    /// Normal.
    Info,
    /// Something looks wrong.
    Warn,
    /// Something is wrong.
    Error,
}

/// Write one log line.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::export::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Log at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Log at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}
