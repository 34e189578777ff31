//! A database of the test's own on the PostgreSQL server on loopback (trust auth), dropped
//! when the test ends.

use std::sync::atomic::{AtomicU32, Ordering};

/// The server the tests use; `VERDICT_TEST_POSTGRES` overrides it.
pub fn server() -> String {
    std::env::var("VERDICT_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_string())
}

/// A database created for one test; dropped (with its connections) on drop.
pub struct TestDatabase {
    name: String,
}

impl TestDatabase {
    /// `verdict_<tag>_<pid>_<n>`, created empty.
    pub fn new(tag: &str) -> TestDatabase {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "verdict_{tag}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        admin()
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("creating database {name} on {}: {e}", server()));
        TestDatabase { name }
    }

    /// Its URL, for `[gateway] store` and `Store::connect`.
    pub fn url(&self) -> String {
        format!("{}/{}", server(), self.name)
    }

    /// A plain connection, for a test that looks with SQL.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).expect("connecting")
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = admin().batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

fn admin() -> postgres::Client {
    let url = format!("{}/postgres", server());
    postgres::Client::connect(&url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e} (is the server up?)"))
}
