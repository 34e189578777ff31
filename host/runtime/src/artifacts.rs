//! The on-disk cache of compiled components, so a restart with many policies does not
//! recompile them.
//!
//! An entry is keyed by the component's SHA-256 and everything that makes compiled code
//! valid for an engine (Wasmtime's compatibility hash covers the Wasmtime version, target,
//! compiler flags, tunables and features; the host's own version is added). The file holds
//! a magic line, an HMAC-SHA256 of the artifact and the artifact; an entry whose MAC does not
//! match is deleted and rebuilt, never loaded. Deserializing compiled code is `unsafe` in
//! Wasmtime because the bytes are trusted to be native code Wasmtime wrote: the MAC is keyed
//! by a secret of this installation (`artifacts.key` in the state directory, 0600), so it
//! guards against truncation and bit rot and against an entry planted or copied from
//! elsewhere; the state directory is private to the gateway's user besides.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::Mac as _;
use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::fsutil::{create_private_dir, write_atomically};

const MAGIC: &[u8] = b"verdict-artifact-2\n";
const DIGEST_LEN: usize = 32;

/// What the cache has done since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Components compiled (cache miss or cache off).
    pub compiled: u64,
    /// Components loaded from the disk cache.
    pub hits: u64,
    /// Entries found stale or corrupt, deleted and rebuilt.
    pub rejected: u64,
}

/// A directory of compiled components.
#[derive(Debug)]
pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
    key: Vec<u8>,
    compiled: AtomicU64,
    hits: AtomicU64,
    rejected: AtomicU64,
}

impl ArtifactCache {
    /// A cache in `dir`, or none (always compile) for `None`. Its MAC key is
    /// `<dir>.key`, made when missing; without it there is no cache.
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        let (dir, key) = match dir {
            Some(dir) => match crate::fsutil::secret(&dir.with_extension("key")) {
                Ok(key) => (Some(dir), key),
                Err(e) => {
                    tracing::warn!(path = %dir.display(), error = %e, "no key for the artifact cache; compiling every component");
                    (None, Vec::new())
                }
            },
            None => (None, Vec::new()),
        };
        ArtifactCache {
            dir,
            key,
            compiled: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            compiled: self.compiled.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    /// The compiled component for `bytes` (whose digest is `sha256`): from the cache when a
    /// sound entry exists, else compiled with `compile` and stored.
    pub(crate) fn get_or_compile(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
        compile: impl FnOnce(&[u8]) -> wasmtime::Result<Component>,
    ) -> wasmtime::Result<Component> {
        let Some(dir) = &self.dir else {
            self.compiled.fetch_add(1, Ordering::Relaxed);
            return compile(bytes);
        };
        let path = dir.join(format!("{}.cwasm", key(engine, sha256)));
        match read_entry(&path, &self.key) {
            Entry::Sound(artifact) => match deserialize(engine, &artifact) {
                Ok(component) => {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(component);
                }
                Err(e) => self.reject(&path, &format!("{e:#}")),
            },
            Entry::Corrupt(why) => self.reject(&path, why),
            Entry::Missing => {}
        }
        self.compiled.fetch_add(1, Ordering::Relaxed);
        let component = compile(bytes)?;
        // A cache that cannot be written costs a recompile next time, nothing else.
        if let Err(e) = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))
            .and_then(|artifact| {
                create_private_dir(dir)?;
                let mac = mac(&self.key, &artifact);
                write_atomically(&path, &[MAGIC, &mac, &artifact])
            })
        {
            tracing::warn!(path = %path.display(), error = %e, "could not write the artifact cache");
        }
        Ok(component)
    }

    fn reject(&self, path: &Path, why: &str) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(path = %path.display(), why, "artifact cache entry rejected; recompiling");
        let _ = std::fs::remove_file(path);
    }
}

/// The entry's file name: everything compiled code depends on, hashed.
fn key(engine: &Engine, sha256: &str) -> String {
    let mut engine_hash = std::collections::hash_map::DefaultHasher::new();
    engine
        .precompile_compatibility_hash()
        .hash(&mut engine_hash);
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.update(engine_hash.finish().to_le_bytes());
    h.update(sha256.as_bytes());
    crate::digest::hex(&h.finalize())
}

enum Entry {
    Missing,
    Corrupt(&'static str),
    Sound(Vec<u8>),
}

/// HMAC-SHA256 of `artifact` under `key`.
fn mac(key: &[u8], artifact: &[u8]) -> [u8; DIGEST_LEN] {
    let mut mac = <hmac::Hmac<Sha256> as hmac::KeyInit>::new_from_slice(key)
        .expect("HMAC takes a key of any length");
    mac.update(artifact);
    mac.finalize().into_bytes().into()
}

fn read_entry(path: &Path, key: &[u8]) -> Entry {
    let Ok(mut file) = std::fs::read(path) else {
        return Entry::Missing;
    };
    let Some(rest) = file.strip_prefix(MAGIC) else {
        return Entry::Corrupt("bad magic");
    };
    if rest.len() < DIGEST_LEN {
        return Entry::Corrupt("truncated");
    }
    let (digest, artifact) = rest.split_at(DIGEST_LEN);
    let mut check = <hmac::Hmac<Sha256> as hmac::KeyInit>::new_from_slice(key)
        .expect("HMAC takes a key of any length");
    check.update(artifact);
    if check.verify_slice(digest).is_err() {
        return Entry::Corrupt("MAC mismatch (damaged, or not written by this installation)");
    }
    let start = MAGIC.len() + DIGEST_LEN;
    file.drain(..start);
    Entry::Sound(file)
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `artifact` is exactly the bytes `Component::serialize` produced for an engine
    // with the same compatibility hash (the key) and the same host version: the MAC
    // written next to it, keyed by this installation's secret, matched, so it is neither
    // truncated, altered nor copied in from elsewhere, and the cache directory is private
    // to the gateway's user. Wasmtime itself re-checks the
    // header's version and engine settings and refuses a mismatch with an error.
    unsafe { Component::deserialize(engine, artifact) }
}
