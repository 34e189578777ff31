//! `verdict new <name>`: a policy crate that passes the admission gate as it is generated,
//! with one marked place for the team's own rules.
//!
//! What it writes, and why each piece is there:
//! - `Cargo.toml`: the `cdylib` crate type a component needs, the SDK, and an empty
//!   `[workspace]` so the crate builds wherever it is put (even inside another workspace).
//! - `src/lib.rs`: a typed config with defaults, `decide` starting from
//!   `Failure::never_retry` (the kinds the gate checks) and ending in exhaustion, and native
//!   unit tests.
//! - `vectors/<name>.json`: expectations `verdict test` runs against the built component.
//! - `verdict.toml`: a gateway config routing one topic to the policy, for `verdict check`.
//! - `README.md` with the commands and a CI job running `verdict test --properties
//!   --format junit`, and a `.gitignore`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where the scaffold takes the SDK from.
#[derive(Debug, Clone)]
pub enum SdkSource {
    /// A `verdict-sdk` checkout (the `guest-sdk` directory of the Verdict repository).
    Path(PathBuf),
    /// A version requirement, for an SDK from a registry.
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
                 pass --sdk-path <verdict checkout>/guest-sdk or --sdk-version <version>",
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

    fn dependency(&self) -> String {
        match self {
            // TOML basic strings escape backslashes and quotes; paths need nothing else.
            SdkSource::Path(path) => format!(
                "{{ path = \"{}\" }}",
                path.display()
                    .to_string()
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
            ),
            SdkSource::Version(version) => format!("\"{version}\""),
        }
    }
}

/// What `verdict new` made.
#[derive(Debug)]
pub struct Scaffold {
    /// The crate's directory.
    pub dir: PathBuf,
    /// The files written, relative to `dir`.
    pub files: Vec<PathBuf>,
}

/// Write a policy crate named after `dir`'s last component into `dir` (which must not
/// exist, or be empty).
pub fn new_policy(dir: &Path, sdk: &SdkSource) -> Result<Scaffold> {
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: expected a directory name", dir.display()))?;
    check_name(name)?;
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_none();
        if !empty {
            bail!(
                "{} exists and is not empty; `verdict new` writes a new crate (choose another name or directory)",
                dir.display()
            );
        }
    }
    let type_name = type_name(name);
    let files = [
        ("Cargo.toml".to_string(), cargo_toml(name, sdk)),
        ("src/lib.rs".to_string(), fill(LIB_RS, name, &type_name)),
        (
            format!("vectors/{name}.json"),
            fill(VECTORS, name, &type_name),
        ),
        (
            "verdict.toml".to_string(),
            fill(VERDICT_TOML, name, &type_name),
        ),
        ("README.md".to_string(), fill(README, name, &type_name)),
        (".gitignore".to_string(), "/target\n/.verdict\n".to_string()),
    ];
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
        files: written,
    })
}

/// A crate name cargo and the component's file name accept: ASCII letters, digits, `-`
/// and `_`, starting with a letter.
fn check_name(name: &str) -> Result<()> {
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!(
            "`{name}` is not a policy name: expected lowercase ASCII letters, digits, `-` or `_`, \
             starting with a letter (at most 64), e.g. `orders` or `payments-eu`"
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

fn fill(template: &str, name: &str, type_name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"))
        .replace("{{Type}}", type_name)
}

fn cargo_toml(name: &str, sdk: &SdkSource) -> String {
    fill(CARGO_TOML, name, "").replace("{{sdk}}", &sdk.dependency())
}

const CARGO_TOML: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
description = "Retry and dead-letter policy for {{name}}."
publish = false

# A component is built from the cdylib; the rlib lets `cargo test` run the logic natively.
[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
verdict-sdk = {{sdk}}
serde = { version = "1", features = ["derive"] }

# Its own workspace: the crate builds wherever it is put, inside another workspace too.
[workspace]

[profile.release]
opt-level = "s"
lto = true
"#;

const LIB_RS: &str = r##"//! The retry and dead-letter policy for `{{name}}`.
//!
//! `decide` answers every failed delivery: the kinds that never heal go to the dead-letter
//! queue at once, then your rules, then retries with exponential backoff until
//! `max_attempts`. Change the part marked "your rules"; the rest is what the admission gate
//! checks.

use serde::Deserialize;
use verdict_sdk::{Backoff, Class, Failure, Jitter, Policy, Verdict, export_policy};

/// The route's `config = { ... }` in `verdict.toml`. Every field has a default; an unknown
/// field is refused with its name when the policy is loaded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Failed deliveries, this one included, after which a message is dead-lettered as
    /// exhausted.
    pub max_attempts: u32,
    /// The first retry's delay; each retry waits up to twice as long (with full jitter).
    pub base_delay_ms: u64,
    /// The longest a retry waits, a consumer's `Retry-After` included.
    pub max_delay_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_attempts: 5,
            base_delay_ms: 200,
            max_delay_ms: 60_000,
        }
    }
}

/// The policy: its config, checked once when the route is loaded.
pub struct {{Type}} {
    config: Config,
    backoff: Backoff,
}

impl Policy for {{Type}} {
    type Config = Config;

    fn new(config: Config) -> Result<Self, String> {
        if config.max_attempts == 0 {
            return Err("max_attempts must be at least 1".into());
        }
        if config.base_delay_ms == 0 || config.base_delay_ms > config.max_delay_ms {
            return Err("base_delay_ms must be at least 1 and at most max_delay_ms".into());
        }
        let backoff = Backoff::Exponential {
            base_ms: config.base_delay_ms,
            cap_ms: config.max_delay_ms,
            jitter: Jitter::Full,
        };
        Ok({{Type}} { config, backoff })
    }

    fn decide(&self, f: &Failure) -> Verdict {
        // Payload, schema, format and auth errors never heal: dead-letter them at once.
        if let Some(dead) = f.never_retry() {
            return dead;
        }
        // The consumer said it can never take this message.
        if f.rejected() {
            return Verdict::dead_letter(Class::Permanent).because("rejected by the consumer");
        }

        // ---- Your rules go here. For example:
        // if f.kind_is("http.429") {
        //     // Rate limited: wait as long as the consumer asks, without spending an attempt.
        //     return Verdict::delay(f.retry_after_ms().unwrap_or(5_000).min(self.config.max_delay_ms));
        // }
        // ---- End of your rules.

        if f.attempt() >= self.config.max_attempts {
            return Verdict::dead_letter(Class::Exhausted)
                .because(format!("{} failed {} times", f.kind(), f.attempt()));
        }
        let backoff = self.backoff.delay_ms(f.attempt(), f.jitter_seed());
        // Wait at least as long as the consumer asked (`Retry-After`), within max_delay_ms.
        let asked = f.retry_after_ms().unwrap_or(0).min(self.config.max_delay_ms);
        Verdict::retry_after(backoff.max(asked))
    }
}

export_policy!({{Type}});

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(config: &str) -> {{Type}} {
        verdict_sdk::instantiate(config).expect("the config is accepted")
    }

    #[test]
    fn kinds_that_never_heal_are_dead_lettered_at_once() {
        let p = policy("{}");
        assert_eq!(p.decide(&Failure::new("json.parse")).class, Class::Poison);
        assert_eq!(p.decide(&Failure::new("auth.denied")).class, Class::Permanent);
    }

    #[test]
    fn transient_failures_are_retried_until_max_attempts() {
        let p = policy(r#"{"max_attempts": 3}"#);
        let first = p.decide(&Failure::new("db.timeout").with_attempt(1));
        assert!(first.delay_ms().is_some_and(|ms| ms <= 60_000), "{first:?}");
        let last = p.decide(&Failure::new("db.timeout").with_attempt(3));
        assert_eq!(last.class, Class::Exhausted);
    }

    #[test]
    fn retry_after_is_honoured_within_max_delay() {
        let p = policy(r#"{"max_delay_ms": 10000}"#);
        let v = p.decide(&Failure::new("http.503").with_retry_after_ms(8_000));
        assert!(v.delay_ms().is_some_and(|ms| ms >= 8_000), "{v:?}");
        let v = p.decide(&Failure::new("http.503").with_retry_after_ms(3_600_000));
        assert_eq!(v.delay_ms(), Some(10_000));
    }

    #[test]
    fn a_bad_config_is_refused_by_name() {
        let e = verdict_sdk::instantiate::<{{Type}}>(r#"{"max_atempts": 3}"#).err().unwrap();
        assert!(e.contains("max_atempts"), "{e}");
        assert!(verdict_sdk::instantiate::<{{Type}}>(r#"{"max_attempts": 0}"#).is_err());
    }
}
"##;

const VECTORS: &str = r#"{
  "suite": "{{name}}",
  "config": { "max_attempts": 3 },
  "cases": [
    {
      "name": "a payload that does not parse is poison",
      "failure": { "error": { "kind": "json.parse" } },
      "expect": { "action": "dead-letter", "class": "poison" }
    },
    {
      "name": "a refused credential is permanent",
      "failure": { "error": { "kind": "auth.denied" } },
      "expect": { "action": "dead-letter", "class": "permanent" }
    },
    {
      "name": "a timeout is retried",
      "failure": { "attempt": 1, "error": { "kind": "db.timeout" } },
      "expect": { "action": "retry" }
    },
    {
      "name": "the third timeout is exhausted",
      "failure": { "attempt": 3, "error": { "kind": "db.timeout" } },
      "expect": { "action": "dead-letter", "class": "exhausted" }
    }
  ]
}
"#;

const VERDICT_TOML: &str = r#"# A gateway config that routes the `{{name}}` topic to this policy. `verdict check -c
# verdict.toml` runs the admission gate on it; `verdict run -c verdict.toml` serves it.

[policies.{{name}}]
path = "target/wasm32-unknown-unknown/release/{{crate}}.component.wasm"
vectors = ["vectors/{{name}}.json"]

[[routes]]
topic = "{{name}}.>"
policy = "{{name}}"
config = { max_attempts = 5 }
consumer = { url = "http://127.0.0.1:8080/{{name}}" }

[storage]
dir = ".verdict"
"#;

const README: &str = r#"# {{name}}

The retry and dead-letter policy for `{{name}}`, a Verdict policy component. Its rules are
in `src/lib.rs`, between "Your rules go here" and "End of your rules"; its config (`max_attempts`, `base_delay_ms`, `max_delay_ms`) is the route's
`config = { ... }`.

```sh
cargo test                                   # the logic, natively
verdict build .                              # the component (its path is printed)
verdict test target/wasm32-unknown-unknown/release/{{crate}}.component.wasm \
    vectors/{{name}}.json --properties       # vectors and the gate's property checks
verdict check -c verdict.toml                # the whole admission gate, as a gateway runs it
```

Add a case to `vectors/{{name}}.json` for every rule you add: the gateway refuses a policy
whose vectors fail.

## CI

```yaml
# .github/workflows/policy.yml
jobs:
  policy:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: rustup target add wasm32-unknown-unknown
      - run: cargo test
      - run: verdict build .
      - run: >
          verdict test target/wasm32-unknown-unknown/release/{{crate}}.component.wasm
          vectors/{{name}}.json --properties --format junit > verdict-junit.xml
```
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_rust_types_and_bad_names_are_refused_with_an_example() {
        assert_eq!(type_name("orders"), "Orders");
        assert_eq!(type_name("payments-eu_v2"), "PaymentsEuV2");
        for bad in ["", "Orders", "9lives", "a b", "../x", "é"] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("e.g. `orders`"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_scaffold_is_written_once_and_never_over_a_crate() {
        let dir = std::env::temp_dir().join(format!("verdict-new-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let target = dir.join("orders");
        let sdk = SdkSource::Version("0.1".into());
        let made = new_policy(&target, &sdk).unwrap();
        assert!(made.files.contains(&PathBuf::from("vectors/orders.json")));
        let cargo = std::fs::read_to_string(target.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("verdict-sdk = \"0.1\"") && cargo.contains("[workspace]"));
        let lib = std::fs::read_to_string(target.join("src/lib.rs")).unwrap();
        assert!(lib.contains("impl Policy for Orders") && !lib.contains("{{"));
        let e = new_policy(&target, &sdk).unwrap_err().to_string();
        assert!(e.contains("exists and is not empty"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
