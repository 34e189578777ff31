//! `verdict test --watch`: build a policy's project, run its vectors (and properties), and do
//! both again each time a file of the project or a vector file is saved - a Rust crate, a
//! Python or a JavaScript project alike, whatever `verdict build` builds.
//!
//! A round never stops the watch: a build that fails prints the toolchain's error and waits
//! for the next save, as does an invalid vector file. Build outputs and dependencies
//! (`target/`, `node_modules/`, `dist/`, `__pycache__/`, dot-directories, lock files) are
//! not watched, so a build never triggers the next one; and a round starts only when a file's
//! size or modification time changed, not on every event (reading a file is one).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};
use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, new_debouncer};

use super::{Format, TestRequest, test};

/// Saves closer together than this are one change (an editor writes a file in steps).
const DEBOUNCE: Duration = Duration::from_millis(300);

/// How long the files must stay as they are before a round starts.
const SETTLE: Duration = Duration::from_millis(200);

/// Directories whose changes are the build's own, or dependencies'.
const IGNORED: [&str; 4] = ["target", "node_modules", "dist", "__pycache__"];

/// Files the toolchains write into the project themselves (a first build writes
/// `Cargo.lock`): changes to them are never the author's edit.
const LOCK_FILES: [&str; 2] = ["Cargo.lock", "package-lock.json"];

/// Compiled Python and editors' backup and lock files.
fn editor_file(name: &str) -> bool {
    name.ends_with(".pyc")
        || name.ends_with('~')
        || name.starts_with(".#")
        || name.ends_with(".swp")
}

/// Build `project` and test the component with `request` (whose `policy` is replaced by
/// the component built), then again after every change, until the process is stopped.
/// Each round's report, and what started it, goes to `out`. Returns only when watching
/// itself fails.
pub fn watch_test(
    project: &Path,
    request: &TestRequest<'_>,
    format: Format,
    out: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<()> {
    let project = std::path::absolute(project)
        .with_context(|| format!("{}: the project to watch", project.display()))?;
    if !project.is_dir() {
        bail!(
            "--watch {}: expected the policy's project directory (a Rust crate, or a Python or \
             JavaScript project), which it rebuilds on every save - not a component",
            project.display()
        );
    }
    let (events, changes) = mpsc::channel();
    let mut debouncer = new_debouncer(DEBOUNCE, move |result: DebounceEventResult| {
        // The receiver is gone only when the watch is over.
        let _ = events.send(result);
    })
    .context("starting the file watcher")?;
    debouncer
        .watcher()
        .watch(&project, RecursiveMode::Recursive)
        .with_context(|| format!("watching {}", project.display()))?;
    for vectors in request.vectors {
        let vectors = std::path::absolute(vectors)?;
        if !vectors.starts_with(&project) {
            // The file's directory, not the file: editors save by renaming a new file over
            // the old one, which a watch on the old file would miss.
            let dir = vectors.parent().unwrap_or(Path::new("/"));
            debouncer
                .watcher()
                .watch(dir, RecursiveMode::NonRecursive)
                .with_context(|| format!("watching {}", dir.display()))?;
        }
    }
    let vectors: Vec<PathBuf> = request
        .vectors
        .iter()
        .filter_map(|v| std::path::absolute(v).ok())
        .collect();
    // Taken before each build: a file saved while it runs starts the next round.
    let mut before = fingerprint(&project, &vectors);
    loop {
        round(&project, request, format, out)?;
        out(&format!(
            "watching {} for changes (Ctrl-C to stop)\n",
            project.display()
        ))?;
        let (changed, now) = next_change(&changes, &project, &vectors, &before)?;
        before = now;
        out(&format!(
            "\n{} changed: building and testing again\n",
            changed.display()
        ))?;
    }
}

/// One build and test; a failure of either is reported, not returned.
fn round(
    project: &Path,
    request: &TestRequest<'_>,
    format: Format,
    out: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<()> {
    let built = match verdict_componentize::build(project, &Default::default()) {
        Ok(built) => built.component,
        Err(e) => return out(&format!("build failed: {e:#}\n")),
    };
    let request = TestRequest {
        policy: &built,
        ..*request
    };
    match test(&request, format) {
        Ok((report, passed)) => {
            out(&report)?;
            out(if passed {
                "all passed\n"
            } else {
                "FAILED: some checks did not pass\n"
            })
        }
        Err(invalid) => out(&format!("error: {invalid}\n")),
    }
}

/// Wait for a change that matters: a file of the project outside its build outputs, or one
/// of the vector files, whose size or modification time is no longer what `before` holds.
/// The watcher's events are only a hint (reading a file is an event too, and the build reads
/// them all); the files themselves say whether anything changed. Returns the first file
/// that did, and the files as they are once they stopped changing (a file being written is
/// not built half-way).
fn next_change(
    changes: &mpsc::Receiver<DebounceEventResult>,
    project: &Path,
    vectors: &[PathBuf],
    before: &Fingerprint,
) -> Result<(PathBuf, Fingerprint)> {
    loop {
        let mut now = fingerprint(project, vectors);
        if first_difference(before, &now).is_some() {
            loop {
                std::thread::sleep(SETTLE);
                let again = fingerprint(project, vectors);
                if again == now {
                    break;
                }
                now = again;
            }
            if let Some(path) = first_difference(before, &now) {
                return Ok((path, now));
            }
        }
        changes
            .recv()
            .context("the file watcher stopped")?
            .map_err(|e| anyhow::anyhow!("watching {}: {e}", project.display()))?;
    }
}

/// Size and modification time of every file that matters, by path.
type Fingerprint = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

fn fingerprint(project: &Path, vectors: &[PathBuf]) -> Fingerprint {
    let mut files = Fingerprint::new();
    let mut dirs = vec![project.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if !IGNORED.contains(&name.as_ref()) && !name.starts_with('.') {
                    dirs.push(path);
                }
            } else if kind.is_file() && matters(&path, project, vectors) {
                stamp(&mut files, path);
            }
        }
    }
    for vector in vectors {
        stamp(&mut files, vector.clone());
    }
    files
}

fn stamp(files: &mut Fingerprint, path: PathBuf) {
    if let Ok(meta) = std::fs::metadata(&path) {
        files.insert(path, (meta.len(), meta.modified().ok()));
    }
}

/// The first file added, removed or changed between two fingerprints.
fn first_difference(before: &Fingerprint, now: &Fingerprint) -> Option<PathBuf> {
    let changed = now
        .iter()
        .find(|(path, stamp)| before.get(*path) != Some(stamp))
        .map(|(path, _)| path.clone());
    changed.or_else(|| before.keys().find(|path| !now.contains_key(*path)).cloned())
}

/// Whether a change at `path` should start a round.
fn matters(path: &Path, project: &Path, vectors: &[PathBuf]) -> bool {
    if vectors.iter().any(|v| v == path) {
        return true;
    }
    let Ok(inside) = path.strip_prefix(project) else {
        return false;
    };
    let mut parts = inside.components().peekable();
    while let Some(part) = parts.next() {
        let name = part.as_os_str().to_string_lossy();
        let is_dir = parts.peek().is_some();
        if is_dir && (IGNORED.contains(&name.as_ref()) || name.starts_with('.')) {
            return false;
        }
        if !is_dir && (LOCK_FILES.contains(&name.as_ref()) || editor_file(&name)) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_and_vectors_matter_build_outputs_and_editor_files_do_not() {
        let project = Path::new("/p");
        let vectors = [PathBuf::from("/elsewhere/cases.json")];
        for path in [
            "/p/src/lib.rs",
            "/p/orders_policy/__init__.py",
            "/p/package.json",
            "/p/vectors/orders.json",
            "/elsewhere/cases.json",
        ] {
            assert!(matters(Path::new(path), project, &vectors), "{path}");
        }
        for path in [
            "/p/target/python/orders.component.wasm",
            "/p/node_modules/esbuild/index.js",
            "/p/dist/out.js",
            "/p/orders_policy/__pycache__/x.cpython-311.pyc",
            "/p/.git/index",
            "/p/src/.#lib.rs",
            "/p/src/lib.rs~",
            "/p/Cargo.lock",
            "/p/package-lock.json",
            "/elsewhere/other.json",
        ] {
            assert!(!matters(Path::new(path), project, &vectors), "{path}");
        }
    }
}
