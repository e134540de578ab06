//! What the gateway keeps of an MCP session when it opens: whether its client declared
//! URL-mode elicitation, for the approval page over MCP (`mcp::page`), and who opened it,
//! the only one who may answer the MCP server's requests in it (issue 37).
//!
//! Before 2026-07-28 a client declares its capabilities once, in `initialize`, which the
//! gateway forwards to the MCP server; its later requests name only the MCP session
//! (`Mcp-Session-Id`, which the server assigns in its answer). So the gateway notes the
//! opening as that answer passes, before the client has it, keyed by the route and the
//! session ID, in the operation store, where every replica reads it. From 2026-07-28 every
//! request declares its own capabilities, and the server asks its questions inside a call's
//! result (`input_required`, whose follow-up is bound to the approver: `proxy::rounds`).
//!
//! The server's questions during a call (`elicitation/create`, 2025-06-18 and 2025-11-25)
//! go to the session's client, and its answer is a JSON-RPC response POSTed with the
//! session's ID: whoever sends it steers what the server does next, an approved call
//! included. So an answer is forwarded only from the Session (or token) that opened the
//! session, proven as a follow-up's approver must be (`operation::is_proven`); anyone
//! else's, or one in a session the gateway did not see opened, is refused and never
//! forwarded.
//!
//! The store has no slot made for this: the opening is kept in its keyed, expiring
//! message slots (`OperationStore::take_message` / `finish_message`, the conversations
//! service's) under keys of their own domain (a digest, as conversation keys are, of other
//! parts). Whatever fails, or is not known, the gateway sends only what every client reads
//! (the tool error with the link), and forwards no answer to the server's requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::now_millis;
use crate::identity::Approver;
use crate::operation::{Kept, is_proven, keep};
use crate::protocol::Keys;
use crate::store::{MessageAnswer, MessageLease, MessageSlot, OperationStore, StoreError};

/// How long an opening is kept: a working day's MCP session. A client whose session
/// outlives it gets the tool error alone, and its answers to the server's requests are
/// refused (it opens a new session).
const REMEMBERED_MS: i64 = 24 * 60 * 60 * 1000;

/// How long a note or a look holds its slot (both are one round trip more).
const LEASE_MS: i64 = 10_000;

/// What gateways before openers were kept noted for a session that declared URL-mode
/// elicitation (no opener: its answers are refused).
const URL_ELICITATION: &[u8] = b"elicitation.url";

/// What is kept of an MCP session's opening.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Opened {
    /// Its client declared URL-mode elicitation.
    pub(crate) url_elicitation: bool,
    /// Who opened it (`None`: the `initialize` named no one the gateway could read).
    pub(crate) opener: Option<Opener>,
}

/// Who opened an MCP session, kept as an operation's record keeps its approver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Opener {
    scope: String,
    credentials: Option<String>,
}

impl Opener {
    pub(crate) fn of(keys: &Keys, approver: &Approver) -> Opener {
        let (scope, credentials) = keep(keys, approver);
        Opener { scope, credentials }
    }

    /// Whether `approver` is the one who opened the session.
    pub(crate) fn is(&self, keys: &Keys, approver: &Approver) -> bool {
        let kept = Kept {
            scope: &self.scope,
            credentials: self.credentials.as_deref(),
        };
        is_proven(keys, kept, approver)
    }
}

impl Opened {
    fn encode(&self) -> Vec<u8> {
        // Serializing these plain fields cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn decode(kept: &[u8]) -> Opened {
        if kept == URL_ELICITATION {
            return Opened {
                url_elicitation: true,
                opener: None,
            };
        }
        serde_json::from_slice(kept).unwrap_or_default()
    }
}

/// Why an answer to the MCP server's requests is not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotForwarded {
    #[error(
        "an answer to the MCP server's requests must name its MCP session (Mcp-Session-Id); nothing was forwarded"
    )]
    NoSession,
    #[error(
        "the gateway did not see who opened this MCP session (opened without a Session it could read, or more than a day ago), and forwards answers to the MCP server's requests only from who opened it; open a new session; nothing was forwarded"
    )]
    NotOpened,
    #[error(
        "this answers a request of the MCP server in an MCP session another Session opened, which only that Session may do; nothing was forwarded"
    )]
    NotTheOpener,
    #[error(
        "the gateway cannot reach its operation store to tell who opened this MCP session; nothing was forwarded, try again"
    )]
    StoreUnavailable,
}

impl NotForwarded {
    pub(crate) fn status(self) -> u16 {
        match self {
            NotForwarded::NoSession => 400,
            NotForwarded::NotOpened | NotForwarded::NotTheOpener => 403,
            NotForwarded::StoreUnavailable => 503,
        }
    }
}

/// The MCP sessions of one route, as far as the gateway saw them opened.
pub(crate) struct McpClients {
    store: Arc<dyn OperationStore>,
    /// What openers' credentials are digested with, as records' are.
    keys: Keys,
    /// The route's name: session IDs are the MCP server's, and two routes' may be equal.
    route: String,
    /// Identifies this process in the slots' leases.
    instance: String,
    taken: AtomicU64,
}

impl McpClients {
    pub(crate) fn new(store: Arc<dyn OperationStore>, route: &str, keys: Keys) -> McpClients {
        McpClients {
            store,
            keys,
            route: route.to_owned(),
            instance: format!("mcp-{:08x}", rand::random::<u32>()),
            taken: AtomicU64::new(0),
        }
    }

    /// Note how the MCP session `session_id` was opened. A failure is logged: that
    /// session's client then gets the tool error alone, and its answers are refused.
    pub(crate) async fn note_opened(&self, session_id: &[u8], opened: &Opened) {
        let (key, owner) = (self.key(session_id), self.owner());
        let lease = lease(&key, &owner);
        let encoded = opened.encode();
        let noted = match self.store.take_message(&lease).await {
            Ok(MessageSlot::Taken) => {
                let noted = MessageAnswer {
                    key: &key,
                    owner: &owner,
                    answer: Some(&encoded),
                    remember_until_ms: lease.now_ms.saturating_add(REMEMBERED_MS),
                };
                self.store.finish_message(&noted).await
            }
            // Noted already (an MCP session is opened once: the first note stands).
            Ok(MessageSlot::Answered(_) | MessageSlot::Busy) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = noted {
            tracing::warn!(error = %e, "an MCP session's opening not noted; its client gets approval page links as tool errors only, and its answers to the server's requests are refused");
        }
    }

    /// How the MCP session `session_id` was opened, as far as noted (`None`: nothing is).
    pub(crate) async fn opened(&self, session_id: &[u8]) -> Result<Option<Opened>, StoreError> {
        let (key, owner) = (self.key(session_id), self.owner());
        let lease = lease(&key, &owner);
        match self.store.take_message(&lease).await? {
            MessageSlot::Answered(kept) => Ok(Some(Opened::decode(&kept))),
            MessageSlot::Taken => {
                // Nothing noted: let the slot this look took go again.
                let let_go = MessageAnswer {
                    key: &key,
                    owner: &owner,
                    answer: None,
                    remember_until_ms: lease.now_ms,
                };
                if let Err(e) = self.store.finish_message(&let_go).await {
                    tracing::warn!(error = %e, "an MCP session's slot not let go; it lapses by itself");
                }
                Ok(None)
            }
            // Another request of the same session looks now, and nothing was noted.
            MessageSlot::Busy => Ok(None),
        }
    }

    /// What to note of a session `sender` opens (`None`: one the gateway could not read).
    pub(crate) fn opening(&self, url_elicitation: bool, sender: Option<&Approver>) -> Opened {
        Opened {
            url_elicitation,
            opener: sender.map(|sender| Opener::of(&self.keys, sender)),
        }
    }

    /// Whether `sender` may answer the MCP server's requests in the session `session_id`:
    /// only who opened it, proven as an operation's approver is.
    pub(crate) async fn may_answer(
        &self,
        session_id: Option<&[u8]>,
        sender: &Approver,
    ) -> Result<(), NotForwarded> {
        let session_id = session_id.ok_or(NotForwarded::NoSession)?;
        let opened = self.opened(session_id).await.map_err(|e| {
            tracing::warn!(error = %e, "an MCP session's opener can't be read; an answer to the server's request is not forwarded");
            NotForwarded::StoreUnavailable
        })?;
        match opened.and_then(|o| o.opener) {
            None => Err(NotForwarded::NotOpened),
            Some(opener) if opener.is(&self.keys, sender) => Ok(()),
            Some(_) => Err(NotForwarded::NotTheOpener),
        }
    }

    /// Whether the MCP session `session_id` declared URL-mode elicitation: false when it did
    /// not, or when the store can't say now.
    pub(crate) async fn declared_url_elicitation(&self, session_id: &[u8]) -> bool {
        match self.opened(session_id).await {
            Ok(opened) => opened.is_some_and(|o| o.url_elicitation),
            Err(e) => {
                tracing::warn!(error = %e, "an MCP client's declarations can't be read; the approval page link goes as a tool error only");
                false
            }
        }
    }

    fn owner(&self) -> String {
        format!(
            "{}-{}",
            self.instance,
            self.taken.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn key(&self, session_id: &[u8]) -> String {
        let mut hash = Sha256::new();
        for part in [
            b"poppy-mcp-client-declared-v1".as_slice(),
            self.route.as_bytes(),
            session_id,
        ] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
        URL_SAFE_NO_PAD.encode(hash.finalize())
    }
}

/// A note's or a look's hold on its slot, from now.
fn lease<'a>(key: &'a str, owner: &'a str) -> MessageLease<'a> {
    let now_ms = now_millis();
    MessageLease {
        key,
        owner,
        now_ms,
        lease_until_ms: now_ms.saturating_add(LEASE_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::new(vec![crate::protocol::SigningKey::new(
            b"mcp-clients-test".to_vec(),
        )])
        .unwrap()
    }

    /// A Session's approver: `scope`, and `token` unverified (`None`: all verified).
    fn approver(scope: &str, token: Option<&[u8]>) -> Approver {
        Approver {
            kind: crate::protocol::ScopeKind::Session,
            scope: scope.into(),
            session_scope: scope.into(),
            credentials: token.map(|t| crate::identity::Credentials::of(t, None)),
            who: crate::identity::Who::default(),
        }
    }

    #[tokio::test]
    async fn only_who_opened_a_session_may_answer_in_it() {
        let store: Arc<dyn OperationStore> = Arc::new(crate::store::MemoryStore::new());
        let (a, b) = (clients(&store, "shop"), clients(&store, "shop"));
        let alice = approver("s:alice", Some(b"jwt-a"));
        a.note_opened(b"s1", &a.opening(false, Some(&alice))).await;
        assert_eq!(
            b.may_answer(Some(b"s1"), &alice).await,
            Ok(()),
            "another replica"
        );
        for (who, other) in [
            ("another Session", approver("s:bob", Some(b"jwt-b"))),
            (
                "her scope, other credentials",
                approver("s:alice", Some(b"jwt-b")),
            ),
        ] {
            assert_eq!(
                b.may_answer(Some(b"s1"), &other).await,
                Err(NotForwarded::NotTheOpener),
                "{who}"
            );
        }
        // A verified Session of her scope is hers (`operation::is_proven`, as for a follow-up).
        assert_eq!(
            b.may_answer(Some(b"s1"), &approver("s:alice", None)).await,
            Ok(()),
            "her scope, verified"
        );
        assert_eq!(
            b.may_answer(Some(b"s2"), &alice).await,
            Err(NotForwarded::NotOpened),
            "a session not seen opened"
        );
        assert_eq!(
            b.may_answer(None, &alice).await,
            Err(NotForwarded::NoSession)
        );
        // Opened by no one the gateway could read, or noted by an older gateway.
        a.note_opened(b"s3", &a.opening(true, None)).await;
        store_legacy(&store, &a, b"s4").await;
        for session in [b"s3", b"s4"] {
            assert!(b.declared_url_elicitation(session).await);
            assert_eq!(
                b.may_answer(Some(session), &alice).await,
                Err(NotForwarded::NotOpened)
            );
        }
        // Verified: the scope alone proves it.
        let verified = approver("s:carol", None);
        a.note_opened(b"s5", &a.opening(false, Some(&verified)))
            .await;
        assert_eq!(b.may_answer(Some(b"s5"), &verified).await, Ok(()));
    }

    /// What a gateway before openers noted for a session declaring URL-mode elicitation.
    async fn store_legacy(store: &Arc<dyn OperationStore>, clients: &McpClients, id: &[u8]) {
        let (key, owner) = (clients.key(id), clients.owner());
        let lease = lease(&key, &owner);
        assert!(matches!(
            store.take_message(&lease).await,
            Ok(MessageSlot::Taken)
        ));
        let noted = MessageAnswer {
            key: &key,
            owner: &owner,
            answer: Some(URL_ELICITATION),
            remember_until_ms: lease.now_ms + REMEMBERED_MS,
        };
        store.finish_message(&noted).await.unwrap();
    }

    fn clients(store: &Arc<dyn OperationStore>, route: &str) -> McpClients {
        McpClients::new(Arc::clone(store), route, keys())
    }

    #[tokio::test]
    async fn a_noted_session_is_known_to_every_replica_of_its_route() {
        let store: Arc<dyn OperationStore> = Arc::new(crate::store::MemoryStore::new());
        let (a, b) = (clients(&store, "shop"), clients(&store, "shop"));
        assert!(!b.declared_url_elicitation(b"s1").await);
        assert!(
            !b.declared_url_elicitation(b"s1").await,
            "a look leaves nothing behind"
        );
        let declared = Opened {
            url_elicitation: true,
            opener: None,
        };
        a.note_opened(b"s1", &declared).await;
        assert!(b.declared_url_elicitation(b"s1").await);
        assert!(a.declared_url_elicitation(b"s1").await);
        assert!(!b.declared_url_elicitation(b"s2").await);
        assert!(
            !clients(&store, "other")
                .declared_url_elicitation(b"s1")
                .await,
            "another route's session of the same ID"
        );
    }
}
