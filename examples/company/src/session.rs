//! Whose conversation it is. A Personal Agent signs a new `Poppy-Session` JWT for every
//! request (docs/sessions.md), so a conversation is bound to the Session the JWTs name (the
//! agent's `iss` and the Session's `sid`), never to one JWT's bytes. The signature is not
//! checked here: the gateway's operations service verifies the Session this Company Agent
//! relays before anything is proposed or performed.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

/// The Session a conversation belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub agent: String,
    pub sid: String,
}

/// The `iss` and `sid` claims of a Session JWT; `None` when it is not a JWT that has both.
pub fn binding(poppy_session: &str) -> Option<Binding> {
    let mut parts = poppy_session.split('.');
    let (Some(_header), Some(payload), Some(_signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    let claim = |name: &str| {
        claims
            .get(name)?
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Some(Binding {
        agent: claim("iss")?,
        sid: claim("sid")?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn jwt(claims: &Value) -> String {
        format!(
            "{}.{}.sig",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"ES256"}"#),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        )
    }

    #[test]
    fn re_signed_sessions_bind_alike_and_others_do_not() {
        let first = jwt(&json!({"iss": "http://a/agent.json", "sid": "ses_1", "iat": 1}));
        let again = jwt(&json!({"iss": "http://a/agent.json", "sid": "ses_1", "iat": 2}));
        assert_ne!(first, again);
        assert_eq!(binding(&first), binding(&again));
        assert!(binding(&first).is_some());
        let other = jwt(&json!({"iss": "http://a/agent.json", "sid": "ses_2"}));
        assert_ne!(binding(&first), binding(&other));
        for unreadable in [
            "not-a-jwt".to_owned(),
            jwt(&json!({"iss": "http://a/agent.json"})),
            jwt(&json!({"iss": "", "sid": "ses_1"})),
            format!("{}.x", jwt(&json!({"iss": "a", "sid": "b"}))),
        ] {
            assert_eq!(binding(&unreadable), None, "{unreadable}");
        }
    }
}
