//! The shared stores over TLS, through the real binary. PostgreSQL: the machine's server
//! (Debian's runs with `ssl = on` and its own certificate), libpq's `sslmode` and
//! `sslrootcert` in the store URL, the connection seen encrypted from the server's side; and
//! a server of the test's own that takes only TLS (`hostssl`), with a password user and a
//! client-certificate user. MariaDB: a server of the test's own on a free loopback port with a certificate from a
//! throwaway CA and a user that may only log in over TLS. For both, a certificate from the
//! wrong CA stops the start with the setting named.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{spawn, text, wait_until};
use verdict_tests::gateway::{Route, TestConfig};
use verdict_tls::test_pki::Pki;

/// A database of the test's own, dropped at the end.
struct Database(String);

impl Database {
    fn new(name: &str) -> Database {
        let name = format!("verdict_{name}_{}", std::process::id());
        sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        sql(&format!("CREATE DATABASE {name}"));
        Database(name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        sql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

fn client() -> postgres::Client {
    let url = "postgres://postgres@127.0.0.1:5432/postgres";
    postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} (.ci/run starts it): {e}"))
}

fn sql(sql: &str) {
    client()
        .batch_execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// (encrypted, plain) connections of `application` as the server sees them.
fn connections_of(application: &str) -> (i64, i64) {
    let row = client()
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&application],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

fn write_config(dir: &Path, store: &str, consumer_url: &str) -> PathBuf {
    std::fs::copy(common::rules(), dir.join("rules.wasm")).unwrap();
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    TestConfig::new()
        .set("gateway.store", store)
        .set("gateway.poll_ms", 20)
        .set("gateway.lease_ms", 5000)
        .policy("rules", "rules.wasm")
        .route(
            Route::new("orders", "rules")
                .consumer(&format!("{consumer_url}/"))
                .config("{ max_attempts = 3 }"),
        )
        .write_toml(dir)
}

#[test]
fn the_postgres_store_speaks_tls_as_sslmode_says_and_a_wrong_ca_stops_the_start() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-tls");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = Database::new("store_tls");
    let consumer = common::healthy_consumer();
    let base = format!("postgres://postgres@127.0.0.1:5432/{}", db.0);

    for (mode, encrypted) in [("require", true), ("disable", false)] {
        let application = format!("verdict-tls-{mode}-{}", std::process::id());
        let store = format!("{base}?sslmode={mode}&application_name={application}");
        let config = write_config(&dir, &store, &consumer.url);
        let gw = spawn(
            env!("CARGO_BIN_EXE_verdict"),
            &["run", "-c", config.to_str().unwrap()],
        );
        let before = common::accepted(&consumer);
        common::publish_batch(&gw.url, &dir, "orders", mode, 50);
        assert!(
            wait_until(Duration::from_secs(60), || common::accepted(&consumer)
                >= before + 50),
            "{mode}: 50 delivered"
        );
        let store_probe = common::probe_of(&config, "gateway.store");
        let detail = store_probe["detail"].as_str().unwrap_or_default();
        assert!(
            detail.starts_with("PostgreSQL ") && detail.contains(", TLS (") == encrypted,
            "{mode}: {store_probe:#}"
        );
        let (tls, plain) = connections_of(&application);
        if encrypted {
            assert!(
                tls >= 1 && plain == 0,
                "{mode}: {tls} encrypted, {plain} plain"
            );
        } else {
            assert!(
                tls == 0 && plain >= 1,
                "{mode}: {tls} encrypted, {plain} plain"
            );
        }
        drop(gw);
    }

    // verify-full against a CA that did not issue the server's certificate: the start
    // stops, naming the setting.
    let stranger = Pki::new("store-tls-stranger");
    let store = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        stranger.ca_file().display()
    );
    let stderr = common::refused_start(
        &write_config(&dir, &store, &consumer.url),
        "a certificate nobody trusts",
        &[],
    );
    assert!(
        stderr.contains("tls.certificate") && stderr.contains("gateway.store sslmode"),
        "{stderr}"
    );
    // A file that is not there is named before any connection.
    let store = format!("{base}?sslmode=verify-ca&sslrootcert=no-such-ca.pem");
    let stderr = common::refused_start(
        &write_config(&dir, &store, &consumer.url),
        "a missing sslrootcert",
        &[],
    );
    assert!(
        stderr.contains("gateway.store sslrootcert") && stderr.contains("no-such-ca.pem"),
        "{stderr}"
    );
}

/// A MariaDB server of the test's own (`mariadb-install-db` into a fresh directory), TLS with
/// a certificate for 127.0.0.1, database `verdict`, and user `tlsonly` / `tls-password` who
/// may log in only over TLS; killed and removed at the end.
struct TlsMariadb {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for TlsMariadb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TlsMariadb {
    fn start(pki: &Pki) -> TlsMariadb {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mariadb-tls");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        let installed = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", data.display()))
            .output()
            .expect("mariadb-install-db (Debian's mariadb-server) runs");
        assert!(installed.status.success(), "{}", text(&installed.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = pki.server("mariadb", &["127.0.0.1", "localhost"]);
        let socket = dir.join("mariadb.sock");
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.join("mariadb.pid").display()))
            .arg("--user=root")
            .arg("--innodb-buffer-pool-size=32M")
            .arg(format!("--ssl-cert={}", server.cert.display()))
            .arg(format!("--ssl-key={}", server.key.display()))
            .arg(format!("--ssl-ca={}", pki.ca_file().display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("mariadb.log")).unwrap())
            .spawn()
            .expect("mariadbd starts");
        let mut db = TlsMariadb { child, port, dir };
        let up = wait_until(Duration::from_secs(60), || {
            Command::new("mariadb")
                .arg("--no-defaults")
                .arg(format!("--socket={}", socket.display()))
                .args(["-uroot", "-e", "SELECT 1"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let log = std::fs::read_to_string(db.dir.join("mariadb.log")).unwrap_or_default();
        assert!(up, "mariadbd on {port}:\n{log}");
        let setup = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", socket.display()))
            .args([
                "-uroot",
                "-e",
                "CREATE DATABASE verdict; \
                 CREATE USER 'tlsonly'@'%' IDENTIFIED BY 'tls-password' REQUIRE SSL; \
                 GRANT ALL ON verdict.* TO 'tlsonly'@'%';",
            ])
            .output()
            .unwrap();
        assert!(setup.status.success(), "{}", text(&setup.stderr));
        db.port = port;
        db
    }
}

#[test]
fn the_mariadb_store_verifies_its_server_and_a_tls_only_user_works_only_over_tls() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-tls-mariadb");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki = Pki::new("store-tls-mariadb");
    let server = TlsMariadb::start(&pki);
    let consumer = common::healthy_consumer();
    let base = format!(
        "mysql://tlsonly:tls-password@127.0.0.1:{}/verdict",
        server.port
    );

    // Verified fully: 50 messages delivered through a user the server lets in only over TLS.
    let store = format!(
        "{base}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        pki.ca_file().display()
    );
    let config = write_config(&dir, &store, &consumer.url);
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    common::publish_batch(&gw.url, &dir, "orders", "m", 50);
    assert!(
        wait_until(Duration::from_secs(60), || common::accepted(&consumer)
            >= 50),
        "50 delivered over TLS"
    );
    drop(gw);
    let seen = common::probe_of(&config, "gateway.store");
    let detail = seen["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("MariaDB") && detail.contains(", TLS ("),
        "{seen:#}"
    );
    assert!(!seen.to_string().contains("tls-password"), "{seen:#}");

    // A CA that did not issue the server's certificate: named, not retried.
    let stranger = Pki::new("store-tls-mariadb-stranger");
    let store = format!(
        "{base}?ssl-mode=VERIFY_CA&ssl-ca={}",
        stranger.ca_file().display()
    );
    let stderr = common::refused_start(
        &write_config(&dir, &store, &consumer.url),
        "a stranger CA",
        &[],
    );
    assert!(
        stderr.contains("tls.certificate") && stderr.contains("gateway.store ssl-mode"),
        "{stderr}"
    );
    // Plain TCP for a user who may log in only over TLS: the server refuses it.
    let stderr = common::refused_start(
        &write_config(&dir, &format!("{base}?ssl-mode=DISABLED"), &consumer.url),
        "plain TCP for a TLS-only user",
        &[],
    );
    assert!(stderr.contains("Access denied"), "{stderr}");
    assert!(
        !stderr.contains("tls-password"),
        "the password is never shown: {stderr}"
    );
}

/// A PostgreSQL server of the test's own (`initdb` into a fresh directory, run as the
/// `postgres` user): TLS with a certificate from a throwaway CA, and `pg_hba.conf` that
/// takes only TLS from the network - user `tlsonly` by password, user `certuser` by its
/// client certificate (`cert` authentication). Stopped and removed at the end.
struct TlsPostgres {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let _ = self.as_postgres(&["pg_ctl", "-D", "data", "stop", "-m", "immediate"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TlsPostgres {
    fn as_postgres(&self, args: &[&str]) -> std::process::Output {
        let program = self.bin.join(args[0]);
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(program)
            .args(&args[1..])
            .current_dir(&self.dir)
            .output()
            .expect("runuser (util-linux) runs")
    }

    fn start(pki: &Pki) -> TlsPostgres {
        // Outside /root: the server runs as `postgres`.
        let dir = std::env::temp_dir().join(format!("verdict-pg-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("Debian's PostgreSQL server binaries")
            .flatten()
            .map(|e| e.path().join("bin"))
            .find(|b| b.join("initdb").is_file())
            .expect("an initdb under /usr/lib/postgresql/*/bin");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = TlsPostgres { dir, port, bin };
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&server.dir)
            .status()
            .unwrap();
        assert!(chown.success());
        let init = server.as_postgres(&["initdb", "-D", "data", "-A", "trust", "-U", "postgres"]);
        assert!(init.status.success(), "{}", text(&init.stderr));
        let data = server.dir.join("data");
        // The server's key must be its own and private.
        let leaf = pki.server("postgres", &["127.0.0.1", "localhost"]);
        std::fs::copy(&leaf.cert, data.join("server.crt")).unwrap();
        std::fs::copy(&leaf.key, data.join("server.key")).unwrap();
        std::fs::copy(pki.ca_file(), data.join("root.crt")).unwrap();
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{socket}'\n\
             ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
             ssl_ca_file = 'root.crt'\nshared_buffers = 16MB\n",
            socket = server.dir.display()
        );
        let mut postgresql = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        postgresql.push_str(&conf);
        std::fs::write(data.join("postgresql.conf"), postgresql).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all tlsonly 127.0.0.1/32 scram-sha-256\n\
             hostssl all certuser 127.0.0.1/32 cert\n\
             hostnossl all all 127.0.0.1/32 reject\n",
        )
        .unwrap();
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&data)
            .status()
            .unwrap();
        assert!(chown.success());
        std::fs::set_permissions(
            data.join("server.key"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let started = server.as_postgres(&["pg_ctl", "-D", "data", "-l", "log", "-w", "start"]);
        let log = std::fs::read_to_string(server.dir.join("log")).unwrap_or_default();
        assert!(started.status.success(), "{}\n{log}", text(&started.stderr));
        let socket = server.dir.display().to_string();
        let port_text = port.to_string();
        let setup = server.as_postgres(&[
            "psql",
            "-h",
            &socket,
            "-p",
            &port_text,
            "-U",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            "CREATE USER tlsonly PASSWORD 'tls-password'",
            "-c",
            "CREATE USER certuser",
            "-c",
            "CREATE DATABASE verdict OWNER tlsonly",
            "-c",
            "CREATE DATABASE verdict_cert OWNER certuser",
        ]);
        assert!(setup.status.success(), "{}", text(&setup.stderr));
        server
    }
}

/// The gateway logs in over TLS as a password user and as a certificate user, verifying
/// the server's certificate against the test's CA (`verify-full`); plaintext is refused by
/// the server, and the certificate user without its certificate cannot log in - each such
/// start stops at once, naming the store, without the password.
#[test]
fn a_postgres_server_taking_only_tls_logs_the_gateway_in_by_password_or_client_certificate() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("store-tls-pg-own");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki = Pki::new("store-tls-pg-own");
    let server = TlsPostgres::start(&pki);
    let consumer = common::healthy_consumer();
    let ca = pki.ca_file().display().to_string();
    let me = pki.client("certuser");
    let port = server.port;
    let by_password = format!(
        "postgres://tlsonly:tls-password@127.0.0.1:{port}/verdict?sslmode=verify-full&sslrootcert={ca}"
    );
    let by_certificate = format!(
        "postgres://certuser@127.0.0.1:{port}/verdict_cert?sslmode=verify-full&sslrootcert={ca}\
         &sslcert={}&sslkey={}",
        me.cert.display(),
        me.key.display()
    );
    for (who, store) in [("password", &by_password), ("certificate", &by_certificate)] {
        let config = write_config(&dir, store, &consumer.url);
        let gw = spawn(
            env!("CARGO_BIN_EXE_verdict"),
            &["run", "-c", config.to_str().unwrap()],
        );
        let before = common::accepted(&consumer);
        common::publish_batch(&gw.url, &dir, "orders", who, 30);
        assert!(
            wait_until(Duration::from_secs(60), || common::accepted(&consumer)
                >= before + 30),
            "{who}: 30 delivered"
        );
        let probe = common::probe_of(&config, "gateway.store");
        let detail = probe["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(", TLS ("), "{who}: {probe:#}");
        drop(gw);
    }

    // Plaintext to a server that takes only TLS, and the certificate user without its
    // certificate: the server refuses each login (saying why), and the start stops naming
    // the store, never its password.
    let plain = by_password.replace("sslmode=verify-full", "sslmode=disable");
    let no_certificate = by_certificate
        .split("&sslcert=")
        .next()
        .unwrap()
        .to_string();
    for (what, store, why) in [
        ("plaintext to a TLS-only server", plain, "no encryption"),
        (
            "a certificate user without its certificate",
            no_certificate,
            "certificate",
        ),
    ] {
        let stderr = common::refused_start(&write_config(&dir, &store, &consumer.url), what, &[]);
        assert!(
            stderr.contains(&format!("store 127.0.0.1:{port}/"))
                && stderr.contains(why)
                && !stderr.contains("tls-password"),
            "{what}: {stderr}"
        );
    }
}
