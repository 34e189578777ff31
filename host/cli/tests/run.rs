//! `verdict run` as an operator runs it, and `verdict policy ...` against it: read-only
//! without the token, hot reload on an edit, rollback of one route, a shadow and its report,
//! graceful stop on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{default_route, payments_route, rules_config, rules_policy, text, verdict};

const TOKEN: &str = "run-test-token";

/// A `verdict run` child; killed if the test ends early.
struct Gateway {
    child: Child,
    url: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &Path) -> Gateway {
    start_in(Path::new("."), config)
}

/// `verdict run -c <config>` with `cwd` as the working directory (`config` as given:
/// relative to `cwd` or absolute).
fn start_in(cwd: &Path, config: &Path) -> Gateway {
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["run", "-c", config.to_str().unwrap()])
        .current_dir(cwd)
        .env_remove("VERDICT_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("verdict run starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("verdict run printed its address before exiting")
            .unwrap();
        if let Some(at) = line.find("http://") {
            break line[at..].trim().to_string();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Gateway { child, url }
}

fn policy(gw: &Gateway, args: &[&str], token: bool) -> (bool, String, String) {
    let token_file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let mut all = vec!["policy", "--admin", gw.url.as_str()];
    if token {
        all.extend(["--token-file", token_file.to_str().unwrap()]);
    }
    all.extend(args);
    let out = verdict(&all, None);
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Poll `verdict policy history` until generation `n` is active (file events are
/// asynchronous), at most 30 s.
fn wait_for_generation(gw: &Gateway, n: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, out, _) = policy(gw, &["history"], false);
        if out.lines().any(|l| l.starts_with(&format!("* {n:>4}"))) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The text of [`common::rules_config`] with the default route allowing `max_attempts`: the
/// file an edit writes.
fn config_allowing(max_attempts: i64) -> String {
    rules_policy()
        .route(payments_route())
        .route(default_route(max_attempts))
        .text()
}

#[test]
fn run_serves_the_registry_and_policy_commands_operate_it() {
    let dir = common::scratch_with_rules("run-gateway");
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    let config = rules_config().write_toml(&dir);
    let mut gw = start(&config);

    let (ok, out, err) = policy(&gw, &["list"], false);
    assert!(ok, "{err}");
    assert!(
        out.contains("rules@0.1.0") && out.contains("payments.>, >"),
        "{out}"
    );

    // Changes need the token.
    let (ok, _, err) = policy(&gw, &["rollback"], false);
    assert!(
        !ok && err.contains("401") && err.contains("Bearer"),
        "{err}"
    );

    // An edit to the file goes live by itself: the default route now allows 4 attempts.
    std::fs::write(&config, config_allowing(4)).unwrap();
    let history = wait_for_generation(&gw, 2);
    assert!(history.contains("*    2  config file"), "{history}");

    // Roll back the default route only.
    let (ok, out, err) = policy(&gw, &["rollback", "--topic", ">"], true);
    assert!(ok, "{err}");
    // It says how long it lasts: until the next change of any route or a restart.
    assert!(out.starts_with("generation 3 is active\nnote: "), "{out}");
    assert!(out.contains("until the next change of any route") && out.contains("restart"));
    let (_, history, _) = policy(&gw, &["history"], false);
    assert!(
        history.contains("*    3  rollback > to generation 1"),
        "{history}"
    );

    // A shadow on payments with 3 attempts, then its report (nothing decided yet).
    let (ok, out, err) = policy(
        &gw,
        &[
            "shadow",
            "--topic",
            "payments.>",
            "--policy",
            "rules",
            "--config",
            r#"{"max_attempts": 3}"#,
        ],
        true,
    );
    assert!(ok, "{err}");
    assert_eq!(out, "generation 4 is active\n");
    let (ok, report, _) = policy(&gw, &["shadow-report", "--json"], false);
    assert!(ok);
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report[0]["topic"], "payments.>");
    assert_eq!(report[0]["compared"], 0);

    // Nothing is listening after SIGTERM, and the process exits cleanly.
    let pid = gw.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = gw.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "verdict run ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let (ok, _, err) = policy(&gw, &["list"], false);
    assert!(!ok && err.contains("is `verdict run` running"), "{err}");
}

/// `cd conf && verdict run -c verdict.toml` (a bare file name) reloads edits like an
/// absolute path does; `verdict run -c conf/verdict.toml` from the parent directory accepts
/// an upload and activates it (paths resolve against the config file, once).
#[test]
fn relative_config_paths_reload_and_upload_from_any_working_directory() {
    let conf = common::scratch_with_rules("run-relative/conf");
    let parent = conf.parent().unwrap().to_path_buf();
    std::fs::write(conf.join("token"), TOKEN).unwrap();
    let config = rules_config().write_toml(&conf);

    let gw = start_in(&conf, Path::new("verdict.toml"));
    std::fs::write(&config, config_allowing(4)).unwrap();
    let history = wait_for_generation(&gw, 2);
    assert!(history.contains("*    2  config file"), "{history}");
    drop(gw);

    let gw = start_in(&parent, Path::new("conf/verdict.toml"));
    let component = conf.join("rules.wasm");
    let upload = verdict(
        &[
            "policy",
            "--admin",
            gw.url.as_str(),
            "--token-file",
            conf.join("token").to_str().unwrap(),
            "upload",
            "rules",
            component.to_str().unwrap(),
            "--activate",
        ],
        None,
    );
    assert!(upload.status.success(), "{}", text(&upload.stderr));
    // The staged upload sits in the state directory beside the config, not below a
    // doubled path.
    assert!(conf.join(".verdict/uploads/rules").is_dir());
    assert!(!conf.join("conf").exists());
}

/// A config rewritten in two steps (half a file, then the rest) is reloaded once it is
/// whole, not refused for the half that was read first.
#[test]
fn a_config_written_in_two_steps_is_reloaded_when_whole() {
    let dir = common::scratch_with_rules("run-halfway");
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    let config = rules_config().write_toml(&dir);
    let gw = start(&config);
    let edited = config_allowing(4);
    // The first half ends inside a table header: alone it does not parse.
    let cut = edited.find("[[routes]]").unwrap() + 4;
    {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&config).unwrap();
        file.write_all(&edited.as_bytes()[..cut]).unwrap();
        file.sync_all().unwrap();
        // Longer than the watcher's debounce: the half file is seen on its own.
        std::thread::sleep(Duration::from_millis(700));
        file.write_all(&edited.as_bytes()[cut..]).unwrap();
    }
    let history = wait_for_generation(&gw, 2);
    assert!(history.contains("*    2  config file"), "{history}");
    let (_, status, _) = policy(&gw, &["status"], false);
    assert!(
        status.contains("\"refused\": 0"),
        "a half-read file was refused: {status}"
    );
}

/// The state directory holds payloads and keys: a group- or world-writable one is refused,
/// naming it; one found readable by others is narrowed to 0700, and the store is 0600.
#[test]
fn the_state_directory_is_private_or_the_gateway_does_not_start() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = common::scratch_with_rules("run-state-dir");
    let config = rules_config().unset("admin.token_file").write_toml(&dir);
    let state = dir.join(".verdict");
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = verdict(&["run", "-c", config.to_str().unwrap()], None);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(state.to_str().unwrap()) && err.contains("writable"),
        "{err}"
    );

    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let gw = start(&config);
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("verdict.db")), 0o600);
    drop(gw);
}

/// Warnings show by default (no `VERDICT_LOG` needed): the one about a gateway without an
/// admin token is printed before the address.
#[test]
fn warnings_show_without_asking() {
    let config = rules_config()
        .unset("admin.token_file")
        .write_toml(&common::scratch_with_rules("run-warnings"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["run", "-c", config.to_str().unwrap()])
        .env_remove("VERDICT_ADMIN_TOKEN")
        .env_remove("VERDICT_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("verdict run starts");
    let mut seen = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let done = line.contains("http://");
        seen.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.iter()
            .any(|l| l.contains("WARN") && l.contains("no admin token and no tokens file")),
        "{seen:#?}"
    );
}
