//! Builds every shipped policy and every purpose-built guest into a component, and writes
//! `fixtures.rs` with one constant per component path. The guests are compiled by a nested
//! cargo in `<target>/verdict-guests` (the outer build holds the lock on `<target>/debug`);
//! the CLI tests and the benches share that directory, so each guest is compiled once.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const GUESTS: [(&str, &str); 5] = [
    ("RULES", "policies/rules"),
    ("ROCKETMQ", "policies/rocketmq"),
    ("ADAPTIVE", "policies/adaptive"),
    ("PAYMENTS", "policies/payments"),
    ("HOSTILE", "tests/guests/hostile"),
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for dir in [
        "policies",
        "guest-sdk/src",
        "wit",
        "tests/guests",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
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
    for (name, dir) in GUESTS {
        let built = verdict_componentize::build_crate(&root.join(dir), &options)
            .unwrap_or_else(|e| panic!("building the {dir} fixture: {e}"));
        writeln!(
            consts,
            "/// Component built from `{dir}`.\npub const {name}: &str = {:?};",
            built.component.display().to_string()
        )
        .expect("writing to a String");
    }
    std::fs::write(out.join("fixtures.rs"), consts).expect("writing fixtures.rs");
}
