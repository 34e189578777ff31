//! The admin surface beside a browser, through the real binary (`verdict run`): requests are
//! sent raw, with the headers a web page that rebinds its own name to 127.0.0.1 would send.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Proc, spawn, wait_until};
use verdict_tests::gateway::{Route, TestConfig};

/// A config of one route, `orders`, to the consumer at `consumer_url` (`retry` is the
/// route's policy config).
fn orders_to(consumer_url: &str, retry: &str) -> TestConfig {
    TestConfig::new().policy("rules", "rules.wasm").route(
        Route::new("orders", "rules")
            .set("consumer.url", consumer_url)
            .set("consumer.timeout_ms", 500)
            .config(&format!("{{ {retry} }}")),
    )
}

/// [`orders_to`] a consumer that is down, one attempt.
fn orders_to_nowhere() -> TestConfig {
    orders_to("http://127.0.0.1:9/hook", "max_attempts = 1")
}

/// A scratch directory with the rules component, the token file and `config`; returns the
/// config's path.
fn write_config(name: &str, config: &TestConfig) -> PathBuf {
    let dir = common::scratch_with_rules(name);
    std::fs::write(dir.join("token"), "operator-token\n").unwrap();
    config.write_toml(&dir)
}

/// A gateway on the embedded store with one route to a consumer that is down, and a dead
/// letter whose payload holds a card number; `config` is [`orders_to_nowhere`] with what a
/// test adds.
fn gateway_with_a_letter(name: &str, config: &TestConfig) -> (Proc, PathBuf) {
    let config = write_config(name, config);
    let dir = config.parent().unwrap().to_path_buf();
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let published = ureq::post(&format!("{}/v1/topics/orders/messages", gw.url))
        .header("Authorization", "Bearer operator-token")
        .send_json(serde_json::json!({"id": "card-1", "payload": {"card": "4111111111111111"}}));
    assert!(published.is_ok(), "{published:?}");
    let with_token = format!(
        "Host: {}\r\nAuthorization: Bearer operator-token\r\n",
        host(&gw)
    );
    assert!(
        wait_until(Duration::from_secs(20), || raw_with(
            &gw,
            "GET",
            "/v1/dlq",
            &with_token
        )
        .1
        .contains("4111111111111111")),
        "the letter reached the DLQ"
    );
    (gw, dir)
}

/// `host:port` of the gateway's listener.
fn host(gw: &Proc) -> String {
    gw.url.trim_start_matches("http://").to_string()
}

/// Send one request with exactly `host_header` as its `Host`; (status, body).
fn raw(gw: &Proc, method: &str, path: &str, host_header: &str) -> (u16, String) {
    raw_with(gw, method, path, &format!("Host: {host_header}\r\n"))
}

fn raw_with(gw: &Proc, method: &str, path: &str, headers: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(host(gw)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\n{headers}Connection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// DNS rebinding: a page on `evil.example` points its name at 127.0.0.1 and asks the
/// listener for the dead letters. Every request naming a foreign host gets 421 and nothing
/// of interest - whatever the path, open or not - and is counted; the listener's own names
/// still work.
#[test]
fn a_request_naming_a_foreign_host_gets_421_and_nothing_else() {
    let (gw, _dir) = gateway_with_a_letter("security-host", &orders_to_nowhere());
    let port = host(&gw).rsplit_once(':').unwrap().1.to_string();
    for path in [
        "/v1/dlq",
        "/",
        "/v1/status",
        "/metrics",
        "/healthz",
        "/nowhere",
    ] {
        for foreign in [
            format!("evil.example:{port}"),
            "evil.example".to_string(),
            format!("127.0.0.1.evil.example:{port}"),
            "localhost".to_string(),
        ] {
            let (status, body) = raw(&gw, "GET", path, &foreign);
            assert_eq!(status, 421, "GET {path} with Host {foreign}: {body}");
            assert!(!body.contains("4111"), "{body}");
            assert!(!body.contains("orders"), "{body}");
        }
    }
    // No Host at all (HTTP/1.0): refused too.
    let (status, _) = raw_with(&gw, "GET", "/v1/dlq", "");
    assert_eq!(status, 421);
    // A change with the right token but a foreign name: refused before authorisation.
    let (status, _) = raw_with(
        &gw,
        "POST",
        "/v1/reload",
        &format!("Host: evil.example:{port}\r\nAuthorization: Bearer operator-token\r\n"),
    );
    assert_eq!(status, 421);
    assert!(common::metric_at(&gw.url, "verdict_admin_misdirected_requests_total") >= 26);
    for own in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
    ] {
        let (status, body) = raw(&gw, "GET", "/healthz", &own);
        assert_eq!((status, body.as_str()), (200, "ok\n"), "Host {own}");
    }
}

/// A proxy in front names the gateway by its own name: `[admin] allowed_hosts` lets exactly
/// those names in.
#[test]
fn allowed_hosts_let_a_proxys_name_in() {
    let (gw, _dir) = gateway_with_a_letter(
        "security-proxy",
        &orders_to_nowhere().set(
            "admin.allowed_hosts",
            vec!["verdict.internal", "proxy.example:8443"],
        ),
    );
    assert_eq!(raw(&gw, "GET", "/healthz", "verdict.internal").0, 200);
    assert_eq!(raw(&gw, "GET", "/healthz", "verdict.internal:443").0, 200);
    assert_eq!(raw(&gw, "GET", "/healthz", "proxy.example:8443").0, 200);
    assert_eq!(raw(&gw, "GET", "/healthz", "proxy.example:8080").0, 421);
    assert_eq!(raw(&gw, "GET", "/healthz", "evil.verdict.internal").0, 421);
}

/// The console's forms compare `Origin` with the listener's names, not with `Host`: a
/// login posted by a rebinding page (both headers its own name) never reaches the form.
#[test]
fn a_console_form_from_a_rebound_page_is_refused() {
    let (gw, _dir) = gateway_with_a_letter("security-origin", &orders_to_nowhere());
    let port = host(&gw).rsplit_once(':').unwrap().1.to_string();
    let (status, _) = raw_with(
        &gw,
        "POST",
        "/login",
        &format!("Host: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\n"),
    );
    assert_eq!(status, 421);
    let (status, body) = raw_with(
        &gw,
        "POST",
        "/login",
        &format!("Host: 127.0.0.1:{port}\r\nOrigin: http://evil.example:{port}\r\n"),
    );
    assert_eq!(status, 403, "{body}");
}

/// A config naming a URL (or a path) as an allowed host is refused, naming the entry.
#[test]
fn an_allowed_host_that_is_not_a_host_is_refused_by_check() {
    let dir = common::scratch_with_rules("security-check");
    let config = dir.join("verdict.toml");
    std::fs::write(
        &config,
        "[admin]\nallowed_hosts = [\"verdict.internal\", \"https://proxy.example/\"]\n\
         [policies.rules]\npath = \"rules.wasm\"\n[[routes]]\ntopic = \"orders\"\npolicy = \"rules\"\n",
    )
    .unwrap();
    let out = common::verdict(&["check", "-c", config.to_str().unwrap()], None);
    assert!(!out.status.success());
    let stderr = common::text(&out.stderr);
    assert!(stderr.contains("admin.allowed_hosts[1]"), "{stderr}");
    assert!(stderr.contains("is a URL"), "{stderr}");
}

/// A consumer URL carrying credentials (userinfo and an `api_key` query value) to a
/// consumer that is down: the HTTP client's error quotes the URL, and that text reaches the
/// attempt history, the envelope, the policy (`host.error-message` is the same text), the
/// console and the log. None of them shows either secret; the path and host stay, so the
/// error still says where.
#[test]
fn a_consumer_urls_credentials_reach_no_answer_letter_or_log_line() {
    const PASSWORD: &str = "PA55WORD-CANARY";
    const KEY: &str = "SUPERSECRET123";
    let config = write_config(
        "security-canary",
        &orders_to(
            &format!("http://ops:{PASSWORD}@127.0.0.1:9/hook?api_key={KEY}"),
            r#"max_attempts = 2, rules = [
    { match = ["json.*", "schema.*", "format.*", "auth.*"], dead_letter = "poison" },
    { match = ["transport.*"], retry = { strategy = "fixed", delay_ms = 50 } },
]"#,
        ),
    );
    let dir = config.parent().unwrap().to_path_buf();
    let log_path = dir.join("gateway.log");
    let gw = common::run_logged(&config, &log_path);
    let cookie = common::log_in(&gw.url, "operator-token");
    // The token for the API, the login for the console's pages.
    let admin = |path: &str| {
        raw_with(
            &gw,
            "GET",
            path,
            &format!(
                "Host: {}\r\nAuthorization: Bearer operator-token\r\nCookie: {cookie}\r\n",
                host(&gw)
            ),
        )
    };
    ureq::post(&format!("{}/v1/topics/orders/messages", gw.url))
        .header("Authorization", "Bearer operator-token")
        .send_json(serde_json::json!({"id": "m-1", "payload": {"order": 1}}))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || admin("/v1/dlq")
            .1
            .contains("m-1")),
        "the message reached the DLQ"
    );
    let (_, letters) = admin("/v1/dlq");
    let letters: serde_json::Value = serde_json::from_str(&letters).unwrap();
    let seq = letters[0]["seq"].as_u64().unwrap();
    // The error still says where it went, without what let it in.
    assert!(
        letters.to_string().contains("127.0.0.1:9/hook"),
        "{letters}"
    );
    let mut answers = vec![letters.to_string()];
    for path in [
        "/v1/dlq/groups".to_string(),
        "/v1/dlq/stats".into(),
        "/v1/status".into(),
        "/v1/routes".into(),
        "/readyz".into(),
        "/metrics".into(),
        "/".into(),
        format!("/letters/{seq}"),
        "/policies".into(),
    ] {
        let (status, body) = admin(&path);
        assert_eq!(status, 200, "{path}: {body}");
        answers.push(body);
    }
    drop(gw);
    answers.push(std::fs::read_to_string(&log_path).unwrap());
    for (i, text) in answers.iter().enumerate() {
        for secret in [PASSWORD, KEY] {
            assert!(!text.contains(secret), "answer {i} shows {secret}: {text}");
        }
    }
}

/// Guessing is slow and seen: 200 wrong bearer tokens in a row and 40 wrong console
/// logins at once. Past ten wrong credentials within a second every credential gets 429
/// (the right one too, for the rest of that second), each wrong one checked is counted, and
/// the burst is a warning in the log naming the peer. A second later the right token works.
#[test]
fn wrong_credentials_past_ten_a_second_get_429_and_are_counted() {
    let (gw, _dir) = gateway_with_a_letter("security-guessing", &orders_to_nowhere());
    let own = host(&gw);
    let statuses: Vec<u16> = (0..200)
        .map(|i| {
            raw_with(
                &gw,
                "POST",
                "/v1/reload",
                &format!("Host: {own}\r\nAuthorization: Bearer guess-{i}\r\n"),
            )
            .0
        })
        .collect();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    let refused = statuses.iter().filter(|s| **s == 401).count();
    assert_eq!(limited + refused, 200, "{statuses:?}");
    assert!(limited >= 150, "{limited} of 200 got 429: {statuses:?}");
    let logins: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..40)
            .map(|i| {
                let gw = &gw;
                let own = own.clone();
                scope.spawn(move || {
                    let body = format!("token=guess-{i}&name=mallory");
                    let mut stream = TcpStream::connect(&own).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    write!(
                        stream,
                        "POST /login HTTP/1.1\r\nHost: {own}\r\nOrigin: {}\r\n\
                         Content-Type: application/x-www-form-urlencoded\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        gw.url,
                        body.len()
                    )
                    .unwrap();
                    let mut answer = String::new();
                    let _ = stream.read_to_string(&mut answer);
                    answer
                        .split(' ')
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(logins.iter().all(|s| *s == 401 || *s == 429), "{logins:?}");
    let counted = common::metric_at(&gw.url, "verdict_admin_auth_failures_total");
    assert!(
        counted >= refused as u64 && counted < 120,
        "{counted} wrong credentials counted; {refused} bearer tokens were checked"
    );
    std::thread::sleep(Duration::from_millis(1_100));
    let (status, body) = raw_with(
        &gw,
        "GET",
        "/v1/dlq?source=nats",
        &format!("Host: {own}\r\nAuthorization: Bearer operator-token\r\n"),
    );
    assert_ne!(status, 429, "{body}");
    assert_ne!(status, 401, "{body}");
}

/// `verdict admin token new NAME --role ROLE`: the printed token and tokens-file line.
fn new_identity(name: &str, role: &str) -> (String, String) {
    let out = common::verdict(&["admin", "token", "new", name, "--role", role], None);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let stdout = common::text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    let [token, line] = lines[..] else {
        panic!("{stdout}")
    };
    assert!(
        !line.contains(token),
        "the file line holds a digest, never the token"
    );
    (token.to_string(), line.to_string())
}

/// Message content needs a credential, and each action the role it names: tokens made by
/// `verdict admin token new`, a reader, an operator and the admin token, against the real
/// binary. Summaries stay open until `open_reads = "none"` closes them on a reload.
#[test]
fn message_content_needs_a_credential_and_every_action_its_role() {
    let settings = orders_to_nowhere().set("admin.tokens_file", "tokens");
    let config = write_config("security-roles", &settings);
    let dir = config.parent().unwrap().to_path_buf();
    let (reader, reader_line) = new_identity("rita", "read");
    let (operator, operator_line) = new_identity("ada", "operate");
    std::fs::write(
        dir.join("tokens"),
        format!("{reader_line}\n{operator_line}\n"),
    )
    .unwrap();
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    let own = host(&gw);
    let as_who = |method: &str, path: &str, token: Option<&str>| {
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        raw_with(&gw, method, path, &format!("Host: {own}\r\n{auth}"))
    };
    ureq::post(&format!("{}/v1/topics/orders/messages", gw.url))
        .header("Authorization", &format!("Bearer {operator}"))
        .send_json(serde_json::json!({"id": "card-1", "payload": {"card": "4111111111111111"}}))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || as_who(
            "GET",
            "/v1/dlq",
            Some(&reader)
        )
        .1
        .contains("4111111111111111")),
        "the letter reached the DLQ, and a reader reads it"
    );

    // Without a credential: no message content anywhere, summaries and health open.
    for path in ["/v1/dlq", "/v1/dlq/groups", "/v1/jobs", "/letters/1"] {
        let (status, body) = as_who("GET", path, None);
        assert_eq!(status, 401, "GET {path}: {body}");
        assert!(!body.contains("4111"), "{path}: {body}");
    }
    for path in [
        "/",
        "/v1/routes",
        "/v1/status",
        "/v1/dlq/stats",
        "/policies",
        "/healthz",
        "/metrics",
    ] {
        let (status, body) = as_who("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(!body.contains("4111"), "{path}: {body}");
    }

    // A reader reads, and is refused every action with the role it needs named.
    let (status, groups) = as_who("GET", "/v1/dlq/groups", Some(&reader));
    assert_eq!(status, 200, "{groups}");
    let groups: serde_json::Value = serde_json::from_str(&groups).unwrap();
    let group = groups[0]["id"].as_str().unwrap().to_string();
    let replay = format!("/v1/dlq/groups/{group}/replay");
    let (status, body) = as_who("POST", &replay, Some(&reader));
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("needs the role `operate`") && body.contains("`rita` has `read`"),
        "{body}"
    );

    // An operator acts, and the job's note names them; policies and config stay the admin's.
    let (status, job) = as_who("POST", &replay, Some(&operator));
    assert_eq!(status, 202, "{job}");
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    assert_eq!(
        job["note"],
        "group replayed through the admin API (by ada, api)"
    );
    for (method, path) in [
        ("POST", "/v1/reload"),
        ("PUT", "/v1/policies/rules/component"),
    ] {
        let (status, body) = as_who(method, path, Some(&operator));
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(body.contains("needs the role `admin`"), "{body}");
    }
    assert_eq!(as_who("GET", "/v1/dlq", Some("vdt_guess")).0, 401);

    // A revoked identity is refused within a second of the edit, without a restart.
    std::fs::write(dir.join("tokens"), format!("{operator_line}\n")).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || as_who(
            "GET",
            "/v1/dlq",
            Some(&reader)
        )
        .0 == 401),
        "rita's token still reads after her line was removed"
    );

    // `open_reads = "none"`: after a reload, only health, readiness and metrics are open.
    settings.set("admin.open_reads", "none").write_toml(&dir);
    let (status, body) = as_who("POST", "/v1/reload", Some("operator-token"));
    assert_eq!(status, 200, "{body}");
    for path in [
        "/v1/routes",
        "/v1/status",
        "/v1/dlq/stats",
        "/",
        "/policies",
    ] {
        assert_eq!(as_who("GET", path, None).0, 401, "GET {path}");
        assert_eq!(
            as_who("GET", path, Some(&operator)).0,
            if path.starts_with("/v1") { 200 } else { 401 },
            "GET {path} with a token"
        );
    }
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(as_who("GET", path, None).0, 200, "GET {path}");
    }
}

/// `curl` against the TLS listener, trusting `ca`: (exit success, headers and body).
fn curl(ca: &Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(args)
        .output()
        .expect("curl runs");
    (
        out.status.success(),
        common::text(&out.stdout) + &common::text(&out.stderr),
    )
}

/// `[admin] tls_cert` / `tls_key`: the listener speaks HTTPS only, the console's cookie is
/// `Secure`, answers carry HSTS; plain HTTP to it gets no answer. A certificate file that
/// holds no certificate stops the start naming the field.
#[test]
fn the_admin_listener_serves_https_with_a_secure_cookie_and_hsts() {
    let config = write_config(
        "security-tls",
        &orders_to_nowhere()
            .set("admin.tls_cert", "cert.pem")
            .set("admin.tls_key", "key.pem"),
    );
    let dir = config.parent().unwrap().to_path_buf();
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
        ])
        .current_dir(&dir)
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", common::text(&made.stderr));
    let gw = spawn(
        env!("CARGO_BIN_EXE_verdict"),
        &["run", "-c", config.to_str().unwrap()],
    );
    assert!(gw.url.starts_with("https://"), "{}", gw.url);
    let ca = dir.join("cert.pem");
    let (ok, answer) = curl(&ca, &[&format!("{}/healthz", gw.url)]);
    assert!(ok, "{answer}");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("strict-transport-security: max-age=31536000"),
        "{answer}"
    );
    let (ok, answer) = curl(
        &ca,
        &["-d", "token=operator-token", &format!("{}/login", gw.url)],
    );
    assert!(ok, "{answer}");
    let cookie = answer
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(
        cookie.contains("HttpOnly") && cookie.trim_end().ends_with("; Secure"),
        "{cookie}"
    );
    // Plain HTTP on the same port: no HTTP answer at all.
    let plain = gw.url.replace("https://", "http://");
    let plain = ureq::get(&format!("{plain}/v1/routes")).call();
    assert!(plain.is_err(), "{plain:?}");
    drop(gw);

    // A certificate file without a certificate: the start fails, naming the field.
    std::fs::write(dir.join("cert.pem"), "not a certificate\n").unwrap();
    let out = common::verdict(&["run", "-c", config.to_str().unwrap()], None);
    assert!(!out.status.success());
    let stderr = common::text(&out.stderr);
    assert!(
        stderr.contains("admin.tls_cert") && stderr.contains("no PEM certificate"),
        "{stderr}"
    );
}

/// Beyond loopback without TLS, `verdict check` refuses the config, naming the setting and
/// what would make it safe.
#[test]
fn a_remote_admin_listener_without_tls_is_refused() {
    let remote = orders_to_nowhere()
        .set("admin.listen", "0.0.0.0:0")
        .set("admin.allow_remote", true);
    let config = write_config("security-remote", &remote);
    let out = common::verdict(&["check", "-c", config.to_str().unwrap()], None);
    assert!(!out.status.success());
    let stderr = common::text(&out.stderr);
    assert!(
        stderr.contains("admin.allow_remote") && stderr.contains("tls_cert"),
        "{stderr}"
    );
    remote
        .set("admin.allow_remote_plaintext", true)
        .write_toml(config.parent().unwrap());
    let out = common::verdict(&["check", "-c", config.to_str().unwrap()], None);
    let stderr = common::text(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("admin.allowed_hosts"),
        "{stderr}"
    );
}
