//! A real browser: Debian's headless Chromium driven through its WebDriver (`chromedriver`,
//! `chromium-driver`; `scripts/prereqs.sh test` installs both) with plain HTTP calls of the
//! W3C WebDriver protocol. `Browser::start()` runs a private chromedriver on a free port and
//! opens one session (a phone-sized window, a fresh profile); both end when it is dropped.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::ports::free_port;
use crate::wait;

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    client: reqwest::Client,
}

impl Browser {
    /// Start chromedriver and a headless Chromium session, `width`×`height` CSS pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver: scripts/prereqs.sh test)");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let ready = wait::until_some(Duration::from_secs(20), || {
            let status = client.get(format!("{base}/status")).send();
            async move {
                let body: Value = status.await.ok()?.json().await.ok()?;
                body["value"]["ready"].as_bool().filter(|r| *r)
            }
        })
        .await;
        assert!(
            ready.is_some(),
            "chromedriver did not become ready within 20 s"
        );
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", format!("--window-size={width},{height}")]
            }
        }}});
        let mut browser = Browser {
            driver,
            base,
            session: String::new(),
            client,
        };
        let created = browser.call("POST", "/session", Some(capabilities)).await;
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {created}"))
            .to_owned();
        browser
    }

    /// One WebDriver command; its `value`. Panics on a WebDriver error.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "POST" => self
                .client
                .post(&url)
                .json(&body.unwrap_or_else(|| json!({}))),
            "DELETE" => self.client.delete(&url),
            _ => self.client.get(&url),
        };
        let answer: Value = tokio::time::timeout(Duration::from_secs(60), async {
            request
                .send()
                .await
                .expect("chromedriver answers")
                .json()
                .await
                .expect("chromedriver answers JSON")
        })
        .await
        .expect("a WebDriver command within 60 s");
        if answer["value"].get("error").is_some() {
            panic!("WebDriver {method} {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Open `url` and wait for it to load.
    pub async fn goto(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({"url": url})),
        )
        .await;
    }

    /// Run `script` (a function body, `return …`) in the page; its result. WebDriver scripts
    /// are the driver's, not the page's: the page's CSP does not apply to them.
    pub async fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let value = self
            .call("GET", &self.session_path("/screenshot"), None)
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().expect("base64 PNG"))
            .expect("a base64 PNG")
    }

    /// Close the session (Chromium exits), then stop chromedriver.
    pub async fn close(mut self) {
        let path = self.session_path("");
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            self.client.delete(format!("{}{path}", self.base)).send(),
        )
        .await;
        self.session.clear();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver ends the Chromium it started when it is killed with its session open
        // only on a clean quit; `close` quits first, this makes sure the driver goes.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
