//! The `Poppy-Session` header: a JWT with the Session's `sid`, the agent's `iss` and the
//! user's `sub`. This demo agent leaves it unsigned (`alg: none`): the gateway reads the
//! claims to decide who may approve, and the upstream, not the gateway, verifies Sessions.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;

/// An unsigned Session JWT.
pub fn session_jwt(sid: &str, iss: &str, sub: &str) -> String {
    let header = json!({"alg": "none", "typ": "poppy-session+jwt"});
    let claims = json!({"sid": sid, "iss": iss, "sub": sub});
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

/// A Session ID for this run: distinct per process and time, no randomness crate needed.
pub fn new_sid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("ses_{:x}{:x}", nanos & 0xffff_ffff_ffff, std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_round_trip() {
        let jwt = session_jwt("ses_1", "agent", "user");
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(
            claims,
            json!({"sid": "ses_1", "iss": "agent", "sub": "user"})
        );
        assert!(new_sid().starts_with("ses_"));
    }
}
