//! The sandbox's static bounds on a component, checked before the compiler sees it.
//!
//! Compiling is the one step of admission a policy's code cannot be interrupted in: no
//! deadline or fuel applies inside Cranelift, and its cost is not proportional to the
//! component's size. Measured (2 cores, the test profile): 100,000 nested blocks in one
//! 293 KiB function compile for 17 s; 20,000 loops in 60 KB for 34 s; 100,000 empty
//! functions for 11 s and 640 MB. Time grows with the square of a function's blocks, and a
//! loop costs the compiler about as much as 16 blocks, so the bounds are on what drives
//! the cost - bytes, functions, blocks per function and in all - and a scan of a few
//! milliseconds refuses a bomb, naming the bound and the value, instead of a compile of
//! minutes. Memories and data segments that can never fit the memory cap are refused here
//! too, rather than by a trap at every instantiation.
//!
//! Bytes the scan cannot parse are left to the compiler, which refuses them with its own
//! reason before compiling any function.

use std::io::Read;
use std::path::Path;

use wasmparser::{DataKind, Encoding, FunctionBody, Operator, Parser, Payload};

use crate::{Limits, LoadError};

/// What a loop counts for in [`Limits::max_function_blocks`] and [`Limits::max_blocks`]:
/// about what it costs the compiler, in blocks (measured: the square root of the cost ratio
/// of a function of loops and one of blocks, 16.1).
pub(crate) const LOOP_BLOCKS: u64 = 16;

/// Read a component file, refusing one past [`Limits::max_component_bytes`] without reading
/// more than that.
pub fn read(path: &Path, limits: &Limits, origin: &str) -> Result<Vec<u8>, LoadError> {
    let io = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let max = limits.max_component_bytes as u64;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(max.saturating_add(1)).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > max {
        let len = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(size(origin, len, limits));
    }
    Ok(bytes)
}

fn size(origin: &str, len: u64, limits: &Limits) -> LoadError {
    bound(
        origin,
        "size in bytes".into(),
        len,
        "max_component_bytes",
        limits.max_component_bytes as u64,
    )
}

fn bound(origin: &str, what: String, value: u64, limit: &'static str, max: u64) -> LoadError {
    LoadError::Bound {
        origin: origin.into(),
        what,
        value,
        limit,
        max,
    }
}

/// Check `bytes` against the sandbox's static bounds.
pub(crate) fn check(bytes: &[u8], limits: &Limits, origin: &str) -> Result<(), LoadError> {
    if bytes.len() > limits.max_component_bytes {
        return Err(size(origin, bytes.len() as u64, limits));
    }
    let cap = limits.memory_cap_bytes as u64;
    let mut functions: u64 = 0;
    let mut blocks: u64 = 0;
    // Core modules in the order they appear, nested ones included; bodies per module.
    let mut module: usize = 0;
    let mut body: usize = 0;
    for payload in Parser::new(0).parse_all(bytes) {
        // Malformed: the compiler refuses it with a precise reason, before compiling any
        // function (bodies are validated as they compile, and skipped below when broken).
        let Ok(payload) = payload else {
            return Ok(());
        };
        match payload {
            Payload::Version {
                encoding: Encoding::Module,
                ..
            } => {
                module += 1;
                body = 0;
            }
            Payload::FunctionSection(section) => {
                functions += u64::from(section.count());
                if functions > u64::from(limits.max_functions) {
                    return Err(bound(
                        origin,
                        "functions defined".into(),
                        functions,
                        "max_functions",
                        limits.max_functions.into(),
                    ));
                }
            }
            Payload::CodeSectionEntry(code) => {
                let here = function_blocks(&code);
                if here > limits.max_function_blocks {
                    return Err(bound(
                        origin,
                        format!(
                            "blocks in function body {body} of core module {} (a loop counts as {LOOP_BLOCKS})",
                            module - 1
                        ),
                        here,
                        "max_function_blocks",
                        limits.max_function_blocks,
                    ));
                }
                blocks += here;
                if blocks > limits.max_blocks {
                    return Err(bound(
                        origin,
                        format!(
                            "blocks in all functions, up to body {body} of core module {} (a loop counts as {LOOP_BLOCKS})",
                            module - 1
                        ),
                        blocks,
                        "max_blocks",
                        limits.max_blocks,
                    ));
                }
                body += 1;
            }
            Payload::MemorySection(section) => {
                for (index, memory) in section.into_iter().enumerate() {
                    let Ok(memory) = memory else {
                        return Ok(());
                    };
                    let page = 1u128 << memory.page_size_log2.unwrap_or(16);
                    let minimum = u128::from(memory.initial) * page;
                    if minimum > u128::from(cap) {
                        return Err(bound(
                            origin,
                            format!(
                                "minimum bytes of memory {index} of core module {}",
                                module.saturating_sub(1)
                            ),
                            u64::try_from(minimum).unwrap_or(u64::MAX),
                            "memory_cap_bytes",
                            cap,
                        ));
                    }
                }
            }
            Payload::DataSection(section) => {
                for (index, data) in section.into_iter().enumerate() {
                    let Ok(data) = data else {
                        return Ok(());
                    };
                    let DataKind::Active { offset_expr, .. } = data.kind else {
                        continue;
                    };
                    // Only a constant offset is known before instantiation.
                    let offset = match offset_expr.get_operators_reader().read() {
                        Ok(Operator::I32Const { value }) => u64::from(value as u32),
                        Ok(Operator::I64Const { value }) => value as u64,
                        _ => continue,
                    };
                    let end = offset.saturating_add(data.data.len() as u64);
                    if end > cap {
                        return Err(bound(
                            origin,
                            format!(
                                "end of data segment {index} of core module {}",
                                module.saturating_sub(1)
                            ),
                            end,
                            "memory_cap_bytes",
                            cap,
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Blocks, ifs and trys in one function body, with each loop counting [`LOOP_BLOCKS`]. A
/// body that does not parse counts what precedes the fault: the compiler refuses it.
fn function_blocks(body: &FunctionBody<'_>) -> u64 {
    let Ok(mut ops) = body.get_operators_reader() else {
        return 0;
    };
    let mut blocks = 0;
    while !ops.eof() {
        match ops.read() {
            Ok(Operator::Loop { .. }) => blocks += LOOP_BLOCKS,
            Ok(
                Operator::Block { .. }
                | Operator::If { .. }
                | Operator::Try { .. }
                | Operator::TryTable { .. },
            ) => blocks += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(fields: &str) -> Vec<u8> {
        wat::parse_str(format!("(component (core module {fields}))")).unwrap()
    }

    fn refused(fields: &str, limits: &Limits) -> String {
        check(&component(fields), limits, "t")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn each_bound_is_named_with_the_value_and_the_limit() {
        let mut limits = Limits::new();
        limits
            .max_component_bytes(4 << 10)
            .max_functions(3)
            .max_function_blocks(40)
            .max_blocks(50);
        let cases = [
            (
                format!(
                    "(memory 1) (data (i32.const 0) \"{}\")",
                    "x".repeat(5 << 10)
                ),
                "size in bytes: 5",
                "max_component_bytes = 4096",
            ),
            (
                "(func) (func) (func) (func)".to_string(),
                "functions defined: 4,",
                "max_functions = 3",
            ),
            (
                format!("(func {})", "block end ".repeat(41)),
                "blocks in function body 0 of core module 0 (a loop counts as 16): 41,",
                "max_function_blocks = 40",
            ),
            (
                "(func loop end loop end loop end)".to_string(),
                "(a loop counts as 16): 48,",
                "max_function_blocks = 40",
            ),
            (
                format!("(func {0}) (func {0})", "block end ".repeat(30)),
                "blocks in all functions, up to body 1 of core module 0 (a loop counts as 16): 60,",
                "max_blocks = 50",
            ),
            (
                "(memory 257)".to_string(),
                "minimum bytes of memory 0 of core module 0: 16842752,",
                "memory_cap_bytes = 16777216",
            ),
            (
                "(memory 1 65536) (data (i32.const 16777216) \"x\")".to_string(),
                "end of data segment 0 of core module 0: 16777217,",
                "memory_cap_bytes = 16777216",
            ),
        ];
        for (fields, what, limit) in cases {
            let text = refused(&fields, &limits);
            assert!(
                text.contains(what) && text.contains(&format!("sandbox.{limit}")),
                "{fields:.60}: {text}"
            );
        }
    }

    #[test]
    fn what_fits_passes_and_what_does_not_parse_is_left_to_the_compiler() {
        let limits = Limits::new();
        let fits = "(memory 256) (data (i32.const 16777215) \"x\") (func loop end block end)";
        assert!(check(&component(fits), &limits, "t").is_ok());
        // A segment placed by a global is only known at instantiation.
        let global = "(global i32 (i32.const 0)) (memory 1) (data (global.get 0) \"x\")";
        assert!(check(&component(global), &limits, "t").is_ok());
        let mut truncated = component("(func) (func)");
        truncated.truncate(truncated.len() - 3);
        assert!(check(&truncated, &limits, "t").is_ok());
    }

    #[test]
    fn a_file_past_the_size_bound_is_not_read_whole() {
        let dir = std::env::temp_dir().join(format!("verdict-bounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.wasm");
        std::fs::write(&path, vec![0u8; 10_000]).unwrap();
        let mut limits = Limits::new();
        limits.max_component_bytes(1_000);
        let text = read(&path, &limits, "big.wasm").unwrap_err().to_string();
        assert!(
            text.contains("size in bytes: 10000,") && text.contains("max_component_bytes = 1000"),
            "{text}"
        );
        limits.max_component_bytes(10_000);
        assert_eq!(read(&path, &limits, "big.wasm").unwrap().len(), 10_000);
        let _ = std::fs::remove_dir_all(dir);
    }
}
