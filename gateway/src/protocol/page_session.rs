//! The approval page's sign-in values (issue 29, groundwork for the next part; nothing calls
//! this yet): the PKCE challenge (RFC 7636, S256), cookies sealed with the gateway's signing
//! keys (each purpose its own MAC domain part, with an expiry), the CSRF token of the Approve
//! and Decline forms (bound to the page session and to one operation revision), and the
//! `Set-Cookie` attributes. Pure: the caller supplies the random bytes and the time.
#![cfg_attr(not(test), allow(dead_code))]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::{Keys, SigningKey, constant_time_eq};

const COOKIE_DOMAIN: &[u8] = b"poppy-approval-page-cookie-v1";
const CSRF_DOMAIN: &[u8] = b"poppy-approval-page-csrf-v1";
/// 43 base64url characters: the whole HMAC-SHA-256.
const MAC_LEN: usize = 43;
/// The longest sealed cookie value read (browsers keep about 4 KiB per cookie).
const MAX_SEALED: usize = 3800;

/// What a sealed cookie is for: a cookie sealed for one purpose never opens as another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Between the redirect to the provider and its callback: the PKCE verifier, the OpenID
    /// nonce and the page to return to.
    SignIn,
    /// After the callback: the verified subject.
    Session,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::SignIn => b"sign-in",
            Purpose::Session => b"session",
        }
    }
}

/// PKCE `code_challenge` for `verifier` (method S256).
pub(crate) fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A PKCE `code_verifier`, a `state` or a nonce from 32 random bytes (43 characters of
/// `A-Z a-z 0-9 - _`, within RFC 7636's 43 to 128).
pub(crate) fn token_from(random: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(random)
}

/// `<payload base64url>.<expires_at>.<mac>`: readable by the browser, changeable by no one
/// without the gateway's key.
pub(crate) fn seal(key: &SigningKey, purpose: Purpose, payload: &[u8], expires_at: i64) -> String {
    let payload = URL_SAFE_NO_PAD.encode(payload);
    let expires = expires_at.to_string();
    let mac = key.tag(
        COOKIE_DOMAIN,
        &[purpose.label(), payload.as_bytes(), expires.as_bytes()],
        MAC_LEN,
    );
    format!("{payload}.{expires}.{mac}")
}

/// The payload of a cookie sealed for `purpose` by any of `keys`, still unexpired at `now`
/// (unix seconds); `None` for anything else.
pub(crate) fn open(keys: &Keys, purpose: Purpose, sealed: &str, now: i64) -> Option<Vec<u8>> {
    if sealed.len() > MAX_SEALED {
        return None;
    }
    let mut parts = sealed.split('.');
    let (payload, expires, mac) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || mac.len() != MAC_LEN {
        return None;
    }
    // Digits only, as minted: no sign, no leading zeros to alias another value.
    let expires_at: i64 = expires.parse().ok()?;
    if expires_at.to_string() != expires || expires_at <= now {
        return None;
    }
    let genuine = keys.all().iter().any(|key| {
        let expected = key.tag(
            COOKIE_DOMAIN,
            &[purpose.label(), payload.as_bytes(), expires.as_bytes()],
            MAC_LEN,
        );
        constant_time_eq(expected.as_bytes(), mac.as_bytes())
    });
    if !genuine {
        return None;
    }
    URL_SAFE_NO_PAD.decode(payload).ok()
}

/// The CSRF token of the forms for one revision, for the page session `session` (the sealed
/// session cookie's value): another session's, another revision's or another operation's
/// token never matches.
pub(crate) fn csrf_token(
    key: &SigningKey,
    session: &str,
    operation_id: &str,
    revision: &str,
) -> String {
    key.tag(
        CSRF_DOMAIN,
        &[
            session.as_bytes(),
            operation_id.as_bytes(),
            revision.as_bytes(),
        ],
        MAC_LEN,
    )
}

/// Whether `token` is [`csrf_token`] of these, under any of `keys`.
pub(crate) fn csrf_matches(
    keys: &Keys,
    token: &str,
    session: &str,
    operation_id: &str,
    revision: &str,
) -> bool {
    token.len() == MAC_LEN
        && keys.all().iter().any(|key| {
            let expected = csrf_token(key, session, operation_id, revision);
            constant_time_eq(expected.as_bytes(), token.as_bytes())
        })
}

/// A `Set-Cookie` value: host-only (no `Domain`), the whole page (`Path=/`), never readable by
/// scripts, sent on top-level navigation from elsewhere (the provider's redirect back) but not
/// on cross-site posts, `Secure` when the page is served over https.
pub(crate) fn set_cookie(name: &str, value: &str, secure: bool, max_age_seconds: u64) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path=/; Max-Age={max_age_seconds}; HttpOnly; SameSite=Lax{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(secret: &[u8]) -> Keys {
        Keys::new(vec![SigningKey::new(secret.to_vec())]).expect("a key")
    }

    #[test]
    fn the_pkce_challenge_is_rfc_7636s() {
        // RFC 7636, appendix B.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let verifier = token_from(&[7; 32]);
        assert_eq!(verifier.len(), 43);
        assert!(
            verifier
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }

    #[test]
    fn a_sealed_cookie_opens_only_as_sealed() {
        let keys = keys(b"page-session-test-key-0123456789ab");
        let sealed = seal(keys.current(), Purpose::Session, b"sub:user-1", 2_000);
        assert_eq!(
            open(&keys, Purpose::Session, &sealed, 1_999).as_deref(),
            Some(&b"sub:user-1"[..])
        );
        // Expired, another purpose, another key, a changed payload or expiry, extra parts.
        assert_eq!(open(&keys, Purpose::Session, &sealed, 2_000), None);
        assert_eq!(open(&keys, Purpose::SignIn, &sealed, 1_000), None);
        assert_eq!(
            open(
                &super::tests::keys(b"another-key-0123456789abcdefghij"),
                Purpose::Session,
                &sealed,
                1_000
            ),
            None
        );
        let (payload, rest) = sealed.split_once('.').expect("parts");
        let other = URL_SAFE_NO_PAD.encode(b"sub:user-2");
        assert_eq!(
            open(&keys, Purpose::Session, &format!("{other}.{rest}"), 1_000),
            None
        );
        let later = sealed.replacen(".2000.", ".20000.", 1);
        assert_eq!(open(&keys, Purpose::Session, &later, 1_000), None);
        let padded = sealed.replacen(".2000.", ".02000.", 1);
        assert_eq!(open(&keys, Purpose::Session, &padded, 1_000), None);
        assert_eq!(
            open(&keys, Purpose::Session, &format!("{sealed}.x"), 1_000),
            None
        );
        assert_eq!(open(&keys, Purpose::Session, payload, 1_000), None);
    }

    #[test]
    fn a_csrf_token_is_bound_to_the_session_and_the_revision() {
        let keys = keys(b"page-csrf-test-key-0123456789abcd");
        let token = csrf_token(keys.current(), "session-a", "exc_aX", "100-r1");
        assert!(csrf_matches(&keys, &token, "session-a", "exc_aX", "100-r1"));
        assert!(!csrf_matches(
            &keys,
            &token,
            "session-b",
            "exc_aX",
            "100-r1"
        ));
        assert!(!csrf_matches(
            &keys,
            &token,
            "session-a",
            "exc_aY",
            "100-r1"
        ));
        assert!(!csrf_matches(
            &keys,
            &token,
            "session-a",
            "exc_aX",
            "100-r2"
        ));
        assert!(!csrf_matches(&keys, "", "session-a", "exc_aX", "100-r1"));
    }

    #[test]
    fn cookies_are_http_only_lax_and_secure_over_https() {
        assert_eq!(
            set_cookie("poppy_page", "v", true, 600),
            "poppy_page=v; Path=/; Max-Age=600; HttpOnly; SameSite=Lax; Secure"
        );
        assert!(!set_cookie("poppy_page", "v", false, 600).contains("Secure"));
    }
}
