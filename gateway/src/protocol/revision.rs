//! Revisions: `<expires_at unix seconds>-<MAC>`, minted statelessly.
//!
//! The MAC covers everything the approval must pin down: the operation_id, the summary, the
//! canonical terms, `expires_at`, the approver scope and the request itself. Verifying an
//! approval is recomputing the MAC from the retried request, so different terms can never
//! share a revision and nothing unapproved needs to be stored.

use super::constant_time_eq;
use super::signing::{Keys, SigningKey};

/// 22 base64url characters: 132 bits of HMAC-SHA-256.
const MAC_LEN: usize = 22;
const DOMAIN: &[u8] = b"poppy-revision-v1";

/// What a revision is computed over.
#[derive(Debug, Clone, Copy)]
pub struct RevisionInput<'a> {
    pub operation_id: &'a str,
    pub summary: &'a str,
    /// Canonical JSON of the terms (see `policy::canonical_json`).
    pub terms: &'a str,
    /// The approver scope (who may approve).
    pub scope: &'a str,
    /// A canonical fingerprint of the request (method, path, query, body).
    pub request: &'a [u8],
}

/// The outcome of checking a revision against a retried request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revision {
    /// Minted by this gateway for exactly this request; approvable until `expires_at`.
    Valid { expires_at: i64 },
    /// Minted for this request, but its `expires_at` has passed.
    Expired,
    /// Not a revision this gateway returned for this request (tampered, truncated, other
    /// terms, other request, other scope).
    Invalid,
}

impl Revision {
    /// Mint the revision of `input`, approvable until `expires_at` (unix seconds).
    pub fn mint(key: &SigningKey, input: &RevisionInput<'_>, expires_at: i64) -> String {
        format!("{expires_at}-{}", mac(key, input, expires_at))
    }

    /// Check `text` against the retried request's `input` at `now` (unix seconds), with every
    /// key (rotation).
    pub fn check(keys: &Keys, text: &str, input: &RevisionInput<'_>, now: i64) -> Revision {
        let Some((expires, tag)) = text.split_once('-') else {
            return Revision::Invalid;
        };
        // Digits only: "+5" or " 5" would parse but could alias a minted revision.
        if expires.is_empty() || expires.len() > 12 || !expires.bytes().all(|b| b.is_ascii_digit())
        {
            return Revision::Invalid;
        }
        let Ok(expires_at) = expires.parse::<i64>() else {
            return Revision::Invalid;
        };
        if format!("{expires_at}") != expires || tag.len() != MAC_LEN {
            return Revision::Invalid;
        }
        let matches = keys
            .all()
            .iter()
            .any(|key| constant_time_eq(mac(key, input, expires_at).as_bytes(), tag.as_bytes()));
        match (matches, expires_at >= now) {
            (false, _) => Revision::Invalid,
            (true, true) => Revision::Valid { expires_at },
            (true, false) => Revision::Expired,
        }
    }
}

fn mac(key: &SigningKey, input: &RevisionInput<'_>, expires_at: i64) -> String {
    let expires = expires_at.to_be_bytes();
    key.tag(
        DOMAIN,
        &[
            input.operation_id.as_bytes(),
            input.summary.as_bytes(),
            input.terms.as_bytes(),
            &expires,
            input.scope.as_bytes(),
            input.request,
        ],
        MAC_LEN,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> Keys {
        Keys::new(vec![SigningKey::new(b"0123456789abcdef".to_vec())]).unwrap()
    }

    fn input<'a>(terms: &'a str, request: &'a [u8]) -> RevisionInput<'a> {
        RevisionInput {
            operation_id: "exc_sAAAAAAAAAAAAAAAABBBBBBBB",
            summary: "Exchange it.",
            terms,
            scope: "s:session-1",
            request,
        }
    }

    #[test]
    fn minted_revision_checks_until_it_expires() {
        let keys = keys();
        let rev = Revision::mint(keys.current(), &input("{}", b"r"), 1000);
        assert!(rev.starts_with("1000-"));
        assert!(super::super::is_id(&rev));
        assert_eq!(
            Revision::check(&keys, &rev, &input("{}", b"r"), 999),
            Revision::Valid { expires_at: 1000 }
        );
        assert_eq!(
            Revision::check(&keys, &rev, &input("{}", b"r"), 1000),
            Revision::Valid { expires_at: 1000 }
        );
        assert_eq!(
            Revision::check(&keys, &rev, &input("{}", b"r"), 1001),
            Revision::Expired
        );
    }

    #[test]
    fn tampering_is_invalid() {
        let keys = keys();
        let rev = Revision::mint(keys.current(), &input("{}", b"r"), 1000);
        let longer_expiry = rev.replacen("1000", "9000", 1);
        let leading_zero = format!("0{rev}");
        let truncated = &rev[..rev.len() - 1];
        for bad in [
            longer_expiry.as_str(),
            leading_zero.as_str(),
            truncated,
            "",
            "-",
            "1000-",
            "x-y",
        ] {
            assert_eq!(
                Revision::check(&keys, bad, &input("{}", b"r"), 0),
                Revision::Invalid,
                "{bad}"
            );
        }
        assert_eq!(
            Revision::check(&keys, &rev, &input("{\"a\":1}", b"r"), 0),
            Revision::Invalid
        );
        assert_eq!(
            Revision::check(&keys, &rev, &input("{}", b"other"), 0),
            Revision::Invalid
        );
    }

    #[test]
    fn rotation_verifies_with_old_keys() {
        let old = SigningKey::new(b"old-key-0123456789".to_vec());
        let rev = Revision::mint(&old, &input("{}", b"r"), 1000);
        let rotated =
            Keys::new(vec![SigningKey::new(b"new-key-0123456789".to_vec()), old]).unwrap();
        assert_eq!(
            Revision::check(&rotated, &rev, &input("{}", b"r"), 0),
            Revision::Valid { expires_at: 1000 }
        );
        assert_eq!(
            Revision::check(&keys(), &rev, &input("{}", b"r"), 0),
            Revision::Invalid
        );
    }

    proptest! {
        /// Different terms never share a revision, and a revision of one set of terms never
        /// checks against another.
        #[test]
        fn different_terms_never_share_a_revision(a in ".{0,40}", b in ".{0,40}", expires in 0i64..4_000_000_000) {
            prop_assume!(a != b);
            let keys = keys();
            let rev_a = Revision::mint(keys.current(), &input(&a, b"r"), expires);
            let rev_b = Revision::mint(keys.current(), &input(&b, b"r"), expires);
            prop_assert_ne!(&rev_a, &rev_b);
            prop_assert_eq!(Revision::check(&keys, &rev_a, &input(&b, b"r"), 0), Revision::Invalid);
        }

        /// No string the gateway did not mint is accepted.
        #[test]
        fn arbitrary_strings_are_not_valid(text in "[0-9]{1,12}-[A-Za-z0-9_-]{22}") {
            prop_assert_eq!(Revision::check(&keys(), &text, &input("{}", b"r"), 0), Revision::Invalid);
        }
    }
}
