//! The approval page's sign-in and decisions without a browser (issue 29): `oidc-provider`
//! (tests/deps/node/oidc/provider.mjs) with the page's client and its tiny login form, and
//! [`approve_on_page`], which walks the link → sign in → Approve (or Decline) with reqwest and
//! a cookie jar of its own, as a browser would. For tests of any interface (MCP included)
//! that need a page approval.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};

use crate::announced;
use crate::identity::keys_dir;
use crate::ports::free_port;
use crate::thirdparty::node_project;

/// The page's client at the provider, as provider.mjs registers it.
pub const PAGE_CLIENT_ID: &str = "poppy-page";
/// Its secret.
pub const PAGE_CLIENT_SECRET: &str = "page-secret";

/// The environment variable the tests' `[approval_page]` tables read the client secret from.
pub const PAGE_SECRET_ENV: &str = "POPPY_E2E_PAGE_CLIENT_SECRET";

/// A test gateway's `[approval_page]` table: the page listening on `127.0.0.1:port`, signing
/// in at `issuer` as client [`PAGE_CLIENT_ID`] with the secret from [`PAGE_SECRET_ENV`];
/// [`PageTable::agents`] adds `[approval_page.agents]`.
#[derive(Debug, Clone)]
pub struct PageTable {
    port: u16,
    issuer: String,
    company_name: String,
    client_id: String,
    /// `client_secret_env = …` or `client_secret_file = …`.
    secret: String,
    /// `public_url`, when not the page's own address (a `check` that starts nothing).
    public_url: Option<String>,
    agents: Option<String>,
}

impl PageTable {
    pub fn new(port: u16, issuer: &str) -> PageTable {
        PageTable {
            port,
            issuer: issuer.to_owned(),
            company_name: "Example Shop".to_owned(),
            client_id: PAGE_CLIENT_ID.to_owned(),
            secret: format!("client_secret_env = \"{PAGE_SECRET_ENV}\""),
            public_url: None,
            agents: None,
        }
    }

    /// The port the page listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The page's base URL (`public_url`, without a trailing `/`).
    pub fn url(&self) -> String {
        match &self.public_url {
            Some(url) => url.clone(),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// Another `public_url` than the page's own address.
    pub fn public_url(mut self, url: &str) -> PageTable {
        self.public_url = Some(url.to_owned());
        self
    }

    pub fn company_name(mut self, name: &str) -> PageTable {
        self.company_name = name.to_owned();
        self
    }

    pub fn client_id(mut self, client_id: &str) -> PageTable {
        self.client_id = client_id.to_owned();
        self
    }

    /// The client secret from this file instead of [`PAGE_SECRET_ENV`].
    pub fn secret_file(mut self, path: &std::path::Path) -> PageTable {
        self.secret = format!("client_secret_file = \"{}\"", path.display());
        self
    }

    /// `[approval_page.agents]` with these lines (`clients = [...]`, `every_request = true`).
    pub fn agents(mut self, lines: &str) -> PageTable {
        self.agents = Some(lines.to_owned());
        self
    }

    /// The TOML, for `GatewayBuilder::extra_config`.
    pub fn toml(&self) -> String {
        let mut toml = format!(
            "[approval_page]\nlisten = \"127.0.0.1:{}\"\npublic_url = \"{}\"\ncompany_name = \"{}\"\nissuer = \"{}\"\nclient_id = \"{}\"\n{}\n",
            self.port,
            self.url(),
            self.company_name,
            self.issuer,
            self.client_id,
            self.secret,
        );
        if let Some(agents) = &self.agents {
            toml.push_str("\n[approval_page.agents]\n");
            toml.push_str(agents);
            toml.push('\n');
        }
        toml
    }
}

/// oidc-provider on a port it picked, with the approval page's client redirecting to
/// `{page}/callback`.
pub struct PageProvider {
    child: Child,
    port: u16,
}

impl PageProvider {
    /// An approval page on a free port and a provider for it: the provider, and the
    /// gateway's `[approval_page]` table for that page.
    pub fn with_page() -> (PageProvider, PageTable) {
        PageProvider::with_page_issuing(None)
    }

    /// [`PageProvider::with_page`], whose ID tokens also carry `claims` (an `aud` list naming
    /// another client, an `azp`), signed with the provider's key as its own are.
    pub fn with_page_issuing(claims: Option<serde_json::Value>) -> (PageProvider, PageTable) {
        let port = free_port();
        let page = format!("http://127.0.0.1:{port}");
        let provider = PageProvider::spawn(&page, claims);
        let table = PageTable::new(port, &provider.issuer());
        (provider, table)
    }

    pub fn start(page: &str) -> PageProvider {
        PageProvider::spawn(page, None)
    }

    fn spawn(page: &str, id_token_claims: Option<serde_json::Value>) -> PageProvider {
        let dir = node_project("oidc");
        let mut command = Command::new("node");
        command
            .current_dir(&dir)
            .arg(dir.join("provider.mjs"))
            .arg(keys_dir().join("es256-a.pem"))
            .arg(keys_dir().join("rs256-a.pem"))
            .env("POPPY_PAGE_REDIRECT_URI", format!("{page}/callback"))
            .stderr(Stdio::null());
        if let Some(claims) = id_token_claims {
            command.env("POPPY_PAGE_ID_TOKEN_CLAIMS", claims.to_string());
        }
        let (child, port) = announced::spawn(command, "provider.mjs");
        PageProvider { child, port }
    }

    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A new JWT access token (resource `https://shop.test`) issued to `client` (`agent`,
    /// or `company-web`, the Company's own front end) for `account` (its `account` claim):
    /// a user's token as an agent without Poppy support sends it. Each call is a new token.
    pub async fn token(&self, client: &str, account: &str) -> String {
        let secret = match client {
            "agent" => "agent-secret",
            "company-web" => "web-secret",
            other => panic!("provider.mjs has no client {other:?} with client credentials"),
        };
        let answer: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/token", self.issuer()))
            .basic_auth(client, Some(secret))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "shop"),
                ("resource", "https://shop.test"),
                ("account", account),
            ])
            .send()
            .await
            .expect("the provider's token endpoint")
            .json()
            .await
            .expect("a JSON token answer");
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {answer}"))
            .to_owned()
    }

    /// `[session]` lines for a gateway that verifies this provider's JWT access tokens
    /// (`[session.token]`), the account being their `account` claim; Sessions of the
    /// provider's client `agent` are verified with its JWKS.
    pub fn verified_tokens(&self) -> String {
        let issuer = self.issuer();
        format!(
            "verify = \"required\"\naudience = [\"https://shop.test\"]\naccount_claim = \"account\"\n\n[[session.agent]]\nissuer = \"agent\"\njwks_url = \"{issuer}/jwks\"\n\n[session.token]\nissuer = \"{issuer}\"\njwks_url = \"{issuer}/jwks\"\naudience = [\"https://shop.test\"]\n"
        )
    }
}

impl Drop for PageProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a page walk ended with: the last page's status and HTML.
#[derive(Debug, Clone)]
pub struct PageAnswer {
    pub status: u16,
    pub html: String,
    /// Where it ended (the page's path and query).
    pub url: String,
}

/// A browser without JavaScript: a cookie jar per origin, redirects followed by hand.
pub struct PageBrowser {
    client: reqwest::Client,
    cookies: HashMap<String, HashMap<String, String>>,
}

impl Default for PageBrowser {
    fn default() -> Self {
        PageBrowser::new()
    }
}

impl PageBrowser {
    pub fn new() -> PageBrowser {
        PageBrowser {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("a client"),
            cookies: HashMap::new(),
        }
    }

    fn origin(url: &reqwest::Url) -> String {
        url.origin().ascii_serialization()
    }

    /// GET `url`, or POST `form` to it, then follow redirects (GET); the final page.
    pub async fn go(&mut self, url: &str, form: Option<&[(&str, &str)]>) -> PageAnswer {
        let mut url = reqwest::Url::parse(url).expect("a URL");
        let mut form: Option<Vec<(String, String)>> = form.map(|f| {
            f.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect()
        });
        for _ in 0..20 {
            let origin = Self::origin(&url);
            let cookie = self
                .cookies
                .get(&origin)
                .map(|jar| {
                    jar.iter()
                        .map(|(n, v)| format!("{n}={v}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default();
            let request = match form.take() {
                Some(fields) => self.client.post(url.clone()).form(&fields),
                None => self.client.get(url.clone()),
            };
            let response = request
                .header("cookie", cookie)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            for value in response.headers().get_all("set-cookie") {
                let text = value.to_str().unwrap_or_default();
                let pair = text.split(';').next().unwrap_or_default();
                if let Some((name, value)) = pair.split_once('=') {
                    let jar = self.cookies.entry(origin.clone()).or_default();
                    if value.is_empty() || text.contains("Max-Age=0") {
                        jar.remove(name.trim());
                    } else {
                        jar.insert(name.trim().to_owned(), value.to_owned());
                    }
                }
            }
            let status = response.status().as_u16();
            if (300..400).contains(&status) {
                let location = response
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_else(|| panic!("{url}: a redirect without Location"))
                    .to_owned();
                url = url.join(&location).expect("a Location");
                continue;
            }
            let html = response.text().await.unwrap_or_default();
            return PageAnswer {
                status,
                html,
                url: url.to_string(),
            };
        }
        panic!("{url}: too many redirects")
    }

    /// Open the page at `link` and sign in as `user` (the provider's login form); the page
    /// shown after the sign-in.
    pub async fn sign_in(&mut self, link: &str, user: &str) -> PageAnswer {
        let page = self.go(link, None).await;
        assert_eq!(page.status, 200, "{link}: {}", page.html);
        let return_to = hidden(&page.html, "return")
            .unwrap_or_else(|| panic!("no sign-in form on the page: {}", page.html));
        let base = reqwest::Url::parse(link).expect("a URL");
        let signin = base.join("/signin").expect("the sign-in path");
        let login = self
            .go(signin.as_str(), Some(&[("return", &return_to)]))
            .await;
        assert_eq!(
            login.status, 200,
            "the provider's login form: {}",
            login.html
        );
        let action = attribute(&login.html, "action")
            .unwrap_or_else(|| panic!("no login form: {}", login.html));
        let login_url = reqwest::Url::parse(&login.url)
            .and_then(|u| u.join(&action))
            .expect("the login action");
        self.go(login_url.as_str(), Some(&[("login", user)])).await
    }

    /// Post the page's own form: `decision` is `approve` or `decline`, with the CSRF token
    /// the page gave (`csrf`: `None` to use it, `Some` to send another).
    pub async fn decide(
        &mut self,
        page: &PageAnswer,
        decision: &str,
        csrf: Option<&str>,
    ) -> PageAnswer {
        let token = match csrf {
            Some(token) => token.to_owned(),
            None => hidden(&page.html, "csrf")
                .unwrap_or_else(|| panic!("no decision form on the page: {}", page.html)),
        };
        let url = page.url.clone();
        let mut fields = vec![("decision", decision)];
        if !token.is_empty() {
            fields.push(("csrf", token.as_str()));
        }
        self.go(&url, Some(&fields)).await
    }
}

/// Open `link`, sign in as `user` and press `decision` (`approve` or `decline`): the page
/// shown afterwards (it says what was decided). The whole flow a User makes, with no browser.
pub async fn approve_on_page(link: &str, user: &str, decision: &str) -> PageAnswer {
    let mut browser = PageBrowser::new();
    let page = browser.sign_in(link, user).await;
    assert_eq!(page.status, 200, "after the sign-in: {}", page.html);
    browser.decide(&page, decision, None).await
}

/// The `value` of the hidden input `name` in `html`.
pub fn hidden(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\" value=\""))?;
    let rest = &html[at + name.len() + 15..];
    let value = &rest[..rest.find('"')?];
    Some(unescape(value))
}

/// The first `attribute="…"` in `html`.
fn attribute(html: &str, attribute: &str) -> Option<String> {
    let at = html.find(&format!("{attribute}=\""))?;
    let rest = &html[at + attribute.len() + 2..];
    Some(unescape(&rest[..rest.find('"')?]))
}

fn unescape(text: &str) -> String {
    text.replace("&amp;", "&")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
}

/// Headless Chromium walks the page at `link` as a User does: **Sign in to approve**, the
/// provider's login form as `user`, back on the page with its decision form; returns when
/// the **Approve** button is there.
pub async fn sign_in_in_browser(browser: &crate::browser::Browser, link: &str, user: &str) {
    browser.goto(link).await;
    browser.script(&click("#signin")).await;
    wait_in_browser(browser, "document.querySelector('#login') !== null").await;
    browser
        .script(&format!(
            "document.querySelector('#login').value = '{user}'; document.querySelector('#submit').click(); return true;"
        ))
        .await;
    wait_in_browser(browser, "document.querySelector('#approve') !== null").await;
}

/// Press **Approve** on the page [`sign_in_in_browser`] left the browser on; returns once
/// the page says what was decided.
pub async fn approve_in_browser(browser: &crate::browser::Browser) {
    browser.script(&click("#approve")).await;
    wait_in_browser(browser, "document.querySelector('#decided') !== null").await;
}

fn click(selector: &str) -> String {
    format!("document.querySelector('{selector}').click(); return true;")
}

/// Poll the page in the browser until `condition` (a JavaScript expression) holds (at most
/// 10 s).
pub async fn wait_in_browser(browser: &crate::browser::Browser, condition: &str) {
    let script = format!("return {condition};");
    for _ in 0..200 {
        if browser.script(&script).await == serde_json::Value::Bool(true) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let html = browser
        .script("return document.documentElement.outerHTML;")
        .await;
    panic!("the browser never saw {condition}: {html}");
}
