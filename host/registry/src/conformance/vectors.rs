//! The vector file format: suites of cases, each a config, a partial failure and the
//! expected verdict. JSON, so the failure reads exactly like `verdict decide` input and the
//! schema (`tests/conformance/vectors.schema.json`) validates it directly; `description`
//! fields take the place of comments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use verdict_types::{Class, Severity};

use verdict_runtime::{FailureSpec, TopicSettings};

/// A vector file: one suite of cases for one policy.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VectorFile {
    /// Editor hint: a path to the schema.
    #[serde(rename = "$schema", default)]
    pub schema: Option<String>,
    /// The suite's name.
    pub suite: String,
    /// What the suite covers.
    #[serde(default)]
    pub description: Option<String>,
    /// The policy config every case uses unless it names its own (JSON, any shape the
    /// policy accepts). Default `{}`.
    #[serde(default)]
    pub config: Option<Value>,
    /// The topic's guardrails and fallback for every case (default: the host's defaults),
    /// so a suite can hold a policy to a stricter topic, or check the clamps.
    #[serde(default)]
    pub settings: TopicSettings,
    /// The cases.
    pub cases: Vec<CaseSpec>,
}

/// One case, possibly parameterised by `each`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    /// The case's name (unique in the file).
    pub name: String,
    /// What it checks and why.
    #[serde(default)]
    pub description: Option<String>,
    /// This case's config, replacing the suite's.
    #[serde(default)]
    pub config: Option<Value>,
    /// The failure: only what matters (at least `error.kind`); the rest defaults as in
    /// `verdict decide`. Give `jitter-seed` to make delays exact.
    #[schemars(with = "FailureSpec")]
    pub failure: Map<String, Value>,
    /// The expected decision (fields not given are not checked).
    #[serde(default)]
    #[schemars(with = "Expect")]
    pub expect: Map<String, Value>,
    /// Parameterise the case: one run per entry; each entry's fields are merged into
    /// `failure` (e.g. `{"attempt": 3}`), and its `expect`, if any, over the case's.
    #[serde(default)]
    #[schemars(with = "Vec<Map<String, Value>>")]
    pub each: Vec<Map<String, Value>>,
}

/// The expected decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `retry`, `delay`, `pause`, `dead-letter` or `discard`.
    #[serde(default)]
    pub action: Option<ExpectedAction>,
    /// The delay of a retry, delay or pause: exact, or `{"min": .., "max": ..}` (inclusive).
    #[serde(default)]
    pub delay_ms: Option<DelaySpec>,
    /// The class.
    #[serde(default)]
    pub class: Option<Class>,
    /// The alert severity.
    #[serde(default)]
    pub alert: Option<Severity>,
    /// A substring of the reason.
    #[serde(default)]
    pub reason_contains: Option<String>,
    /// Labels that must be present with these values (others may exist).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Whether the host's fallback applied (default: it must not have).
    #[serde(default)]
    pub fallback: Option<bool>,
    /// Guardrail clamps that must have applied (`delay-capped`, `attempt-ceiling`,
    /// `deferral-bound`, `terminal-class`, `reason-truncated`, `labels-truncated`).
    #[serde(default)]
    pub clamps: Vec<String>,
}

/// An action, without its delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ExpectedAction {
    /// Retry (spends an attempt).
    Retry,
    /// Delay (spends no attempt).
    Delay,
    /// Pause the route (spends no attempt).
    Pause,
    /// Dead-letter.
    DeadLetter,
    /// Discard.
    Discard,
}

/// An exact delay or an inclusive range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DelaySpec {
    /// Exactly this many ms.
    Exact(u64),
    /// Within a range.
    Range {
        /// Smallest accepted delay.
        #[serde(default)]
        min: Option<u64>,
        /// Largest accepted delay.
        #[serde(default)]
        max: Option<u64>,
    },
}

impl DelaySpec {
    /// Whether `ms` satisfies the spec.
    pub fn accepts(&self, ms: u64) -> bool {
        match *self {
            DelaySpec::Exact(want) => ms == want,
            DelaySpec::Range { min, max } => {
                min.is_none_or(|m| ms >= m) && max.is_none_or(|m| ms <= m)
            }
        }
    }
}

impl std::fmt::Display for DelaySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            DelaySpec::Exact(ms) => write!(f, "{ms}"),
            DelaySpec::Range { min, max } => {
                write!(
                    f,
                    "{}..={}",
                    min.map_or(String::new(), |m| m.to_string()),
                    max.map_or(String::new(), |m| m.to_string())
                )
            }
        }
    }
}

/// A case ready to run: config, failure and expectation resolved.
#[derive(Debug, Clone)]
pub struct Case {
    /// The name, with the parameter appended for `each` runs (`ladder [attempt=3]`).
    pub name: String,
    /// The config, as JSON text.
    pub config: String,
    /// The failure.
    pub failure: FailureSpec,
    /// What must hold.
    pub expect: Expect,
}

/// A loaded, validated vector file.
#[derive(Debug, Clone)]
pub struct Suite {
    /// Where it came from.
    pub file: PathBuf,
    /// Its name.
    pub name: String,
    /// Guardrails and fallback for its cases.
    pub settings: TopicSettings,
    /// The expanded cases.
    pub cases: Vec<Case>,
}

/// The vector input itself is invalid: names the file, the case and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{field}: {message}", file.display(), case.as_ref().map(|c| format!("case `{c}`: ")).unwrap_or_default())]
pub struct VectorError {
    /// The file.
    pub file: PathBuf,
    /// The case, when the problem is inside one.
    pub case: Option<String>,
    /// The field path.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Suite {
    /// Read and validate a vector file.
    pub fn load(path: &Path) -> Result<Suite, VectorError> {
        Self::load_with_config(path, None)
    }

    /// Like [`Suite::load`], with `config` (JSON text) replacing the suite's default config;
    /// cases that name their own config keep it.
    pub fn load_with_config(path: &Path, config: Option<&str>) -> Result<Suite, VectorError> {
        let text = std::fs::read_to_string(path).map_err(|e| VectorError {
            file: path.to_path_buf(),
            case: None,
            field: "(file)".into(),
            message: e.to_string(),
        })?;
        Self::parse(&text, path, config)
    }

    /// Validate the text of a vector file; `path` names it in errors (and is what
    /// [`Suite::file`] holds), `config` is as for [`Suite::load_with_config`].
    pub fn parse(text: &str, path: &Path, config: Option<&str>) -> Result<Suite, VectorError> {
        let err = |case: Option<String>, field: &str, message: String| VectorError {
            file: path.to_path_buf(),
            case,
            field: field.to_string(),
            message,
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let file: VectorFile = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| err(None, &e.path().to_string(), e.inner().to_string()))?;
        // One document: text after it is refused, not silently ignored.
        de.end().map_err(|e| err(None, "(syntax)", e.to_string()))?;
        let default_config = match config {
            Some(text) => text.to_string(),
            None => file
                .config
                .as_ref()
                .map_or_else(|| "{}".to_string(), Value::to_string),
        };
        let mut cases = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for (i, spec) in file.cases.into_iter().enumerate() {
            let case_name = Some(spec.name.clone());
            if !names.insert(spec.name.clone()) {
                return Err(err(
                    case_name,
                    &format!("cases[{i}].name"),
                    "duplicate case name".into(),
                ));
            }
            let config = spec
                .config
                .as_ref()
                .map_or_else(|| default_config.clone(), Value::to_string);
            let runs: Vec<Map<String, Value>> = if spec.each.is_empty() {
                vec![Map::new()]
            } else {
                spec.each.clone()
            };
            for (j, mut params) in runs.into_iter().enumerate() {
                let params_expect = params.remove("expect");
                let label = params
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let name = if label.is_empty() {
                    spec.name.clone()
                } else {
                    format!("{} [{label}]", spec.name)
                };
                let field = |f: &str| {
                    if spec.each.is_empty() {
                        format!("cases[{i}].{f}")
                    } else {
                        format!("cases[{i}].each[{j}].{f}")
                    }
                };
                let mut failure = spec.failure.clone();
                merge(&mut failure, params);
                let failure = FailureSpec::from_json(&Value::Object(failure).to_string())
                    .map_err(|e| err(case_name.clone(), &field("failure"), e))?;
                let mut expect = spec.expect.clone();
                match params_expect {
                    Some(Value::Object(over)) => merge(&mut expect, over),
                    Some(_) => {
                        return Err(err(case_name, &field("expect"), "must be an object".into()));
                    }
                    None => {}
                }
                let expect: Expect = serde_path_to_error::deserialize(Value::Object(expect))
                    .map_err(|e| {
                        err(
                            case_name.clone(),
                            &field(&format!("expect.{}", e.path())),
                            e.inner().to_string(),
                        )
                    })?;
                cases.push(Case {
                    name,
                    config: config.clone(),
                    failure,
                    expect,
                });
            }
        }
        Ok(Suite {
            file: path.to_path_buf(),
            name: file.suite,
            settings: file.settings,
            cases,
        })
    }
}

/// Deep-merge `over` into `base` (objects merge, everything else replaces).
fn merge(base: &mut Map<String, Value>, over: Map<String, Value>) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(b)), Value::Object(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The JSON Schema of vector files, as checked in at `tests/conformance/vectors.schema.json`.
pub fn vector_schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(VectorFile)).unwrap_or(Value::Null);
    // A case's `failure` is partial: `each` entries may supply what it leaves out (even the
    // error), and the merged result is checked when the file loads.
    if let Some(defs) = schema
        .pointer_mut("/$defs/FailureSpec")
        .and_then(Value::as_object_mut)
    {
        defs.remove("required");
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_file_is_one_document() {
        let one =
            r#"{"suite": "s", "cases": [{"name": "c", "failure": {"error": {"kind": "x"}}}]}"#;
        let path = Path::new("v.json");
        assert_eq!(Suite::parse(one, path, None).unwrap().cases.len(), 1);
        // Text after the document was ignored (found by `tests/fuzz.rs`): a second suite
        // pasted below the first never ran.
        let two = format!("{one}\n{one}");
        let e = Suite::parse(&two, path, None).unwrap_err();
        assert_eq!(e.field, "(syntax)");
        assert!(e.message.contains("trailing"), "{e}");
    }
}
