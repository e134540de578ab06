//! Real APIs as their SDKs call them, through the UNTOUCHED drafts of `poppy-gateway init`
//! (issue 38): Stripe's form API (nested `metadata[k]`, `address[city]`, indexed
//! `tax_id_data[0][type]`, lists `expand[]`, `enabled_events[0]`) and OpenAI's JSON API
//! (nested objects, arrays of objects), trimmed in tests/fixtures/openapi/. Behind the gateway,
//! Stoplight Prism mocks each API from the same description and validates every request
//! (`--errors`: an invalid one gets a 4xx). Each request an official SDK sends, the required
//! fields only or every optional one, is held (403 approval_required), executed once when
//! approved (Prism answers 2xx: it found the request valid), and replayed without reaching
//! Prism; both stores. `check` passes every draft, and no write route is left unheld.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use poppy_e2e::markdown::unescape;
use poppy_e2e::prism::PrismMock;
use poppy_e2e::{
    GatewayBuilder, Operation, RedisServer, Request, Session, Store, binaries, run_binary,
};
use serde_json::{Value, json};

const STRIPE: &str = "stripe_spec3.json";
const OPENAI: &str = "openai.json";
const FORM: &str = "application/x-www-form-urlencoded";
const JSON: &str = "application/json";
/// The API key an SDK sends: Prism wants the description's security scheme satisfied.
const API_KEY: &str = "Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/openapi")
        .join(name)
}

/// `init --openapi FIXTURE`: the drafts (stdout) and the report (stderr).
fn init(name: &str) -> (String, String) {
    let path = fixture(name).display().to_string();
    let run = run_binary(
        &binaries::gateway(),
        &["init", "--openapi", &path],
        "",
        &[],
        Duration::from_secs(60),
    );
    run.assert_code(0, &format!("init --openapi {name}"));
    (run.stdout, run.stderr)
}

/// A request as an SDK sends it.
struct Call {
    what: &'static str,
    method: &'static str,
    path: &'static str,
    content_type: &'static str,
    body: String,
}

fn form(what: &'static str, method: &'static str, path: &'static str, body: &str) -> Call {
    Call {
        what,
        method,
        path,
        content_type: FORM,
        body: body.to_owned(),
    }
}

fn json_call(what: &'static str, method: &'static str, path: &'static str, body: Value) -> Call {
    Call {
        what,
        method,
        path,
        content_type: JSON,
        body: if body.is_null() {
            String::new()
        } else {
            body.to_string()
        },
    }
}

impl Call {
    fn request(&self, session: &Session) -> Request {
        let request =
            Request::agent(self.method, self.path, session).header("Authorization", API_KEY);
        if self.body.is_empty() && self.method == "DELETE" {
            return request;
        }
        request.body(self.body.as_bytes().to_vec(), self.content_type)
    }
}

/// The gateway with the drafts of `name` in front of Prism mocking the same description.
struct World {
    gateway: poppy_e2e::Gateway,
    prism: PrismMock,
    _redis: Option<RedisServer>,
    session: Session,
}

fn world(store: Store, name: &str, mount: &str) -> World {
    let (drafts, _) = init(name);
    let redis = (store == Store::Redis).then(RedisServer::start);
    let prism = PrismMock::start(&fixture(name), mount);
    let mut builder = GatewayBuilder::new(&prism.url()).policy("drafts.toml", &drafts);
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    World {
        gateway: builder.start(),
        prism,
        _redis: redis,
        session: Session::signed_out("ses_sdk"),
    }
}

impl World {
    /// Held (nothing reaches Prism), approved once (Prism receives the exact bytes once and
    /// answers `expect`), replayed (Prism receives nothing more): the operation it was held as.
    async fn held_executed_once_replayed(&self, call: &Call, expect: u16) -> Operation {
        let before = self.prism.exchanges().len();
        let request = call.request(&self.session);
        let operation = self.gateway.send(&request).await.operation_in(call.what);
        assert_eq!(
            self.prism.exchanges().len(),
            before,
            "{}: held, nothing forwarded",
            call.what
        );
        let approved = request.clone().approve(&operation);
        let first = self.gateway.send(&approved).await;
        let exchanges = self.prism.exchanges();
        assert_eq!(
            exchanges.len(),
            before + 1,
            "{}: executed once: {:?}",
            call.what,
            exchanges.iter().map(|e| e.describe()).collect::<Vec<_>>()
        );
        let executed = &exchanges[before];
        assert_eq!(
            (executed.method.as_str(), executed.path.as_str()),
            (call.method, call.path),
            "{}",
            call.what
        );
        assert_eq!(
            executed.body, request.body,
            "{}: the approved bytes are what the API received",
            call.what
        );
        assert_eq!(
            first.status,
            expect,
            "{}: Prism's answer to the approved request: {}\n{}",
            call.what,
            executed.describe(),
            self.prism.log()
        );
        self.gateway
            .send(&approved)
            .await
            .assert_replay_of(&first, call.what);
        assert_eq!(
            self.prism.exchanges().len(),
            before + 1,
            "{}: a retry is replayed, not sent again",
            call.what
        );
        operation
    }
}

/// Every draft of both descriptions passes `check`, and every write is held (none left to pass
/// through unapproved): the multipart upload is held and refused.
#[test]
fn the_drafts_pass_check_and_hold_every_write() {
    for (name, writes) in [(STRIPE, 8), (OPENAI, 8)] {
        let (drafts, report) = init(name);
        assert!(!report.contains("UNHELD"), "{name}:\n{report}");
        assert!(!drafts.contains("UNAPPROVED"), "{name}:\n{drafts}");
        assert_eq!(
            report.lines().filter(|l| l.starts_with("drafted")).count(),
            writes,
            "{name}:\n{report}"
        );
        let dir = GatewayBuilder::new("http://127.0.0.1:9")
            .policy("drafts.toml", &drafts)
            .write();
        run_binary(
            &binaries::gateway(),
            &["check", "--config", dir.config.to_str().unwrap()],
            "",
            &[],
            Duration::from_secs(60),
        )
        .assert_code(0, &format!("check of the drafts of {name}"));
    }
}

async fn stripe_sdk_requests(store: Store) {
    let world = world(store, STRIPE, "");
    let ok = 200;
    // `stripe.Customer.create()`: no field at all, the SDK sends an empty form.
    let op = world
        .held_executed_once_replayed(
            &form("create a customer, no field", "POST", "/v1/customers", ""),
            ok,
        )
        .await;
    assert_eq!(op.terms, json!({}), "no term set");
    // Some optional fields, nested maps and a list, as stripe-python encodes them.
    let op = world
        .held_executed_once_replayed(
            &form(
                "create a customer with nested fields",
                "POST",
                "/v1/customers",
                "email=jenny%40example.com&name=Jenny+Rosen&metadata%5Border_id%5D=1\
                 &address%5Bcity%5D=Paris&address%5Bline1%5D=1+rue+X&expand%5B%5D=tax\
                 &preferred_locales%5B0%5D=fr&preferred_locales%5B1%5D=en\
                 &invoice_settings%5Bfooter%5D=Thanks",
            ),
            ok,
        )
        .await;
    assert_eq!(
        op.terms,
        json!({
            "email": "jenny@example.com",
            "name": "Jenny Rosen",
            "metadata": {"order_id": "1"},
            "address": {"city": "Paris", "line1": "1 rue X"},
            "expand": ["tax"],
            "preferred_locales": ["fr", "en"],
            "invoice_settings": {"footer": "Thanks"},
        })
    );
    let summary = unescape(&op.summary);
    assert!(
        summary.starts_with("Creates a new customer object.\n\n")
            && summary.contains("- address: city: Paris, line1: 1 rue X")
            && summary.contains("- metadata: order_id: 1")
            && !summary.contains("balance"),
        "one sentence and the values this request sets:\n{summary}"
    );
    // An indexed list of objects, as stripe-node's `qs` writes it (brackets unencoded).
    // Prism can't read one in a form body (its own limit: it answers 415 "Cannot
    // deserialize JSON object array in form data request body"); the gateway holds it,
    // forwards the approved bytes once and replays.
    let op = world
        .held_executed_once_replayed(
            &form(
                "create a customer with an indexed list",
                "POST",
                "/v1/customers",
                "tax_id_data[0][type]=eu_vat&tax_id_data[0][value]=DE123456789",
            ),
            415,
        )
        .await;
    assert_eq!(
        op.terms["tax_id_data"],
        json!([{"type": "eu_vat", "value": "DE123456789"}])
    );
    assert!(
        world
            .prism
            .log()
            .contains("Cannot deserialize JSON object array"),
        "Prism's 415 is its form reader's limit, not the request:\n{}",
        world.prism.log()
    );
    for call in [
        form(
            "update a customer",
            "POST",
            "/v1/customers/cus_1",
            "description=VIP&metadata%5Btier%5D=gold&expand%5B%5D=default_source",
        ),
        form("delete a customer", "DELETE", "/v1/customers/cus_1", ""),
        form(
            "delete a tax id",
            "DELETE",
            "/v1/customers/cus_1/tax_ids/txi_1",
            "",
        ),
        form(
            "refund, required only",
            "POST",
            "/v1/refunds",
            "charge=ch_1",
        ),
        form(
            "refund, every field an SDK sets",
            "POST",
            "/v1/refunds",
            "charge=ch_1&amount=500&reason=requested_by_customer&metadata%5Border_id%5D=6735\
             &expand%5B%5D=charge",
        ),
        // (`name=T-shirt` alone is valid too, but Prism reads the absent `deepObject` group
        // `package_dimensions` as `{}` and then wants its required members: its own 422.)
        form(
            "product with images and dimensions",
            "POST",
            "/v1/products",
            "name=T-shirt&images%5B0%5D=https%3A%2F%2Fexample.com%2Ft.png\
             &package_dimensions%5Bheight%5D=1.5&package_dimensions%5Blength%5D=20\
             &package_dimensions%5Bweight%5D=300&package_dimensions%5Bwidth%5D=15\
             &metadata%5Bsku%5D=ts-1&shippable=true",
        ),
        form(
            "webhook endpoint, a required list",
            "POST",
            "/v1/webhook_endpoints",
            "url=https%3A%2F%2Fexample.com%2Fhook&enabled_events%5B0%5D=charge.succeeded\
             &enabled_events%5B1%5D=charge.failed",
        ),
    ] {
        world.held_executed_once_replayed(&call, ok).await;
    }
    // A field the description does not have is refused naming it, as Prism would refuse it.
    let answer = world
        .gateway
        .send(
            &form("unknown field", "POST", "/v1/refunds", "charge=ch_1&fee=1")
                .request(&world.session),
        )
        .await;
    assert_eq!(answer.error_code().as_deref(), Some("unexpected_field"));
    // The multipart upload is held and refused, never forwarded.
    let upload = Call {
        what: "upload a file",
        method: "POST",
        path: "/v1/files",
        content_type: "multipart/form-data; boundary=b",
        body: "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\ndispute_evidence\r\n--b--\r\n"
            .to_owned(),
    };
    let answer = world.gateway.send(&upload.request(&world.session)).await;
    assert_eq!(answer.status, 400, "{}", answer.describe());
    assert_eq!(
        world.prism.exchanges().len(),
        10,
        "one execution per approved request, nothing else"
    );
}

async fn openai_sdk_requests(store: Store) {
    let world = world(store, OPENAI, "/v1");
    let ok = 200;
    let op = world
        .held_executed_once_replayed(
            &json_call(
                "embeddings, required only",
                "POST",
                "/v1/embeddings",
                json!({"input": "The food was delicious", "model": "text-embedding-3-small"}),
            ),
            ok,
        )
        .await;
    assert_eq!(op.terms.as_object().unwrap().len(), 2, "{}", op.terms);
    for call in [
        json_call(
            "embeddings, every optional field",
            "POST",
            "/v1/embeddings",
            json!({"input": ["a", "b"], "model": "text-embedding-3-small",
                   "encoding_format": "float", "dimensions": 256, "user": "user-1"}),
        ),
        json_call(
            "assistant, required only",
            "POST",
            "/v1/assistants",
            json!({"model": "gpt-4o"}),
        ),
        json_call(
            "assistant with nested objects and arrays of objects",
            "POST",
            "/v1/assistants",
            json!({"model": "gpt-4o", "name": "Math tutor", "instructions": "Be brief.",
                   "tools": [{"type": "code_interpreter"}],
                   "tool_resources": {"code_interpreter": {"file_ids": ["file-1"]}},
                   "metadata": {"order_id": "1"}, "temperature": 0.5}),
        ),
        json_call(
            "modify an assistant",
            "POST",
            "/v1/assistants/asst_1",
            json!({"name": "Renamed"}),
        ),
        json_call(
            "delete an assistant",
            "DELETE",
            "/v1/assistants/asst_1",
            Value::Null,
        ),
        json_call(
            "vector store, nothing set",
            "POST",
            "/v1/vector_stores",
            json!({}),
        ),
        json_call(
            "vector store with nested fields",
            "POST",
            "/v1/vector_stores",
            json!({"name": "kb", "file_ids": ["file-1"], "metadata": {"k": "v"},
                   "expires_after": {"anchor": "last_active_at", "days": 7}}),
        ),
        json_call(
            "delete a vector store",
            "DELETE",
            "/v1/vector_stores/vs_1",
            Value::Null,
        ),
        json_call(
            "batch, required only",
            "POST",
            "/v1/batches",
            json!({"input_file_id": "file-1", "endpoint": "/v1/chat/completions",
                   "completion_window": "24h"}),
        ),
        json_call(
            "batch with metadata",
            "POST",
            "/v1/batches",
            json!({"input_file_id": "file-1", "endpoint": "/v1/chat/completions",
                   "completion_window": "24h", "metadata": {"a": "b"}}),
        ),
    ] {
        world.held_executed_once_replayed(&call, ok).await;
    }
    assert_eq!(world.prism.exchanges().len(), 11);
}

poppy_e2e::store_tests!(stripe_sdk_requests, openai_sdk_requests);
