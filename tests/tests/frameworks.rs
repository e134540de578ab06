//! Never unapproved, exactly the approved terms, in front of real lenient frameworks.
//!
//! Flask (Werkzeug), Starlette (uvicorn) and Express 4 (with method-override) each serve the
//! same API and record every execution with the terms they acted on. A hostile Personal Agent
//! sends every spelling that one of them reads differently from the gateway (targets, method
//! overrides, rewrite headers, duplicate and case-folded keys and parameters, numbers, content
//! types, encodings, extra fields), without an approval and as the retry of an approved
//! request. None may execute; the approved request executes once, with exactly the approved
//! terms; both stores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::frameworks::{Framework, FrameworkApp, body_of};
use poppy_e2e::rawhttp::{self, RawResponse};
use poppy_e2e::{GatewayBuilder, OPERATIONS_V2, Operation, RedisServer, Session, Store};
use serde_json::Value;

const POLICIES: &str = r#"
[[operation]]
name = "transfer"
method = "POST"
path = "/accounts/{account}/transfers"
id_prefix = "trf"
expires_in = "15m"
same_action = ["account", "to"]
summary = "Send {amount} {currency} from account {account} to {to}, by {channel}."

[operation.terms]
account = { path = "account" }
amount = { body = "$.amount" }
to = { body = "$.to" }
currency = { query = "currency" }
channel = { header = "X-Channel" }

[[operation]]
name = "close"
method = "DELETE"
path = "/accounts/{account}"
id_prefix = "cls"
expires_in = "15m"
same_action = ["account"]
summary = "Close account {account}."

[operation.terms]
account = { path = "account" }

[[operation]]
name = "confirm"
method = "GET"
path = "/confirm/{code}"
id_prefix = "cnf"
expires_in = "15m"
same_action = ["code"]
summary = "Confirm {code}."

[operation.terms]
code = { path = "code" }

[[tool]]
name = "pay"
tool = "pay"
id_prefix = "pay"
expires_in = "15m"
same_action = ["amount"]
summary = "Pay {amount}."

[tool.terms]
amount = { argument = "$.amount" }
"#;

const TRANSFER: &str = "/accounts/a1/transfers?currency=USD";
const BODY: &str = r#"{"amount":"10.00","to":"bob"}"#;

/// One raw request from a Personal Agent (or, with `session: None`, without Poppy-Session).
#[derive(Debug, Clone)]
struct Raw {
    what: &'static str,
    method: &'static str,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Raw {
    fn new(what: &'static str, method: &'static str, target: &str) -> Raw {
        Raw {
            what,
            method,
            target: target.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The clean transfer, as an honest agent sends it.
    fn transfer(what: &'static str) -> Raw {
        Raw::new(what, "POST", TRANSFER)
            .header("X-Channel", "app")
            .json(BODY)
    }

    fn header(mut self, name: &str, value: &str) -> Raw {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn without(mut self, name: &str) -> Raw {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    fn json(self, body: &str) -> Raw {
        self.without("content-type")
            .header("Content-Type", "application/json")
            .body(body.as_bytes())
    }

    fn body(mut self, body: &[u8]) -> Raw {
        self.body = body.to_vec();
        self
    }

    fn target(mut self, target: &str) -> Raw {
        self.target = target.to_owned();
        self
    }

    fn bytes(&self, session: Option<&Session>, approval: Option<&Operation>) -> Vec<u8> {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            self.method, self.target
        );
        if let Some(session) = session {
            head.push_str(&format!(
                "Poppy-Session: {}\r\nPoppy-Extensions: {OPERATIONS_V2}\r\n",
                session.header()
            ));
        }
        if let Some(op) = approval {
            head.push_str(&format!("Poppy-Approval: {}\r\n", op.approval_header()));
        }
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

struct World {
    app: FrameworkApp,
    gateway: poppy_e2e::Gateway,
    _redis: Option<RedisServer>,
    session: Session,
}

impl World {
    fn start(framework: Framework, store: Store) -> World {
        let app = FrameworkApp::start(framework);
        let redis = (store == Store::Redis).then(RedisServer::start);
        let mut builder = GatewayBuilder::new(&app.url())
            .policy("frameworks.toml", POLICIES)
            .extra_config("[mcp]\npath = \"/mcp\"");
        if let Some(redis) = &redis {
            builder = builder.store_url(&redis.url());
        }
        World {
            gateway: builder.start(),
            app,
            _redis: redis,
            session: Session::signed_out("ses_hostile"),
        }
    }

    fn send(&self, raw: &Raw, approval: Option<&Operation>) -> RawResponse {
        self.send_as(raw, Some(&self.session), approval)
    }

    fn send_as(
        &self,
        raw: &Raw,
        session: Option<&Session>,
        approval: Option<&Operation>,
    ) -> RawResponse {
        rawhttp::exchange(
            self.gateway.listen_addr(),
            &raw.bytes(session, approval),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", raw.what))
    }

    /// The request is refused with a 4xx and a JSON `error` and `detail` (or, where pingora
    /// itself rejects the request line, any 4xx), and nothing executes.
    fn assert_refused(&self, raw: &Raw, approval: Option<&Operation>) {
        let before = self.app.executions().len();
        let answer = self.send(raw, approval);
        let body = body_of(&answer);
        assert!(
            (400..500).contains(&answer.status) && answer.status != 403,
            "{:?} {}: expected a refusal, got {}: {}",
            self.app.framework,
            raw.what,
            answer.status,
            String::from_utf8_lossy(&body)
        );
        if let Ok(json) = serde_json::from_slice::<Value>(&body) {
            assert!(
                json["error"].is_string() && json["detail"].is_string(),
                "{}: {json}",
                raw.what
            );
        }
        let after = self.app.executions();
        assert_eq!(
            after.len(),
            before,
            "{:?} {}: executed {:?}",
            self.app.framework,
            raw.what,
            after.last()
        );
    }

    fn operation(&self, raw: &Raw) -> Operation {
        let answer = self.send(raw, None);
        let body: Value = serde_json::from_slice(&body_of(&answer)).unwrap_or(Value::Null);
        assert_eq!(answer.status, 403, "{}: {body}", raw.what);
        assert_eq!(body["error"], "approval_required", "{}", raw.what);
        let op = &body["operation"];
        let text = |name: &str| op[name].as_str().unwrap_or_default().to_owned();
        Operation {
            operation_id: text("operation_id"),
            revision: text("revision"),
            summary: text("summary"),
            terms: op["terms"].clone(),
            expires_at: text("expires_at"),
            expires_at_unix: 0.0,
        }
    }
}

/// Spellings of the transfer's target that some framework routes to its handler.
fn hostile_targets(port: u16) -> Vec<(&'static str, String)> {
    vec![
        (
            "no leading slash",
            "accounts/a1/transfers?currency=USD".into(),
        ),
        (
            "encoded leading slash",
            "%2Faccounts/a1/transfers?currency=USD".into(),
        ),
        (
            "absolute-form",
            format!("http://127.0.0.1:{port}/accounts/a1/transfers?currency=USD"),
        ),
        (
            "matrix parameter",
            "/accounts/a1/transfers;x=1?currency=USD".into(),
        ),
        (
            "matrix in a segment",
            "/accounts;v=1/a1/transfers?currency=USD".into(),
        ),
        ("..;/", "/accounts/x/..;/a1/transfers?currency=USD".into()),
        ("encoded ;", "/accounts/a1/transfers%3B?currency=USD".into()),
        (
            "format suffix",
            "/accounts/a1/transfers.json?currency=USD".into(),
        ),
        (
            "NUL and more",
            "/accounts/a1/transfers%00.txt?currency=USD".into(),
        ),
        (
            "trailing dot",
            "/accounts/a1/transfers.?currency=USD".into(),
        ),
        (
            "trailing space",
            "/accounts/a1/transfers%20?currency=USD".into(),
        ),
        (
            "trailing tab",
            "/accounts/a1/transfers%09?currency=USD".into(),
        ),
        (
            "overlong UTF-8",
            "/accounts/a1/tran%C1%B3fers?currency=USD".into(),
        ),
        ("long s", "/accounts/a1/tran%C5%BFfers?currency=USD".into()),
        (
            "fullwidth t",
            "/accounts/a1/%EF%BD%94ransfers?currency=USD".into(),
        ),
        (
            "dot segment",
            "/accounts/./a1/transfers?currency=USD".into(),
        ),
        (
            "dot-dot segment",
            "/x/../accounts/a1/transfers?currency=USD".into(),
        ),
        (
            "encoded slash",
            "/accounts/a1%2Ftransfers?currency=USD".into(),
        ),
        (
            "double-encoded slash",
            "/accounts/a1%252Ftransfers?currency=USD".into(),
        ),
        ("backslash", "/accounts\\a1\\transfers?currency=USD".into()),
        (
            "a raw # in a segment (a fragment to the framework)",
            "/accounts/a1#x/transfers?currency=USD".into(),
        ),
        (
            "raw < and >",
            "/accounts/a<1>/transfers?currency=USD".into(),
        ),
        (
            "a raw backtick",
            "/accounts/a`1/transfers?currency=USD".into(),
        ),
        ("raw braces", "/accounts/{a1}/transfers?currency=USD".into()),
    ]
}

/// Everything a hostile agent tries without an approval.
fn unapproved_attacks(port: u16) -> Vec<Raw> {
    let mut attacks: Vec<Raw> = hostile_targets(port)
        .into_iter()
        .map(|(what, target)| Raw::transfer(what).target(&target))
        .collect();
    let form = "application/x-www-form-urlencoded";
    attacks.extend([
        Raw::new("_method in the query", "POST", "/accounts/a1?_method=DELETE"),
        Raw::new("_method in a form", "POST", "/accounts/a1")
            .header("Content-Type", form)
            .body(b"_method=DELETE"),
        Raw::new("method-override header", "POST", "/accounts/a1")
            .header("X-HTTP-Method-Override", "DELETE"),
        Raw::new("HEAD runs GET", "HEAD", "/confirm/c1"),
        Raw::transfer("X-Original-URL").header("X-Original-URL", "/accounts/a1"),
        Raw::transfer("X-Rewrite-URL").header("X-Rewrite-URL", "/accounts/a1"),
        Raw::transfer("duplicate query parameter").target("/accounts/a1/transfers?currency=USD&currency=EUR"),
        Raw::transfer("percent-encoded twin parameter")
            .target("/accounts/a1/transfers?currency=USD&%63urrency=EUR"),
        Raw::transfer("case twin parameter").target("/accounts/a1/transfers?currency=USD&CURRENCY=EUR"),
        Raw::transfer("unlisted parameter").target("/accounts/a1/transfers?currency=USD&fee=0"),
        Raw::transfer("form type, JSON body")
            .without("content-type")
            .header("Content-Type", form),
        Raw::transfer("no content type").without("content-type"),
        Raw::transfer("text/plain").without("content-type").header("Content-Type", "text/plain"),
        Raw::transfer("form body").without("content-type").header("Content-Type", form).body(b"amount=10.00&to=bob"),
        Raw::transfer("duplicate key").json(r#"{"amount":"10.00","to":"bob","amount":"9999.00"}"#),
        Raw::transfer("duplicate key first").json(r#"{"amount":"9999.00","amount":"10.00","to":"bob"}"#),
        Raw::transfer("case twin key").json(r#"{"amount":"10.00","to":"bob","AMOUNT":"9999.00"}"#),
        Raw::transfer("folded twin key").json(r#"{"amount":"10.00","to":"bob","\u017fomething":1}"#),
        Raw::transfer("integer beyond 2^53").json(r#"{"amount":9007199254740993,"to":"bob"}"#),
        Raw::transfer("integer beyond u64").json(r#"{"amount":18446744073709551616,"to":"bob"}"#),
        Raw::transfer("number not as it reads").json(r#"{"amount":10.50,"to":"bob"}"#),
        Raw::transfer("exponent").json(r#"{"amount":1e3,"to":"bob"}"#),
        Raw::transfer("field outside the summary").json(r#"{"amount":"10.00","to":"bob","fee_waived":true}"#),
        Raw::transfer("nested duplicate").json(r#"{"amount":"10.00","to":"bob","x":{"a":1,"a":2}}"#),
        Raw::transfer("byte order mark").body(b"\xef\xbb\xbf{\"amount\":\"10.00\",\"to\":\"bob\"}"),
        Raw::transfer("not UTF-8").body(b"{\"amount\":\"10.00\",\"to\":\"b\xffb\"}"),
        Raw::transfer("NUL in a string").json(r#"{"amount":"10.00","to":"bob\u0000eve"}"#),
        Raw::transfer("header term twice").header("X-Channel", "batch"),
        Raw::transfer("underscore header twin").header("X_Channel", "batch"),
        Raw::transfer("gzip body").header("Content-Encoding", "gzip"),
        Raw::transfer("upgrade").header("Upgrade", "websocket").header("Connection", "Upgrade"),
        Raw::new("encoded slash to MCP", "POST", "%2Fmcp")
            .json(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"amount":"10"}}}"#),
        Raw::new("MCP with ;params", "POST", "/mcp;x=1")
            .json(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay","arguments":{"amount":"10"}}}"#),
    ]);
    attacks
}

/// Variations of the approved request, sent with its approval before it was performed.
fn approved_variations() -> Vec<Raw> {
    vec![
        Raw::transfer("approved body plus a duplicate key")
            .json(r#"{"amount":"10.00","to":"bob","amount":"9999.00"}"#),
        Raw::transfer("approved body plus a case twin")
            .json(r#"{"amount":"10.00","to":"bob","Amount":"9999.00"}"#),
        Raw::transfer("approved query plus a twin")
            .target("/accounts/a1/transfers?currency=USD&currency=EUR"),
        Raw::transfer("approved header plus a twin").header("X-Channel", "batch"),
        Raw::transfer("approved body as a form")
            .without("content-type")
            .header("Content-Type", "application/x-www-form-urlencoded"),
        Raw::transfer("approved target without its slash")
            .target("accounts/a1/transfers?currency=USD"),
        Raw::transfer("approved body plus a field")
            .json(r#"{"amount":"10.00","to":"bob","note":1}"#),
    ]
}

async fn never_unapproved_exactly_the_approved_terms(framework: Framework, store: Store) {
    let world = World::start(framework, store);
    let port = world.app_port();
    let attacks = unapproved_attacks(port);
    // Control: sent to the framework directly, these attacks do execute. That is what the
    // gateway stands in front of.
    let direct: Vec<&str> = attacks
        .iter()
        .filter(|attack| {
            let before = world.app.executions().len();
            let _ = rawhttp::exchange(
                ([127, 0, 0, 1], port).into(),
                &attack.bytes(Some(&world.session), None),
                Duration::from_secs(10),
            );
            world.app.executions().len() > before
        })
        .map(|attack| attack.what)
        .collect();
    assert!(direct.len() >= 10, "{framework:?} executed only {direct:?}");
    let base = world.app.executions().len();
    for attack in &attacks {
        world.assert_refused(attack, None);
    }
    // The company's own traffic (no Poppy-Session) with a Poppy header spelled as CGI reads it.
    let twin = Raw::transfer("Poppy_Session").header("Poppy_Session", &world.session.header());
    let answer = world.send_as(&twin, None, None);
    assert_eq!(answer.status, 400, "Poppy_Session passed through");
    assert_eq!(
        world.app.executions().len(),
        base,
        "{:?}",
        world.app.executions()
    );

    let clean = Raw::transfer("the clean transfer");
    let op = world.operation(&clean);
    let variations = approved_variations();
    for variation in &variations {
        world.assert_refused(variation, Some(&op));
    }
    assert_eq!(world.app.executions().len(), base);

    let performed = world.send(&clean, Some(&op));
    assert_eq!(
        performed.status,
        201,
        "{:?}",
        String::from_utf8_lossy(&performed.body)
    );
    let executions = world.app.executions();
    assert_eq!(executions.len(), base + 1, "{executions:?}");
    let executed = &executions[base];
    let approved = op.terms.clone();
    for term in ["account", "amount", "to", "currency", "channel"] {
        assert_eq!(
            executed[term], approved[term],
            "{framework:?}: `{term}` executed {executed} but approved {approved}"
        );
    }
    let replay = world.send(&clean, Some(&op));
    assert_eq!(replay.status, 201);
    assert_eq!(
        body_of(&replay),
        body_of(&performed),
        "the replay is the first answer"
    );
    assert_eq!(world.app.executions().len(), base + 1);
    eprintln!(
        "{framework:?} on {store:?}: {} of {} attacks execute when sent to the framework directly; through the gateway {} unapproved attempts and {} approved variations were refused and executed nothing; the approved transfer executed once with {approved}",
        direct.len(),
        attacks.len(),
        attacks.len() + 1,
        variations.len()
    );
    eprintln!("{framework:?} executes directly: {direct:?}");
}

impl World {
    fn app_port(&self) -> u16 {
        self.app
            .url()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    }
}

macro_rules! framework_tests {
    ($($name:ident => $framework:expr),+ $(,)?) => {
        $(
            mod $name {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    never_unapproved_exactly_the_approved_terms($framework, Store::Memory).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    never_unapproved_exactly_the_approved_terms($framework, Store::Redis).await
                }
            }
        )+
    };
}

framework_tests!(
    flask => Framework::Flask,
    starlette => Framework::Starlette,
    express => Framework::Express,
);
