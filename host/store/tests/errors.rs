//! A store error keeps the driver's error behind it: the message quotes it for people, the
//! source keeps it for code (a SQL state, an I/O kind) - for a database that cannot be
//! reached as for a statement it refuses.

#![cfg(any(feature = "postgres", feature = "mysql"))]

use std::error::Error as _;
use std::path::Path;

use verdict_store::{Store, StoreError};

/// A port nothing listens on: bound, noted, closed.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_postgresql_keeps_the_drivers_error_as_the_source() {
    let url = format!("postgres://verdict@127.0.0.1:{}/verdict", closed_port());
    let e = Store::connect(&url, Path::new(".")).unwrap_err();
    assert!(matches!(e, StoreError::Connect { .. }), "{e:?}");
    assert!(e.is_unreachable());
    let source = e.source().expect("the driver's error");
    assert!(
        source.downcast_ref::<postgres::Error>().is_some(),
        "{source:?}"
    );
    // Said once, with the address and never a password.
    assert!(e.to_string().contains("127.0.0.1:"), "{e}");
}

#[cfg(feature = "mysql")]
#[test]
fn an_unreachable_mariadb_keeps_the_drivers_error_as_the_source() {
    let url = format!("mysql://verdict:s3cret@127.0.0.1:{}/verdict", closed_port());
    let e = Store::connect(&url, Path::new(".")).unwrap_err();
    assert!(matches!(e, StoreError::Connect { .. }), "{e:?}");
    let source = e.source().expect("the driver's error");
    assert!(
        source.downcast_ref::<mysql::Error>().is_some(),
        "{source:?}"
    );
    assert!(!e.to_string().contains("s3cret"), "{e}");
}
