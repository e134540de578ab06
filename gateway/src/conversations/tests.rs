//! One front door for every interface: a Company Agent's description, a Personal Agent's
//! HTTP request and an MCP call of the same action are refused alike, or admitted with the
//! same terms (and, for the description and the request, the same fingerprint and the same
//! request forwarded). The property tests feed generated requests to each interface's own
//! reading (`describe`, `admit::route`, `mcp::read_post`) and then to the runner's front door
//! (`run::admit_request`), as the service, the proxy and the MCP endpoint do.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::describe::{Described, Limits, bound_to_conversation, describe};
use super::wire::{Answer, Context, Description};
use crate::config::parse_policy_file;
use crate::identity::{RequestTarget, SessionClaims};
use crate::ingress::RouteMatch;
use crate::ingress::admit::{self, Action, Admitted, ApprovalSource, Refused};
use crate::mcp::{Incoming, read_post};
use crate::policy::PolicySet;
use crate::run::{Admission, Arrival, admit_request};
use crate::testkit::{EXCHANGE_POLICY, claims_off, unsigned_jwt};

const UPSTREAM_HOST: &str = "127.0.0.1:9000";
const EXTENSIONS: &str = "\"operations\";v=\"2\"";
const MAX_BODY_BYTES: usize = 1024;

fn policies() -> PolicySet {
    let tool = r#"
[[tool]]
name = "exchange_tool"
tool = "exchange_item"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item {item_id} on order {order_id} for {sku}."
[tool.terms]
order_id = { argument = "$.order_id" }
item_id = { argument = "$.item_id" }
sku = { argument = "$.sku" }
"#;
    let toml = format!("{EXCHANGE_POLICY}{tool}").replace("EXPIRES", "15m");
    PolicySet::new(parse_policy_file(std::path::Path::new("p.toml"), &toml).unwrap())
}

fn claims() -> SessionClaims {
    claims_off()
}

fn session() -> String {
    unsigned_jwt(&serde_json::json!({"sid": "ses_1", "iss": "agent"}))
}

fn context<'a>(conversation_id: &'a str, session: &'a str) -> Context<'a> {
    Context {
        conversation_id,
        poppy_session: session,
        authorization: None,
        poppy_extensions: EXTENSIONS,
        session_request: None,
    }
}

fn description(body: &str) -> Description {
    Description {
        method: "POST".into(),
        path: "/orders/o1/exchanges".into(),
        query: None,
        headers: Vec::new(),
        body: Some(body.into()),
    }
}

/// What a front door gave: the terms, fingerprint and forwarded request, or the refusal's
/// status and `error`.
#[derive(Debug, PartialEq)]
enum Door {
    Admitted {
        terms: String,
        fingerprint: Vec<u8>,
        target: String,
        body: Bytes,
    },
    Refused(u16, String),
}

fn door(result: Result<Admitted, (u16, String)>) -> Door {
    match result {
        Ok(admitted) => Door::Admitted {
            terms: serde_json::to_string(&admitted.terms).unwrap(),
            fingerprint: admitted.fingerprint,
            target: admitted.forward.path_and_query,
            body: admitted.forward.body,
        },
        Err((status, error)) => Door::Refused(status, error),
    }
}

fn refused(refused: &Refused) -> (u16, String) {
    let body = refused.error_body();
    let value: serde_json::Value = serde_json::from_slice(&body.to_bytes()).unwrap();
    (
        refused.status(),
        value["error"].as_str().unwrap().to_owned(),
    )
}

fn answered(answer: &Answer) -> (u16, String) {
    (
        answer.status,
        answer.body["error"].as_str().unwrap().to_owned(),
    )
}

/// The front door of a gateway without a page (and so without an agents rule).
const NO_PAGE: crate::run::Door<'static> = crate::run::Door {
    page_offered: false,
    agents: None,
    metrics: None,
};

/// What the front door let in, or its refusal as status and code.
fn admitted(admission: Result<Admission, Refused>) -> Result<Admitted, (u16, String)> {
    match admission {
        Ok(Admission::Admitted(admitted)) => Ok(admitted),
        Ok(Admission::NotAnAgent) => Err((0, "not_an_agent".into())),
        Err(r) => Err(refused(&r)),
    }
}

fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

/// The conversations service's reading: the description routed, then the runner's front door
/// (as `Seam::run`), the fingerprint not yet bound to the conversation.
fn by_conversation(description: &Description) -> Result<Admitted, (u16, String)> {
    let policies = policies();
    let session = session();
    let limits = Limits {
        policies: &policies,
        upstream_host: UPSTREAM_HOST,
    };
    let Described {
        action,
        headers,
        body,
    } = describe(description, &context("conv_a", &session), &limits).map_err(|a| answered(&a))?;
    let arrival = Arrival {
        headers,
        signed_for: RequestTarget {
            method: "",
            path: "",
        },
        action,
        approval: ApprovalSource::Json {
            value: None,
            place: "message.extensions.operations.approval",
        },
    };
    let body = async move { admit::body_size(body.len(), MAX_BODY_BYTES).map(|()| body) };
    admitted(run(admit_request(&claims(), &NO_PAGE, arrival, body)))
}

/// The proxy's reading of the same request: its raw target and headers routed
/// (`admit::route`, as `service.rs`), then the runner's front door (as `http_api.rs`).
fn by_http(description: &Description) -> Result<Admitted, (u16, String)> {
    let policies = policies();
    let mut headers = HeaderMap::new();
    for (name, value) in &description.headers {
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    headers.insert("poppy-session", HeaderValue::from_str(&session()).unwrap());
    headers.insert("poppy-extensions", HeaderValue::from_static(EXTENSIONS));
    headers.insert(http::header::HOST, HeaderValue::from_static(UPSTREAM_HOST));
    let body = description.body.clone().unwrap_or_default();
    if !body.is_empty() && !headers.contains_key(http::header::CONTENT_TYPE) {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    let raw_target = match &description.query {
        Some(query) => format!("{}?{query}", description.path),
        None => description.path.clone(),
    };
    let (target, route) = admit::route(
        &policies,
        None,
        "POST",
        raw_target.as_bytes(),
        &headers,
        admit::Sender::PersonalAgent,
    )
    .map_err(|r| (r.status, r.error.to_owned()))?;
    let RouteMatch::Policy(policy, captures) = route else {
        return Err((404, "no_action".into()));
    };
    let arrival = Arrival {
        headers,
        signed_for: RequestTarget {
            method: "POST",
            path: "",
        },
        action: Action::Http {
            policy,
            captures,
            method: http::Method::POST,
            target,
        },
        approval: ApprovalSource::Header,
    };
    let body = Bytes::from(body);
    let body = async move { admit::body_size(body.len(), MAX_BODY_BYTES).map(|()| body) };
    admitted(run(admit_request(&claims(), &NO_PAGE, arrival, body)))
}

/// The MCP endpoint's reading of a call of the tool whose arguments are `arguments` (JSON
/// text, spliced as sent): `read_post`, then the runner's front door (as `mcp_api.rs`).
fn by_mcp(arguments: &str) -> Result<Admitted, (u16, String)> {
    let policies = policies();
    let message = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"exchange_item","arguments":{arguments}}}}}"#
    );
    let needs_approval = |name: &str| policies.find_tool(name).is_some();
    let (incoming, _) = read_post(message.as_bytes(), None, needs_approval)
        .map_err(|e| (400, format!("rpc {}", e.code)))?;
    let Incoming::Held(call) = incoming else {
        return Err((400, "not held".into()));
    };
    let mut headers = HeaderMap::new();
    headers.insert("poppy-session", HeaderValue::from_str(&session()).unwrap());
    headers.insert("poppy-extensions", HeaderValue::from_static(EXTENSIONS));
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let arrival = Arrival {
        headers,
        signed_for: RequestTarget {
            method: "POST",
            path: "/mcp",
        },
        action: Action::Tool {
            policy: Arc::clone(&policies.find_tool("exchange_item").unwrap()),
            tool: call.tool.clone(),
            arguments: call.arguments,
            path_and_query: "/mcp".into(),
        },
        approval: ApprovalSource::Json {
            value: call.approval.as_ref(),
            place: "params._meta approval",
        },
    };
    let body = std::future::ready(Ok(Bytes::from(call.forward_body)));
    admitted(run(admit_request(&claims(), &NO_PAGE, arrival, body)))
}

#[test]
fn a_description_reads_like_a_request_and_is_the_conversation_s() {
    let body = r#"{"item_id":"i1","sku":"s1"}"#;
    let a = by_conversation(&description(body)).unwrap();
    assert_eq!(a.policy.name, "exchange");
    assert_eq!(a.terms.get("sku").unwrap(), "s1");
    assert_eq!(a.forward.body.as_ref(), body.as_bytes());
    let names: Vec<&str> = a.forward.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"poppy-session") && names.contains(&"content-type"));
    let again = by_conversation(&description(body)).unwrap();
    assert_eq!(a.fingerprint, again.fingerprint);
    assert_ne!(
        bound_to_conversation("conv_a", &a.fingerprint),
        bound_to_conversation("conv_b", &a.fingerprint)
    );
}

#[test]
fn what_the_proxy_refuses_is_refused() {
    let error = |d: &Description| by_conversation(d).err();
    let bad = |status: u16, error: &str| Some((status, error.to_owned()));
    assert_eq!(
        error(&description(r#"{"item_id":"i1","item_id":"i2","sku":"s"}"#)),
        bad(400, "invalid_body")
    );
    assert_eq!(
        error(&description(
            r#"{"item_id":"i1","sku":"s","refund_to":"x"}"#
        )),
        bad(400, "unexpected_field")
    );
    let mut other_route = description("{}");
    other_route.path = "/orders/o1".into();
    assert_eq!(error(&other_route), bad(404, "no_action"));
    let mut dotted = description("{}");
    dotted.path = "/orders/o1/exchanges.json".into();
    assert_eq!(error(&dotted), bad(400, "invalid_path"));
    let mut fragment = description(r#"{"item_id":"i1","sku":"s"}"#);
    fragment.path = "/orders/ord_7Hk2#x/exchanges".into();
    assert_eq!(error(&fragment), bad(400, "invalid_path"));
    let mut override_header = description(r#"{"item_id":"i1","sku":"s"}"#);
    override_header.headers = vec![("X-HTTP-Method-Override".into(), "DELETE".into())];
    assert_eq!(error(&override_header), bad(400, "invalid_header"));
    let mut credentials = description(r#"{"item_id":"i1","sku":"s"}"#);
    credentials.headers = vec![("Authorization".into(), "Bearer x".into())];
    assert_eq!(error(&credentials), bad(400, "invalid_request"));
    let too_large = description(&format!(
        r#"{{"item_id":"{}","sku":"s"}}"#,
        "i".repeat(2000)
    ));
    assert_eq!(error(&too_large), bad(413, "body_too_large"));
}

#[test]
fn an_approval_is_read_alike_wherever_it_travels() {
    // The same malformed approval: the header's, a message's and an MCP call's refusals name
    // the same member for the same reason.
    let approval = serde_json::json!({"operation_id": "exc_1", "revision": "r 1"});
    let header = crate::protocol::ApprovalHeader::parse([
        br#"operation_id="exc_1", revision="r 1""#.as_slice(),
    ])
    .unwrap_err();
    let json = crate::protocol::ApprovalHeader::from_json(&approval, "message").unwrap_err();
    assert_eq!(
        header.to_string().split_once(' ').unwrap().1,
        json.to_string().split_once(' ').unwrap().1
    );
    let arguments = r#"{"order_id":"o1","item_id":"i1","sku":"s1"}"#;
    let message = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"exchange_item","arguments":{arguments},"_meta":{{"personalagentprotocol.org/approval":{approval}}}}}}}"#
    );
    let policies = policies();
    let (Incoming::Held(call), _) = read_post(message.as_bytes(), None, |n| {
        policies.find_tool(n).is_some()
    })
    .unwrap() else {
        panic!("held");
    };
    assert_eq!(call.approval, Some(approval));
}

/// Path segments a framework, a forwarder or the matcher could read differently.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => Just("o1".to_owned()),
        1 => Just("ord_7Hk2#x".to_owned()),
        1 => Just("o%2F1".to_owned()),
        1 => Just("o%201".to_owned()),
        1 => Just("..".to_owned()),
        1 => Just("o1;v=1".to_owned()),
        1 => Just("O1".to_owned()),
        1 => Just("o<1>".to_owned()),
        1 => Just("o`1".to_owned()),
        1 => Just("%zz".to_owned()),
        1 => Just("o 1".to_owned()),
        1 => "[a-zA-Z0-9_.~%#;<>`-]{1,6}",
    ]
}

fn description_strategy() -> impl Strategy<Value = Description> {
    let suffix = prop_oneof![
        6 => Just(""),
        1 => Just("/"),
        1 => Just(".json"),
        1 => Just("#x"),
        1 => Just("//"),
        1 => Just("/x"),
    ];
    let query = prop_oneof![
        6 => Just(None),
        1 => Just(Some("".to_owned())),
        1 => Just(Some("a=1".to_owned())),
        1 => Just(Some("item_id=i9".to_owned())),
        1 => Just(Some("a=1&a=2".to_owned())),
        1 => Just(Some("%zz".to_owned())),
    ];
    let header = prop_oneof![
        Just(("X-Tenant", "a")),
        Just(("X-HTTP-Method-Override", "DELETE")),
        Just(("Content-Type", "text/plain")),
        Just(("Content-Type", "application/json; charset=utf-8")),
        Just(("Content-Type", "application/x-www-form-urlencoded")),
        Just(("X-Original-URL", "/orders/o2/exchanges")),
        Just(("Accept", "*/*")),
        Just(("Content-Encoding", "gzip")),
    ];
    let body = prop_oneof![
        Just(r#"{"item_id":"i1","sku":"s1"}"#.to_owned()),
        Just(r#"{"sku":"s1","item_id":"i1"}"#.to_owned()),
        Just(r#"{"item_id":"i1","item_id":"i2","sku":"s1"}"#.to_owned()),
        Just(r#"{"item_id":"i1","sku":"s1","refund_to":"x"}"#.to_owned()),
        Just(r#"{"item_id":"i1","sku":"s1","ITEM_ID":"i2"}"#.to_owned()),
        Just(r#"{"item_id":"i1"}"#.to_owned()),
        Just(r#"{"item_id":9007199254740993,"sku":"s1"}"#.to_owned()),
        Just(r#"{"item_id":"i\u0000","sku":"s1"}"#.to_owned()),
        Just("not json".to_owned()),
        Just(String::new()),
        "\\{\"item_id\":\"[a-z0-9]{1,4}\",\"sku\":\"[ -~]{0,6}\"\\}",
    ];
    (
        segment(),
        suffix,
        query,
        proptest::collection::vec(header, 0..2),
        body,
    )
        .prop_map(|(segment, suffix, query, headers, body)| Description {
            method: "POST".into(),
            path: format!("/orders/{segment}/exchanges{suffix}"),
            query,
            headers: headers
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
            body: Some(body),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The HTTP API and the conversations service: the same refusal, or the same terms, the
    /// same fingerprint and the same forwarded target and body.
    #[test]
    fn the_proxy_and_the_service_admit_alike(description in description_strategy()) {
        let http = door(by_http(&description));
        let conversation = door(by_conversation(&description));
        prop_assert_eq!(&http, &conversation, "{:?}", description);
        if let Door::Admitted { target, .. } = &http {
            // What is approved can be sent: the forwarder's request line takes it as it is.
            prop_assert!(http::uri::PathAndQuery::try_from(target.as_str()).is_ok());
            prop_assert!(!target.contains('#'));
        }
    }

    /// The HTTP API and the MCP endpoint, for the same terms (the body's members as the tool's
    /// arguments): both refuse, or both admit with the same terms.
    #[test]
    fn the_proxy_and_the_mcp_endpoint_admit_alike(description in description_strategy()) {
        let mut plain = description.clone();
        plain.path = "/orders/o1/exchanges".into();
        plain.query = None;
        plain.headers.clear();
        let body = plain.body.clone().unwrap_or_default();
        let arguments = match body.trim().strip_prefix('{') {
            Some(rest) if rest.trim_start().starts_with('}') => r#"{"order_id":"o1"}"#.to_owned(),
            Some(rest) => format!(r#"{{"order_id":"o1",{rest}"#),
            None => body.clone(),
        };
        let http = by_http(&plain).map(|a| serde_json::to_value(&a.terms).unwrap());
        let mcp = by_mcp(&arguments).map(|a| serde_json::to_value(&a.terms).unwrap());
        match (&http, &mcp) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "{:?} → HTTP {:?}, MCP {:?}", body, http, mcp),
        }
    }
}

#[test]
fn the_generated_requests_reach_every_outcome() {
    // The property tests above are only as good as what they generate: sample it and see
    // that both admitted requests and each kind of refusal occur.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = description_strategy();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..512 {
        let description = strategy.new_tree(&mut runner).unwrap().current();
        seen.insert(match door(by_http(&description)) {
            Door::Admitted { .. } => "admitted".to_owned(),
            Door::Refused(status, error) => format!("{status} {error}"),
        });
    }
    for outcome in [
        "admitted",
        "400 invalid_path",
        "400 invalid_body",
        "400 unexpected_field",
        "400 invalid_header",
        "404 no_action",
    ] {
        assert!(
            seen.contains(outcome),
            "{outcome} never generated: {seen:?}"
        );
    }
}

/// A described request without a Session, under `[approval_page.agents] clients`, is read by
/// the proxy's rule (`ingress::credentials`): a token in the query or a form body makes it a
/// candidate (unverified here: held as an agent's, so `extension_required` without a page),
/// an `Authorization` read two ways is refused naming it, and no token is not an agent's.
#[test]
fn a_described_request_without_a_session_is_read_for_its_token() {
    let agents = admit::Agents {
        clients: vec!["agent".into()],
        every_request: false,
    };
    let door = crate::run::Door {
        page_offered: false,
        agents: Some(&agents),
        metrics: None,
    };
    let read = |description: &Description, authorization: Option<&str>| {
        let policies = policies();
        let limits = Limits {
            policies: &policies,
            upstream_host: UPSTREAM_HOST,
        };
        let mut context = context("conv_a", "");
        context.authorization = authorization;
        let Described {
            action,
            headers,
            body,
        } = describe(description, &context, &limits).map_err(|a| answered(&a))?;
        let arrival = Arrival {
            headers,
            signed_for: RequestTarget {
                method: "",
                path: "",
            },
            action,
            approval: ApprovalSource::Json {
                value: None,
                place: "message.extensions.operations.approval",
            },
        };
        let body = async move { admit::body_size(body.len(), MAX_BODY_BYTES).map(|()| body) };
        admitted(run(admit_request(&claims(), &door, arrival, body))).map(|_| ())
    };
    let json = description(r#"{"item_id":"i1","replacement_sku":"s1"}"#);
    let held = Err((400, "extension_required".to_owned()));
    let mut in_query = json.clone();
    in_query.query = Some("access_token=t".into());
    assert_eq!(read(&in_query, None), held);
    let mut in_form = description("access_token=t");
    in_form.headers = vec![(
        "content-type".into(),
        "application/x-www-form-urlencoded".into(),
    )];
    assert_eq!(read(&in_form, None), held);
    assert_eq!(read(&json, Some("Bearer t")), held);
    assert_eq!(
        read(&json, Some("Bearer\u{a0}t")),
        Err((400, "invalid_header".to_owned()))
    );
    assert_eq!(
        read(&in_query, Some("Bearer t")),
        Err((400, "invalid_query".to_owned()))
    );
    assert_eq!(read(&json, None), Err((0, "not_an_agent".to_owned())));
}
