//! The approval page's link for one revision: `/approve/{operation_id}?r={revision}&d={details}&m={mac}`.
//!
//! Operations are minted statelessly (protocol/revision.rs): nothing is stored before an
//! approval. The link carries what the page shows (policy, summary, terms, expiry) as
//! base64url JSON, MACed with the gateway's signing keys under a domain of its own, so the
//! page shows only what the gateway minted and nothing unapproved is stored. The MAC
//! binds the operation ID and the revision too: details can't be moved to another operation.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Keys, OperationId, SigningKey, constant_time_eq, is_id};

const DOMAIN: &[u8] = b"poppy-approval-page-link-v1";
const ACCOUNT_DOMAIN: &[u8] = b"poppy-approval-page-account-v1";
/// 43 base64url characters: the whole HMAC-SHA-256.
const MAC_LEN: usize = 43;
/// The longest `d` accepted or minted: a link stays well under what browsers and proxies
/// carry in a request line (8 KiB is common).
pub(crate) const MAX_DETAILS_CHARS: usize = 6 * 1024;

/// What the page shows for one revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Details {
    pub(crate) policy: String,
    pub(crate) summary: String,
    pub(crate) terms: Map<String, Value>,
    /// Unix seconds, the revision's own `expires_at`.
    pub(crate) expires_at: i64,
    /// A keyed hash of the account the request acts for ([`account_binding`]): the page
    /// stores a decision only by a subject that is that account. `None`: a request without
    /// an account, which nobody can approve on the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) account: Option<String>,
    /// The `[[route]]` the request came to (`None`: the default route), for the page's
    /// events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) route: Option<String>,
}

/// The account binding of a link: a keyed hash of the approver's account, so the link shows
/// no account name and can't be bound to another.
pub(crate) fn account_binding(key: &SigningKey, account: &str) -> String {
    key.tag(ACCOUNT_DOMAIN, &[account.as_bytes()], MAC_LEN)
}

/// Whether a signed-in `subject` is the account `binding` was made for (under any key): the
/// account as the approver reads it, `verified:<sub>` from a verified token or `claim:<sub>`
/// from an unverified one (`operation::page::subject_is_account`).
pub(crate) fn binds_subject(keys: &Keys, binding: &str, subject: &str) -> bool {
    !subject.is_empty()
        && keys.all().iter().any(|key| {
            [format!("claim:{subject}"), format!("verified:{subject}")]
                .iter()
                .any(|account| {
                    constant_time_eq(account_binding(key, account).as_bytes(), binding.as_bytes())
                })
        })
}

/// One link, as read from a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Link {
    pub(crate) operation_id: OperationId,
    pub(crate) revision: String,
    pub(crate) details: Details,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LinkError {
    #[error("`{0}` is not an operation_id of this gateway")]
    OperationId(String),
    #[error("the link lacks `{0}`")]
    Missing(&'static str),
    #[error("the link's `{0}` is malformed")]
    Malformed(&'static str),
    #[error("the link was not made by this gateway, or was changed")]
    Forged,
    #[error("the operation's details are too long for a link")]
    TooLong,
}

/// The path and query of the link for `details` (to append to the page's public URL).
pub(crate) fn mint(
    key: &SigningKey,
    operation_id: &OperationId,
    revision: &str,
    details: &Details,
) -> Result<String, LinkError> {
    let json = serde_json::to_vec(details).map_err(|_| LinkError::Malformed("d"))?;
    let d = URL_SAFE_NO_PAD.encode(json);
    if d.len() > MAX_DETAILS_CHARS {
        return Err(LinkError::TooLong);
    }
    let m = mac(key, operation_id.as_str(), revision, &d);
    // The ID, the revision (digits, `-`, base64url) and both base64url values need no
    // percent-encoding.
    Ok(format!(
        "/approve/{}?r={revision}&d={d}&m={m}",
        operation_id.as_str()
    ))
}

/// Read and check a link's path segment (the operation ID) and query, with every key
/// (rotation). Expiry is the caller's: an expired link still shows, as expired.
pub(crate) fn read(keys: &Keys, id: &str, query: &str) -> Result<Link, LinkError> {
    let operation_id = OperationId::parse(id).ok_or_else(|| LinkError::OperationId(shorten(id)))?;
    let (mut r, mut d, mut m) = (None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let slot = match pair.split_once('=') {
            Some(("r", v)) => (&mut r, v),
            Some(("d", v)) => (&mut d, v),
            Some(("m", v)) => (&mut m, v),
            // Other parameters (a tracker's, say) are not the link's and change nothing.
            _ => continue,
        };
        if slot.0.replace(slot.1).is_some() {
            return Err(LinkError::Malformed("query"));
        }
    }
    let revision = r.ok_or(LinkError::Missing("r"))?;
    let d = d.ok_or(LinkError::Missing("d"))?;
    let m = m.ok_or(LinkError::Missing("m"))?;
    if !is_id(revision) {
        return Err(LinkError::Malformed("r"));
    }
    if d.len() > MAX_DETAILS_CHARS {
        return Err(LinkError::TooLong);
    }
    if m.len() != MAC_LEN {
        return Err(LinkError::Forged);
    }
    let genuine = keys.all().iter().any(|key| {
        constant_time_eq(
            mac(key, operation_id.as_str(), revision, d).as_bytes(),
            m.as_bytes(),
        )
    });
    if !genuine {
        return Err(LinkError::Forged);
    }
    let json = URL_SAFE_NO_PAD
        .decode(d)
        .map_err(|_| LinkError::Malformed("d"))?;
    let details: Details = serde_json::from_slice(&json).map_err(|_| LinkError::Malformed("d"))?;
    Ok(Link {
        operation_id,
        revision: revision.to_owned(),
        details,
    })
}

fn mac(key: &SigningKey, id: &str, revision: &str, details: &str) -> String {
    key.tag(
        DOMAIN,
        &[id.as_bytes(), revision.as_bytes(), details.as_bytes()],
        MAC_LEN,
    )
}

/// At most 64 characters of a bad value, for an error message.
fn shorten(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new(vec![SigningKey::new(
            b"page-link-test-key-0123456789abcd".to_vec(),
        )])
        .expect("a key")
    }

    fn details() -> Details {
        let mut terms = Map::new();
        terms.insert("item_id".into(), Value::String("A1".into()));
        Details {
            policy: "exchange".into(),
            summary: "Exchange **A1**.".into(),
            terms,
            expires_at: 1_900_000_000,
            account: Some(account_binding(keys().current(), "verified:alice")),
            route: None,
        }
    }

    #[test]
    fn the_account_binding_names_the_signed_in_subject_only() {
        let keys = keys();
        let binding = details().account.expect("bound");
        assert!(binds_subject(&keys, &binding, "alice"));
        assert!(!binds_subject(&keys, &binding, "bob"));
        assert!(!binds_subject(&keys, &binding, ""));
        let unverified = account_binding(keys.current(), "claim:carol");
        assert!(binds_subject(&keys, &unverified, "carol"));
    }

    fn id() -> OperationId {
        OperationId::parse("exc_aAAAAAAAAAAAAAAAABBBBBBBB").expect("an id of the gateway's shape")
    }

    fn split(link: &str) -> (&str, &str) {
        let rest = link.strip_prefix("/approve/").expect("the page's path");
        rest.split_once('?').expect("a query")
    }

    #[test]
    fn a_minted_link_reads_back() {
        let keys = keys();
        let link = mint(keys.current(), &id(), "1900000000-abc", &details()).expect("minted");
        let (path_id, query) = split(&link);
        let read = read(&keys, path_id, query).expect("genuine");
        assert_eq!(read.operation_id, id());
        assert_eq!(read.revision, "1900000000-abc");
        assert_eq!(read.details, details());
        // A parameter that is not the link's changes nothing.
        assert!(super::read(&keys, path_id, &format!("{query}&utm=x")).is_ok());
    }

    #[test]
    fn changed_or_foreign_links_are_refused() {
        let keys = keys();
        let link = mint(keys.current(), &id(), "1900000000-abc", &details()).expect("minted");
        let (path_id, query) = split(&link);
        // Another revision, another operation, other details, another key.
        let other_revision = query.replace("r=1900000000-abc", "r=1900000000-abd");
        assert_eq!(
            read(&keys, path_id, &other_revision),
            Err(LinkError::Forged)
        );
        let other_id = "exc_aAAAAAAAAAAAAAAAABBBBBBBC";
        assert_eq!(read(&keys, other_id, query), Err(LinkError::Forged));
        let mut changed = details();
        changed.summary = "Exchange **B2**.".into();
        let forged = mint(keys.current(), &id(), "1900000000-abc", &changed).expect("minted");
        let forged_d = split(&forged).1.split('&').nth(1).expect("d");
        let original_d = query.split('&').nth(1).expect("d");
        assert_eq!(
            read(&keys, path_id, &query.replace(original_d, forged_d)),
            Err(LinkError::Forged)
        );
        let other_keys = Keys::new(vec![SigningKey::new(
            b"another-gateway-key-0123456789abc".to_vec(),
        )])
        .expect("a key");
        assert_eq!(read(&other_keys, path_id, query), Err(LinkError::Forged));
        // Repeated, missing and malformed parameters.
        assert!(read(&keys, path_id, &format!("{query}&r=1")).is_err());
        assert_eq!(
            read(&keys, path_id, "r=1-a&d=e30"),
            Err(LinkError::Missing("m"))
        );
        assert!(matches!(
            read(&keys, "not an id", query),
            Err(LinkError::OperationId(_))
        ));
    }

    #[test]
    fn details_too_long_for_a_link_are_not_minted() {
        let mut long = details();
        long.summary = "x".repeat(MAX_DETAILS_CHARS);
        assert_eq!(
            mint(keys().current(), &id(), "1900000000-abc", &long),
            Err(LinkError::TooLong)
        );
    }
}
