//! `verdict new <dir> [--lang rust|python|javascript]`: a policy project that passes the
//! admission gate as it is generated, with one marked place for the team's own rules.
//!
//! Every language gets the same policy and the same pieces, so a team can start in any of
//! them and port later:
//! - the manifest `verdict build` reads (`Cargo.toml`, `pyproject.toml`, `package.json`),
//!   with the SDK from where [`SdkSource`] says;
//! - the policy: a typed config (`max_attempts`, `base_delay_ms`, `max_delay_ms`) with
//!   defaults, refused with the field's name when wrong; `decide` starting from the SDK's
//!   never-retry helper (the kinds the gate checks) and the consumer's rejection, then the
//!   marked "your rules", then exponential backoff with full jitter (`Retry-After` honoured
//!   within `max_delay_ms`) until `max_attempts`;
//! - four native unit tests of that logic;
//! - `vectors/<name>.json`: expectations `verdict test` runs against the built component;
//! - `verdict.toml`: a gateway config routing `<name>.>` to the component the build makes,
//!   for `verdict check`;
//! - `README.md` with the commands and a CI job running `verdict test --properties
//!   --format junit`, and a `.gitignore`.
//!
//! This module holds what the languages share: names, the SDK's source, writing the files.
//! Each language's files are made in its own module from the templates under
//! `templates/<lang>/` (`templates/shared/` for the vectors and the gateway config), whose
//! `{{placeholders}}` [`fill`] replaces.

mod javascript;
mod python;
mod rust;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The language of the project `verdict new` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A crate built with cargo.
    Rust,
    /// A `pyproject.toml` project built with componentize-py.
    Python,
    /// A `package.json` project built with ComponentizeJS.
    JavaScript,
}

impl Language {
    /// What `--lang` accepts, in [`Language::name`]'s spelling.
    pub const NAMES: [&'static str; 3] = ["rust", "python", "javascript"];

    /// The name `--lang` takes.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::JavaScript => "javascript",
        }
    }

    /// The commands that test and build a fresh project, run from its directory.
    pub fn next_steps(self) -> &'static str {
        match self {
            Language::Rust => "cargo test && verdict build .",
            Language::Python => "python3 -m unittest discover -s tests && verdict build .",
            Language::JavaScript => "npm install && node --test test/ && verdict build .",
        }
    }
}

impl std::str::FromStr for Language {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Language> {
        match s {
            "rust" => Ok(Language::Rust),
            "python" => Ok(Language::Python),
            "javascript" => Ok(Language::JavaScript),
            _ => bail!("--lang {s}: expected one of {}", Language::NAMES.join(", ")),
        }
    }
}

/// Where the scaffold takes the SDK from.
#[derive(Debug, Clone)]
pub enum SdkSource {
    /// A `verdict-sdk` checkout (the `guest-sdk` directory of the Verdict repository); the
    /// Python and JavaScript SDKs are its `python` and `js` directories.
    Path(PathBuf),
    /// A version requirement, for an SDK from a registry (Rust only: the Python and
    /// JavaScript SDKs are not published).
    Version(String),
}

impl SdkSource {
    /// `--sdk-path`, else `--sdk-version`, else the checkout this binary was built from.
    pub fn resolve(path: Option<PathBuf>, version: Option<String>) -> Result<SdkSource> {
        match (path, version) {
            (Some(path), _) => {
                let dir = std::fs::canonicalize(&path)
                    .with_context(|| format!("--sdk-path {}", path.display()))?;
                if !dir.join("Cargo.toml").is_file() {
                    bail!(
                        "--sdk-path {}: no Cargo.toml there; expected the `guest-sdk` directory of a Verdict checkout",
                        path.display()
                    );
                }
                Ok(SdkSource::Path(dir))
            }
            (None, Some(version)) => Ok(SdkSource::Version(version)),
            (None, None) => SdkSource::from_checkout().context(
                "this verdict was not built from a checkout, so the SDK's path is unknown: \
                 pass --sdk-path <verdict checkout>/guest-sdk (or, for a Rust policy, \
                 --sdk-version <version>)",
            ),
        }
    }

    /// The SDK beside this binary's sources, when they are still there (a `verdict` built
    /// from a checkout); `None` for an installed binary whose sources are gone.
    pub fn from_checkout() -> Option<SdkSource> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk");
        dir.join("Cargo.toml")
            .is_file()
            .then(|| std::fs::canonicalize(&dir).ok())
            .flatten()
            .map(SdkSource::Path)
    }

    /// The directory `sub` of the checkout (`python`, `js`), which must hold `marker`: the
    /// SDK of a language whose projects depend on it by path. A version is refused, naming
    /// what to pass instead: those SDKs are in no registry.
    fn checkout_dir(&self, language: &str, sub: &str, marker: &str) -> Result<PathBuf> {
        match self {
            SdkSource::Path(dir) => {
                let sdk = dir.join(sub);
                if !sdk.join(marker).exists() {
                    bail!(
                        "--sdk-path {}: no {sub}/{marker} there; expected the `guest-sdk` \
                         directory of a Verdict checkout, which holds the {language} SDK",
                        dir.display()
                    );
                }
                Ok(sdk)
            }
            SdkSource::Version(version) => bail!(
                "--sdk-version {version}: the {language} SDK is not published to a registry, \
                 so a {language} policy depends on it by path: pass --sdk-path <verdict \
                 checkout>/guest-sdk, or neither option to use the checkout this verdict was \
                 built from"
            ),
        }
    }
}

/// What `verdict new` made.
#[derive(Debug)]
pub struct Scaffold {
    /// The project's directory.
    pub dir: PathBuf,
    /// Its language.
    pub language: Language,
    /// The files written, relative to `dir`.
    pub files: Vec<PathBuf>,
}

/// Write a `language` policy project named after `dir`'s last component into `dir` (which
/// must not exist, or be empty). Nothing is written when the name, the SDK or the
/// directory is refused.
pub fn new_policy(dir: &Path, language: Language, sdk: &SdkSource) -> Result<Scaffold> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: expected a directory name", dir.display()))?;
    let names = Names::new(name)?;
    let files = match language {
        Language::Rust => rust::files(&names, sdk)?,
        Language::Python => python::files(&names, sdk)?,
        Language::JavaScript => javascript::files(&names, sdk)?,
    };
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            bail!(
                "{} exists and is not empty; `verdict new` writes a new project (choose another name or directory)",
                dir.display()
            );
        }
    }
    let mut written = Vec::new();
    for (path, text) in files {
        let full = dir.join(&path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&full, text).with_context(|| format!("writing {}", full.display()))?;
        written.push(PathBuf::from(path));
    }
    Ok(Scaffold {
        dir: dir.to_path_buf(),
        language,
        files: written,
    })
}

/// One file of a project: its path relative to the project's directory, and its text.
type File = (String, String);

/// The forms of a policy's name the templates use.
struct Names {
    /// As given: the policy's, the package's and the topic's name (`payments-eu`).
    name: String,
    /// With `_` for `-`: the Rust crate's and the component file's (`payments_eu`).
    snake: String,
    /// The policy's type (`PaymentsEu`).
    type_name: String,
}

impl Names {
    fn new(name: &str) -> Result<Names> {
        check_name(name)?;
        let type_name = type_name(name);
        if TAKEN_TYPE_NAMES.contains(&type_name.as_str()) {
            bail!(
                "`{name}` is not a policy name: the policy's type would be `{type_name}`, which \
                 the generated code already uses for something else; add a word, e.g. \
                 `{name}-policy`"
            );
        }
        Ok(Names {
            name: name.to_string(),
            snake: name.replace('-', "_"),
            type_name,
        })
    }
}

/// Names the generated code uses beside the policy's type, in any of the languages (the
/// SDKs' types, the config's, the language's own): a policy named `config` or `none` would
/// not compile or import.
const TAKEN_TYPE_NAMES: [&str; 18] = [
    "Backoff",
    "Class",
    "Config",
    "ConfigError",
    "Decider",
    "Default",
    "Deserialize",
    "Failure",
    "False",
    "Jitter",
    "None",
    "Policy",
    "Result",
    "String",
    "True",
    "U32",
    "U64",
    "Verdict",
];

/// A name every language's package, module and component file accept: ASCII letters,
/// digits, `-` and `_`, starting with a letter and ending with a letter or digit.
fn check_name(name: &str) -> Result<()> {
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!(
            "`{name}` is not a policy name: expected lowercase ASCII letters, digits, `-` or `_`, \
             starting with a letter and ending with a letter or digit (at most 64), e.g. \
             `orders` or `payments-eu`"
        );
    }
    Ok(())
}

/// `payments-eu` -> `PaymentsEu`.
fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect()
}

/// `template` with `{{name}}`, `{{crate}}` and `{{Type}}` replaced by `names`' forms, then
/// each `{{key}}` of `extra` by its value, in order.
fn fill(template: &str, names: &Names, extra: &[(&str, &str)]) -> String {
    let mut text = template
        .replace("{{name}}", &names.name)
        .replace("{{crate}}", &names.snake)
        .replace("{{Type}}", &names.type_name);
    for (key, value) in extra {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    text
}

/// `vectors/<name>.json`: the same cases in every language.
fn vectors(names: &Names) -> File {
    (
        format!("vectors/{}.json", names.name),
        fill(include_str!("templates/shared/vectors.json"), names, &[]),
    )
}

/// `verdict.toml`, routing `<name>.>` to the component at `component` (relative to the
/// project, where the language's build puts it).
fn verdict_toml(names: &Names, component: &str) -> File {
    (
        "verdict.toml".to_string(),
        fill(
            include_str!("templates/shared/verdict.toml"),
            names,
            &[("component", component)],
        ),
    )
}

/// `text` as a double-quoted string that TOML (a basic string) and JSON read alike.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test.
    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("verdict-new-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn checkout() -> (SdkSource, PathBuf) {
        let sdk = SdkSource::from_checkout().expect("the tests run in a checkout");
        let SdkSource::Path(dir) = &sdk else {
            unreachable!()
        };
        let dir = dir.clone();
        (sdk, dir)
    }

    /// Every file of a scaffold, read back; none has a placeholder left.
    fn read_all(made: &Scaffold) -> Vec<(PathBuf, String)> {
        made.files
            .iter()
            .map(|file| {
                let text = std::fs::read_to_string(made.dir.join(file)).unwrap();
                assert!(
                    !text.contains("{{"),
                    "{}: a placeholder is left",
                    file.display()
                );
                (file.clone(), text)
            })
            .collect()
    }

    fn file<'a>(files: &'a [(PathBuf, String)], path: &str) -> &'a str {
        &files
            .iter()
            .find(|(p, _)| p == Path::new(path))
            .unwrap_or_else(|| panic!("no {path} in {files:?}"))
            .1
    }

    #[test]
    fn names_become_types_and_bad_names_are_refused_with_an_example() {
        assert_eq!(type_name("orders"), "Orders");
        assert_eq!(type_name("payments-eu_v2"), "PaymentsEuV2");
        for bad in [
            "", "Orders", "9lives", "a b", "../x", "é", "orders-", "orders_",
        ] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("e.g. `orders`"), "{bad}: {e}");
        }
        for taken in ["config", "verdict", "none", "decider"] {
            let e = Names::new(taken).err().unwrap().to_string();
            assert!(
                e.contains(&format!("e.g. `{taken}-policy`")),
                "{taken}: {e}"
            );
        }
        assert!(Names::new("config-policy").is_ok());
        assert_eq!(
            "javascript".parse::<Language>().unwrap(),
            Language::JavaScript
        );
        let e = "go".parse::<Language>().unwrap_err().to_string();
        assert!(e.contains("rust, python, javascript"), "{e}");
        for name in Language::NAMES {
            assert_eq!(name.parse::<Language>().unwrap().name(), name);
        }
    }

    #[test]
    fn a_scaffold_is_written_once_and_never_over_a_crate() {
        let dir = scratch("rust");
        let target = dir.join("orders");
        let sdk = SdkSource::Version("0.1".into());
        let made = new_policy(&target, Language::Rust, &sdk).unwrap();
        assert!(made.files.contains(&PathBuf::from("vectors/orders.json")));
        let files = read_all(&made);
        let cargo = file(&files, "Cargo.toml");
        assert!(cargo.contains("verdict-sdk = \"0.1\"") && cargo.contains("[workspace]"));
        assert!(file(&files, "src/lib.rs").contains("impl Policy for Orders"));
        assert!(
            file(&files, "verdict.toml")
                .contains("path = \"target/wasm32-unknown-unknown/release/orders.component.wasm\"")
        );
        let e = new_policy(&target, Language::Rust, &sdk)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exists and is not empty"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_python_project_names_its_module_and_the_checkouts_sdk() {
        let dir = scratch("python");
        let target = dir.join("payments-eu");
        let (sdk, sdk_dir) = checkout();
        let made = new_policy(&target, Language::Python, &sdk).unwrap();
        let files = read_all(&made);
        let manifest: toml::Table = file(&files, "pyproject.toml").parse().unwrap();
        assert_eq!(manifest["project"]["name"].as_str(), Some("payments-eu"));
        let verdict = &manifest["tool"]["verdict"];
        // A module name Python can import, and no standard module's (`json`, `time`).
        assert_eq!(verdict["module"].as_str(), Some("payments_eu_policy"));
        let path = verdict["path"].as_array().unwrap();
        assert_eq!(path.len(), 1);
        assert_eq!(Path::new(path[0].as_str().unwrap()), sdk_dir.join("python"));
        let policy = file(&files, "payments_eu_policy/__init__.py");
        assert!(
            policy.contains("class PaymentsEu(verdict_sdk.Policy):"),
            "{policy}"
        );
        assert!(
            policy.contains("Decider = verdict_sdk.export(PaymentsEu)"),
            "{policy}"
        );
        assert!(
            file(&files, "tests/test_payments_eu_policy.py")
                .contains("from payments_eu_policy import PaymentsEu")
        );
        // Where `verdict build` puts the component: the project's name, `-` as `_`.
        assert!(
            file(&files, "verdict.toml")
                .contains("path = \"target/python/payments_eu.component.wasm\"")
        );
        assert!(file(&files, "README.md").contains(&format!(
            "componentize-py=={}",
            verdict_componentize::COMPONENTIZE_PY_VERSION
        )));
        let e = new_policy(&target, Language::Python, &sdk)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exists and is not empty"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_javascript_project_links_the_checkouts_sdk_with_the_tested_toolchain() {
        let dir = scratch("javascript");
        let target = dir.join("payments-eu");
        let (sdk, sdk_dir) = checkout();
        let made = new_policy(&target, Language::JavaScript, &sdk).unwrap();
        let files = read_all(&made);
        let manifest: serde_json::Value =
            serde_json::from_str(file(&files, "package.json")).unwrap();
        assert_eq!(manifest["name"], "payments-eu");
        let entry = manifest["verdict"]["entry"].as_str().unwrap();
        assert!(file(&files, entry).contains("export const decider = exportPolicy(PaymentsEu, {"));
        assert_eq!(
            manifest["dependencies"]["@verdict/sdk"].as_str(),
            Some(format!("file:{}", sdk_dir.join("js").display()).as_str())
        );
        // The toolchain the shipped JavaScript policy is built and tested with.
        let shipped: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/rules-js/package.json"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(manifest["devDependencies"], shipped["devDependencies"]);
        assert!(file(&files, "test/policy.test.js").contains("instantiate(PaymentsEu, config)"));
        assert!(
            file(&files, "verdict.toml")
                .contains("path = \"target/javascript/payments_eu.component.wasm\"")
        );
        let e = new_policy(&target, Language::JavaScript, &sdk)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exists and is not empty"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_language_gets_the_same_vectors_and_route() {
        let dir = scratch("same");
        let (sdk, _) = checkout();
        let mut seen: Vec<(String, String)> = Vec::new();
        for name in Language::NAMES {
            let language: Language = name.parse().unwrap();
            let made = new_policy(&dir.join(name).join("orders"), language, &sdk).unwrap();
            let files = read_all(&made);
            let vectors = file(&files, "vectors/orders.json").to_string();
            // The route, without the component's path.
            let route: String = file(&files, "verdict.toml")
                .lines()
                .filter(|l| !l.starts_with("path = "))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(route.contains("topic = \"orders.>\""), "{route}");
            seen.push((vectors, route));
        }
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn python_and_javascript_refuse_a_registry_version_and_write_nothing() {
        let dir = scratch("version");
        let sdk = SdkSource::Version("0.1".into());
        for language in [Language::Python, Language::JavaScript] {
            let target = dir.join(language.name());
            let e = new_policy(&target, language, &sdk).unwrap_err().to_string();
            assert!(
                e.contains("--sdk-version 0.1")
                    && e.contains("not published")
                    && e.contains("--sdk-path"),
                "{e}"
            );
            assert!(!target.exists(), "{}", target.display());
        }
        let not_sdk = SdkSource::Path(std::env::temp_dir());
        let e = new_policy(&dir.join("py"), Language::Python, &not_sdk)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("python/verdict_sdk") && e.contains("guest-sdk"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn quoted_strings_read_back_in_toml_and_json() {
        for text in [r"C:\policies\sdk", "a \"b\"", "tab\there", "plain/path"] {
            let q = quoted(text);
            let doc: toml::Table = format!("x = {q}").parse().unwrap();
            assert_eq!(doc["x"].as_str(), Some(text));
            assert_eq!(serde_json::from_str::<String>(&q).unwrap(), text);
        }
    }
}
