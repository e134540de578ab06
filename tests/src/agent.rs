//! What a Personal Agent sends: a Session (the `Poppy-Session` JWT and, signed in, a bearer
//! token), the `Poppy-Extensions` declaration, and approvals.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::answer::Operation;

/// `Poppy-Extensions` of an agent that supports this extension.
pub const OPERATIONS_V2: &str = "\"operations\";v=\"2\"";

/// The agent and user every Session has unless a test says otherwise.
pub const AGENT: &str = "agent_1";
pub const USER: &str = "user_1";

/// A Personal Agent Session: `sid` and `iss` (agent) and `sub` (user) in the Session JWT, and,
/// when signed in, an access token for `account`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub sid: String,
    pub agent: String,
    pub user: String,
    pub account: Option<String>,
}

impl Session {
    /// A signed-out Session of agent `agent_1` and user `user_1`.
    pub fn signed_out(sid: &str) -> Session {
        Session {
            sid: sid.to_owned(),
            agent: AGENT.to_owned(),
            user: USER.to_owned(),
            account: None,
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

    /// The same Session after signing out.
    pub fn signed_out_twin(&self) -> Session {
        Session {
            account: None,
            ..self.clone()
        }
    }

    /// The `Poppy-Session` header value: an unsigned JWT.
    pub fn header(&self) -> String {
        unsigned_jwt(
            &json!({"alg": "none", "typ": "poppy-session+jwt"}),
            &json!({"sid": self.sid, "iss": self.agent, "sub": self.user}),
        )
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
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// A request with no headers at all (not a Personal Agent request).
    pub fn plain(method: &str, path: &str) -> Request {
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A Personal Agent request in `session`, declaring `"operations";v="2"`.
    pub fn agent(method: &str, path: &str, session: &Session) -> Request {
        let mut request = Request::plain(method, path)
            .header("Poppy-Session", &session.header())
            .header("Poppy-Version", "0.4")
            .header("Poppy-Extensions", OPERATIONS_V2);
        if let Some(authorization) = session.authorization() {
            request = request.header("Authorization", &authorization);
        }
        request
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

    /// Set a header, replacing any of the same name.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Add a header line, keeping any of the same name (a field sent on several lines).
    pub fn header_line(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn without_header(mut self, name: &str) -> Request {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

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

    pub fn session(self, session: &Session) -> Request {
        let request = self
            .header("Poppy-Session", &session.header())
            .without_header("Authorization");
        match session.authorization() {
            Some(authorization) => request.header("Authorization", &authorization),
            None => request,
        }
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
