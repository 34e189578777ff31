//! What the Kafka tests of the binary share: nisshi, a Kafka-compatible broker (`.ci/run`
//! installs it), started by a test on a port of its own, and the PostgreSQL database such
//! a broker stores in when it must keep its records across a restart or hold SCRAM users.

/// The nisshi binary: `VERDICT_NISSHI`, else where `.ci/run` installs it.
pub fn nisshi() -> String {
    std::env::var("VERDICT_NISSHI").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/verdict/tools/nisshi/bin/nisshi")
    })
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn postgres() -> postgres::Client {
    postgres::Client::connect("host=127.0.0.1 user=postgres", postgres::NoTls)
        .expect("PostgreSQL on 127.0.0.1:5432")
}

/// A fresh database `name` on the machine's PostgreSQL, and the URL nisshi stores in it
/// by (without TLS to the server, whose certificate names `localhost` only).
pub fn fresh_database(name: &str) -> String {
    let mut pg = postgres();
    pg.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    pg.batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    format!("postgres://postgres@127.0.0.1/{name}?sslmode=disable")
}

/// Drop the database `name`, whoever is still connected.
pub fn drop_database(name: &str) {
    let _ = postgres().batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
}

/// What `/readyz` at the gateway `url` says, whatever its status.
pub fn readyz(url: &str) -> String {
    ureq::get(&format!("{url}/readyz"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default()
}
