//! The Python project: a `pyproject.toml` whose `[tool.verdict]` names the module that
//! exports the policy (`module`) and the SDK's directory (`path`), which `verdict build`
//! hands to componentize-py; the component lands in `target/python/<name>.component.wasm`,
//! `-` in the project's name written `_`.
//!
//! - `<name>_policy/__init__.py`: the policy and its export `Decider`. The module is the
//!   name with `_` for `-` and a `_policy` suffix, so no name can shadow a standard module
//!   (`json`, `time`, `random`) or be a keyword.
//! - `tests/test_<name>_policy.py`: the unit tests (`python3 -m unittest discover -s
//!   tests`), named after the module they test so that neither can shadow the other, with
//!   `tests/verdict_path.py` putting the project and `[tool.verdict] path` on the module
//!   path as the build does.

use anyhow::Result;

use super::{File, Names, SdkSource, fill, quoted, vectors, verdict_toml};

/// The project's files, in the order `verdict new` lists them.
pub(super) fn files(names: &Names, sdk: &SdkSource) -> Result<Vec<File>> {
    let sdk_path = quoted(
        &sdk.checkout_dir("Python", "python", "verdict_sdk")?
            .display()
            .to_string(),
    );
    let module = format!("{}_policy", names.snake);
    let component = format!("target/python/{}.component.wasm", names.snake);
    let version = verdict_componentize::COMPONENTIZE_PY_VERSION;
    let extra = [("module", module.as_str()), ("componentize_py", version)];
    Ok(vec![
        (
            "pyproject.toml".to_string(),
            fill(
                include_str!("templates/python/pyproject.toml"),
                names,
                &[("module", module.as_str()), ("sdk", sdk_path.as_str())],
            ),
        ),
        (
            format!("{module}/__init__.py"),
            fill(include_str!("templates/python/__init__.py"), names, &extra),
        ),
        (
            format!("tests/test_{module}.py"),
            fill(
                include_str!("templates/python/test_policy.py"),
                names,
                &extra,
            ),
        ),
        (
            "tests/verdict_path.py".to_string(),
            include_str!("templates/python/verdict_path.py").to_string(),
        ),
        vectors(names),
        verdict_toml(names, &component),
        (
            "README.md".to_string(),
            fill(include_str!("templates/python/README.md"), names, &extra),
        ),
        (
            ".gitignore".to_string(),
            "/target\n/.verdict\n__pycache__/\n*.py[cod]\n".to_string(),
        ),
    ])
}
