//! What the store's tests share: a database of each test's own on the loopback servers.

#![allow(dead_code, reason = "each test binary uses part of the support module")]

#[cfg(feature = "mysql")]
pub mod mariadb;
#[cfg(feature = "postgres")]
pub mod postgres;

/// A fresh directory of the test's own under the system's temporary directory.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("verdict-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a scratch dir");
    dir
}
