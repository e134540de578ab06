//! `operation_id`: `<prefix>_<kind><action><generation>`, e.g. `exc_aQ2x…`.
//!
//! - `kind` is `a` for an operation that belongs to an account (signed in) and `s` for one bound
//!   to a single Session (signed out); a signed-out Session naming an `a` operation is challenged.
//! - `action` (16 chars) is a MAC of the policy, the approver scope and the `same_action` values:
//!   the same action always has the same tag, whatever its terms.
//! - `generation` (8 chars) is a MAC of the action tag and the action's generation counter, which
//!   moves on once an operation is performed, so a later request for the same action is new.
//!
//! The part before the generation is the *action tag*: the store keys the record and the
//! generation counter by it, so both live in one Redis Cluster hash slot.

use std::fmt;

use super::signing::SigningKey;

const ACTION_LEN: usize = 16;
const GENERATION_LEN: usize = 8;

/// Who may approve an operation (spec section 3, "Who can approve it").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeKind {
    /// Signed out: only the Session that received it.
    Session,
    /// Signed in: any Session of the same Personal Agent and User signed in to the account.
    Account,
}

impl ScopeKind {
    fn marker(self) -> char {
        match self {
            ScopeKind::Session => 's',
            ScopeKind::Account => 'a',
        }
    }
}

/// A well-formed operation_id of this gateway's shape. Parsing proves the shape only; whether
/// the gateway minted it is decided by recomputing it from the request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperationId {
    text: String,
    kind: ScopeKind,
}

/// `<prefix>_<kind><action>`: identifies an action, whatever its generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ActionTag {
    text: String,
    kind: ScopeKind,
}

impl ActionTag {
    /// The tag of an action: a MAC of the policy, the approver scope and the `same_action`
    /// values (all in `action_material`).
    pub(crate) fn derive(
        key: &SigningKey,
        prefix: &str,
        kind: ScopeKind,
        action_material: &[&[u8]],
    ) -> ActionTag {
        let action = key.tag(b"poppy-action-v1", action_material, ACTION_LEN);
        ActionTag {
            text: format!("{prefix}_{}{action}", kind.marker()),
            kind,
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// The operation_id of this action at `generation`.
    pub(crate) fn operation_id(&self, key: &SigningKey, generation: u64) -> OperationId {
        let generation_bytes = generation.to_be_bytes();
        let generation = key.tag(
            b"poppy-generation-v1",
            &[self.text.as_bytes(), &generation_bytes],
            GENERATION_LEN,
        );
        OperationId {
            text: format!("{}{generation}", self.text),
            kind: self.kind,
        }
    }
}

impl OperationId {
    /// Derive the operation_id of an action at a generation.
    pub fn derive(
        key: &SigningKey,
        prefix: &str,
        kind: ScopeKind,
        action_material: &[&[u8]],
        generation: u64,
    ) -> OperationId {
        ActionTag::derive(key, prefix, kind, action_material).operation_id(key, generation)
    }

    /// Parse an operation_id named in an approval. `None` when it is not of this gateway's
    /// shape (it then cannot be one this gateway returned).
    pub fn parse(text: &str) -> Option<OperationId> {
        let (prefix, opaque) = text.split_once('_')?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        if opaque.len() != 1 + ACTION_LEN + GENERATION_LEN {
            return None;
        }
        let kind = match opaque.as_bytes()[0] {
            b's' => ScopeKind::Session,
            b'a' => ScopeKind::Account,
            _ => return None,
        };
        if !opaque[1..].bytes().all(super::is_id_byte) {
            return None;
        }
        Some(OperationId {
            text: text.to_owned(),
            kind,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn kind(&self) -> ScopeKind {
        self.kind
    }

    /// `<prefix>_<kind><action>`: identifies the action, whatever the generation.
    pub fn action_tag(&self) -> &str {
        &self.text[..self.text.len() - GENERATION_LEN]
    }

    /// The generation part alone.
    pub fn generation_tag(&self) -> &str {
        &self.text[self.text.len() - GENERATION_LEN..]
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        SigningKey::new(b"test key material that is long enough".to_vec())
    }

    #[test]
    fn same_action_same_id_and_generation_changes_it() {
        let a = OperationId::derive(&key(), "exc", ScopeKind::Session, &[b"o1", b"i1"], 0);
        let b = OperationId::derive(&key(), "exc", ScopeKind::Session, &[b"o1", b"i1"], 0);
        let c = OperationId::derive(&key(), "exc", ScopeKind::Session, &[b"o1", b"i1"], 1);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.action_tag(), c.action_tag());
    }

    #[test]
    fn material_boundaries_matter() {
        let a = OperationId::derive(&key(), "exc", ScopeKind::Session, &[b"ab", b"c"], 0);
        let b = OperationId::derive(&key(), "exc", ScopeKind::Session, &[b"a", b"bc"], 0);
        assert_ne!(a, b);
    }

    #[test]
    fn parse_round_trips_and_rejects_other_shapes() {
        let a = OperationId::derive(&key(), "exc", ScopeKind::Account, &[b"x"], 3);
        let parsed = OperationId::parse(a.as_str()).unwrap();
        assert_eq!(parsed, a);
        assert_eq!(parsed.kind(), ScopeKind::Account);
        assert!(a.as_str().starts_with("exc_a"));
        for bad in [
            "",
            "exc",
            "exc_",
            "_aAAAAAAAAAAAAAAAABBBBBBBB",
            "exc_xAAAAAAAAAAAAAAAABBBBBBBB",
            "exc_aAAAA",
            "e-c_aAAAAAAAAAAAAAAAABBBBBBBB",
            "exc_aAAAAAAAAAAAAAAA.BBBBBBBB",
        ] {
            assert!(OperationId::parse(bad).is_none(), "{bad}");
        }
    }
}
