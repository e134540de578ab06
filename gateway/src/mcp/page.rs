//! The Company's approval page offered over MCP (issue 29): what a held call from a client
//! without the operations extension is answered with, per protocol version
//! (docs/approval-page.md, "Over MCP"). The adapter is `proxy::mcp_api`.
//!
//! - Every version: a tool error whose text carries the link (`answer::page_approval_result`),
//!   which every SDK hands to the model as the call's result.
//! - 2025-11-25, to a client that declared URL-mode elicitation in `initialize`: that tool
//!   error, and before it, on the call's event stream, an `elicitation/create` request in URL
//!   mode (Streamable HTTP lets a server send requests there before the response). Not the
//!   `URLElicitationRequiredError` (-32042) form: that is a JSON-RPC error in place of the
//!   result, so the model would get no tool result with the link, and the SDKs raise it as an
//!   exception instead of calling their elicitation handler. The client's answer (it only
//!   says whether the user agreed to open the page) comes back in a POST that the gateway
//!   recognizes by the request's ID ([`answers_the_gateway`]), accepts and never forwards.
//! - 2026-07-28, to a client that declares the mode in the call's `_meta`: an
//!   `input_required` result whose one input request is the URL elicitation. The client
//!   answers by calling again with `inputResponses`; the gateway takes its own input response
//!   and request state out of that call ([`take_page_round`]: the MCP server never sees
//!   them) and answers it as any other call, except that it never asks again: performed once
//!   if the User approved on the page meanwhile, else the tool error, so an SDK that runs
//!   the rounds itself ends with a result.
//!
//! Nothing here names the operation's ID or revision (spec section 2): they travel only
//! inside the link, which the User's browser opens.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Where a 2026-07-28 request declares the client's capabilities, in `params._meta`.
pub(crate) const CLIENT_CAPABILITIES_META_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

/// The JSON-RPC IDs of the gateway's own requests to a client start with this: answers to
/// them are the gateway's, never the MCP server's.
pub(crate) const PAGE_REQUEST_ID_PREFIX: &str = "personalagentprotocol.org/approval-page/";

/// The key of the page's input request in a 2026-07-28 `input_required` result.
pub(crate) const PAGE_INPUT_KEY: &str = "personalagentprotocol.org/approval_page";

/// The `requestState` of that result: it carries nothing (the link is recomputed from the
/// call), only marks the follow-up as the page's.
pub(crate) const PAGE_REQUEST_STATE: &str = "personalagentprotocol.org/approval_page";

/// The page offered for one held call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageOffer<'a> {
    /// The page's link for the operation the call is held for.
    pub(crate) url: &'a str,
    /// The operation's summary (the extension's Markdown subset).
    pub(crate) summary: &'a str,
    /// RFC 3339.
    pub(crate) expires_at: &'a str,
}

/// What a held call says about the page, read off its `params`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PageCall {
    /// It declares URL-mode elicitation in `_meta` (2026-07-28).
    pub(crate) declares_url_elicitation: bool,
    /// It answers the page's `input_required` round: the gateway took its own input
    /// response (or request state) out of it.
    pub(crate) answered: bool,
}

/// `capabilities` declares URL-mode elicitation (`elicitation.url`, an object). An empty
/// `elicitation` means form mode only (MCP 2025-11-25, "Capabilities").
pub(crate) fn declares_url_elicitation(capabilities: Option<&Value>) -> bool {
    capabilities
        .and_then(|c| c.get("elicitation"))
        .and_then(|e| e.get("url"))
        .is_some_and(Value::is_object)
}

/// `message` is an `initialize` request whose client declares URL-mode elicitation.
pub(crate) fn initialize_declares_url_elicitation(message: &Map<String, Value>) -> bool {
    message.get("method").and_then(Value::as_str) == Some("initialize")
        && declares_url_elicitation(message.get("params").and_then(|p| p.get("capabilities")))
}

/// Read what a held call's `params` say about the page, and take the gateway's own input
/// response and request state out of them (they answer the gateway, not the MCP server).
pub(crate) fn take_page_round(params: &mut Map<String, Value>) -> PageCall {
    let declares_url_elicitation = declares_url_elicitation(
        params
            .get("_meta")
            .and_then(|meta| meta.get(CLIENT_CAPABILITIES_META_KEY)),
    );
    let mut answered = false;
    if let Some(Value::Object(responses)) = params.get_mut("inputResponses")
        && responses.remove(PAGE_INPUT_KEY).is_some()
    {
        answered = true;
        if responses.is_empty() {
            params.remove("inputResponses");
        }
    }
    if params.get("requestState").and_then(Value::as_str) == Some(PAGE_REQUEST_STATE) {
        answered = true;
        params.remove("requestState");
    }
    PageCall {
        declares_url_elicitation,
        answered,
    }
}

/// What the client shows the user with the URL.
fn elicitation_message(offer: &PageOffer<'_>) -> String {
    format!(
        "Approve this on the company's page (sign in there; before {}): {} Nothing is done until you approve.",
        offer.expires_at, offer.summary
    )
}

/// The elicitation's ID: a digest of the link, so the same held call (the same operation
/// and revision) is the same elicitation, and the ID reveals nothing the link does not.
pub(crate) fn elicitation_id(url: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"poppy-approval-page-elicitation-v1\0");
    hash.update(url.as_bytes());
    URL_SAFE_NO_PAD.encode(&hash.finalize()[..16])
}

/// The 2025-11-25 `elicitation/create` request in URL mode. `nonce`: makes the request's
/// JSON-RPC ID unique among the gateway's requests to the client.
pub(crate) fn url_elicitation_request(offer: &PageOffer<'_>, nonce: u64) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": format!("{PAGE_REQUEST_ID_PREFIX}{nonce:016x}"),
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "message": elicitation_message(offer),
            "url": offer.url,
            "elicitationId": elicitation_id(offer.url),
        },
    })
}

/// The 2026-07-28 `input_required` result: one URL elicitation (no `elicitationId` in this
/// version), and the page's request state.
pub(crate) fn page_input_required_result(offer: &PageOffer<'_>) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {
            PAGE_INPUT_KEY: {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "message": elicitation_message(offer),
                    "url": offer.url,
                },
            },
        },
        "requestState": PAGE_REQUEST_STATE,
    })
}

/// `messages` as a `text/event-stream` body, one event each.
pub(crate) fn event_stream(messages: &[Value]) -> String {
    messages
        .iter()
        .map(|message| format!("event: message\ndata: {message}\n\n"))
        .collect()
}

/// `value` is only answers to the gateway's own requests (one, or a batch of them).
pub(crate) fn answers_the_gateway(value: &Value) -> bool {
    let one = |message: &Value| {
        message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some())
            && message
                .get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| id.starts_with(PAGE_REQUEST_ID_PREFIX))
    };
    match value {
        Value::Array(items) => !items.is_empty() && items.iter().all(one),
        message => one(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://approve.shop.example/approve/exc_1?r=1-a&d=x&m=y";

    fn offer() -> PageOffer<'static> {
        PageOffer {
            url: URL,
            summary: "Exchange item **i1**.",
            expires_at: "2026-12-04T14:15:00Z",
        }
    }

    #[test]
    fn url_mode_is_declared_only_as_an_object() {
        let declared = |c: Value| declares_url_elicitation(Some(&c));
        assert!(declared(json!({"elicitation": {"form": {}, "url": {}}})));
        assert!(!declared(json!({"elicitation": {}})), "form mode only");
        assert!(!declared(json!({"elicitation": {"url": true}})));
        assert!(!declared(json!({"sampling": {}})));
        assert!(!declares_url_elicitation(None));
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}}}});
        assert!(initialize_declares_url_elicitation(
            initialize.as_object().unwrap()
        ));
        let mut other = initialize.clone();
        other["method"] = json!("ping");
        assert!(!initialize_declares_url_elicitation(
            other.as_object().unwrap()
        ));
    }

    #[test]
    fn the_page_round_is_taken_out_of_the_call() {
        let mut params = json!({
            "name": "exchange_item",
            "arguments": {},
            "_meta": {CLIENT_CAPABILITIES_META_KEY: {"elicitation": {"url": {}}}},
            "inputResponses": {PAGE_INPUT_KEY: {"action": "accept"}},
            "requestState": PAGE_REQUEST_STATE,
        });
        let page = take_page_round(params.as_object_mut().unwrap());
        assert_eq!(
            page,
            PageCall {
                declares_url_elicitation: true,
                answered: true
            }
        );
        assert!(params.get("inputResponses").is_none());
        assert!(params.get("requestState").is_none());
        assert!(params["_meta"].get(CLIENT_CAPABILITIES_META_KEY).is_some());
        // The MCP server's own rounds are left alone.
        let mut theirs = json!({"inputResponses": {"q": {"action": "accept"}, PAGE_INPUT_KEY: {}},
            "requestState": "sealed"});
        let page = take_page_round(theirs.as_object_mut().unwrap());
        assert!(page.answered && !page.declares_url_elicitation);
        assert_eq!(
            theirs,
            json!({"inputResponses": {"q": {"action": "accept"}}, "requestState": "sealed"})
        );
        let mut plain = json!({"name": "t"});
        assert_eq!(
            take_page_round(plain.as_object_mut().unwrap()),
            PageCall::default()
        );
    }

    #[test]
    fn the_elicitations_carry_the_link_and_no_operation() {
        let request = url_elicitation_request(&offer(), 7);
        assert_eq!(request["method"], "elicitation/create");
        assert_eq!(
            request["id"],
            format!("{PAGE_REQUEST_ID_PREFIX}0000000000000007")
        );
        assert_eq!(request["params"]["mode"], "url");
        assert_eq!(request["params"]["url"], URL);
        assert_eq!(request["params"]["elicitationId"], elicitation_id(URL));
        assert_ne!(elicitation_id(URL), elicitation_id("https://other"));
        let message = request["params"]["message"].as_str().unwrap();
        assert!(message.contains("Exchange item **i1**.") && message.contains("2026-12-04"));
        let result = page_input_required_result(&offer());
        assert_eq!(result["resultType"], "input_required");
        let asked = &result["inputRequests"][PAGE_INPUT_KEY];
        assert_eq!(asked["method"], "elicitation/create");
        assert_eq!(asked["params"]["url"], URL);
        assert_eq!(result["requestState"], PAGE_REQUEST_STATE);
        for text in [request.to_string(), result.to_string()] {
            assert!(!text.contains("operation_id") && !text.contains("revision"));
        }
    }

    #[test]
    fn only_answers_to_the_gateways_requests_are_the_gateways() {
        let ours = json!({"jsonrpc": "2.0", "id": format!("{PAGE_REQUEST_ID_PREFIX}1"),
            "result": {"action": "accept"}});
        assert!(answers_the_gateway(&ours));
        assert!(answers_the_gateway(&json!([ours.clone(), ours.clone()])));
        let theirs = json!({"jsonrpc": "2.0", "id": 3, "result": {"action": "accept"}});
        assert!(!answers_the_gateway(&theirs));
        assert!(!answers_the_gateway(&json!([ours.clone(), theirs])));
        assert!(!answers_the_gateway(&json!([])));
        let request = json!({"jsonrpc": "2.0", "id": format!("{PAGE_REQUEST_ID_PREFIX}1"),
            "method": "tools/call", "result": {}});
        assert!(!answers_the_gateway(&request), "a request is never ours");
        assert_eq!(
            event_stream(&[json!({"a": 1}), json!(2)]),
            "event: message\ndata: {\"a\":1}\n\nevent: message\ndata: 2\n\n"
        );
    }
}
