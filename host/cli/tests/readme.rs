//! The code of the README and of the book (`docs/src`), run as a reader would run it: the
//! quickstart script and `verdict demo`, the one-question `decide`, the failure JSON, the
//! simulator's examples, and the gateway configs through the admission gate. Each test
//! works in a scratch copy of the layout the pages assume (`policies/`, `examples/`,
//! `target/wasm32-unknown-unknown/release/rules.component.wasm`).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{checkout, rules, text};

/// The README and every chapter of the book (`docs/src`), one after the other: a section
/// is found by its heading wherever it is.
fn readme() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut text = std::fs::read_to_string(root.join("README.md")).expect("reading README.md");
    let mut chapters = Vec::new();
    for dir in ["docs/src", "docs/src/policies"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("the book's chapters") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                chapters.push(path);
            }
        }
    }
    chapters.sort();
    for path in chapters {
        text.push('\n');
        text += &std::fs::read_to_string(&path).unwrap();
    }
    text
}

/// The `lang` code blocks of the section whose heading (`## Quickstart`, `# Routing topics
/// to policies`) starts with `heading`: up to the next heading of its level or above,
/// outside code blocks (a shell comment is not a heading).
fn blocks(heading: &str, lang: &str) -> Vec<String> {
    let readme = readme();
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut lines = readme.lines().skip_while(|l| !l.starts_with(heading));
    assert!(
        lines.next().is_some(),
        "the README or the book has a `{heading}` section"
    );
    let mut section = Vec::new();
    let mut fenced = false;
    for line in lines {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let depth = line.chars().take_while(|c| *c == '#').count();
        if !fenced && depth > 0 && depth <= level && line[depth..].starts_with(' ') {
            break;
        }
        section.push(line);
    }
    let section = section.join("\n") + "\n";
    let blocks: Vec<String> = section
        .split(&format!("```{lang}\n"))
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .map(str::to_string)
        .collect();
    assert!(!blocks.is_empty(), "`{heading}` has no ```{lang} block");
    blocks
}

/// Run a README or book shell block in `dir`, with `cargo run -q --bin X --` standing for the
/// binaries this test run built; background jobs are stopped when the script ends.
fn sh(dir: &Path, block: &str) -> Output {
    let script = block
        .replace(
            "cargo run -q --bin verdict-demo-consumer",
            env!("CARGO_BIN_EXE_verdict-demo-consumer"),
        )
        .replace(
            "cargo run -q --bin verdict --",
            env!("CARGO_BIN_EXE_verdict"),
        );
    assert!(
        !script.contains("cargo run"),
        "a README command this test cannot run:\n{script}"
    );
    Command::new("timeout")
        .args(["120", "bash", "-c"])
        .arg(format!(
            "trap 'jobs -p | xargs -r kill; wait || true' EXIT\nset -e\n{script}"
        ))
        .current_dir(dir)
        // `verdict build` in the script compiles into the guests' shared directory, not
        // the scratch checkout; the component it would write is already in place.
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("../verdict-guests"),
        )
        .env_remove("VERDICT_ADMIN_TOKEN")
        .output()
        .expect("bash runs")
}

fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {series} in:\n{metrics}")) as u64
}

#[test]
fn the_quickstart_runs_as_written() {
    let dir = checkout("quickstart");
    // The one command first, told to stop once it has summarised (a reader stops it with
    // Ctrl-C, which `tests/demo.rs` sends).
    let demo = &blocks("## Quickstart", "sh")[0];
    assert!(
        demo.contains("cargo run -q --bin verdict -- demo"),
        "{demo}"
    );
    let out = sh(&dir, &demo.replace("-- demo", "-- demo --exit"));
    let said = text(&out.stderr);
    assert!(
        out.status.success(),
        "the demo failed ({:?}): {said}",
        out.status
    );
    assert!(said.contains("of 200 orders:"), "{said}");
    assert!(said.contains("x poison (schema.unknown-version)"), "{said}");
    let block = &blocks("## Quickstart", "sh")[1];
    let out = sh(&dir, block);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "the quickstart failed ({:?})\nstdout: {stdout}\nstderr: {}",
        out.status,
        text(&out.stderr)
    );
    // What the README says the reader sees: every order delivered or dead, the dead ones
    // listed, one envelope shown.
    let delivered = metric(&stdout, "verdict_messages{state=\"delivered\"}");
    let dead = metric(&stdout, "verdict_messages{state=\"dead\"}");
    assert_eq!(delivered + dead, 200, "{stdout}");
    assert!(dead > 0, "the demo consumer refuses 5% for good:\n{stdout}");
    assert!(stdout.contains("orders.DLQ"), "{stdout}");
    assert!(stdout.contains("schema.unknown-version"), "{stdout}");
    // `dlq groups`: the dead letters are one group, of their number, and it says why.
    let group = stdout
        .lines()
        .skip_while(|l| !l.starts_with("GROUP "))
        .nth(1)
        .expect("a groups table");
    let columns: Vec<&str> = group.split_whitespace().collect();
    assert_eq!(columns[0].len(), 16, "{group}");
    assert_eq!(columns[1].parse::<u64>().ok(), Some(dead), "{group}");
    assert_eq!(
        &columns[3..6],
        ["orders", "poison", "schema.unknown-version"],
        "{group}"
    );
    // The envelope the book documents has the keys the gateway wrote.
    let config = dir.join("examples/quickstart.toml");
    let shown = common::verdict(&["dlq", "show", "1", "-c", config.to_str().unwrap()], None);
    let shown = text(&shown.stdout);
    let envelope: serde_json::Value = serde_json::from_str(&shown).expect("dlq show prints JSON");
    let documented: serde_json::Value = serde_json::from_str(
        blocks("# The gateway", "json")
            .iter()
            .find(|b| b.contains("\"original\""))
            .expect("the book documents the envelope"),
    )
    .unwrap();
    let keys = |v: &serde_json::Value| {
        v.as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(keys(&documented), keys(&envelope["envelope"]), "{shown}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn asking_a_policy_one_question_prints_the_exhausted_verdict() {
    let dir = checkout("decide");
    let block = &blocks("## Quickstart", "sh")[2];
    let out = sh(&dir, block);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let decision: serde_json::Value = serde_json::from_str(&stdout).expect("decide prints JSON");
    assert_eq!(
        decision["verdict"]["action"]["type"], "dead-letter",
        "{stdout}"
    );
    assert_eq!(decision["verdict"]["class"], "exhausted", "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_documented_failure_json_is_accepted_by_decide() {
    let failure = &blocks("# The `verdict` command", "json")[0];
    let out = common::verdict(
        &["decide", "--policy", rules(), "--failure", "-"],
        Some(failure),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let decision: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // An http.503 with a 5 s Retry-After on its second attempt: retried, not sooner.
    assert_eq!(decision["verdict"]["action"]["type"], "retry", "{stdout}");
    assert!(
        decision["verdict"]["action"]["ms"].as_u64().unwrap() >= 5_000,
        "{stdout}"
    );
}

#[test]
fn the_documented_gateway_configs_pass_the_admission_gate() {
    let dir = checkout("configs");
    let routing = &blocks("# Routing topics to policies", "toml")[0];
    std::fs::write(dir.join("routing.toml"), routing).unwrap();
    let out = common::verdict(
        &["check", "-c", dir.join("routing.toml").to_str().unwrap()],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("payments.>"), "{stdout}");

    // The broker section shows the routes and servers; the policy is the one above.
    let brokers = &blocks("## On a broker", "toml")[0];
    let policy = routing.split("\n[[routes]]").next().unwrap();
    std::fs::write(dir.join("brokers.toml"), format!("{policy}\n{brokers}")).unwrap();
    let out = common::verdict(
        &["check", "-c", dir.join("brokers.toml").to_str().unwrap()],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("orders.>") && stdout.contains("invoices"),
        "{stdout}"
    );

    // The Kafka section's settings and route pass too.
    let kafka = &blocks("## On Kafka", "toml")[0];
    std::fs::write(dir.join("kafka.toml"), format!("{policy}\n{kafka}")).unwrap();
    let out = common::verdict(
        &["check", "-c", dir.join("kafka.toml").to_str().unwrap()],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("payments"), "{stdout}");

    // The traces chapter's `[telemetry]` passes, and the check says where traces go.
    let telemetry = &blocks("# Traces", "toml")[0];
    std::fs::write(dir.join("traces.toml"), format!("{routing}\n{telemetry}")).unwrap();
    let out = common::verdict(
        &["check", "-c", dir.join("traces.toml").to_str().unwrap()],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains(r#""traces": "http/protobuf to http://127.0.0.1:4318/v1/traces as `verdict`, 0.25 sampled"#),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The book's TLS settings, with the files they name made by a throwaway CA, pass
/// `verdict check`: the HTTPS consumer block and the NATS and PostgreSQL block.
#[test]
fn the_documented_tls_settings_pass_check_with_their_files_in_place() {
    let dir = checkout("tls-configs");
    let routing = &blocks("# Routing topics to policies", "toml")[0];
    let policy = routing.split("\n[[routes]]").next().unwrap();
    let pki = verdict_tls::test_pki::Pki::new("readme-tls");
    let me = pki.client("gateway");
    std::fs::create_dir_all(dir.join("tls")).unwrap();
    for ca in [
        "internal-ca.pem",
        "nats-ca.pem",
        "db-ca.pem",
        "rabbit-ca.pem",
    ] {
        std::fs::copy(pki.ca_file(), dir.join("tls").join(ca)).unwrap();
    }
    std::fs::copy(&me.cert, dir.join("tls/gateway.pem")).unwrap();
    std::fs::copy(&me.key, dir.join("tls/gateway.key")).unwrap();
    let check = |name: &str, config: String| {
        let path = dir.join(name);
        std::fs::write(&path, config).unwrap();
        let out = common::verdict(&["check", "-c", path.to_str().unwrap()], None);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}\n{}",
            text(&out.stderr)
        );
        stdout
    };
    let https = blocks("# The gateway", "toml")
        .into_iter()
        .find(|b| b.contains("consumer_tls"))
        .expect("the HTTPS consumer example");
    let stdout = check("https.toml", format!("{policy}\n{https}"));
    assert!(stdout.contains("payments.>"), "{stdout}");
    let ordered = blocks("# The gateway", "toml")
        .into_iter()
        .find(|b| b.contains("ordering = \"key\""))
        .expect("the key ordering example");
    let stdout = check("ordering.toml", format!("{policy}\n{ordered}"));
    assert!(stdout.contains("orders"), "{stdout}");
    let tls = &blocks("# TLS and credentials", "toml")[0];
    let route = "[[routes]]\ntopic = \"orders.>\"\npolicy = \"rules\"\nsource = \"nats\"\n\
                 consumer = { url = \"http://127.0.0.1:1/\", timeout_ms = 2000 }\n\
                 [[routes]]\ntopic = \"invoices\"\npolicy = \"rules\"\nsource = \"rabbitmq\"\n\
                 consumer = { url = \"http://127.0.0.1:1/\", timeout_ms = 2000 }\n";
    let stdout = check("peers.toml", format!("{policy}\n{tls}\n{route}"));
    assert!(
        stdout.contains("orders.>") && stdout.contains("invoices"),
        "{stdout}"
    );
    // The certificate login, in place of the password one.
    let external = &blocks("# TLS and credentials", "toml")[1];
    assert!(external.contains("auth_mechanism=external"), "{external}");
    let rabbit_route = route.split("[[routes]]").nth(2).unwrap();
    check(
        "external.toml",
        format!("{policy}\n{external}\n[[routes]]{rabbit_route}"),
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkout with the shipped scenarios where the README's simulate commands expect them.
fn simulate_checkout(name: &str) -> std::path::PathBuf {
    let dir = checkout(name);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::create_dir_all(dir.join("host/simulate")).unwrap();
    std::os::unix::fs::symlink(
        root.join("host/simulate/scenarios").canonicalize().unwrap(),
        dir.join("host/simulate/scenarios"),
    )
    .unwrap();
    dir
}

#[test]
fn the_simulate_example_prints_the_figures_the_readme_quotes() {
    let dir = simulate_checkout("simulate");
    let block = &blocks("## Simulate it against an outage", "sh")[0];
    let out = sh(&dir, block);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // The figures the README quotes, from the same seed: they change only with the model.
    for line in [
        "published                60000",
        "dead-lettered            12570 (exhausted 12152, poison 418)",
        "deliveries               60000 first + 60456 retries",
        "publish to end           p50 20 ms, p99 61682 ms, max 66442 ms",
        "drain after recovery     18.5 s",
        "retry load               peak 317/s against 100/s published",
        "peak backlog             4621",
    ] {
        assert!(
            stdout.contains(line),
            "the README quotes `{line}`:\n{stdout}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_retry_budget_comparison_prints_the_figures_the_readme_quotes() {
    let dir = simulate_checkout("simulate-budget");
    let block = &blocks("## Simulate it against an outage", "sh")[1];
    assert!(block.contains("--compare-settings"), "{block}");
    let out = sh(&dir, block);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // The budgeted run's column, as the README quotes it.
    for figure in [
        "retry budget 20%",
        "713 (exhausted 160, poison 553)",
        "60000 first + 24365 retries",
        "20% of first attempts + 10/s over 10 s: 133089 held",
        "84365 (1.41 per message)",
        "p99 209600 ms",
        "59.9 s",
        "peak 364/s against 100/s published",
    ] {
        assert!(
            stdout.contains(figure),
            "the README quotes `{figure}`:\n{stdout}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The book holds together: every chapter in `docs/src` is listed in `SUMMARY.md` and every
/// entry there exists; every relative link of the README and the book - to a chapter, an
/// image or a file of the repository, and to a heading of a chapter - resolves.
#[test]
fn every_chapter_is_in_the_summary_and_every_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = root.join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let listed: std::collections::BTreeSet<String> = summary
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(str::to_string)
        .collect();
    let mut pages = vec![root.join("README.md")];
    for dir in [src.clone(), src.join("policies")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                let name = path.strip_prefix(&src).unwrap().display().to_string();
                if name != "SUMMARY.md" {
                    assert!(listed.contains(&name), "{name} is not in SUMMARY.md");
                }
                pages.push(path);
            }
        }
    }
    for entry in &listed {
        assert!(
            src.join(entry).is_file(),
            "SUMMARY.md lists {entry}, which is not there"
        );
    }
    // A heading's anchor as mdBook and GitHub make it.
    let anchor = |heading: &str| -> String {
        heading
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let mut fenced = false;
        for line in text.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for link in line.split("](").skip(1).filter_map(|r| r.split(')').next()) {
                if link.starts_with("http") || link.starts_with("mailto:") {
                    continue;
                }
                let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
                let target = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                assert!(
                    target.exists(),
                    "{}: the link `{link}` leads nowhere",
                    page.display()
                );
                if !fragment.is_empty() && target.extension().is_some_and(|e| e == "md") {
                    let headings: Vec<String> = std::fs::read_to_string(&target)
                        .unwrap()
                        .lines()
                        .filter(|l| l.starts_with('#'))
                        .map(anchor)
                        .collect();
                    assert!(
                        headings.iter().any(|h| h == fragment),
                        "{}: `{link}`: no heading `#{fragment}` in {}",
                        page.display(),
                        target.display()
                    );
                }
            }
        }
    }
}
