//! The Rust project: a crate `verdict build` compiles with cargo.
//!
//! - `Cargo.toml`: the `cdylib` crate type a component needs, the SDK, and an empty
//!   `[workspace]` so the crate builds wherever it is put (even inside another workspace).
//! - `src/lib.rs`: the policy, `export_policy!`, and its unit tests (`cargo test`).

use anyhow::Result;

use super::{File, Names, SdkSource, fill, quoted, vectors, verdict_toml};

/// The crate's files, in the order `verdict new` lists them.
pub(super) fn files(names: &Names, sdk: &SdkSource) -> Result<Vec<File>> {
    let component = format!(
        "target/wasm32-unknown-unknown/release/{}.component.wasm",
        names.snake
    );
    let sdk_dependency = dependency(sdk);
    Ok(vec![
        (
            "Cargo.toml".to_string(),
            fill(
                include_str!("templates/rust/Cargo.toml"),
                names,
                &[("sdk", sdk_dependency.as_str())],
            ),
        ),
        (
            "src/lib.rs".to_string(),
            fill(include_str!("templates/rust/lib.rs"), names, &[]),
        ),
        vectors(names),
        verdict_toml(names, &component),
        (
            "README.md".to_string(),
            fill(include_str!("templates/rust/README.md"), names, &[]),
        ),
        (".gitignore".to_string(), "/target\n/.verdict\n".to_string()),
    ])
}

/// The `verdict-sdk` dependency's value: a path table or a version requirement.
fn dependency(sdk: &SdkSource) -> String {
    match sdk {
        SdkSource::Path(path) => format!("{{ path = {} }}", quoted(&path.display().to_string())),
        SdkSource::Version(version) => quoted(version),
    }
}
