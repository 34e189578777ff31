//! Build Verdict policies into WebAssembly components.
//!
//! This is the engine behind `verdict build`, and what the test suite's build script uses to
//! produce its fixtures. A Rust policy crate is compiled for `wasm32-unknown-unknown` (so
//! std pulls in no WASI imports at all), then its core module, which carries the contract's
//! component type in a custom section put there by `wit-bindgen`, is wrapped into a
//! component with `wit-component`. A Python project (`pyproject.toml`) is built by
//! `componentize-py` and a JavaScript one (`package.json`) by ComponentizeJS, both against
//! the contract's WIT ([`build_project`]); [`build`] picks by the manifest it finds.
//!
//! ```no_run
//! use verdict_componentize::{BuildOptions, build_crate};
//!
//! let built = build_crate("policies/rules".as_ref(), &BuildOptions::default())?;
//! println!("{}", built.component.display());
//! # Ok::<(), verdict_componentize::BuildError>(())
//! ```

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod interpreted;

pub use interpreted::{
    COMPONENTIZE_PY_VERSION, JS_BUILD_SCRIPT, Language, POLICY_WIT, WORLD, build_project,
};

/// The target policies are compiled for.
pub const TARGET: &str = "wasm32-unknown-unknown";

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The directory has no `Cargo.toml`, `pyproject.toml` or `package.json`.
    #[error(
        "{0}: no Cargo.toml, pyproject.toml or package.json here; pass the directory of a \
         policy project (Rust, Python or JavaScript)"
    )]
    NotACrate(PathBuf),
    /// The Rust target is not installed.
    #[error("the {TARGET} target is not installed; run `rustup target add {TARGET}`")]
    MissingTarget,
    /// Cargo or a language toolchain could not be started.
    #[error("could not run `{cargo}`: {source}")]
    Spawn {
        /// The command.
        cargo: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Cargo reported a compile error (already printed to stderr).
    #[error("cargo build failed for {} (see the compiler output above){}", .0.display(), workspace_hint(.0))]
    Compile(PathBuf),
    /// The crate built, but produced no `.wasm` library.
    #[error(
        "{0}: built no .wasm; a policy crate needs `[lib] crate-type = [\"cdylib\", \"rlib\"]`"
    )]
    NoCdylib(PathBuf),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A project manifest (`pyproject.toml`, `package.json`) does not say how to build.
    #[error("{}: {message}", path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is missing or wrong.
        message: String,
    },
    /// A language toolchain is not installed.
    #[error("{tool} not found: {install}")]
    MissingTool {
        /// The tool.
        tool: String,
        /// How to install it.
        install: String,
    },
    /// A language toolchain reported an error (already printed to stderr).
    #[error("{tool} failed to build {} (see its output above)", dir.display())]
    Toolchain {
        /// The project.
        dir: PathBuf,
        /// The tool.
        tool: String,
    },
    /// The core module could not be turned into a component.
    #[error("{path}: not a valid policy module: {message}")]
    Encode {
        /// The core module.
        path: PathBuf,
        /// What wit-component said.
        message: String,
    },
}

/// The usual cause of a failed build that the compiler output does not name: a crate put
/// inside another workspace that does not list it. Cargo refuses to build it ("believes
/// it's in a workspace when it's not"); an empty `[workspace]` table makes the crate a
/// workspace of its own.
fn workspace_hint(crate_dir: &Path) -> String {
    let own = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap_or_default();
    if own.lines().any(|l| l.trim() == "[workspace]") {
        return String::new();
    }
    let outer = crate_dir.canonicalize().ok().and_then(|dir| {
        dir.ancestors()
            .skip(1)
            .map(|a| a.join("Cargo.toml"))
            .find(|m| {
                std::fs::read_to_string(m)
                    .is_ok_and(|t| t.lines().any(|l| l.trim() == "[workspace]"))
            })
    });
    // A crate the outer workspace lists is not the case: cargo failed for another reason.
    let listed = outer.as_ref().is_some_and(|manifest| {
        let (Some(root), Ok(dir)) = (manifest.parent(), crate_dir.canonicalize()) else {
            return false;
        };
        let Ok(relative) = dir.strip_prefix(root) else {
            return false;
        };
        std::fs::read_to_string(manifest)
            .is_ok_and(|text| text.contains(&format!("\"{}\"", relative.display())))
    });
    match outer.filter(|_| !listed) {
        Some(manifest) => format!(
            "; if cargo says the package believes it is in a workspace, the crate sits inside \
             the workspace of {}: add an empty `[workspace]` table to the crate's Cargo.toml \
             (what `verdict new` writes), or list it in that workspace's members",
            manifest.display()
        ),
        None => String::new(),
    }
}

/// How to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Cargo target directory; `None` uses the crate's own (its workspace's `target/`).
    pub target_dir: Option<PathBuf>,
    /// Build with `--release` (the default: smaller and faster components).
    pub release: bool,
    /// Pass `--quiet` to cargo.
    pub quiet: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            target_dir: None,
            release: true,
            quiet: false,
        }
    }
}

/// A built policy.
#[derive(Debug, Clone)]
pub struct Built {
    /// The crate's library name.
    pub name: String,
    /// The core module cargo produced (Rust only: the other toolchains write the component
    /// directly).
    pub core_module: Option<PathBuf>,
    /// The component, next to the core module as `<name>.component.wasm`.
    pub component: PathBuf,
}

/// Compile the policy crate in `crate_dir` and wrap it into a component.
pub fn build_crate(crate_dir: &Path, options: &BuildOptions) -> Result<Built, BuildError> {
    let manifest = crate_dir.join("Cargo.toml");
    let manifest = manifest
        .canonicalize()
        .map_err(|_| BuildError::NotACrate(crate_dir.to_path_buf()))?;
    ensure_target_installed()?;

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(&cargo);
    cmd.args([
        "build",
        "--lib",
        "--target",
        TARGET,
        "--message-format=json-render-diagnostics",
    ])
    .arg("--manifest-path")
    .arg(&manifest)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if options.release {
        cmd.arg("--release");
    }
    if options.quiet {
        cmd.arg("--quiet");
    }
    if let Some(dir) = &options.target_dir {
        cmd.env("CARGO_TARGET_DIR", dir);
    }
    // When run from a build script, the outer build's flags are for the host target, not
    // for wasm32; never leak them into the guest build.
    cmd.env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    let output = cmd.output().map_err(|source| BuildError::Spawn {
        cargo: cargo.clone(),
        source,
    })?;
    if !output.status.success() {
        return Err(BuildError::Compile(crate_dir.to_path_buf()));
    }
    let (name, core_module) = find_cdylib(&output.stdout, &manifest)
        .ok_or_else(|| BuildError::NoCdylib(crate_dir.to_path_buf()))?;
    let core = std::fs::read(&core_module).map_err(|source| BuildError::Io {
        path: core_module.clone(),
        source,
    })?;
    let component_bytes = componentize(&core).map_err(|message| BuildError::Encode {
        path: core_module.clone(),
        message,
    })?;
    let component = core_module.with_file_name(format!("{name}.component.wasm"));
    write_if_changed(&component, &component_bytes)?;
    Ok(Built {
        name,
        core_module: Some(core_module),
        component,
    })
}

/// Build the policy project in `dir`, whatever its language: a Rust crate (`Cargo.toml`),
/// a Python project (`pyproject.toml`) or a JavaScript one (`package.json`).
pub fn build(dir: &Path, options: &BuildOptions) -> Result<Built, BuildError> {
    if dir.join("Cargo.toml").is_file() {
        return build_crate(dir, options);
    }
    match Language::of(dir) {
        Some(language) => build_project(dir, language, options),
        None => Err(BuildError::NotACrate(dir.to_path_buf())),
    }
}

/// Wrap a core module built with `wit-bindgen` into a component. The error is
/// wit-component's explanation.
pub fn componentize(core_module: &[u8]) -> Result<Vec<u8>, String> {
    if !has_component_type(core_module) {
        return Err(
            "the module carries no component type; was it built with verdict-sdk's \
                    `export_policy!` (or wit-bindgen for the verdict:policy world)?"
                .to_string(),
        );
    }
    wit_component::ComponentEncoder::default()
        .module(core_module)
        .and_then(|encoder| encoder.validate(true).encode())
        .map_err(|e| format!("{e:#}"))
}

/// `wit-bindgen` embeds the world a module implements in `component-type*` custom sections;
/// without one there is nothing to encode a policy from.
fn has_component_type(module: &[u8]) -> bool {
    wasmparser::Parser::new(0).parse_all(module).any(|payload| {
        matches!(payload, Ok(wasmparser::Payload::CustomSection(c)) if c.name().starts_with("component-type"))
    })
}

/// Writing only on change keeps the mtime stable, so file watchers and build scripts that
/// depend on the component do not fire for a no-op rebuild.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes).map_err(|source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn ensure_target_installed() -> Result<(), BuildError> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let Ok(out) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        // Let cargo report whatever is wrong with the toolchain.
        return Ok(());
    };
    target_in_sysroot(Path::new(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Without the target's standard library, cargo's own error ("can't find crate for
/// `core`") does not say what to install.
fn target_in_sysroot(sysroot: &Path) -> Result<(), BuildError> {
    if sysroot.join("lib/rustlib").join(TARGET).exists() {
        Ok(())
    } else {
        Err(BuildError::MissingTarget)
    }
}

/// Find the `.wasm` of the crate's library among cargo's JSON messages.
fn find_cdylib(stdout: &[u8], manifest: &Path) -> Option<(String, PathBuf)> {
    let mut found = None;
    for line in stdout.split(|&b| b == b'\n') {
        let Ok(msg) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let same_crate = msg["manifest_path"]
            .as_str()
            .is_some_and(|p| Path::new(p) == manifest);
        if !same_crate {
            continue;
        }
        let files = msg["filenames"].as_array()?;
        if let Some(wasm) = files
            .iter()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".wasm"))
        {
            let name = msg["target"]["name"]
                .as_str()
                .unwrap_or("policy")
                .replace('-', "_");
            found = Some((name, PathBuf::from(wasm)));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crate_inside_another_workspace_is_told_how_to_stand_alone() {
        let root = std::env::temp_dir().join(format!("verdict-ws-hint-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let inner = root.join("policies/orders");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(root.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
        std::fs::write(inner.join("Cargo.toml"), "[package]\nname = \"orders\"\n").unwrap();
        let e = BuildError::Compile(inner.clone()).to_string();
        assert!(
            e.contains("add an empty `[workspace]` table") && e.contains("Cargo.toml"),
            "{e}"
        );
        // A crate that is its own workspace gets no such hint.
        std::fs::write(
            inner.join("Cargo.toml"),
            "[package]\nname = \"orders\"\n\n[workspace]\n",
        )
        .unwrap();
        let e = BuildError::Compile(inner.clone()).to_string();
        assert!(!e.contains("[workspace]"), "{e}");
        // Nor does a crate the outer workspace lists as a member: cargo failed otherwise.
        std::fs::write(inner.join("Cargo.toml"), "[package]\nname = \"orders\"\n").unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace]\nmembers = [\"policies/orders\"]\n",
        )
        .unwrap();
        let e = BuildError::Compile(inner).to_string();
        assert!(!e.contains("[workspace]"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn finds_the_crates_wasm_among_dependency_artifacts() {
        let manifest = Path::new("/w/policies/rules/Cargo.toml");
        let stdout = br#"{"reason":"compiler-artifact","manifest_path":"/w/guest-sdk/Cargo.toml","target":{"name":"verdict_sdk"},"filenames":["/t/libverdict_sdk.rlib"]}
{"reason":"compiler-artifact","manifest_path":"/w/policies/rules/Cargo.toml","target":{"name":"rules"},"filenames":["/t/rules.wasm","/t/librules.rlib"]}
{"reason":"build-finished","success":true}"#;
        let (name, path) = find_cdylib(stdout, manifest).unwrap();
        assert_eq!(name, "rules");
        assert_eq!(path, PathBuf::from("/t/rules.wasm"));
        assert!(find_cdylib(stdout, Path::new("/w/other/Cargo.toml")).is_none());
    }

    #[test]
    fn a_plain_core_module_is_refused_with_wit_components_reason() {
        let module = wat::parse_str("(module (func (export \"f\")))").unwrap();
        let err = componentize(&module).unwrap_err();
        assert!(err.contains("no component type"), "{err}");
        assert!(componentize(b"\0asm garbage").is_err());
    }

    #[test]
    fn a_toolchain_without_the_target_is_told_what_to_install() {
        let sysroot = std::env::temp_dir().join(format!("verdict-sysroot-{}", std::process::id()));
        std::fs::create_dir_all(sysroot.join("lib/rustlib/x86_64-unknown-linux-gnu")).unwrap();
        let err = target_in_sysroot(&sysroot).unwrap_err().to_string();
        assert!(
            err.contains("rustup target add wasm32-unknown-unknown"),
            "{err}"
        );
        std::fs::create_dir_all(sysroot.join("lib/rustlib").join(TARGET)).unwrap();
        assert!(target_in_sysroot(&sysroot).is_ok());
        std::fs::remove_dir_all(&sysroot).unwrap();
    }

    #[test]
    fn a_missing_crate_is_named() {
        let err =
            build_crate(Path::new("/nonexistent/policy"), &BuildOptions::default()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/policy"), "{err}");
    }
}
