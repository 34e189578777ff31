//! The short torture profile over TLS (`--tls`): the hostile consumer answers over HTTPS
//! (resets, half answers and silence inside TLS) and NATS is a TLS-only `nats-server` of the
//! run's own, restarted by the broker fault, each certificate from a CA made for the run.
//! The invariants are the same as in plaintext.

mod common;

#[test]
fn the_gateway_keeps_its_invariants_under_torture_over_tls() {
    let (workdir, reports) = common::torture(
        "verdict-torture-tls",
        &[
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
        ],
        &[],
    );
    assert_eq!(reports.len(), 2, "{reports:?}");
    for r in &reports {
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
    common::clean(&workdir);
}
