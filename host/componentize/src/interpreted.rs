//! Python and JavaScript policies: a project directory built into a component by its
//! language's toolchain (`componentize-py`, ComponentizeJS), against the contract's WIT.
//!
//! Both toolchains take seconds and embed an interpreter, so a build is skipped when
//! nothing it reads has changed: the sources, the contract and the SDK are hashed into a
//! stamp beside the component.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::{BuildError, BuildOptions, Built, write_if_changed};

/// The contract Python and JavaScript policies are built against, as their toolchains read
/// it: the current one, `verdict:policy@0.2`, the same the Rust SDK builds for (the stamp
/// hashes it, so a contract change rebuilds every project).
pub const POLICY_WIT: &str = include_str!("../../../wit/policy.wit");
/// The world a policy implements.
pub const WORLD: &str = "policy";
/// The componentize-py release the Python SDK is tested with.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// A policy project in a language other than Rust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A `pyproject.toml` with `[tool.verdict] module = "..."`.
    Python,
    /// A `package.json` with `"verdict": {"entry": "..."}`.
    JavaScript,
}

impl Language {
    /// The language of the project in `dir`, from its manifest.
    pub fn of(dir: &Path) -> Option<Language> {
        if dir.join("pyproject.toml").is_file() {
            Some(Language::Python)
        } else if dir.join("package.json").is_file() {
            Some(Language::JavaScript)
        } else {
            None
        }
    }
}

/// Build the Python or JavaScript project in `dir`.
pub fn build_project(
    dir: &Path,
    language: Language,
    options: &BuildOptions,
) -> Result<Built, BuildError> {
    // The toolchain runs in the project's directory, while the paths handed to it are
    // made here: relative ones would be resolved twice (`policies/x/policies/x/...`).
    let dir = &std::path::absolute(dir).map_err(|source| io(dir, source))?;
    let project = Project::read(dir, language)?;
    let target_dir = options
        .target_dir
        .as_deref()
        .map(std::path::absolute)
        .transpose()
        .map_err(|source| io(dir, source))?;
    let out_dir = target_dir
        .unwrap_or_else(|| dir.join("target"))
        .join(match language {
            Language::Python => "python",
            Language::JavaScript => "javascript",
        });
    let wit_dir = out_dir.join("wit");
    std::fs::create_dir_all(&wit_dir).map_err(|source| io(&wit_dir, source))?;
    write_if_changed(&wit_dir.join("policy.wit"), POLICY_WIT.as_bytes())?;
    let component = out_dir.join(format!("{}.component.wasm", project.name));
    let stamp_path = out_dir.join(format!("{}.inputs", project.name));
    let stamp = project.stamp()?;
    let fresh =
        component.is_file() && std::fs::read_to_string(&stamp_path).is_ok_and(|old| old == stamp);
    if !fresh {
        let tmp = out_dir.join(format!("{}.component.wasm.part", project.name));
        let mut cmd = project.command(&wit_dir, &tmp)?;
        cmd.current_dir(dir).stdin(Stdio::null());
        // The toolchain's chatter goes to stderr: stdout carries only the component's path.
        if options.quiet {
            cmd.stdout(Stdio::null());
        } else {
            cmd.stdout(std::io::stderr());
        }
        let tool = project.tool_name();
        let status = cmd.status().map_err(|source| BuildError::Spawn {
            cargo: tool.clone(),
            source,
        })?;
        if !status.success() || !tmp.is_file() {
            return Err(BuildError::Toolchain {
                dir: dir.to_path_buf(),
                tool,
            });
        }
        std::fs::rename(&tmp, &component).map_err(|source| io(&component, source))?;
        std::fs::write(&stamp_path, &stamp).map_err(|source| io(&stamp_path, source))?;
    }
    Ok(Built {
        name: project.name,
        core_module: None,
        component,
    })
}

fn io(path: &Path, source: std::io::Error) -> BuildError {
    BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a build needs to know about a project.
struct Project {
    dir: PathBuf,
    language: Language,
    /// The component's file name stem.
    name: String,
    /// Python: the module that exports the policy. JavaScript: the entry file.
    entry: String,
    /// Python: directories added to the module path (the project, `[tool.verdict] path`).
    python_path: Vec<PathBuf>,
}

impl Project {
    fn read(dir: &Path, language: Language) -> Result<Project, BuildError> {
        match language {
            Language::Python => Project::python(dir),
            Language::JavaScript => Project::javascript(dir),
        }
    }

    fn python(dir: &Path) -> Result<Project, BuildError> {
        let manifest = dir.join("pyproject.toml");
        let text = std::fs::read_to_string(&manifest).map_err(|source| io(&manifest, source))?;
        let doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| BuildError::Manifest {
                path: manifest.clone(),
                message: e.message().to_string(),
            })?;
        let bad = |message: &str| BuildError::Manifest {
            path: manifest.clone(),
            message: message.to_string(),
        };
        let verdict = doc
            .get("tool")
            .and_then(|t| t.get("verdict"))
            .and_then(|v| v.as_table())
            .ok_or_else(|| {
                bad(
                    "no [tool.verdict] table; add one naming the module that exports the \
                     policy: [tool.verdict] module = \"my_policy\"",
                )
            })?;
        let entry = verdict
            .get("module")
            .and_then(|m| m.as_str())
            .filter(|m| !m.is_empty())
            .ok_or_else(|| bad("[tool.verdict] module: expected the name of the Python module that exports the policy"))?
            .to_string();
        let name = doc
            .get("project")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or(&entry)
            .replace('-', "_");
        let mut python_path = vec![dir.to_path_buf()];
        if let Some(paths) = verdict.get("path") {
            let paths = paths
                .as_array()
                .ok_or_else(|| bad("[tool.verdict] path: expected a list of directories"))?;
            for p in paths {
                let p = p.as_str().ok_or_else(|| {
                    bad("[tool.verdict] path: expected a list of directories (strings)")
                })?;
                let full = dir.join(p);
                if !full.is_dir() {
                    return Err(bad(&format!(
                        "[tool.verdict] path: {} is not a directory",
                        full.display()
                    )));
                }
                python_path.push(full);
            }
        }
        Ok(Project {
            dir: dir.to_path_buf(),
            language: Language::Python,
            name,
            entry,
            python_path,
        })
    }

    fn javascript(dir: &Path) -> Result<Project, BuildError> {
        let manifest = dir.join("package.json");
        let text = std::fs::read_to_string(&manifest).map_err(|source| io(&manifest, source))?;
        let bad = |message: &str| BuildError::Manifest {
            path: manifest.clone(),
            message: message.to_string(),
        };
        let doc: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
        let entry = doc["verdict"]["entry"]
            .as_str()
            .filter(|e| !e.is_empty())
            .ok_or_else(|| {
                bad(
                    "\"verdict\": {\"entry\": ...}: expected the file that exports the policy, \
                     e.g. \"verdict\": {\"entry\": \"policy.js\"}",
                )
            })?
            .to_string();
        if !dir.join(&entry).is_file() {
            return Err(bad(&format!(
                "\"verdict\".\"entry\": {} does not exist",
                dir.join(&entry).display()
            )));
        }
        let name = doc["name"]
            .as_str()
            .map(|n| n.rsplit('/').next().unwrap_or(n))
            .unwrap_or("policy")
            .replace('-', "_");
        Ok(Project {
            dir: dir.to_path_buf(),
            language: Language::JavaScript,
            name,
            entry,
            python_path: Vec::new(),
        })
    }

    fn tool_name(&self) -> String {
        match self.language {
            Language::Python => componentize_py(),
            Language::JavaScript => "node (ComponentizeJS)".to_string(),
        }
    }

    /// The toolchain's command line, after checking that the toolchain is there.
    fn command(&self, wit_dir: &Path, out: &Path) -> Result<Command, BuildError> {
        match self.language {
            Language::Python => {
                let tool = componentize_py();
                if !runs(&tool, "--version") {
                    return Err(BuildError::MissingTool {
                        tool,
                        install: format!(
                            "pip install componentize-py=={COMPONENTIZE_PY_VERSION} (into the \
                             Python environment whose bin/ is on PATH, or set \
                             VERDICT_COMPONENTIZE_PY to its path)"
                        ),
                    });
                }
                let mut cmd = Command::new(tool);
                cmd.arg("-d")
                    .arg(wit_dir)
                    .args(["-w", WORLD, "componentize"]);
                cmd.arg(&self.entry);
                for p in &self.python_path {
                    cmd.arg("-p").arg(p);
                }
                cmd.arg("-o").arg(out);
                Ok(cmd)
            }
            Language::JavaScript => {
                if !runs("node", "--version") {
                    return Err(BuildError::MissingTool {
                        tool: "node".into(),
                        install: "install Node.js 20 or later (e.g. `apt-get install nodejs npm`)"
                            .into(),
                    });
                }
                let script = self.dir.join(JS_BUILD_SCRIPT);
                if !script.is_file() {
                    return Err(BuildError::MissingTool {
                        tool: JS_BUILD_SCRIPT.into(),
                        install: format!(
                            "run `npm install` in {} (its package.json must depend on \
                             @verdict/sdk, which brings the build script and ComponentizeJS)",
                            self.dir.display()
                        ),
                    });
                }
                let mut cmd = Command::new("node");
                cmd.arg(script)
                    .arg("--wit")
                    .arg(wit_dir)
                    .args(["--world", WORLD, "--entry"])
                    .arg(&self.entry)
                    .arg("--out")
                    .arg(out);
                Ok(cmd)
            }
        }
    }

    /// A digest of everything the build reads: sources, manifests, the contract.
    fn stamp(&self) -> Result<String, BuildError> {
        let mut files = Vec::new();
        let extensions: &[&str] = match self.language {
            Language::Python => &["py", "toml"],
            Language::JavaScript => &["js", "mjs", "json"],
        };
        let mut roots = vec![self.dir.clone()];
        roots.extend(self.python_path.iter().cloned());
        if self.language == Language::JavaScript {
            // The SDK is a linked dependency: its sources count too.
            roots.push(self.dir.join("node_modules/@verdict/sdk"));
        }
        for root in &roots {
            collect(root, extensions, &mut files, 0);
        }
        files.sort();
        files.dedup();
        let mut hash = Sha256::new();
        hash.update(POLICY_WIT.as_bytes());
        hash.update(self.tool_name().as_bytes());
        hash.update(self.entry.as_bytes());
        for f in &files {
            let bytes = std::fs::read(f).map_err(|source| io(f, source))?;
            hash.update(f.to_string_lossy().as_bytes());
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(&bytes);
        }
        let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Ok(digest + "\n")
    }
}

/// Where `verdict build` finds a JS project's build script: shipped by the SDK package.
pub const JS_BUILD_SCRIPT: &str = "node_modules/@verdict/sdk/bin/verdict-build-js.mjs";

fn componentize_py() -> String {
    std::env::var("VERDICT_COMPONENTIZE_PY").unwrap_or_else(|_| "componentize-py".to_string())
}

fn runs(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Source files under `dir`, skipping build outputs, caches and dependencies other than the
/// SDK (a project's node_modules holds thousands of files the policy never bundles).
fn collect(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>, depth: usize) {
    const SKIP: [&str; 7] = [
        "target",
        "node_modules",
        "__pycache__",
        ".git",
        "build",
        "dist",
        ".venv",
    ];
    if depth > 8 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !SKIP.contains(&name.as_ref()) && !name.starts_with('.') {
                collect(&path, extensions, out, depth + 1);
            }
        } else if path
            .extension()
            .is_some_and(|x| extensions.iter().any(|e| x == *e))
        {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("verdict-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_python_project_names_its_module_or_is_told_how() {
        let dir = scratch("py-manifest");
        std::fs::write(dir.join("pyproject.toml"), "[project]\nname = \"orders\"\n").unwrap();
        assert_eq!(Language::of(&dir), Some(Language::Python));
        let e = Project::read(&dir, Language::Python)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("pyproject.toml") && e.contains("[tool.verdict] module"),
            "{e}"
        );
        std::fs::write(
            dir.join("pyproject.toml"),
            "[project]\nname = \"orders-policy\"\n[tool.verdict]\nmodule = \"orders\"\npath = [\"nope\"]\n",
        )
        .unwrap();
        let e = Project::read(&dir, Language::Python)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("nope") && e.contains("not a directory"), "{e}");
        std::fs::write(
            dir.join("pyproject.toml"),
            "[project]\nname = \"orders-policy\"\n[tool.verdict]\nmodule = \"orders\"\n",
        )
        .unwrap();
        let p = Project::read(&dir, Language::Python).unwrap();
        assert_eq!(
            (p.name.as_str(), p.entry.as_str()),
            ("orders_policy", "orders")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_js_project_names_an_entry_that_exists() {
        let dir = scratch("js-manifest");
        std::fs::write(dir.join("package.json"), r#"{"name": "@acme/orders"}"#).unwrap();
        assert_eq!(Language::of(&dir), Some(Language::JavaScript));
        let e = Project::read(&dir, Language::JavaScript)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("package.json") && e.contains("\"entry\""), "{e}");
        std::fs::write(
            dir.join("package.json"),
            r#"{"name": "@acme/orders", "verdict": {"entry": "policy.js"}}"#,
        )
        .unwrap();
        let e = Project::read(&dir, Language::JavaScript)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("policy.js") && e.contains("does not exist"),
            "{e}"
        );
        std::fs::write(dir.join("policy.js"), "export const decider = {};").unwrap();
        let p = Project::read(&dir, Language::JavaScript).unwrap();
        assert_eq!(p.name, "orders");
        // Without node_modules the build says what to run.
        let e = p
            .command(&dir, &dir.join("out.wasm"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("npm install"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_stamp_changes_with_a_source_and_not_with_a_cache_file() {
        let dir = scratch("stamp");
        std::fs::write(
            dir.join("pyproject.toml"),
            "[project]\nname = \"p\"\n[tool.verdict]\nmodule = \"p\"\n",
        )
        .unwrap();
        std::fs::write(dir.join("p.py"), "A = 1\n").unwrap();
        let p = Project::read(&dir, Language::Python).unwrap();
        let first = p.stamp().unwrap();
        std::fs::create_dir_all(dir.join("__pycache__")).unwrap();
        std::fs::write(dir.join("__pycache__/p.py"), "junk").unwrap();
        assert_eq!(p.stamp().unwrap(), first);
        std::fs::write(dir.join("p.py"), "A = 2\n").unwrap();
        assert_ne!(p.stamp().unwrap(), first);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
