//! What a Personal Agent sends: a Session (the `Poppy-Session` JWT and, signed in, a bearer
//! token), the `Poppy-Extensions` declaration, and approvals.
//!
//! As a real agent does, a [`Request`] made for a Session carries a **new** `Poppy-Session`
//! JWT every time it is sent (see [`crate::signer`]): every send path (the harness's client,
//! curl, rmcp, the conversations' `poppy_session`) signs it for the request's method and path
//! at send time, so a retry is never byte-identical. A `Poppy-Session` a test sets itself
//! (`.header("Poppy-Session", raw)`) is sent as it is.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::answer::Operation;
use crate::signer::{self, DelegatedKeys, Fault, Signer};

/// `Poppy-Extensions` of an agent that supports this extension.
pub const OPERATIONS_V2: &str = "\"operations\";v=\"2\"";

/// The agent and user every Session has unless a test says otherwise.
pub const AGENT: &str = "agent_1";
pub const USER: &str = "user_1";

/// A Personal Agent Session: `sid` and `iss` (agent) and `sub` (user) in the Session JWT, and,
/// when signed in, an access token for `account`; `signer` says how its JWTs are signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub sid: String,
    pub agent: String,
    pub user: String,
    pub account: Option<String>,
    pub signer: Signer,
}

impl Session {
    /// A signed-out Session of agent `agent_1` and user `user_1`.
    pub fn signed_out(sid: &str) -> Session {
        Session {
            sid: sid.to_owned(),
            agent: AGENT.to_owned(),
            user: USER.to_owned(),
            account: None,
            signer: Signer::default(),
        }
    }

    /// A Session of agent `agent_1` and user `user_1`, signed in to `account`.
    pub fn signed_in(sid: &str, account: &str) -> Session {
        Session {
            account: Some(account.to_owned()),
            ..Session::signed_out(sid)
        }
    }

    pub fn with_agent(mut self, agent: &str) -> Session {
        self.agent = agent.to_owned();
        self
    }

    pub fn with_user(mut self, user: &str) -> Session {
        self.user = user.to_owned();
        self
    }

    /// Delegations signed by test key `name` (`es256-a` by default, or `rs256-a`, …).
    pub fn with_long_term_key(mut self, name: &str) -> Session {
        self.signer.long_term = name.to_owned();
        self
    }

    /// A new delegated key (and delegation) for every request.
    pub fn with_key_per_request(mut self) -> Session {
        self.signer.keys = DelegatedKeys::PerRequest;
        self
    }

    /// One delegation for the Session, signed once and sent with every request (a real
    /// agent's way; by default the test signer signs it again for each request).
    pub fn with_delegation_signed_once(mut self) -> Session {
        self.signer.keys = DelegatedKeys::SignedOnce;
        self
    }

    /// Delegations valid for `secs` seconds from when they are signed.
    pub fn with_delegation_lifetime(mut self, secs: i64) -> Session {
        self.signer.delegation_lifetime = secs;
        self
    }

    /// The same Session with another delegated key than before (as after the agent rotated it).
    pub fn with_new_delegated_key(mut self) -> Session {
        self.signer.generation += 1;
        self
    }

    /// Sign with `fault` (one check of the gateway's that must fail).
    pub fn with_fault(mut self, fault: Fault) -> Session {
        self.signer.fault = Some(fault);
        self
    }

    /// Send the unsigned legacy form ([`Session::header`]) instead of signed JWTs.
    pub fn unsigned(self) -> Session {
        self.with_fault(Fault::Unsigned)
    }

    /// The public JWK of this Session's delegated key (per Session; a new one for every
    /// request with [`Session::with_key_per_request`]).
    pub fn delegated_jwk(&self) -> Value {
        signer::delegated_key(self).jwk().clone()
    }

    /// A new `Poppy-Session` JWT for `method` `path_and_query`: what every send path puts on
    /// the wire.
    pub fn signed_header(&self, method: &str, path_and_query: &str) -> String {
        signer::sign_session(self, method, path_and_query)
    }

    /// The same Session after signing out.
    pub fn signed_out_twin(&self) -> Session {
        Session {
            account: None,
            ..self.clone()
        }
    }

    /// The unsigned legacy `Poppy-Session` value (`alg: none`, claims `sid`, `iss`, `sub`):
    /// the same bytes every time, for a test that sets the header itself. Requests made for
    /// this Session send [`Session::signed_header`] instead.
    pub fn header(&self) -> String {
        signer::unsigned_header(self)
    }

    /// The `Authorization` header value when signed in.
    pub fn authorization(&self) -> Option<String> {
        self.account.as_ref().map(|account| {
            format!(
                "Bearer {}",
                unsigned_jwt(
                    &json!({"alg": "none", "typ": "at+jwt"}),
                    &json!({"sub": account, "client_id": self.agent}),
                )
            )
        })
    }
}

/// `base64url(header).base64url(payload).sig`
pub fn unsigned_jwt(header: &Value, payload: &Value) -> String {
    format!(
        "{}.{}.sig",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(payload.to_string())
    )
}

/// The payload of a JWT made by [`unsigned_jwt`].
pub fn jwt_payload(jwt: &str) -> Option<Value> {
    let payload = jwt.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

/// `operation_id="…", revision="…"`
pub fn approval_header(operation_id: &str, revision: &str) -> String {
    format!("operation_id=\"{operation_id}\", revision=\"{revision}\"")
}

/// One HTTP request, reusable: a test sends the *same* request again with an approval.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The headers set; `Poppy-Session` is among them only when a test set it itself.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The Session whose `Poppy-Session` is signed at send time ([`Request::wire_headers`]).
    pub session: Option<Session>,
}

impl Request {
    /// A request with no headers at all (not a Personal Agent request).
    pub fn plain(method: &str, path: &str) -> Request {
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            session: None,
        }
    }

    /// A Personal Agent request in `session`, declaring `"operations";v="2"`.
    pub fn agent(method: &str, path: &str, session: &Session) -> Request {
        Request::plain(method, path)
            .header("Poppy-Version", "0.4")
            .header("Poppy-Extensions", OPERATIONS_V2)
            .session(session)
    }

    /// `POST /orders/{order}/exchanges` with `{"item_id", "replacement_sku"}` (policy `exchange`).
    pub fn exchange(session: &Session, order: &str, item: &str, sku: &str) -> Request {
        Request::agent("POST", &format!("/orders/{order}/exchanges"), session)
            .json(&json!({"item_id": item, "replacement_sku": sku}))
    }

    /// `POST /orders/{order}/cancel` with `{}` (policy `cancel`).
    pub fn cancel(session: &Session, order: &str) -> Request {
        Request::agent("POST", &format!("/orders/{order}/cancel"), session).json(&json!({}))
    }

    /// `POST /orders/{order}/refunds` with `{"amount"}` (policy `refund`, expires in 2 s).
    pub fn refund(session: &Session, order: &str, amount: &str) -> Request {
        Request::agent("POST", &format!("/orders/{order}/refunds"), session)
            .json(&json!({"amount": amount}))
    }

    /// Set a header, replacing any of the same name. A `Poppy-Session` set here is sent as it
    /// is, never re-signed.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        if name.eq_ignore_ascii_case("poppy-session") {
            self.session = None;
        }
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Add a header line, keeping any of the same name (a field sent on several lines).
    pub fn header_line(mut self, name: &str, value: &str) -> Request {
        if name.eq_ignore_ascii_case("poppy-session")
            && let Some(session) = self.session.take()
        {
            // The signed line first, then this one: the field sent on two lines.
            let signed = session.signed_header(&self.method, &self.path);
            self.headers.push(("Poppy-Session".to_owned(), signed));
        }
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn without_header(mut self, name: &str) -> Request {
        if name.eq_ignore_ascii_case("poppy-session") {
            self.session = None;
        }
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    /// A header set on this request (not the `Poppy-Session` signed at send time: see
    /// [`Request::wire_headers`]).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A JSON body (and `Content-Type: application/json`).
    pub fn json(self, body: &Value) -> Request {
        self.body(body.to_string().into_bytes(), "application/json")
    }

    pub fn body(mut self, body: Vec<u8>, content_type: &str) -> Request {
        self.body = body;
        self.header("Content-Type", content_type)
    }

    /// The same request with the approval of `operation`.
    pub fn approve(self, operation: &Operation) -> Request {
        self.approval(&approval_header(
            &operation.operation_id,
            &operation.revision,
        ))
    }

    /// The same request with `Poppy-Approval: <raw>`.
    pub fn approval(self, raw: &str) -> Request {
        self.header("Poppy-Approval", raw)
    }

    pub fn extensions(self, raw: &str) -> Request {
        self.header("Poppy-Extensions", raw)
    }

    /// The same request in `session`: its `Poppy-Session` signed at send time, its
    /// `Authorization` (signed in) or none.
    pub fn session(self, session: &Session) -> Request {
        let mut request = self
            .without_header("Poppy-Session")
            .without_header("Authorization");
        request.session = Some(session.clone());
        match session.authorization() {
            Some(authorization) => request.header("Authorization", &authorization),
            None => request,
        }
    }

    /// A new `Poppy-Session` value for this request, if it has a Session to sign it.
    pub fn signed_session(&self) -> Option<String> {
        self.session
            .as_ref()
            .map(|session| session.signed_header(&self.method, &self.path))
    }

    /// The headers to put on the wire now: a freshly signed `Poppy-Session` first (when the
    /// request has a Session and the test did not set the header itself), then the others.
    pub fn wire_headers(&self) -> Vec<(String, String)> {
        let mut headers = Vec::with_capacity(self.headers.len() + 1);
        if let Some(signed) = self.signed_session() {
            headers.push(("Poppy-Session".to_owned(), signed));
        }
        headers.extend(self.headers.iter().cloned());
        headers
    }

    /// `METHOD path` for messages.
    pub fn describe(&self) -> String {
        let approval = match self.header_value("Poppy-Approval") {
            Some(approval) => format!(" [Poppy-Approval: {approval}]"),
            None => String::new(),
        };
        format!("{} {}{approval}", self.method, self.path)
    }
}
