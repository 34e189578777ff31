//! Builds every shipped policy and every purpose-built guest into a component, and writes
//! `fixtures.rs` with one constant per component path. The guests are compiled by a nested
//! cargo in `<target>/verdict-guests` (the outer build holds the lock on `<target>/debug`);
//! the CLI tests and the benches share that directory, so each guest is compiled once.
//!
//! The Python and JavaScript ports of `rules` are built by their toolchains
//! (`componentize-py`, ComponentizeJS from `policies/rules-js/node_modules`), skipped when
//! nothing they read changed. A missing toolchain does not stop the Rust build: the fixture
//! holds the error instead, and the tests that need the component fail with it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const GUESTS: [(&str, &str); 7] = [
    ("RULES", "policies/rules"),
    ("RULES_V0_1", "tests/guests/rules-v0-1"),
    ("ROCKETMQ", "policies/rocketmq"),
    ("ADAPTIVE", "policies/adaptive"),
    ("PAYMENTS", "policies/payments"),
    ("HOSTILE", "tests/guests/hostile"),
    ("BATCH_LIAR", "tests/guests/batch-liar"),
];

/// Policies in other languages: built by their toolchains, which a machine may lack.
const INTERPRETED: [(&str, &str); 3] = [
    ("RULES_PY", "policies/rules-py"),
    ("RULES_JS", "policies/rules-js"),
    ("WASI_PROBE_PY", "tests/guests/wasi-probe-py"),
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for dir in [
        "docs/src/embedding.md",
        "policies",
        "guest-sdk/src",
        "guest-sdk/python/verdict_sdk",
        "guest-sdk/js/src",
        "guest-sdk/js/bin",
        "wit",
        "tests/guests",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=VERDICT_COMPONENTIZE_PY");
    println!("cargo:rerun-if-env-changed=PATH");
    let target = match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => root.join(dir),
        None => root.join("target"),
    };
    let options = verdict_componentize::BuildOptions {
        target_dir: Some(target.join("verdict-guests")),
        release: true,
        quiet: true,
    };
    let mut consts = String::new();
    let mut rules = String::new();
    // The 0.1 fixture builds `rules` again with the SDK's `contract-v0-1` feature. A cdylib's
    // file name carries no hash, so in a shared target directory the two builds of `rules`
    // would overwrite each other's `rules.wasm`: it gets a directory of its own.
    let v0_1_options = verdict_componentize::BuildOptions {
        target_dir: Some(target.join("verdict-guests-v0-1")),
        ..options.clone()
    };
    for (name, dir) in GUESTS {
        let options = if name == "RULES_V0_1" {
            &v0_1_options
        } else {
            &options
        };
        let built = verdict_componentize::build_crate(&root.join(dir), options)
            .unwrap_or_else(|e| panic!("building the {dir} fixture: {e}"));
        if name == "RULES" {
            rules = built.component.display().to_string();
        }
        writeln!(
            consts,
            "/// Component built from `{dir}`.\npub const {name}: &str = {:?};",
            built.component.display().to_string()
        )
        .expect("writing to a String");
    }
    for (name, dir) in INTERPRETED {
        let built = verdict_componentize::build(&root.join(dir), &options)
            .map(|b| b.component.display().to_string())
            .map_err(|e| format!("building {dir}: {e}"));
        if let Err(e) = &built {
            println!("cargo:warning={e}");
        }
        writeln!(
            consts,
            "/// Component built from `{dir}`, or why it could not be built.\n\
             pub const {name}: Result<&str, &str> = {built:?};"
        )
        .expect("writing to a String");
    }
    std::fs::write(out.join("fixtures.rs"), consts).expect("writing fixtures.rs");
    write_readme_embedding_example(&root, &out, &rules);
}

/// The book's "Embed the decision engine" example (`docs/src/embedding.md`) as a function `readme_embed()` that
/// returns its `decision`, with the component path pointed at the `rules` fixture: the test
/// suite compiles and runs the book's code as a reader would copy it.
fn write_readme_embedding_example(root: &Path, out: &Path, component: &str) {
    const COMPONENT: &str = "\"target/wasm32-unknown-unknown/release/rules.component.wasm\"";
    let chapter = std::fs::read_to_string(root.join("docs/src/embedding.md"))
        .expect("reading docs/src/embedding.md");
    let block = chapter
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/src/embedding.md: the chapter has a ```rust block");
    assert!(
        block.contains(COMPONENT) && block.contains("let decision ="),
        "docs/src/embedding.md: the embedding example must load {COMPONENT} and bind `decision`"
    );
    let code = format!(
        "/// The book's embedding example, verbatim but for the component's path.\n\
         fn readme_embed() -> Result<verdict_runtime::Decision, Box<dyn std::error::Error>> {{\n\
         {}\nOk(decision)\n}}\n",
        block.replace(COMPONENT, &format!("{component:?}"))
    );
    std::fs::write(out.join("readme_embed.rs"), code).expect("writing readme_embed.rs");
}
