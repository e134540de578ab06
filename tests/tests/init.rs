//! `poppy-gateway init`: drafts from three real OpenAPI descriptions (Twilio's, OpenAPI 3.0.1
//! JSON with form bodies and `{Sid}.json` paths; Resend's, OpenAPI 3.1.2 YAML with JSON
//! bodies; Stripe's, OpenAPI 3.0.0 with HTML descriptions, DELETEs, a multipart upload and a
//! required list; trimmed in tests/fixtures/openapi/) and from running MCP servers (the
//! Python SDK's upstream.py and init_servers.py), which `check` accepts. A drafted route
//! (form, JSON, a DELETE) or tool holds a Personal Agent's request with a summary naming every
//! term's value, and executes it once, as sent, when approved (both stores); no write route
//! is left to pass through unapproved, and a body the gateway can't read is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use poppy_e2e::mcp_client::{self, MCP_PATH};
use poppy_e2e::python_mcp::PythonMcpServer;
use poppy_e2e::{
    GatewayBuilder, RedisServer, Request, Run, Session, Stack, Store, binaries, run_binary,
};
use serde_json::{Map, Value, json};

const TWILIO: &str = "twilio_api_v2010.json";
const RESEND: &str = "resend.yaml";
const STRIPE: &str = "stripe_spec3.json";
const FORM: &str = "application/x-www-form-urlencoded";

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/openapi")
        .join(name)
        .display()
        .to_string()
}

fn gateway_cli(args: &[&str]) -> Run {
    run_binary(&binaries::gateway(), args, "", &[], Duration::from_secs(60))
}

/// `init --openapi FIXTURE`, which must succeed: the drafts and the report.
fn draft(name: &str, extra: &[&str]) -> Run {
    let path = fixture(name);
    let mut args = vec!["init", "--openapi", path.as_str()];
    args.extend_from_slice(extra);
    let run = gateway_cli(&args);
    run.assert_code(0, &format!("init --openapi {name}"));
    run
}

/// `check` of a gateway.toml naming `policy` (and `extra` config).
fn check(policy: &str, extra: &str) -> Run {
    let dir = GatewayBuilder::new("http://127.0.0.1:9")
        .policy("drafts.toml", policy)
        .extra_config(extra)
        .write();
    gateway_cli(&["check", "--config", dir.config.to_str().unwrap()])
}

/// One drafted table, read back from the draft's text: its keys and its terms (name, source
/// kind, source value).
struct Drafted {
    method: String,
    path: String,
    terms: Vec<(String, String, String)>,
}

fn drafted(text: &str, name: &str) -> Drafted {
    let start = text
        .find(&format!("\nname = \"{name}\"\n"))
        .unwrap_or_else(|| panic!("no draft named {name} in:\n{text}"));
    let block = &text[start..];
    let block = &block[..block[1..].find("\n[[").map_or(block.len(), |i| i + 1)];
    let key = |k: &str| {
        block
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} = \"")))
            .map(|v| v.trim_end_matches('"').to_owned())
            .unwrap_or_default()
    };
    let terms = block
        .lines()
        .skip_while(|l| !l.ends_with(".terms]"))
        .skip(1)
        .take_while(|l| l.contains(" = { "))
        .map(|l| {
            let (term, source) = l.split_once(" = { ").unwrap();
            let (kind, value) = source.split_once(" = \"").unwrap();
            let value = value.split_once('"').unwrap().0;
            (term.to_owned(), kind.to_owned(), value.to_owned())
        })
        .collect();
    Drafted {
        method: key("method"),
        path: key("path"),
        terms,
    }
}

/// A value for each term: plain letters and digits, so the summary shows them as they are.
fn value_of(i: usize) -> String {
    format!("val{i}q")
}

#[test]
fn the_drafts_of_two_real_descriptions_pass_check() {
    for (name, live, commented_or_skipped) in [
        (
            TWILIO,
            vec![
                "drafted    POST /2010-04-01/Accounts/{AccountSid}/Calls.json  CreateCall",
                "drafted    POST /2010-04-01/Accounts/{AccountSid}/Calls/{Sid}.json  UpdateCall  (11 terms)",
                "drafted    DELETE /2010-04-01/Accounts/{AccountSid}/Calls/{Sid}.json  DeleteCall  (2 terms)",
            ],
            vec!["skipped    GET /2010-04-01/Accounts/{AccountSid}/Calls.json: not a write"],
        ),
        (
            RESEND,
            vec![
                "drafted    POST /emails  emails_send  (14 terms)",
                "drafted    PATCH /domains/{domain_id}  domains_update  (6 terms)",
                "drafted    DELETE /api-keys/{api_key_id}  api-keys_remove  (1 terms)",
            ],
            vec!["skipped    GET /emails/{email_id}: not a write"],
        ),
    ] {
        let run = draft(name, &[]);
        for line in live.iter().chain(&commented_or_skipped) {
            assert!(
                run.stderr.contains(line),
                "{name}: no {line:?}:\n{}",
                run.stderr
            );
        }
        assert!(
            run.stdout
                .contains("# TODO: rewrite in plain language\nsummary = ")
        );
        let checked = check(&run.stdout, "");
        checked.assert_code(0, &format!("check of the drafts of {name}"));
        // The form route says what it accepts: every field of the description, each optional
        // (`?`) as the description has it.
        if name == TWILIO {
            assert!(
                checked.stdout.contains("accepts form: terms FallbackMethod?, FallbackUrl?, Method?, Status?, StatusCallback?, StatusCallbackMethod?, TimeLimit?, Twiml?, Url?; ignored none"),
                "{}",
                checked.stdout
            );
            // A list sent as the field repeated: a term holding one value, several refused.
            assert!(run.stdout.contains(
                "status_callback_event = { form = \"StatusCallbackEvent\", optional = true }"
            ));
            assert!(run.stderr.contains(
                "refuses    POST /2010-04-01/Accounts/{AccountSid}/Calls.json  CreateCall: a request with several values of form field `StatusCallbackEvent`"
            ), "{}", run.stderr);
        }
    }
}

/// The trimmed fixtures are still valid descriptions (every `$ref` kept): checked by
/// `openapi-spec-validator` (tests/deps/python/openapi).
#[test]
fn the_fixtures_are_valid_openapi() {
    let script = "import sys\n\
        from openapi_spec_validator import validate\n\
        from openapi_spec_validator.readers import read_from_filename\n\
        spec, _ = read_from_filename(sys.argv[1])\n\
        validate(spec)\n\
        print(spec['openapi'])\n";
    for (name, version) in [(TWILIO, "3.0.1"), (RESEND, "3.1.2"), (STRIPE, "3.0.0")] {
        let python = poppy_e2e::thirdparty::python("openapi");
        let path = fixture(name);
        let run = run_binary(
            &python,
            &["-c", script, &path],
            "",
            &[],
            Duration::from_secs(60),
        );
        run.assert_code(0, &format!("openapi-spec-validator on {name}"));
        assert_eq!(run.stdout.trim(), version);
    }
}

#[test]
fn selection_by_glob_and_output_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("emails.toml");
    let out_arg = out.to_str().unwrap();
    let run = draft(
        RESEND,
        &[
            "--include",
            "emails/*",
            "--exclude",
            "*/cancel",
            "--output",
            out_arg,
        ],
    );
    assert!(run.stdout.is_empty(), "{}", run.describe());
    assert!(run.stderr.contains("drafted    POST /emails  emails_send"));
    assert!(
        run.stderr
            .contains("skipped    POST /emails/{email_id}/cancel: matched by --exclude")
    );
    assert!(
        run.stderr
            .contains("skipped    DELETE /domains/{domain_id}: not matched by --include")
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("name = \"emails_send\"") && !text.contains("emails_cancel"));
    // An existing file is kept.
    let again = gateway_cli(&["init", "--openapi", &fixture(RESEND), "--output", out_arg]);
    again.assert_code(2, "an existing --output");
    assert!(again.stderr.contains("--force"), "{}", again.describe());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
}

/// A drafted route, behind the gateway: held with every term's value in the summary, then
/// executed once, with the body as sent.
async fn hold_and_execute(store: Store, fixture_name: &str, name: &str, form: bool) {
    let text = draft(fixture_name, &[]).stdout;
    let route = drafted(&text, name);
    let mut path = route.path.clone();
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut values = Vec::new();
    for (i, (_, kind, source)) in route.terms.iter().enumerate() {
        let value = value_of(i);
        match kind.as_str() {
            "path" => path = path.replace(&format!("{{{source}}}"), &value),
            "form" | "body" => fields.push((source.clone(), value.clone())),
            other => panic!("a term of kind {other} in {name}"),
        }
        values.push(value);
    }
    let body = if form {
        fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    } else {
        let object: Map<String, Value> = fields
            .iter()
            .map(|(k, v)| {
                (
                    k.trim_start_matches("$.").to_owned(),
                    Value::from(v.clone()),
                )
            })
            .collect();
        Value::Object(object).to_string()
    };
    let content_type = if form { FORM } else { "application/json" };
    let stack = Stack::start_with(store, |b| b.policy("drafts.toml", &text));
    let session = Session::signed_in(&format!("ses_init_{name}"), "acct_1");
    let request = Request::agent(&route.method, &path, &session)
        .body(body.clone().into_bytes(), content_type);
    let operation = stack.gateway.send(&request).await.operation();
    for (value, (term, _, _)) in values.iter().zip(&route.terms) {
        assert!(
            operation.summary.contains(value.as_str()),
            "the summary names {term}'s value {value}: {}",
            operation.summary
        );
        assert_eq!(operation.terms[term], value.as_str(), "term {term}");
    }
    stack.assert_executions(0, "held");
    let approved = stack
        .gateway
        .send(&request.clone().approve(&operation))
        .await;
    approved.assert_upstream_answer(1, &route.method, &path);
    let again = stack.gateway.send(&request.approve(&operation)).await;
    again.assert_replay_of(&approved, "the same approval again");
    stack.assert_executions(1, "approved once");
    let executed = &stack.upstream.requests()[0];
    assert_eq!(executed.body, body.as_bytes(), "the body as approved");
}

async fn a_drafted_form_route_holds_and_executes_once(store: Store) {
    hold_and_execute(store, TWILIO, "UpdateCall", true).await;
}

async fn a_drafted_json_route_holds_and_executes_once(store: Store) {
    hold_and_execute(store, RESEND, "emails_send", false).await;
}

poppy_e2e::store_tests!(
    a_drafted_form_route_holds_and_executes_once,
    a_drafted_json_route_holds_and_executes_once
);

/// `init --mcp` against the Python SDK's server, answering JSON and then event streams:
/// a `[[tool]]` for each tool but the read-only one, which `check` accepts with `[mcp]`;
/// the same with FastMCP's.
#[test]
fn mcp_tools_are_drafted_but_the_read_only_one() {
    for json in [true, false] {
        let server = PythonMcpServer::start(json);
        let url = format!("{}/mcp", server.url());
        let run = gateway_cli(&["init", "--mcp", &url]);
        run.assert_code(0, "init --mcp");
        for tool in ["exchange_item", "confirm_exchange", "restream_exchange"] {
            assert!(
                run.stdout
                    .contains(&format!("[[tool]]\nname = \"{tool}\"\ntool = \"{tool}\"\n")),
                "{tool}:\n{}",
                run.stdout
            );
        }
        assert!(
            run.stdout
                .contains("order_id = { argument = \"$.order_id\" }")
        );
        assert!(!run.stdout.contains("lookup_order"), "{}", run.stdout);
        assert!(
            run.stderr
                .contains("skipped    tool lookup_order: readOnlyHint: true"),
            "{}",
            run.stderr
        );
        check(&run.stdout, "[mcp]\npath = \"/mcp\"\n").assert_code(0, "check of the tool drafts");
    }
    // FastMCP's server: titled tools, output schemas, event streams.
    let fastmcp = PythonMcpServer::start_fastmcp();
    let run = gateway_cli(&["init", "--mcp", &format!("{}/mcp", fastmcp.url())]);
    run.assert_code(0, "init --mcp of FastMCP");
    assert!(
        run.stderr
            .contains("drafted    tool exchange_item  exchange_item  (3 terms)"),
        "{}",
        run.stderr
    );
    check(&run.stdout, "[mcp]\npath = \"/mcp\"\n").assert_code(0, "check of FastMCP's drafts");
    let refused = gateway_cli(&["init", "--mcp", "http://127.0.0.1:9/mcp"]);
    refused.assert_code(2, "no MCP server there");
    assert!(
        refused.stderr.contains("initialize"),
        "{}",
        refused.describe()
    );
}

/// A drafted `[[tool]]` in front of the Python SDK's server: the call is held with every
/// argument's value in the summary, and executes once when approved.
async fn a_drafted_tool_holds_and_executes_once(store: Store) {
    let server = PythonMcpServer::start(true);
    let run = gateway_cli(&["init", "--mcp", &format!("{}{MCP_PATH}", server.url())]);
    run.assert_code(0, "init --mcp");
    let redis = (store == Store::Redis).then(RedisServer::start);
    let mut builder = GatewayBuilder::new(&server.url())
        .policy("tools.toml", &run.stdout)
        .extra_config(&format!("[mcp]\npath = \"{MCP_PATH}\""));
    if let Some(redis) = &redis {
        builder = builder.store_url(&redis.url());
    }
    let gateway = builder.start();
    let session = Session::signed_in("ses_init_tool", "acct_1");
    let client = mcp_client::connect(&gateway.base_url(), &session, true).await;
    let arguments = json!({"order_id": "ord1q", "item_id": "itm2q", "replacement_sku": "sku3q"});
    let call = || mcp_client::call("exchange_item", arguments.clone());
    let held = mcp_client::call_ok(&client, call()).await;
    let operation = mcp_client::held_operation(&held, "a drafted tool");
    for value in ["ord1q", "itm2q", "sku3q"] {
        assert!(operation.summary.contains(value), "{}", operation.summary);
    }
    assert_eq!(server.count("exchange_item").await, 0, "held");
    let done = mcp_client::call_ok(&client, mcp_client::approved(call(), &operation)).await;
    assert_eq!(done["structuredContent"]["execution"], 1, "{done}");
    assert_eq!(
        done["structuredContent"]["replacement_sku"], "sku3q",
        "{done}"
    );
    let again = mcp_client::call_ok(&client, mcp_client::approved(call(), &operation)).await;
    assert_eq!(
        again["structuredContent"], done["structuredContent"],
        "a replay"
    );
    assert_eq!(server.count("exchange_item").await, 1, "executed once");
}

poppy_e2e::store_tests!(a_drafted_tool_holds_and_executes_once);

/// Stripe's writes: every one drafted live (a DELETE on its path term, the multipart upload
/// and the required list held and refused), summaries in plain text, and the file passes
/// `check`. Before, 2 DELETEs, the upload and the list were commented out: unheld.
#[test]
fn every_write_of_stripe_s_description_is_held() {
    let run = draft(STRIPE, &[]);
    for line in [
        "drafted    DELETE /v1/customers/{customer}  DeleteCustomersCustomer  (1 terms)",
        "drafted    DELETE /v1/customers/{customer}/tax_ids/{id}  DeleteCustomersCustomerTaxIdsId  (2 terms)",
        "drafted    POST /v1/files  PostFiles  (1 terms)",
        "refuses    POST /v1/files  PostFiles: a multipart/form-data body",
        "8 drafted, 0 commented out, 7 skipped;",
    ] {
        assert!(run.stderr.contains(line), "no {line:?}:\n{}", run.stderr);
    }
    assert!(!run.stderr.contains("UNHELD"), "{}", run.stderr);
    assert!(!run.stdout.contains("UNAPPROVED"), "{}", run.stdout);
    for line in [
        "summary = \"Permanently deletes a customer: customer {customer}.\"",
        "summary = \"\"\"\nCreates a new customer object.\n\n{...}\"\"\"",
        "enabled_events = { form = \"enabled_events\" }\n",
        "metadata = { form = \"metadata\", optional = true }",
        "action = { value = \"POST /v1/files\" }",
    ] {
        assert!(run.stdout.contains(line), "no {line:?}:\n{}", run.stdout);
    }
    // No HTML, and no residue of it, in what the User reads.
    for summary in run.stdout.lines().filter(|l| l.starts_with("summary = ")) {
        assert!(
            !summary.contains('<') && !summary.contains("/p") && !summary.contains("href"),
            "{summary}"
        );
    }
    check(&run.stdout, "").assert_code(0, "check of Stripe's drafts");
}

/// A drafted Stripe DELETE (its path term only) holds, executes once when approved, and
/// replays; its multipart upload is refused, never forwarded.
async fn a_drafted_delete_holds_and_an_upload_is_refused(store: Store) {
    let text = draft(STRIPE, &[]).stdout;
    let stack = Stack::start_with(store, |b| b.policy("drafts.toml", &text));
    let session = Session::signed_in("ses_init_stripe", "acct_1");
    let delete = Request::agent("DELETE", "/v1/customers/cus_9q", &session);
    let operation = stack.gateway.send(&delete).await.operation();
    assert!(
        operation.summary.contains("cus_9q"),
        "{}",
        operation.summary
    );
    stack.assert_executions(0, "held");
    let approved = stack
        .gateway
        .send(&delete.clone().approve(&operation))
        .await;
    approved.assert_upstream_answer(1, "DELETE", "/v1/customers/cus_9q");
    let again = stack.gateway.send(&delete.approve(&operation)).await;
    again.assert_replay_of(&approved, "the same approval again");
    let upload = Request::agent("POST", "/v1/files", &session).body(
        b"--x\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\ndispute_evidence\r\n--x--\r\n"
            .to_vec(),
        "multipart/form-data; boundary=x",
    );
    let refused = stack.gateway.send(&upload).await;
    refused.assert_error(400, "invalid_body", "a multipart body on a drafted route");
    stack.assert_executions(1, "the DELETE once; the upload never");
}

poppy_e2e::store_tests!(a_drafted_delete_holds_and_an_upload_is_refused);

/// A YAML description with an integer beyond 64 bits (as a published one has) reads.
#[test]
fn a_yaml_description_with_a_big_integer_reads() {
    let text = std::fs::read_to_string(fixture(RESEND)).unwrap();
    let big = text.replacen(
        "components:\n",
        "components:\n  x-big: 99999999999999999999\n",
        1,
    );
    assert_ne!(big, text);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    std::fs::write(&path, big).unwrap();
    let run = gateway_cli(&["init", "--openapi", path.to_str().unwrap()]);
    run.assert_code(0, "init of a YAML description with a big integer");
    assert!(
        run.stdout.contains("name = \"emails_send\""),
        "{}",
        run.describe()
    );
}

/// `init` reads no gateway.toml: its help doesn't offer `--config`.
#[test]
fn init_help_lists_no_config() {
    let run = gateway_cli(&["init", "--help"]);
    run.assert_code(0, "init --help");
    assert!(run.stdout.contains("--openapi"), "{}", run.describe());
    assert!(!run.stdout.contains("--config"), "{}", run.stdout);
}

/// The headers one of init_servers.py's servers received, one object per request.
async fn seen(server: &PythonMcpServer) -> Vec<Value> {
    poppy_e2e::gateway::http_client(poppy_e2e::gateway::HTTP_TIMEOUT)
        .get(format!("{}/seen", server.url()))
        .send()
        .await
        .expect("GET /seen")
        .json()
        .await
        .expect("seen")
}

/// `init --mcp` at a URL that redirects to another origin (another port) refuses to follow,
/// so the operator's `--header` never reaches the other server.
#[tokio::test]
async fn init_mcp_sends_no_header_to_another_origin() {
    let other = PythonMcpServer::start_script("mcp2", "init_servers.py", &["--repeating"]);
    let target = format!("{}{MCP_PATH}", other.url());
    let front =
        PythonMcpServer::start_script("mcp2", "init_servers.py", &["--redirect-to", &target]);
    let run = gateway_cli(&[
        "init",
        "--mcp",
        &format!("{}{MCP_PATH}", front.url()),
        "--header",
        "X-Api-Key: sk_secret",
    ]);
    run.assert_code(2, "a redirect to another origin");
    assert!(
        run.stderr
            .contains(&format!("redirected to {target}, another origin")),
        "{}",
        run.describe()
    );
    let front_saw = seen(&front).await;
    assert_eq!(front_saw[0]["x-api-key"], "sk_secret", "{front_saw:?}");
    let other_saw = seen(&other).await;
    assert!(other_saw.is_empty(), "the other origin got {other_saw:?}");
}

/// A server listing a tool twice and repeating its `nextCursor`: drafted once, listing
/// stopped at the repeat, and `check` accepts the file.
#[test]
fn init_mcp_drafts_a_repeated_tool_once_and_stops_on_a_repeated_cursor() {
    let server = PythonMcpServer::start_script("mcp2", "init_servers.py", &["--repeating"]);
    let run = gateway_cli(&["init", "--mcp", &format!("{}{MCP_PATH}", server.url())]);
    run.assert_code(0, "init --mcp");
    for line in [
        "note       tools/list: the server gave the cursor `page2` again; stopped there",
        "drafted    tool send_invoice  send_invoice  (2 terms)",
        "skipped    tool send_invoice: listed again by the server",
        "skipped    tool get_invoice: readOnlyHint: true",
    ] {
        assert!(run.stderr.contains(line), "no {line:?}:\n{}", run.stderr);
    }
    assert_eq!(
        run.stdout.matches("\n[[tool]]\n").count(),
        1,
        "{}",
        run.stdout
    );
    check(&run.stdout, "[mcp]\npath = \"/mcp\"\n").assert_code(0, "check of the tool drafts");
}

/// A server whose tools are all read-only: nothing to approve, said in the file and on
/// stderr, and no table; `check` accepts the file.
#[test]
fn init_mcp_of_read_only_tools_says_nothing_needs_approval() {
    let server = PythonMcpServer::start_script("mcp2", "init_servers.py", &["--read-only"]);
    let run = gateway_cli(&["init", "--mcp", &format!("{}{MCP_PATH}", server.url())]);
    run.assert_code(0, "init --mcp of read-only tools");
    assert!(
        run.stdout.contains("# Nothing here needs approval"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("\n[[tool]]\n"), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("nothing drafted: no action here needs approval (2 skipped)"),
        "{}",
        run.stderr
    );
    // The file says `nothing_to_approve`, so it loads: `check` passes, with a warning.
    let checked = check(&run.stdout, "[mcp]\npath = \"/mcp\"\n");
    checked.assert_code(0, "check of a file with nothing to approve");
    assert!(
        checked
            .stdout
            .contains("holds no policy (nothing_to_approve)"),
        "{}",
        checked.describe()
    );
}
