//! `[approval_page.agents]`: which requests without a `Poppy-Session` are an agent's, to be
//! held for the approval page, and which are the Company's own, passed through unread.

use http::HeaderMap;

use super::Refused;
use crate::ingress::credentials::{self, Token};
use crate::ingress::headers;

/// `[approval_page.agents]`: which requests without a `Poppy-Session` are an agent's (issue
/// 29). Without it none is: they pass through, as the Company's own clients' must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agents {
    /// A bearer token, verified, issued to one of these OAuth clients (its `client_id`, else
    /// `azp`) makes the request an agent's; any other client's passes through.
    pub(crate) clients: Vec<String>,
    /// Every request without a `Poppy-Session` is an agent's (an API only agents call).
    pub(crate) every_request: bool,
}

/// What the rule makes of a request without a `Poppy-Session`, its token found
/// ([`credentials`]) but not yet verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsigned {
    /// An agent's (`every_request`).
    Agent,
    /// An agent's if its verified token's client is listed ([`Agents::lists`]).
    IfListed,
    /// Not an agent's: it passes through untouched (no token anywhere, with `clients`).
    NotAnAgent,
}

impl Agents {
    /// Whether a request without a `Poppy-Session` may be an agent's, from its head alone
    /// (`query`: the raw query): then it is routed, and on a route a policy names its
    /// credentials are read ([`credentials`]: a token anywhere a resource server reads one,
    /// and any value read two ways, are never let through as the Company's). Otherwise it
    /// passes through unread.
    pub(crate) fn may_be_agents(&self, request_headers: &HeaderMap, query: Option<&str>) -> bool {
        // A head read two ways is routed too, to be refused on a policy's route.
        self.every_request
            || match credentials::in_head(request_headers, query) {
                Ok(found) => found.may_carry(),
                Err(_) => true,
            }
    }

    /// Step 2's first half for a request without a `Poppy-Session`, its one `token` found:
    /// an agent's, one if the token's client is listed, or none.
    pub(crate) fn unsigned(&self, token: Option<&Token>) -> Unsigned {
        if self.every_request {
            Unsigned::Agent
        } else if token.is_some() {
            Unsigned::IfListed
        } else {
            Unsigned::NotAnAgent
        }
    }

    /// After step 3, for [`Unsigned::IfListed`]: whether the verified token's client
    /// (`None`: not verified, which `load` rules out with `clients`) makes it an agent's.
    /// Fails closed: a client that can't be told is taken as an agent's.
    pub(crate) fn lists(&self, client: Option<&str>) -> bool {
        client.is_none_or(|client| self.clients.iter().any(|c| c == client))
    }

    /// Step 1's Personal Agent rules, for a request now known to be an agent's (one
    /// `Authorization`, one `Host`, no method overrides...).
    pub(crate) fn check(request_headers: &HeaderMap) -> Result<(), Refused> {
        headers::check_personal_agent(request_headers).map_err(Refused::Request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    /// With `clients`, only a token can name a listed client: a request with none anywhere
    /// is the Company's and passes unread; one with a token, a form body that may hold one,
    /// or a head read two ways is routed (and read, or refused, on a policy's route).
    #[test]
    fn which_requests_without_a_session_are_agents() {
        let clients = Agents {
            clients: vec!["agent".into()],
            every_request: false,
        };
        assert!(!clients.may_be_agents(&headers(&[]), None));
        assert!(!clients.may_be_agents(&headers(&[("authorization", "Basic dTpw")]), None));
        assert!(!clients.may_be_agents(
            &headers(&[("content-type", "application/json")]),
            Some("a=1")
        ));
        for head in [
            headers(&[("authorization", "Bearer t")]),
            headers(&[("authorization", "Bearer\tt")]),
            headers(&[
                ("authorization", "Basic dTpw"),
                ("authorization", "Bearer t"),
            ]),
            headers(&[("content-type", "application/x-www-form-urlencoded")]),
        ] {
            assert!(clients.may_be_agents(&head, None), "{head:?}");
        }
        assert!(clients.may_be_agents(&headers(&[]), Some("access_token=t")));
        let token = credentials::in_head(&headers(&[("authorization", "Bearer t")]), None)
            .unwrap()
            .token()
            .cloned();
        assert_eq!(clients.unsigned(token.as_ref()), Unsigned::IfListed);
        assert_eq!(clients.unsigned(None), Unsigned::NotAnAgent);
        let two = headers(&[
            ("authorization", "Basic dTpw"),
            ("authorization", "Bearer t"),
        ]);
        assert!(matches!(Agents::check(&two), Err(Refused::Request(_))));
        assert!(clients.lists(Some("agent")));
        assert!(!clients.lists(Some("company-web")));
        assert!(clients.lists(None), "a client that can't be told is held");
        let every = Agents {
            clients: Vec::new(),
            every_request: true,
        };
        assert!(every.may_be_agents(&headers(&[]), None));
        assert_eq!(every.unsigned(None), Unsigned::Agent);
    }
}
