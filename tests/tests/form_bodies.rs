//! A form-bodied API behind the gateway: real form readers upstream (Werkzeug's
//! `request.form` in Flask, Starlette's `request.form()` (python-multipart),
//! `express.urlencoded({ extended: true })` in Express), a Twilio-like
//! API (`POST …/Calls.json` with `To`, `From`, `Customer[name]`, `Tags[]`; `POST
//! …/Calls/{Sid}.json`), both stores.
//!
//! Every spelling two form readers read differently is refused with a `400` naming the field
//! (or the header), and executes nothing; an approved call executes once, with exactly the
//! approved fields as the framework read them; a `{Sid}.json` route is held and executed, and
//! the same path without its suffix, with another one or with an escaped one is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::conversations::{Service, Turn, approval_message, assert_outcome};
use poppy_e2e::frameworks::{Framework, FrameworkApp, body_of};
use poppy_e2e::policies::CHECKOUT;
use poppy_e2e::rawhttp::{self, RawResponse};
use poppy_e2e::{
    GatewayBuilder, OPERATIONS_V2, Operation, RedisServer, Session, Store, TEST_KEYS, binaries,
    run_binary,
};
use serde_json::{Value, json};

const POLICIES: &str = r#"
[[operation]]
name = "create_call"
method = "POST"
path = "/2010-04-01/Accounts/{AccountSid}/Calls.json"
id_prefix = "call"
expires_in = "15m"
same_action = ["account", "to"]
summary = "Call {to} from {from} for {customer} (tags {tags}), billed to account {account}."
ignore = ["StatusCallback", "Lines"]

[operation.terms]
account = { path = "AccountSid" }
to = { form = "To" }
from = { form = "From" }
customer = { form = "Customer[name]" }
tags = { form = "Tags[]" }

[[operation]]
name = "update_call"
method = "POST"
path = "/2010-04-01/Accounts/{AccountSid}/Calls/{Sid}.json"
id_prefix = "upd"
expires_in = "15m"
same_action = ["account", "sid"]
summary = "Set call {sid} of account {account} to {status}."

[operation.terms]
account = { path = "AccountSid" }
sid = { path = "Sid" }
status = { form = "Status" }
"#;

const FORM: &str = "application/x-www-form-urlencoded";
const CALLS: &str = "/2010-04-01/Accounts/AC1/Calls.json";
const CALL: &str = "/2010-04-01/Accounts/AC1/Calls/CA1.json";
/// The clean call, as clients encode it (brackets escaped, as URLSearchParams and Python's
/// urlencode send them; spaces as `+`).
const CLEAN: &str =
    "To=%2B15551234567&From=%2B15557654321&Customer%5Bname%5D=Ann+Lee&Tags[]=vip&Tags[]=callback";
const CALLBACK: &str = "&StatusCallback=https%3A%2F%2Fhooks.example%2Fcalls";

/// What a refusal must name.
#[derive(Debug, Clone, Copy)]
enum Names {
    Field(&'static str),
    Header(&'static str),
    Term(&'static str),
    Path,
}

/// One raw request from the Personal Agent.
#[derive(Debug, Clone)]
struct Raw {
    what: &'static str,
    target: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

fn call(what: &'static str, body: &str) -> Raw {
    Raw {
        what,
        target: CALLS.to_owned(),
        content_type: Some(FORM.to_owned()),
        body: body.as_bytes().to_vec(),
    }
}

impl Raw {
    fn content_type(mut self, content_type: Option<&str>) -> Raw {
        self.content_type = content_type.map(str::to_owned);
        self
    }

    fn bytes_body(mut self, body: &[u8]) -> Raw {
        self.body = body.to_vec();
        self
    }

    fn target(mut self, target: &str) -> Raw {
        self.target = target.to_owned();
        self
    }

    fn bytes(&self, session: &Session, approval: Option<&Operation>) -> Vec<u8> {
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nPoppy-Session: {}\r\nPoppy-Extensions: {OPERATIONS_V2}\r\n",
            self.target,
            session.header()
        );
        if let Some(op) = approval {
            head.push_str(&format!("Poppy-Approval: {}\r\n", op.approval_header()));
        }
        if let Some(content_type) = &self.content_type {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
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

/// Every ambiguity class, sent without an approval: what it must be refused naming.
fn attacks() -> Vec<(Raw, Names)> {
    use Names::{Field, Header, Path, Term};
    let latin1 = "To=%2B15551234567&From=%2B15557654321&Customer%5Bname%5D=Ren%E9e&Tags[]=vip";
    let many_tags: String = (0..21).map(|i| format!("&Tags[]=t{i}")).collect();
    let with = |extra: &str| format!("{CLEAN}{extra}");
    vec![
        (call("a field twice", &with("&To=%2B19995550000")), Field("To")),
        (
            call("a field twice, the other first", &format!("To=%2B19995550000&{CLEAN}")),
            Field("To"),
        ),
        (call("a case-folded twin", &with("&to=%2B19995550000")), Field("to")),
        (call("a percent-encoded twin", &with("&%54o=%2B19995550000")), Field("To")),
        (
            call("the encoded and the raw bracket name", &with("&Customer[name]=Eve")),
            Field("Customer[name]"),
        ),
        (
            call("a case twin inside brackets", &with("&Customer[NAME]=Eve")),
            Field("Customer[NAME]"),
        ),
        (call("an empty value", &with("&StatusCallback=")), Field("StatusCallback")),
        (call("a name without =", &with("&StatusCallback")), Field("StatusCallback")),
        (
            call(
                "an empty term",
                "To=%2B15551234567&From=&Customer%5Bname%5D=Ann&Tags[]=vip",
            ),
            Field("From"),
        ),
        (call("a field outside the summary", &with("&Price=0")), Field("Price")),
        (call("_method in the form", &with("&_method=DELETE")), Field("_method")),
        (call("the charset sentinel", &with("&_charset_=ISO-8859-1")), Field("_charset_")),
        (
            call("charset=latin1", latin1).content_type(Some(
                "application/x-www-form-urlencoded; charset=latin1",
            )),
            Header("content-type"),
        ),
        (
            call("charset=iso-8859-1", latin1).content_type(Some(
                "application/x-www-form-urlencoded; charset=iso-8859-1",
            )),
            Header("content-type"),
        ),
        (
            call("multipart", "--X\r\nContent-Disposition: form-data; name=\"To\"\r\n\r\n+15551234567\r\n--X--\r\n")
                .content_type(Some("multipart/form-data; boundary=X")),
            Header("content-type"),
        ),
        (
            call(
                "JSON",
                r#"{"To":"+15551234567","From":"+15557654321","Customer":{"name":"Ann"},"Tags":["vip"]}"#,
            )
            .content_type(Some("application/json")),
            Header("content-type"),
        ),
        (call("no content type", CLEAN).content_type(None), Header("content-type")),
        (call("an escape that is not UTF-8", latin1), Field("Customer[name]")),
        (
            call("raw non-ASCII", "").bytes_body(
                b"To=%2B15551234567&From=%2B15557654321&Customer%5Bname%5D=Ren\xc3\xa9e&Tags[]=vip",
            ),
            Field("Customer[name]"),
        ),
        (
            call("an invalid escape", &with("&StatusCallback=%zz")),
            Field("StatusCallback"),
        ),
        (call("; as a separator", &with(";To=%2B19995550000")), Field("Tags[]")),
        (
            call(
                "NUL",
                "To=%2B15551234567&From=%2B15557654321&Customer%5Bname%5D=Ann%00Eve&Tags[]=vip",
            ),
            Field("Customer[name]"),
        ),
        (call("a value and a group", &with("&Customer=Eve")), Field("Customer")),
        (call("a list and a value", &with("&Tags=x")), Field("Tags")),
        (call("a list over 20", &with(&many_tags)), Field("Tags[]")),
        (
            call("indices out of order", &with("&Lines[1][sku]=a")),
            Field("Lines[1][sku]"),
        ),
        (
            call("indices and keys", &with("&Lines[0][sku]=a&Lines[x][sku]=b")),
            Field("Lines[x][sku]"),
        ),
        (call("a dotted name", &with("&Customer.name=Eve")), Field("Customer.name")),
        (call("[] inside a name", &with("&Lines[][sku]=a")), Field("Lines[][sku]")),
        (
            call("a prototype name", &with("&Lines[toString]=1")),
            Field("Lines[toString]"),
        ),
        (
            call("deeper than qs reads", &with("&Lines[a][b][c][d][e][f]=1")),
            Field("Lines[a][b][c][d][e][f]"),
        ),
        (
            call(
                "a term left out",
                "To=%2B15551234567&Customer%5Bname%5D=Ann&Tags[]=vip",
            ),
            Term("from"),
        ),
        (
            call("{Sid} without its suffix", "Status=completed")
                .target("/2010-04-01/Accounts/AC1/Calls/CA1"),
            Path,
        ),
        (
            call("{Sid} with another format", "Status=completed")
                .target("/2010-04-01/Accounts/AC1/Calls/CA1.xml"),
            Path,
        ),
        (
            call("{Sid}.json with a format after it", "Status=completed")
                .target("/2010-04-01/Accounts/AC1/Calls/CA1.json.xml"),
            Path,
        ),
        (
            call("an escaped suffix", "Status=completed")
                .target("/2010-04-01/Accounts/AC1/Calls/CA1%2Ejson"),
            Path,
        ),
        (
            call("a dot segment", "Status=completed")
                .target("/2010-04-01/Accounts/AC1/Calls/./CA1.json"),
            Path,
        ),
        (
            call("Calls.json without its suffix", CLEAN).target("/2010-04-01/Accounts/AC1/Calls"),
            Path,
        ),
    ]
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
            .policy("calls.toml", POLICIES)
            .policy("checkout.toml", CHECKOUT);
        if let Some(redis) = &redis {
            builder = builder.store_url(&redis.url());
        }
        World {
            gateway: builder.start(),
            app,
            _redis: redis,
            session: Session::signed_out("ses_forms"),
        }
    }

    fn send(&self, raw: &Raw, approval: Option<&Operation>) -> (RawResponse, Value) {
        let answer = rawhttp::exchange(
            self.gateway.listen_addr(),
            &raw.bytes(&self.session, approval),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", raw.what));
        let json = serde_json::from_slice(&body_of(&answer)).unwrap_or(Value::Null);
        (answer, json)
    }

    /// Refused with a `400` and a JSON error naming `names`, and nothing executed.
    fn assert_refused(&self, raw: &Raw, names: Names, approval: Option<&Operation>) {
        let before = self.app.executions().len();
        let (answer, body) = self.send(raw, approval);
        let framework = self.app.framework;
        assert_eq!(answer.status, 400, "{framework:?} {}: {body}", raw.what);
        assert!(body["detail"].is_string(), "{}: {body}", raw.what);
        let (member, value) = match names {
            Names::Field(field) => ("field", Some(field)),
            Names::Header(header) => ("header", Some(header)),
            Names::Term(term) => ("term", Some(term)),
            Names::Path => ("error", Some("invalid_path")),
        };
        assert_eq!(
            body[member].as_str(),
            value,
            "{framework:?} {}: {body}",
            raw.what
        );
        let after = self.app.executions();
        assert_eq!(
            after.len(),
            before,
            "{framework:?} {}: executed {:?}",
            raw.what,
            after.last()
        );
    }

    fn operation(&self, raw: &Raw) -> Operation {
        let (answer, body) = self.send(raw, None);
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

    /// Performed with its approval: `201`, one more execution, returned.
    fn perform(&self, raw: &Raw, op: &Operation) -> (Value, Vec<u8>) {
        let before = self.app.executions().len();
        let (answer, body) = self.send(raw, Some(op));
        assert_eq!(answer.status, 201, "{}: {body}", raw.what);
        let executions = self.app.executions();
        assert_eq!(executions.len(), before + 1, "{executions:?}");
        (executions[before].clone(), body_of(&answer))
    }

    /// The same request and approval again: the first answer, nothing executed.
    fn assert_replayed(&self, raw: &Raw, op: &Operation, first: &[u8]) {
        let before = self.app.executions().len();
        let (answer, _) = self.send(raw, Some(op));
        assert_eq!(answer.status, 201, "{}", raw.what);
        assert_eq!(body_of(&answer), first, "the replay is the first answer");
        assert_eq!(self.app.executions().len(), before);
    }

    /// How many attacks execute when sent to the framework directly.
    fn executing_directly(&self, attacks: &[(Raw, Names)]) -> Vec<&'static str> {
        let port: u16 = self
            .app
            .url()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port");
        attacks
            .iter()
            .filter(|(attack, _)| {
                let before = self.app.executions().len();
                let _ = rawhttp::exchange(
                    ([127, 0, 0, 1], port).into(),
                    &attack.bytes(&self.session, None),
                    Duration::from_secs(10),
                );
                self.app.executions().len() > before
            })
            .map(|(attack, _)| attack.what)
            .collect()
    }
}

async fn form_bodies_are_held_and_executed_as_approved(framework: Framework, store: Store) {
    let world = World::start(framework, store);
    let attacks = attacks();
    // Control: sent to the framework directly, many of these execute (each with a reading
    // of its own). That is what the gateway stands in front of.
    let direct = world.executing_directly(&attacks);
    assert!(direct.len() >= 15, "{framework:?} executed only {direct:?}");
    let base = world.app.executions().len();
    for (attack, names) in &attacks {
        world.assert_refused(attack, *names, None);
    }
    assert_eq!(world.app.executions().len(), base);

    // Held, approved, executed once with exactly the approved fields.
    let clean = call("the clean call", &format!("{CLEAN}{CALLBACK}"));
    let op = world.operation(&clean);
    assert_eq!(
        op.terms,
        json!({
            "account": "AC1",
            "to": "+15551234567",
            "from": "+15557654321",
            "customer": "Ann Lee",
            "tags": ["vip", "callback"],
        })
    );
    assert!(op.summary.contains("Ann Lee"), "{}", op.summary);
    // With the approval, a twin is still refused; other bytes that read the same (`%20`
    // for `+`) are another revision, held again; neither executes.
    world.assert_refused(
        &call(
            "approved, plus a twin",
            &format!("{CLEAN}{CALLBACK}&To=%2B19995550000"),
        ),
        Names::Field("To"),
        Some(&op),
    );
    let respelled = call(
        "approved, %20 for +",
        &format!("{}{CALLBACK}", CLEAN.replace("Ann+Lee", "Ann%20Lee")),
    );
    let (answer, body) = world.send(&respelled, Some(&op));
    assert_eq!(answer.status, 403, "{body}");
    assert_eq!(body["error"], "approval_required");
    assert_eq!(body["operation"]["terms"], op.terms, "it reads the same");
    assert_eq!(world.app.executions().len(), base);

    let (executed, first) = world.perform(&clean, &op);
    assert_eq!(executed["kind"], "create_call");
    for (term, as_executed) in [
        ("account", "account"),
        ("to", "to"),
        ("from", "sender"),
        ("customer", "customer"),
        ("tags", "tags"),
    ] {
        assert_eq!(
            executed[as_executed], op.terms[term],
            "{framework:?}: `{term}` executed {executed} but approved {}",
            op.terms
        );
    }
    // Every field the framework read is a term or the ignored callback.
    let fields: Vec<&str> = executed["fields"]
        .as_object()
        .expect("fields")
        .keys()
        .map(String::as_str)
        .collect();
    let expected: &[&str] = match framework {
        Framework::Express => &["Customer", "From", "StatusCallback", "Tags", "To"],
        _ => &["Customer[name]", "From", "StatusCallback", "Tags[]", "To"],
    };
    let mut sorted = fields.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted, expected,
        "{framework:?} read {}",
        executed["fields"]
    );
    world.assert_replayed(&clean, &op, &first);

    // `/Calls/{Sid}.json`: held with the capture between the literals, executed once.
    let update = call("update a call", "Status=completed").target(CALL);
    let op = world.operation(&update);
    assert_eq!(
        op.terms,
        json!({"account": "AC1", "sid": "CA1", "status": "completed"})
    );
    let (executed, first) = world.perform(&update, &op);
    assert_eq!(
        (
            &executed["kind"],
            &executed["sid"],
            &executed["status"],
            &executed["account"]
        ),
        (
            &json!("update_call"),
            &json!("CA1"),
            &json!("completed"),
            &json!("AC1")
        )
    );
    world.assert_replayed(&update, &op, &first);
    assert_eq!(world.app.executions().len(), base + 2);
    eprintln!(
        "{framework:?} on {store:?}: {} of {} form and path attacks execute when sent to the framework directly, none through the gateway; the approved call and update executed once each with the approved fields",
        direct.len(),
        attacks.len()
    );
    eprintln!("{framework:?} executes directly: {direct:?}");
}

const CHECKOUT_PATH: &str = "/v1/checkout/sessions";

/// A form's fields as a flat reader (Werkzeug, Starlette) lists them, from the gateway's
/// reading of structured terms: `metadata[k]`, `items[0][price]`, `expand[]`.
fn flat_fields(prefix: &str, value: &Value, out: &mut serde_json::Map<String, Value>) {
    match value {
        Value::Object(map) => {
            for (key, member) in map {
                flat_fields(&format!("{prefix}[{key}]"), member, out);
            }
        }
        Value::Array(items) if items.iter().all(Value::is_string) => {
            out.insert(format!("{prefix}[]"), value.clone());
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                flat_fields(&format!("{prefix}[{i}]"), item, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), json!([other]));
        }
    }
}

/// Structured spellings (issue 38): each the gateway accepts is held, approved and executed
/// once, and the framework read exactly the approved terms (flat readers: the same names and
/// values; `qs`: the same nesting); each that readers build differently is refused naming the
/// field, and executes nothing.
async fn structured_spellings_read_one_way(framework: Framework, store: Store) {
    let world = World::start(framework, store);
    for body in [
        "mode=payment&line_items%5B0%5D%5Bprice%5D=price_a&line_items%5B0%5D%5Bquantity%5D=2",
        "mode=setup&line_items[0][price]=price_b&line_items[1][price]=price_c&line_items[0][quantity]=1&line_items[1][quantity]=3&metadata[order_id]=6735&metadata[note]=gift+wrap&expand[]=customer&expand[]=payment_intent",
        "customer=cus_9&line_items[0][price]=price_d&mode=payment&metadata%5Bshipping%5D%5Bcity%5D=Paris&expand%5B%5D=customer",
    ] {
        let raw = call("a structured form", body).target(CHECKOUT_PATH);
        let op = world.operation(&raw);
        let (executed, first) = world.perform(&raw, &op);
        assert_eq!(executed["kind"], "checkout");
        let expected = match framework {
            Framework::Express => op.terms.clone(),
            _ => {
                let mut flat = serde_json::Map::new();
                for (term, value) in op.terms.as_object().expect("terms") {
                    flat_fields(term, value, &mut flat);
                }
                Value::Object(flat)
            }
        };
        assert_eq!(
            executed["fields"], expected,
            "{framework:?} read {body} as {} but the gateway approved {}",
            executed["fields"], op.terms
        );
        world.assert_replayed(&raw, &op, &first);
    }
    let executed = world.app.executions().len();
    let refused: Vec<(Raw, Names)> = [
        ("line_items[0]price=p", "line_items[0]price"),
        ("line_items[0][price]=p&expand[]=a&expand[0]=b", "expand[0]"),
        ("line_items[0][price]=p&expand[0]=a&expand[]=b", "expand[]"),
        (
            "line_items[0][price]=p&metadata[a]=1&metadata=2",
            "metadata",
        ),
        (
            "line_items[0][price]=p&metadata[a][b][c][d][e][f]=1",
            "metadata[a][b][c][d][e][f]",
        ),
        (
            "line_items[0][price]=p&line_items[2][price]=q",
            "line_items[2][price]",
        ),
        (
            "line_items[1][price]=p&line_items[0][price]=q",
            "line_items[1][price]",
        ),
        (
            "line_items[0][price]=p&line_items[x][price]=q",
            "line_items[x][price]",
        ),
        (
            "line_items[0][price]=p&line_items[20][price]=q",
            "line_items[20][price]",
        ),
        (
            "line_items[0][price]=p&line_items[0][price]=q",
            "line_items[0][price]",
        ),
        (
            "line_items[0][price]=p&metadata[a]=1&metadata[A]=2",
            "metadata[A]",
        ),
        ("line_items[0][price]=p&expand[][x]=1", "expand[][x]"),
    ]
    .into_iter()
    .map(|(body, field)| {
        (
            call("a structured spelling", body).target(CHECKOUT_PATH),
            Names::Field(field),
        )
    })
    .collect();
    for (raw, names) in &refused {
        world.assert_refused(raw, *names, None);
    }
    assert_eq!(world.app.executions().len(), executed);
    // Control: the framework itself executes these, each with a reading of its own.
    let direct = world.executing_directly(&refused);
    assert!(direct.len() >= 10, "{framework:?} executed only {direct:?}");
}

/// A Company Agent describes the same form request to the conversations service: one front
/// door, so the same reading, the same refusals, the same execution.
async fn a_company_agent_describes_a_form_body(store: Store) {
    let app = FrameworkApp::start(Framework::Flask);
    let redis = (store == Store::Redis).then(RedisServer::start);
    let mut builder = GatewayBuilder::new(&app.url())
        .policy("calls.toml", POLICIES)
        .conversations();
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let service = Service::of(&gateway);
    let session = Session::signed_out("ses_forms_conv");
    let turn = |body: &str, content_type: Option<&str>| {
        let mut request = json!({"method": "POST", "path": CALLS, "body": body});
        if let Some(content_type) = content_type {
            request["headers"] = json!([["Content-Type", content_type]]);
        }
        Turn {
            conversation: "conv_forms".to_owned(),
            session: session.clone(),
            request,
            extensions: OPERATIONS_V2.to_owned(),
        }
    };
    for (what, refused, code, names) in [
        (
            "a field twice",
            turn(&format!("{CLEAN}&To=%2B19995550000"), Some(FORM)),
            "invalid_body",
            ("field", "To"),
        ),
        (
            "charset=latin1",
            turn(
                CLEAN,
                Some("application/x-www-form-urlencoded; charset=latin1"),
            ),
            "invalid_body",
            ("header", "content-type"),
        ),
        (
            // The service sends a body without a Content-Type as JSON.
            "no Content-Type",
            turn(CLEAN, None),
            "invalid_body",
            ("header", "content-type"),
        ),
        (
            "a field outside the summary",
            turn(&format!("{CLEAN}&Price=0"), Some(FORM)),
            "unexpected_field",
            ("field", "Price"),
        ),
    ] {
        let answer = service.propose(&refused).await;
        answer.assert_error(400, code, what);
        assert_eq!(
            answer.json()[names.0],
            names.1,
            "{what}: {}",
            answer.describe()
        );
    }
    let clean = turn(&format!("{CLEAN}{CALLBACK}"), Some(FORM));
    let operation = service.proposed(&clean).await;
    assert_eq!(operation.terms["tags"], json!(["vip", "callback"]));
    assert_eq!(operation.terms["customer"], "Ann Lee");
    assert!(app.executions().is_empty(), "{:?}", app.executions());
    let answer = service
        .perform(&clean, &approval_message("msg_forms_1", &operation))
        .await;
    assert_outcome(&answer, "performed", "the approval message");
    let executions = app.executions();
    assert_eq!(executions.len(), 1, "{executions:?}");
    assert_eq!(executions[0]["to"], operation.terms["to"]);
    assert_eq!(executions[0]["customer"], operation.terms["customer"]);
    assert_eq!(executions[0]["tags"], operation.terms["tags"]);
}

poppy_e2e::store_tests!(a_company_agent_describes_a_form_body);

/// `explain` reads a form body as the gateway does (the same front door), and `check` shows
/// what a form route accepts.
#[test]
fn explain_and_check_read_forms() {
    let config = GatewayBuilder::new("http://127.0.0.1:1")
        .policy("calls.toml", POLICIES)
        .write();
    let explain = |body: &str, content_type: &str| {
        let header = format!("Content-Type: {content_type}");
        run_binary(
            &binaries::gateway(),
            &[
                "explain",
                "--config",
                config.config.to_str().unwrap(),
                "--path",
                CALLS,
                "--header",
                &header,
                "--body",
                body,
            ],
            "",
            &[("POPPY_GATEWAY_KEYS", TEST_KEYS)],
            Duration::from_secs(20),
        )
    };
    let run = explain(&format!("{CLEAN}{CALLBACK}"), FORM);
    run.assert_code(0, "a form request to a form route");
    for shown in [
        "policy `create_call`",
        "from form field `Customer[name]`",
        "Ann Lee",
    ] {
        assert!(
            run.stdout.contains(shown),
            "shows `{shown}`:\n{}",
            run.describe()
        );
    }
    let run = explain(&format!("{CLEAN}&To=%2B19995550000"), FORM);
    run.assert_code(1, "a twin");
    assert!(
        run.stdout.contains("\"field\": \"To\""),
        "{}",
        run.describe()
    );

    let check = run_binary(
        &binaries::gateway(),
        &["check", "--config", config.config.to_str().unwrap()],
        "",
        &[("POPPY_GATEWAY_KEYS", TEST_KEYS)],
        Duration::from_secs(20),
    );
    check.assert_code(0, "check");
    for shown in [
        "/2010-04-01/Accounts/{AccountSid}/Calls/{Sid}.json update_call",
        "accepts form: terms Customer[name], From, Tags[], To; ignored StatusCallback, Lines",
    ] {
        assert!(
            check.stdout.contains(shown),
            "shows `{shown}`:\n{}",
            check.describe()
        );
    }
}

macro_rules! form_tests {
    ($($name:ident => $framework:expr),+ $(,)?) => {
        $(
            mod $name {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    form_bodies_are_held_and_executed_as_approved($framework, Store::Memory).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    form_bodies_are_held_and_executed_as_approved($framework, Store::Redis).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn structured_memory() {
                    structured_spellings_read_one_way($framework, Store::Memory).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn structured_redis() {
                    structured_spellings_read_one_way($framework, Store::Redis).await
                }
            }
        )+
    };
}

form_tests!(
    flask => Framework::Flask,
    starlette => Framework::Starlette,
    express => Framework::Express,
);
