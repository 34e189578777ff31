//! Components that must be refused at load, each with an error naming the problem.

use verdict_host::LoadError;
use verdict_tests::{fixtures, host};

fn load_wat(name: &str) -> LoadError {
    let path = fixtures::file(name);
    let bytes = wat::parse_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    host().load_bytes(&bytes, name).expect_err(name)
}

fn load_bytes(bytes: &[u8], origin: &str) -> LoadError {
    host().load_bytes(bytes, origin).expect_err(origin)
}

#[test]
fn foreign_imports_are_refused_naming_the_import() {
    for (file, import) in [
        ("imports-wasi-filesystem.wat", "wasi:filesystem/types@0.2.0"),
        ("imports-wasi-sockets.wat", "wasi:sockets/tcp@0.2.0"),
        ("imports-wasi-clocks.wat", "wasi:clocks/wall-clock@0.2.0"),
        ("imports-unknown.wat", "acme:secrets/vault@1.0.0"),
    ] {
        let err = load_wat(file);
        assert!(
            matches!(&err, LoadError::ForeignImport { import: i, .. } if i == import),
            "{file}: {err}"
        );
        assert!(err.to_string().contains(import), "{err}");
    }
}

#[test]
fn wrong_contract_version_names_found_and_supported() {
    let err = load_wat("wrong-version.wat").to_string();
    assert!(
        err.contains("verdict:policy/decider@0.2.0") && err.contains("0.1.x"),
        "{err}"
    );
}

#[test]
fn missing_export_is_named() {
    let err = load_wat("missing-export.wat").to_string();
    assert!(
        err.contains("does not export verdict:policy/decider"),
        "{err}"
    );
}

#[test]
fn core_module_is_refused() {
    assert!(matches!(
        load_wat("core-module.wat"),
        LoadError::CoreModule { .. }
    ));
}

#[test]
fn empty_truncated_and_random_bytes_are_refused() {
    assert!(matches!(
        load_bytes(b"", "empty.wasm"),
        LoadError::Empty { .. }
    ));
    let rules = std::fs::read(fixtures::RULES).unwrap();
    let err = load_bytes(&rules[..rules.len() / 2], "truncated.wasm");
    assert!(
        matches!(&err, LoadError::Compile { origin, .. } if origin == "truncated.wasm"),
        "{err}"
    );
    let mut rng = verdict_sdk_free_rng(0xdead_beef);
    let random: Vec<u8> = (0..4096).map(|_| rng() as u8).collect();
    assert!(matches!(
        load_bytes(&random, "random.bin"),
        LoadError::NotWasm { .. }
    ));
    let mut header_then_noise = b"\0asm\x0d\x00\x01\x00".to_vec();
    header_then_noise.extend(&random);
    assert!(matches!(
        load_bytes(&header_then_noise, "noise.wasm"),
        LoadError::Compile { .. }
    ));
}

#[test]
fn a_missing_file_names_the_path() {
    let err = host()
        .load_file("/nonexistent/policy.wasm".as_ref())
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/policy.wasm"), "{err}");
}

#[test]
fn shipped_policies_describe_themselves_and_import_only_the_contract() {
    let host = host();
    for (path, name) in [
        (fixtures::RULES, "rules"),
        (fixtures::ROCKETMQ, "rocketmq"),
        (fixtures::ADAPTIVE, "adaptive"),
        (fixtures::PAYMENTS, "payments"),
    ] {
        let p = verdict_tests::load(&host, path);
        assert_eq!(p.provenance().name, name);
        assert!(!p.description().is_empty(), "{name} has no description");
        assert!(
            p.imports().iter().all(|i| i.starts_with("verdict:policy/")),
            "{name}: {:?}",
            p.imports()
        );
        assert_eq!(p.exports(), ["verdict:policy/decider@0.1.0"]);
    }
}

/// A tiny deterministic byte source for the random-bytes case.
fn verdict_sdk_free_rng(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
