//! Components that must be refused at load, one test per case, each with an error naming
//! the problem while another topic keeps deciding.

use verdict_runtime::LoadError;
use verdict_tests::{fixtures, host, with_bystander};

fn refused(bytes: &[u8], origin: &str) -> LoadError {
    with_bystander(|| host().load_bytes(bytes, origin).expect_err(origin))
}

fn refused_wat(name: &str) -> LoadError {
    let bytes = wat::parse_file(fixtures::file(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    refused(&bytes, name)
}

fn assert_foreign(file: &str, import: &str) {
    let err = refused_wat(file);
    assert!(
        matches!(&err, LoadError::ForeignImport { import: i, .. } if i == import),
        "{file}: {err}"
    );
    assert!(
        err.to_string().contains(import) && err.to_string().contains(file),
        "{err}"
    );
    // A WASI interface the host does not stub: the message says which ones it does.
    assert_eq!(
        err.to_string().contains("deterministic stubs"),
        import.starts_with("wasi:"),
        "{err}"
    );
}

/// The deterministic WASI's interfaces pass the import check (a Python or JavaScript policy
/// imports them); these components are then refused for what they lack, the decider.
#[test]
fn wasi_filesystem_sockets_and_clocks_imports_pass_the_contract_check() {
    for file in [
        "imports-wasi-filesystem.wat",
        "imports-wasi-sockets.wat",
        "imports-wasi-clocks.wat",
    ] {
        let err = refused_wat(file);
        assert!(
            matches!(&err, LoadError::MissingExport { .. }),
            "{file}: {err}"
        );
    }
}

#[test]
fn foreign_import_wasi_http_is_refused() {
    let bytes =
        wat::parse_str(r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#)
            .unwrap();
    let err = refused(&bytes, "imports-wasi-http.wasm");
    assert!(
        matches!(&err, LoadError::ForeignImport { import, .. } if import == "wasi:http/outgoing-handler@0.2.0"),
        "{err}"
    );
    assert!(err.to_string().contains("deterministic stubs"), "{err}");
}

#[test]
fn foreign_import_unknown_interface_is_refused() {
    assert_foreign("imports-unknown.wat", "acme:secrets/vault@1.0.0");
}

#[test]
fn wrong_contract_version_names_found_and_supported() {
    let err = refused_wat("wrong-version.wat").to_string();
    assert!(
        err.contains("verdict:policy/decider@0.3.0") && err.contains("0.1.x or 0.2.x"),
        "{err}"
    );
}

#[test]
fn missing_export_is_named() {
    let err = refused_wat("missing-export.wat").to_string();
    assert!(
        err.contains("does not export verdict:policy/decider") && err.contains("export_policy!"),
        "{err}"
    );
}

#[test]
fn core_module_is_refused() {
    let err = refused_wat("core-module.wat");
    assert!(matches!(err, LoadError::CoreModule { .. }));
    assert!(err.to_string().contains("verdict build"), "{err}");
}

#[test]
fn empty_file_is_refused() {
    assert!(matches!(
        refused(b"", "empty.wasm"),
        LoadError::Empty { .. }
    ));
}

#[test]
fn truncated_file_is_refused() {
    let rules = std::fs::read(fixtures::RULES).unwrap();
    let err = refused(&rules[..rules.len() / 2], "truncated.wasm");
    assert!(
        matches!(&err, LoadError::Compile { origin, .. } if origin == "truncated.wasm"),
        "{err}"
    );
}

#[test]
fn random_bytes_are_refused() {
    let mut state = 0xdead_beef_u64;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    assert!(matches!(
        refused(&random, "random.bin"),
        LoadError::NotWasm { .. }
    ));
    let mut header_then_noise = b"\0asm\x0d\x00\x01\x00".to_vec();
    header_then_noise.extend(&random);
    assert!(matches!(
        refused(&header_then_noise, "noise.wasm"),
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
        assert_eq!(p.exports(), ["verdict:policy/decider@0.2.0"]);
        assert_eq!(p.contract(), verdict_runtime::Contract::V0_2);
    }
}
