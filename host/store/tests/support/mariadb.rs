//! A database of the test's own on the MariaDB (or MySQL) server on loopback, dropped when
//! the test ends.

use std::sync::atomic::{AtomicU32, Ordering};

use mysql::prelude::Queryable as _;

/// The server the tests use; `VERDICT_TEST_MYSQL` overrides it.
pub fn server() -> String {
    std::env::var("VERDICT_TEST_MYSQL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// A database created for one test; dropped on drop.
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
        admin(&format!("CREATE DATABASE {name}"));
        TestDatabase { name }
    }

    /// Its URL, for `[gateway] store` and `Store::connect`.
    pub fn url(&self) -> String {
        format!("{}/{}", server(), self.name)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        admin(&format!("DROP DATABASE IF EXISTS {}", self.name));
    }
}

fn admin(sql: &str) {
    let url = server();
    let mut conn = mysql::Conn::new(mysql::Opts::from_url(&url).expect("a MySQL URL"))
        .unwrap_or_else(|e| panic!("MariaDB at {url}: {e} (is the server up?)"));
    conn.query_drop(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}
