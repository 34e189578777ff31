//! The short torture profile the test command runs: every source, two seeds, 150 hostile
//! messages and six faults each (a gateway kill, a broker restart, a consumer outage, a
//! hot reload that reshapes the routes, a rollback and, on RabbitMQ, an operator deleting the
//! delay exchange of the waiting retries), through the real `verdict` binary. The runs take
//! the `rules` policy's Rust, Python and JavaScript builds in turn. The long runs (`--soak`,
//! more seeds) are run by hand; see RELIABILITY.md.
//!
//! On Kafka the broker is never restarted (the test broker keeps its records in memory);
//! a kill there is met by the group's rebalance once the dead member's session expires.

mod common;

#[test]
fn the_gateway_keeps_its_invariants_under_torture_on_every_source() {
    let (workdir, reports) = common::torture(
        "verdict-torture",
        &[
            "--sources",
            "embedded,nats,rabbitmq,kafka",
            "--seed",
            "1",
            "--seeds",
            "2",
            "--messages",
            "150",
            "--faults",
            "6",
            "--duration",
            "90",
            "--languages",
            "rust,python,javascript",
        ],
        // Hermetic: a caller's admin settings reach neither the harness nor its gateways.
        &[
            ("VERDICT_ADMIN_TOKEN", "the-callers-token-not-the-runs"),
            ("VERDICT_ADMIN_URL", "http://127.0.0.1:9"),
            ("VERDICT_LOG_FORMAT", "json"),
        ],
    );
    assert_eq!(reports.len(), 8, "{reports:?}");
    let languages: std::collections::BTreeSet<&str> = reports
        .iter()
        .map(|r| r["language"].as_str().unwrap())
        .collect();
    assert_eq!(languages.len(), 3, "every language ran: {languages:?}");
    for r in &reports {
        assert_eq!(r["violations"], serde_json::json!([]), "{r}");
        let terminal = r["delivered"].as_u64().unwrap() + r["dead_lettered"].as_u64().unwrap();
        let expected = r["messages"].as_u64().unwrap() - r["refused"].as_u64().unwrap();
        // Every message ends somewhere (RabbitMQ keeps a producer's repeated publish as a
        // message of its own, so it may hold both copies' outcomes).
        assert!(terminal >= expected, "{r}");
        assert!(
            r["dead_lettered"].as_u64().unwrap() > 0,
            "poison and exhausted ones: {r}"
        );
        // Six faults take every kind in turn: each run had each kind its source allows.
        let faults = &r["faults"];
        for kind in ["gateway_kills", "consumer_outages", "reloads", "rollbacks"] {
            assert!(faults[kind].as_u64().unwrap() >= 1, "{kind}: {r}");
        }
        let broker = r["source"] != "embedded" && r["source"] != "kafka";
        assert_eq!(
            faults["broker_restarts"].as_u64().unwrap() >= 1,
            broker,
            "{r}"
        );
        assert_eq!(
            faults["operator_acts"].as_u64().unwrap() >= 1,
            r["source"] == "rabbitmq",
            "{r}"
        );
    }
    common::clean(&workdir);
}
