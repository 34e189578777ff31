//! The short torture profile over TLS (`--tls`): the hostile consumer answers over HTTPS
//! (resets, half answers and silence inside TLS) and NATS is a TLS-only `nats-server` of the
//! run's own, restarted by the broker fault, each certificate from a CA made for the run.
//! The invariants are the same as in plaintext.

use std::process::Command;

#[test]
fn the_gateway_keeps_its_invariants_under_torture_over_tls() {
    let workdir = std::env::temp_dir().join(format!("verdict-torture-tls-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_verdict-torture"))
        .args([
            "--sources",
            "embedded,nats",
            "--seed",
            "3",
            "--messages",
            "150",
            "--faults",
            "6",
            "--duration",
            "90",
            "--tls",
            "--json",
            "--quiet",
        ])
        .arg("--workdir")
        .arg(&workdir)
        .output()
        .expect("verdict-torture runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON reports");
    let reports = reports.as_array().expect("one report per run");
    assert_eq!(reports.len(), 2, "{reports:?}");
    for r in reports {
        assert_eq!(r["tls"], true, "{r}");
        assert_eq!(r["violations"], serde_json::json!([]), "{r}");
        // Deliveries went through: a consumer the gateway could not reach over TLS would
        // have every message dead-lettered as exhausted, none delivered.
        assert!(r["delivered"].as_u64().unwrap() > 50, "{r}");
        let broker_restarts = r["faults"]["broker_restarts"].as_u64().unwrap();
        assert_eq!(broker_restarts >= 1, r["source"] == "nats", "{r}");
    }
    // The run's TLS server and its store are gone with the run.
    let left: Vec<_> = std::fs::read_dir(&workdir)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !left.iter().any(|n| n.to_string_lossy().ends_with("-nats")),
        "{left:?}"
    );
    let _ = std::fs::remove_dir_all(&workdir);
}
