//! The Session's ES256 signature is checked with ring, every other one with jsonwebtoken:
//! both must read every token alike.

use serde_json::json;

use super::*;
use crate::identity::testkeys::{AGENT, jwk, sign};

/// An ES256 Session is verified with ring, the others with jsonwebtoken: both read every
/// token alike (valid, re-signed by another key, a byte changed, a signature not base64url).
#[test]
fn ring_and_jsonwebtoken_agree_on_es256() {
    let key = DelegatedKey::parse(&jwk("es256-b")).unwrap();
    assert!(key.p256.is_some());
    let good = sign(
        "es256-b",
        json!({"typ": SESSION_TYP}),
        &json!({"iss": AGENT}),
    );
    let other = sign(
        "es256-a",
        json!({"typ": SESSION_TYP}),
        &json!({"iss": AGENT}),
    );
    let message = good.rsplit_once('.').unwrap().0.to_owned();
    let swapped = format!("{message}.{}", other.rsplit_once('.').unwrap().1);
    let mut flipped = good.clone().into_bytes();
    let at = message.len() - 5;
    flipped[at] = if flipped[at] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    let tokens = [
        good,
        swapped,
        flipped,
        format!("{message}.!!"),
        format!("{message}."),
    ];
    for (n, token) in tokens.iter().enumerate() {
        let ring = delegated_claims(token, &key, Algorithm::ES256)
            .map_err(|e| matches!(e, Signature::Bad));
        let jwt = signed_claims(token, &key.key, Algorithm::ES256)
            .map_err(|e| matches!(e, Signature::Bad));
        assert_eq!(ring, jwt, "token {n}");
        assert_eq!(ring.is_ok(), n == 0, "token {n}");
    }
}
