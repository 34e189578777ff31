//! Several gateways under torture: every shared source - PostgreSQL and MariaDB stores, NATS,
//! RabbitMQ - taken by two gateways, the second on a clock 30 s ahead (libfaketime); one
//! seed each, 150 hostile messages and six faults: a kill of one gateway or the other, a
//! broker restart (on a store, every connection to its database cut), a consumer outage,
//! reloads that reshape the routes on both (one reloads before the other) and rollbacks of
//! both. On the stores leases, due times and dead letters follow the database's clock; on
//! NATS a message is left to another route's consumer only when the server says that
//! consumer takes it. No message may be lost, and no duplicate appear beyond what the
//! faults explain. The policy is the `rules` table's Python port on PostgreSQL and NATS and
//! its JavaScript port on MariaDB and RabbitMQ (the Rust build runs everywhere else); the
//! short profile runs every source in every language. More seeds are a run by hand:
//! `verdict-torture --sources postgres,mysql,nats,rabbitmq --gateways 2 --skew=+30s --seeds 4
//! --messages 150 --faults 6 --languages python,javascript`.

mod common;

#[test]
fn two_gateways_a_clock_apart_keep_the_invariants_on_every_shared_source() {
    let (workdir, reports) = common::torture(
        "verdict-torture-fleet",
        &[
            "--sources",
            "postgres,mysql,nats,rabbitmq",
            "--gateways",
            "2",
            "--skew=+30s",
            "--seed",
            "1",
            "--messages",
            "150",
            "--faults",
            "6",
            "--duration",
            "90",
            "--languages",
            "python,javascript",
        ],
        &[],
    );
    assert_eq!(reports.len(), 4, "{reports:?}");
    // The languages alternate across the sources.
    let languages: Vec<(&str, &str)> = reports
        .iter()
        .map(|r| {
            (
                r["source"].as_str().unwrap(),
                r["language"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        languages,
        [
            ("postgres", "python"),
            ("mysql", "javascript"),
            ("nats", "python"),
            ("rabbitmq", "javascript")
        ]
    );
    for r in &reports {
        assert_eq!(r["violations"], serde_json::json!([]), "{r}");
        assert_eq!(r["gateways"], 2, "{r}");
        assert_eq!(r["skew"], serde_json::json!(["+30s"]), "{r}");
        let terminal = r["delivered"].as_u64().unwrap() + r["dead_lettered"].as_u64().unwrap();
        let expected = r["messages"].as_u64().unwrap() - r["refused"].as_u64().unwrap();
        // RabbitMQ keeps a producer's repeated publish as a message of its own.
        assert!(terminal >= expected, "every message ends somewhere: {r}");
        let faults = &r["faults"];
        for kind in ["gateway_kills", "consumer_outages", "reloads", "rollbacks"] {
            assert!(faults[kind].as_u64().unwrap() >= 1, "{kind}: {r}");
        }
        // On the stores the broker fault cuts every connection to the run's database.
        assert!(faults["broker_restarts"].as_u64().unwrap() >= 1, "{r}");
    }
    common::clean(&workdir);
}
