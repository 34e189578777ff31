//! The JavaScript project: a `package.json` whose `"verdict": {"entry": ...}` names the
//! module that exports `decider`, depending on `@verdict/sdk` by path (it brings the build
//! script `verdict build` runs) and on the toolchain at the versions the SDK is tested
//! with; the component lands in `target/javascript/<name>.component.wasm`, `-` in the
//! package's name written `_`.
//!
//! - `src/policy.js`: the policy and its export `decider`.
//! - `test/policy.test.js`: the unit tests (`node --test test/`).

use anyhow::Result;

use super::{File, Names, SdkSource, fill, quoted, vectors, verdict_toml};

/// The project's files, in the order `verdict new` lists them.
pub(super) fn files(names: &Names, sdk: &SdkSource) -> Result<Vec<File>> {
    let sdk_dir = sdk.checkout_dir("JavaScript", "js", "package.json")?;
    let dependency = quoted(&format!("file:{}", sdk_dir.display()));
    let component = format!("target/javascript/{}.component.wasm", names.snake);
    Ok(vec![
        (
            "package.json".to_string(),
            fill(
                include_str!("templates/javascript/package.json"),
                names,
                &[("sdk", dependency.as_str())],
            ),
        ),
        (
            "src/policy.js".to_string(),
            fill(include_str!("templates/javascript/policy.js"), names, &[]),
        ),
        (
            "test/policy.test.js".to_string(),
            fill(
                include_str!("templates/javascript/policy.test.js"),
                names,
                &[],
            ),
        ),
        vectors(names),
        verdict_toml(names, &component),
        (
            "README.md".to_string(),
            fill(include_str!("templates/javascript/README.md"), names, &[]),
        ),
        (
            ".gitignore".to_string(),
            "/target\n/.verdict\nnode_modules/\n".to_string(),
        ),
    ])
}
