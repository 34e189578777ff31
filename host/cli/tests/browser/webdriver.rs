//! Just enough of the W3C WebDriver protocol to drive a headless Chromium through
//! `chromedriver`: open pages, find elements, type, click, read, take screenshots.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// The key under which WebDriver returns an element's reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A program, found on `PATH` or named by the environment variable `var`.
fn program(var: &str, names: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            if dir.join(name).is_file() {
                return dir.join(name);
            }
        }
    }
    panic!(
        "the console's browser test needs {} (Debian: `apt-get install chromium \
         chromium-driver`; or set {var})",
        names.join(" or ")
    );
}

/// A headless Chromium session, ended (and its driver stopped) on drop.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    _profile: tempdir::Dir,
}

impl Browser {
    /// Start `chromedriver` on a free port and a headless Chromium session through it.
    pub fn start() -> Browser {
        let chromium = program("VERDICT_CHROMIUM", &["chromium", "chromium-browser"]);
        let chromedriver = program("VERDICT_CHROMEDRIVER", &["chromedriver"]);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromedriver.display()));
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while ureq::get(&format!("{base}/status")).call().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempdir::Dir::new("verdict-chromium");
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            _profile: profile,
        };
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", browser._profile.path.display()),
        ];
        let created = browser.call(
            "POST",
            "/session",
            Some(json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": chromium, "args": args},
            }}})),
        );
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        browser
    }

    /// One protocol call; the answer's `value`. A WebDriver error panics with its message.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let agent_config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build();
        let agent = ureq::Agent::new_with_config(agent_config);
        let response = match (method, body) {
            ("GET", _) => agent.get(&url).call(),
            ("DELETE", _) => agent.delete(&url).call(),
            (_, body) => agent
                .post(&url)
                .send_json(body.unwrap_or_else(|| json!({}))),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let answer: Value = response.body_mut().read_json().unwrap_or(Value::Null);
        let value = answer["value"].clone();
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            panic!("{method} {path}: {error}: {}", value["message"]);
        }
        value
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Open `url` and wait for it to load.
    pub fn open(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({"url": url})),
        );
    }

    /// The URL shown now.
    pub fn url(&self) -> String {
        let url = self.call("GET", &self.session_path("/url"), None);
        url.as_str().unwrap_or_default().to_string()
    }

    /// The page's HTML now.
    pub fn source(&self) -> String {
        let source = self.call("GET", &self.session_path("/source"), None);
        source.as_str().unwrap_or_default().to_string()
    }

    /// The element `css` selects (the first).
    pub fn find(&self, css: &str) -> Element<'_> {
        let found = self.call(
            "POST",
            &self.session_path("/element"),
            Some(json!({"using": "css selector", "value": css})),
        );
        Element {
            browser: self,
            id: found[ELEMENT].as_str().unwrap_or_default().to_string(),
        }
    }

    /// How many elements `css` selects.
    pub fn count(&self, css: &str) -> usize {
        let found = self.call(
            "POST",
            &self.session_path("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        found.as_array().map_or(0, Vec::len)
    }

    /// Wait until `check` holds for the browser's URL: a click that submits a form or
    /// follows a link returns before the next page is there.
    pub fn wait_for_url(&self, limit: Duration, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let url = self.url();
            if check(&url) {
                return url;
            }
            assert!(Instant::now() < deadline, "the browser stayed at {url}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until `check` holds for the page's HTML (the page may reload itself meanwhile);
    /// the HTML it held for.
    pub fn wait_for(&self, limit: Duration, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let source = self.source();
            if check(&source) {
                return source;
            }
            assert!(
                Instant::now() < deadline,
                "the page at {} never got there:\n{source}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A PNG of the page, written to `path`.
    pub fn screenshot(&self, path: &Path) {
        let png = self.call("GET", &self.session_path("/screenshot"), None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap_or_default())
            .expect("a screenshot is base64");
        assert!(bytes.starts_with(b"\x89PNG"), "a screenshot is a PNG");
        std::fs::write(path, bytes).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let url = format!("{}{}", self.base, self.session_path(""));
            let _ = ureq::delete(&url).call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// An element of the page.
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Element<'_> {
    fn path(&self, rest: &str) -> String {
        self.browser
            .session_path(&format!("/element/{}{rest}", self.id))
    }

    /// Click it (a link or a form's button: the next page has loaded when this returns).
    pub fn click(&self) {
        self.browser
            .call("POST", &self.path("/click"), Some(json!({})));
    }

    /// Type `text` into it.
    pub fn type_text(&self, text: &str) {
        self.browser
            .call("POST", &self.path("/value"), Some(json!({"text": text})));
    }

    /// Its rendered width and height in CSS pixels.
    pub fn size(&self) -> (f64, f64) {
        let rect = self.browser.call("GET", &self.path("/rect"), None);
        (
            rect["width"].as_f64().unwrap_or(0.0),
            rect["height"].as_f64().unwrap_or(0.0),
        )
    }

    /// The value of its attribute `name`.
    pub fn attribute(&self, name: &str) -> String {
        let value = self
            .browser
            .call("GET", &self.path(&format!("/attribute/{name}")), None);
        value.as_str().unwrap_or_default().to_string()
    }
}

/// A scratch directory removed on drop (Chromium's profile).
mod tempdir {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub struct Dir {
        pub path: PathBuf,
    }

    impl Dir {
        pub fn new(name: &str) -> Dir {
            // One per browser: two tests' browsers must not share a profile.
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("{name}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Dir { path }
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
