//! The admission gate's refusals that need a misbehaving guest, and the on-disk compiled
//! artifact cache (warm restart, corrupt and truncated entries).

use std::path::Path;
use std::time::Instant;

use verdict_registry::{GatewayConfig, Registry, RegistryError};
use verdict_runtime::{Action, Class, LoadError};
use verdict_tests::{at, fixtures, scratch_dir, with_bystander};

/// `rules` on `orders`; with a `mode`, the hostile guest in that mode on `hostile.>`.
fn config(state: &Path, mode: Option<&str>, admission: &str) -> GatewayConfig {
    let hostile_route = mode.map_or_else(String::new, |mode| {
        format!("[[routes]]\ntopic = \"hostile.>\"\npolicy = \"hostile\"\nconfig = {{ mode = \"{mode}\" }}\n")
    });
    let text = format!(
        r#"
[sandbox]
decide_timeout_ms = 1000
[storage]
dir = "{state}"
[admission]
{admission}
[policies.rules]
path = "{rules}"
[policies.hostile]
path = "{hostile}"
[[routes]]
topic = "orders"
policy = "rules"
config = {{ max_attempts = 3 }}
{hostile_route}
"#,
        state = state.display(),
        rules = fixtures::RULES,
        hostile = fixtures::HOSTILE,
    );
    GatewayConfig::parse(&text, "verdict.toml").unwrap()
}

#[test]
fn a_policy_that_traps_in_init_is_refused_and_the_old_one_keeps_deciding() {
    let state = scratch_dir("admission-init");
    let r = Registry::new(&config(&state, None, ""), Path::new("/")).unwrap();
    let err = r
        .reload(&config(&state, Some("trap-in-init"), ""), Path::new("/"))
        .unwrap_err();
    assert!(
        matches!(&err, RegistryError::Route { index: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("hostile.>"), "{err}");
    assert_eq!(r.current().number, 1);
    assert!(r.decide("hostile.x", &at("db.timeout", 1)).is_none());
    assert_eq!(r.status().refused, 1);
}

#[test]
fn a_policy_that_fails_the_property_checks_is_refused_under_the_fuel_ceiling() {
    let state = scratch_dir("admission-properties");
    let admission = "fuel_per_decision = 200_000\nproperty_inputs = 4";
    let r = Registry::new(&config(&state, None, admission), Path::new("/")).unwrap();
    // `loop` accepts its config, then never returns from `decide`: fuel stops it, the
    // "contained" property fails, and the route is refused - however loaded the machine.
    let err = r
        .reload(&config(&state, Some("loop"), admission), Path::new("/"))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, RegistryError::Admission { policy, .. } if policy == "hostile"),
        "{text}"
    );
    assert!(
        text.contains("FAIL contained") && text.contains("fuel"),
        "{text}"
    );
    assert_eq!(r.current().number, 1);

    // With the property checks off, the same route goes live (and its fallback applies).
    let lax = config(
        &state,
        Some("loop"),
        "fuel_per_decision = 200_000\nproperties = false",
    );
    let r = Registry::new(&lax, Path::new("/")).unwrap();
    let d = r.decide("hostile.x", &at("db.timeout", 1)).unwrap();
    assert!(d.fallback.is_some(), "{d:?}");
}

#[test]
fn a_policy_whose_init_never_returns_is_refused_not_admitted_unchecked() {
    let state = scratch_dir("admission-unchecked");
    let admission = "fuel_per_decision = 200_000\nproperty_inputs = 4";
    let r = Registry::new(&config(&state, None, admission), Path::new("/")).unwrap();
    // `init` never returns: no property can run, and the route is refused with the cause.
    let err = r
        .reload(
            &config(&state, Some("loop-in-init"), admission),
            Path::new("/"),
        )
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("hostile") && text.contains("init") && text.contains("timed out"),
        "{text}"
    );
    assert_eq!(r.current().number, 1);
    assert_eq!(r.status().refused, 1);
    assert!(r.decide("hostile.x", &at("db.timeout", 1)).is_none());
    assert!(r.decide("orders", &at("db.timeout", 1)).is_some());
}

#[test]
fn a_warm_restart_compiles_nothing_and_a_damaged_entry_is_rebuilt_not_trusted() {
    let state = scratch_dir("artifacts");
    let cfg = config(&state, None, "");
    let cold = Registry::new(&cfg, Path::new("/")).unwrap();
    let stats = cold.cache_stats();
    assert_eq!((stats.compiled, stats.hits, stats.rejected), (2, 0, 0));
    drop(cold);

    let warm = Registry::new(&cfg, Path::new("/")).unwrap();
    let stats = warm.cache_stats();
    assert_eq!((stats.compiled, stats.hits, stats.rejected), (0, 2, 0));
    drop(warm);

    // Damage every serving-engine entry: one bit flipped, one truncated.
    let mut entries: Vec<_> = std::fs::read_dir(state.join("artifacts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    entries.sort();
    assert!(entries.len() >= 2, "{entries:?}");
    for (i, entry) in entries.iter().enumerate() {
        let mut bytes = std::fs::read(entry).unwrap();
        if i % 2 == 0 {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x40;
        } else {
            bytes.truncate(bytes.len() / 3);
        }
        std::fs::write(entry, bytes).unwrap();
    }
    let repaired = Registry::new(&cfg, Path::new("/")).unwrap();
    let stats = repaired.cache_stats();
    assert_eq!(stats.hits, 0, "{stats:?}");
    assert_eq!((stats.compiled, stats.rejected), (2, 2), "{stats:?}");
    let d = repaired.decide("orders", &at("db.timeout", 3)).unwrap();
    assert_eq!(d.verdict.class, Class::Exhausted);
    drop(repaired);

    // The rebuilt entries are sound again.
    let again = Registry::new(&cfg, Path::new("/")).unwrap();
    assert_eq!(again.cache_stats().hits, 2);
}

/// Artifacts are authenticated with a key of the installation that wrote them: an entry
/// copied (or planted) from another state directory is rejected and recompiled, not loaded.
#[test]
fn an_artifact_from_another_installation_is_recompiled_not_trusted() {
    let here = scratch_dir("artifacts-here");
    let elsewhere = scratch_dir("artifacts-elsewhere");
    drop(Registry::new(&config(&elsewhere, None, ""), Path::new("/")).unwrap());
    let mut copied = 0;
    std::fs::create_dir_all(here.join("artifacts")).unwrap();
    for entry in std::fs::read_dir(elsewhere.join("artifacts")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm") {
            std::fs::copy(
                &path,
                here.join("artifacts").join(path.file_name().unwrap()),
            )
            .unwrap();
            copied += 1;
        }
    }
    assert!(copied >= 2, "{copied}");
    let r = Registry::new(&config(&here, None, ""), Path::new("/")).unwrap();
    let stats = r.cache_stats();
    assert_eq!(stats.hits, 0, "{stats:?}");
    assert_eq!((stats.compiled, stats.rejected), (2, 2), "{stats:?}");
    assert_ne!(
        std::fs::read(here.join("artifacts.key")).unwrap(),
        std::fs::read(elsewhere.join("artifacts.key")).unwrap()
    );
}

#[test]
fn operator_changes_survive_a_restart_until_the_file_changes_their_entry() {
    let state = scratch_dir("operator-journal");
    let cfg = config(&state, None, "");
    let r = Registry::new(&cfg, Path::new("/")).unwrap();
    let original = r
        .decide("orders", &at("db.timeout", 1))
        .unwrap()
        .provenance
        .sha256
        .clone();
    let upload = r
        .upload("rules", &verdict_tests::variant(fixtures::RULES, "v2"))
        .unwrap();
    r.activate("rules", &upload.provenance.sha256).unwrap();
    r.set_shadow(
        "orders",
        Some(verdict_registry::ShadowConfig {
            policy: "rules".into(),
            config: Some(serde_json::json!({"max_attempts": 2})),
        }),
    )
    .unwrap();
    drop(r);

    // A restart keeps the activated upload and the shadow.
    let r = Registry::new(&cfg, Path::new("/")).unwrap();
    let g = r.current();
    assert_eq!(g.cause, "config file + operator changes");
    let d = r.decide("orders", &at("db.timeout", 1)).unwrap();
    assert_eq!(d.provenance.sha256, upload.provenance.sha256);
    assert_eq!(r.shadow_report().len(), 1);
    drop(r);

    // Once the file's own entry for the policy changes, the file speaks again.
    let mut edited = cfg.clone();
    edited.policies.get_mut("rules").unwrap().vectors =
        vec![fixtures::rules_vectors("limits.json")];
    let r = Registry::new(&edited, Path::new("/")).unwrap();
    let d = r.decide("orders", &at("db.timeout", 1)).unwrap();
    assert_eq!(d.provenance.sha256, original);
    assert_eq!(
        r.shadow_report().len(),
        1,
        "the shadow's route entry did not change"
    );
}

// Components generated here rather than built from source: what `describe` answers is
// fixed before any config arrives (so no mode of the hostile guest can pick it), and a
// start function or a compile bomb is not something a Rust compiler emits on request.

/// `bytes` as the contents of a WAT string literal.
fn wat_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:02x}")).collect()
}

/// Where `contract_module` keeps the text its `describe` returns.
const NAME_AT: u32 = 1 << 16;

/// A core module that speaks the contract through the canonical ABI by hand. `describe`
/// answers `name` as its name, version and description; `decide` dead-letters every failure
/// as `unknown`, which passes every property check; `extra` is spliced into the module.
fn contract_module(name: &[u8], extra: &str) -> String {
    let len = u32::try_from(name.len()).unwrap();
    let pages = (NAME_AT + len).div_ceil(1 << 16) + 1;
    let info: Vec<u8> = [NAME_AT, len, NAME_AT, len, NAME_AT, len]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    format!(
        r#"(module
  (memory (export "memory") {pages})
  (global $heap (mut i32) (i32.const {heap}))
  ;; A bump allocator: each instance serves a handful of calls.
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32) (local $end i32) (local $have i32)
    (local.set $p (i32.and
      (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
      (i32.sub (i32.const 0) (local.get 2))))
    (local.set $end (i32.add (local.get $p) (local.get 3)))
    (local.set $have (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.gt_u (local.get $end) (local.get $have))
      (then
        (if (i32.eq
              (memory.grow (i32.div_u
                (i32.add (i32.sub (local.get $end) (local.get $have)) (i32.const 65535))
                (i32.const 65536)))
              (i32.const -1))
          (then unreachable))))
    (global.set $heap (local.get $end))
    (local.get $p))
  (func (export "verdict:policy/decider@0.1.0#init") (param i32 i32) (result i32)
    (i32.const 1024))
  (func (export "verdict:policy/decider@0.1.0#describe") (result i32)
    (i32.const 1040))
  (func (export "verdict:policy/decider@0.1.0#decide")
    (param i32 i32 i64 i64 i32 i64 i32 i32 i32 i64 i32 i64 i64 i32 i32 i32) (result i32)
    (i32.const 1088))
  (data (i32.const 1040) "{info}")
  ;; verdict: action dead-letter (case 2) at 0, class unknown (case 6) at 16
  (data (i32.const 1088) "\02")
  (data (i32.const 1104) "\06")
  (data (i32.const {NAME_AT}) "{name}")
  {extra}
)"#,
        heap = NAME_AT + len.next_multiple_of(8),
        info = wat_bytes(&info),
        name = wat_bytes(name),
    )
}

/// `core_wat` wrapped into a policy component with the contract's world embedded, as
/// `verdict build` does for a module `wit-bindgen` produced.
fn componentize(core_wat: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve
        .push_file(Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/v0.1/policy.wit"))
        .unwrap();
    let world = resolve.select_world(&[package], Some("policy")).unwrap();
    componentize_for(core_wat, &resolve, world)
}

/// `core_wat` wrapped into a component of `world`.
fn componentize_for(
    core_wat: &str,
    resolve: &wit_parser::Resolve,
    world: wit_parser::WorldId,
) -> Vec<u8> {
    let mut module = wat::parse_str(core_wat).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        resolve,
        world,
        wit_component::StringEncoding::UTF8,
        false,
    )
    .unwrap();
    verdict_componentize::componentize(&module).unwrap()
}

/// `rules` on `orders`, plus each `(name, component)` written to the state dir and routed
/// on `<name>.>`.
fn config_with(state: &Path, admission: &str, extra: &[(&str, &[u8])]) -> GatewayConfig {
    let mut text = format!(
        r#"
[sandbox]
decide_timeout_ms = 1000
[storage]
dir = "{state}"
[admission]
{admission}
[policies.rules]
path = "{rules}"
[[routes]]
topic = "orders"
policy = "rules"
config = {{ max_attempts = 3 }}
"#,
        state = state.display(),
        rules = fixtures::RULES,
    );
    for (name, component) in extra {
        let path = state.join(format!("{name}.wasm"));
        std::fs::write(&path, component).unwrap();
        text += &format!(
            "[policies.{name}]\npath = \"{}\"\n[[routes]]\ntopic = \"{name}.>\"\npolicy = \"{name}\"\n",
            path.display()
        );
    }
    GatewayConfig::parse(&text, "verdict.toml").unwrap()
}

/// Reload a registry serving `rules` on `orders` to one that adds `component` as `name`,
/// while a bystander decides on another host; the refusal, once it is clear nothing moved:
/// the old generation is live and `orders` still decides.
fn refused(test: &str, name: &str, component: &[u8]) -> RegistryError {
    let state = scratch_dir(test);
    let r = Registry::new(&config_with(&state, "", &[]), Path::new("/")).unwrap();
    let bad = config_with(&state, "", &[(name, component)]);
    let err = with_bystander(|| {
        let started = Instant::now();
        let err = r.reload(&bad, Path::new("/")).unwrap_err();
        // Measured once for RELIABILITY.md (`--nocapture`); not asserted.
        eprintln!(
            "{test}: {} bytes refused in {:?}",
            component.len(),
            started.elapsed()
        );
        err
    });
    assert_eq!(r.current().number, 1, "{err}");
    assert_eq!(r.status().refused, 1);
    assert!(
        r.decide(&format!("{name}.x"), &at("db.timeout", 1))
            .is_none()
    );
    let d = r.decide("orders", &at("db.timeout", 3)).unwrap();
    assert_eq!(d.verdict.class, Class::Exhausted);
    assert!(d.fallback.is_none());
    drop(r);
    // Some bombs are tens of MiB.
    let _ = std::fs::remove_dir_all(&state);
    err
}

#[test]
fn a_policy_describing_itself_with_a_megabyte_of_lines_is_shown_as_one_bounded_line() {
    let name = "hostile\r\nx-injected: 1\n".repeat(50_000);
    assert!(name.len() > 1 << 20);
    let component = componentize(&contract_module(name.as_bytes(), ""));
    let state = scratch_dir("admission-describe");
    let config = config_with(&state, "", &[("named", &component)]);
    // Loaded, described and put through the property checks while another host decides.
    let (r, d) = with_bystander(|| {
        let r = Registry::new(&config, Path::new("/")).unwrap();
        let d = r.decide("named.x", &at("db.timeout", 1)).unwrap();
        (r, d)
    });
    assert!(d.fallback.is_none(), "{d:?}");
    assert_eq!(
        (d.verdict.action, d.verdict.class),
        (Action::DeadLetter, Class::Unknown)
    );
    let provenance = &d.provenance;
    for shown in [&provenance.name, &provenance.version] {
        assert_eq!(
            shown.len(),
            verdict_runtime::text::MAX_NAME_BYTES,
            "{shown}"
        );
        assert!(!shown.chars().any(char::is_control), "{shown}");
        assert!(shown.starts_with("hostile  x-injected: 1 "), "{shown}");
    }
    let policy = &r.current().policies["named"];
    assert!(policy.description().len() <= 4 << 10);
    assert!(!policy.description().chars().any(char::is_control));
    assert!(r.decide("orders", &at("db.timeout", 1)).is_some());
}

#[test]
fn a_policy_that_traps_while_instantiating_is_refused_and_the_old_one_keeps_deciding() {
    let trap = "(func $start unreachable) (start $start)";
    let component = componentize(&contract_module(b"trap", trap));
    let err = refused("admission-start-trap", "trap", &component);
    let text = err.to_string();
    assert!(
        matches!(&err, RegistryError::Load { policy, error: LoadError::Instantiate { .. } } if policy == "trap"),
        "{text}"
    );
    assert!(
        text.contains("could not instantiate: trapped: wasm trap: wasm `unreachable`"),
        "{text}"
    );
}

/// A component of one core module with `fields`, instantiated `instances` times.
fn component_of(fields: &str, instances: usize) -> Vec<u8> {
    let mut wat = format!("(component\n(core module $m {fields})\n");
    for _ in 0..instances {
        wat += "(core instance (instantiate $m))\n";
    }
    wat::parse_str(wat + ")").unwrap()
}

#[test]
fn more_memories_tables_or_instances_than_a_policy_has_are_refused_naming_the_limit() {
    for (what, fields, instances, reason) in [
        (
            "memories",
            "(memory 1)".to_string(),
            4,
            "4 Wasm linear memories, which exceeds the configured maximum of 1",
        ),
        (
            "memories-in-one-module",
            "(memory 1)".repeat(25),
            1,
            "defined memories count of 25 exceeds the per-instance limit of 1",
        ),
        (
            "tables",
            "(table 1 funcref)".to_string(),
            4,
            "4 tables, which exceeds the configured maximum of 2",
        ),
        // 1 000 is as many as the parser takes at all.
        (
            "instances",
            String::new(),
            1_000,
            "1000 core module instances, which exceeds the configured maximum of 16",
        ),
    ] {
        let component = component_of(&fields, instances);
        let text = refused(&format!("admission-many-{what}"), what, &component).to_string();
        assert!(text.contains(reason), "{what}: {text}");
    }
}

/// The `[sandbox]` bound a refusal names, and its text.
fn bound(err: &RegistryError) -> (&'static str, String) {
    match err {
        RegistryError::Load {
            error: LoadError::Bound { limit, .. },
            ..
        } => (limit, err.to_string()),
        other => panic!("expected a refusal before compiling, got {other}"),
    }
}

/// `n` blocks, each inside the one before.
fn nested_blocks(n: usize) -> String {
    format!("(func {} {})", "block\n".repeat(n), "end\n".repeat(n))
}

// Unbounded, these took the compiler 17 s (nested blocks), 34 s (loops), 11 s and 640 MB
// (functions) and 3.4 s (a 32 MiB segment) on a 2-core machine before being refused for
// not exporting the contract; one that did export it went live after that.

#[test]
fn a_function_nested_100_000_blocks_deep_is_refused_before_compiling() {
    let component = component_of(&nested_blocks(100_000), 1);
    let (limit, text) = bound(&refused("admission-nesting", "nested", &component));
    assert_eq!(limit, "max_function_blocks", "{text}");
    assert!(
        text.contains("function body 0 of core module 0 (a loop counts as 16): 100000, past sandbox.max_function_blocks = 10000"),
        "{text}"
    );
}

#[test]
fn loop_bombs_are_refused_in_one_function_and_spread_over_many() {
    let one = component_of(&format!("(func {})", "loop end ".repeat(20_000)), 1);
    let (limit, text) = bound(&refused("admission-loops", "loops", &one));
    assert_eq!(limit, "max_function_blocks", "{text}");
    assert!(text.contains(": 320000, past"), "{text}");
    // Each function under the bound (9,600), 110 of them over the component's.
    let function = format!("(func {})\n", "loop end ".repeat(600));
    let spread = component_of(&function.repeat(110), 1);
    let (limit, text) = bound(&refused("admission-loops-spread", "spread", &spread));
    assert_eq!(limit, "max_blocks", "{text}");
    assert!(
        text.contains("up to body 104 of core module 0 (a loop counts as 16): 1008000, past sandbox.max_blocks = 1000000"),
        "{text}"
    );
}

#[test]
fn a_component_with_100_000_functions_is_refused_before_compiling() {
    let funcs = "(func (result i32) i32.const 7)\n".repeat(100_000);
    let component = component_of(&funcs, 1);
    let (limit, text) = bound(&refused("admission-functions", "functions", &component));
    assert_eq!(limit, "max_functions", "{text}");
    assert!(
        text.contains("functions defined: 100000, past sandbox.max_functions = 40000"),
        "{text}"
    );
}

#[test]
fn a_memory_or_data_segment_past_the_memory_cap_is_refused_before_compiling() {
    for (what, fields, reason) in [
        (
            "memory",
            "(memory 16384)",
            "minimum bytes of memory 0 of core module 0: 1073741824, past sandbox.memory_cap_bytes = 16777216",
        ),
        (
            "data",
            "(memory 1 65536) (data (i32.const 1073741823) \"x\")",
            "end of data segment 0 of core module 0: 1073741824, past sandbox.memory_cap_bytes = 16777216",
        ),
    ] {
        let component = component_of(fields, 1);
        let (limit, text) = bound(&refused(&format!("admission-{what}-cap"), what, &component));
        assert_eq!(limit, "memory_cap_bytes", "{text}");
        assert!(text.contains(reason), "{what}: {text}");
    }
}

#[test]
fn a_component_past_max_component_bytes_is_refused_before_it_is_read_whole() {
    let data = "x".repeat(40 << 20);
    let component = component_of(&format!("(memory 1) (data (i32.const 0) \"{data}\")"), 1);
    let (limit, text) = bound(&refused("admission-size", "large", &component));
    assert_eq!(limit, "max_component_bytes", "{text}");
    assert!(
        text.contains(&format!(
            "size in bytes: {}, past sandbox.max_component_bytes = 33554432",
            component.len()
        )),
        "{text}"
    );
}

/// `contract_module` whose `decide` first runs `call`, with `imports` (core imports of WASI
/// functions) and the WIT packages `wit` declaring them added to the policy's world.
fn calling_wasi(wit: &[&str], world_imports: &str, imports: &str, call: &str) -> Vec<u8> {
    let module = contract_module(b"caller", "")
        .replacen("(module", &format!("(module\n  {imports}"), 1)
        .replacen(
            "(result i32)\n    (i32.const 1088))",
            &format!("(result i32)\n    {call}\n    (i32.const 1088))"),
            1,
        );
    assert!(module.contains(call), "the call was spliced in");
    let mut resolve = wit_parser::Resolve::default();
    resolve
        .push_file(Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/v0.1/policy.wit"))
        .unwrap();
    for package in wit {
        resolve.push_str("wasi.wit", package).unwrap();
    }
    let caller = resolve
        .push_str(
            "caller.wit",
            &format!(
                "package test:caller;\nworld caller {{\n  include verdict:policy/policy@0.1.0;\n  {world_imports}\n}}\n"
            ),
        )
        .unwrap();
    let world = resolve.select_world(&[caller], Some("caller")).unwrap();
    componentize_for(&module, &resolve, world)
}

/// A policy asking the random stub for 100 MiB in one call is refused before the host
/// allocates any of it (the stub's bound is 64 KiB), and the old generation keeps deciding.
#[test]
fn a_policy_asking_for_100_mib_of_random_bytes_is_refused_before_the_host_allocates() {
    let component = calling_wasi(
        &[
            "package wasi:random@0.2.0;\ninterface random {\n  get-random-bytes: func(len: u64) -> list<u8>;\n}\n",
        ],
        "import wasi:random/random@0.2.0;",
        r#"(import "wasi:random/random@0.2.0" "get-random-bytes" (func $random (param i64 i32)))"#,
        "(call $random (i64.const 104857600) (i32.const 2048))",
    );
    let err = refused("admission-random-flood", "randomflood", &component).to_string();
    assert!(err.contains("random bytes (at most 65536)"), "{err}");
}

/// A policy writing 2 MiB to stdout in one call - 32 times what `check-write` allows - is
/// refused by the hostcall fuel while its bytes are lifted: a guest capped at 16 MiB cannot
/// make one call cost the host more than that (wasmtime's default would lift these 2 MiB
/// into about 64 MiB of host values before the stub saw them).
#[test]
fn a_policy_writing_2_mib_in_one_call_runs_out_of_hostcall_fuel() {
    let io_error = "package wasi:io@0.2.0;\ninterface error {\n  resource error;\n}\n\
        interface streams {\n  use error.{error};\n  variant stream-error {\n    \
        last-operation-failed(error),\n    closed,\n  }\n  resource output-stream {\n    \
        write: func(contents: list<u8>) -> result<_, stream-error>;\n  }\n}\n";
    let stdout = "package wasi:cli@0.2.0;\ninterface stdout {\n  \
        use wasi:io/streams@0.2.0.{output-stream};\n  get-stdout: func() -> output-stream;\n}\n";
    let component = calling_wasi(
        &[io_error, stdout],
        "import wasi:cli/stdout@0.2.0;",
        r#"(import "wasi:cli/stdout@0.2.0" "get-stdout" (func $stdout (result i32)))
  (import "wasi:io/streams@0.2.0" "[method]output-stream.write" (func $write (param i32 i32 i32 i32)))"#,
        "(drop (memory.grow (i32.const 40)))\n    \
         (call $write (call $stdout) (i32.const 0) (i32.const 2097152) (i32.const 2048))",
    );
    let err = refused("admission-write-flood", "writeflood", &component).to_string();
    assert!(
        err.contains("fuel allocated for hostcalls has been exhausted"),
        "{err}"
    );
}
