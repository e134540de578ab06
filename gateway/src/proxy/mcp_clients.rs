//! What an MCP client declared in `initialize` that the gateway's own answers depend on:
//! URL-mode elicitation, for the approval page over MCP (`mcp::page`).
//!
//! Before 2026-07-28 a client declares its capabilities once, in `initialize`, which the
//! gateway forwards to the MCP server; its later requests name only the MCP session
//! (`Mcp-Session-Id`, which the server assigns in its answer). So the gateway notes the
//! declaration as that answer passes, before the client has it, keyed by the route and the
//! session ID, in the operation store, where every replica reads it. From 2026-07-28 every
//! request declares its own capabilities, and nothing is kept.
//!
//! The store has no slot made for this: the declaration is kept in its keyed, expiring
//! message slots (`OperationStore::take_message` / `finish_message`, the conversations
//! service's) under keys of their own domain (a digest, as conversation keys are, of other
//! parts). Whatever fails, or is not known, the gateway sends only what every client reads
//! (the tool error with the link): nothing here decides what is performed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::clock::now_millis;
use crate::store::{MessageAnswer, MessageLease, MessageSlot, OperationStore};

/// How long a declaration is kept: a working day's MCP session. A client whose session
/// outlives it gets the tool error alone.
const REMEMBERED_MS: i64 = 24 * 60 * 60 * 1000;

/// How long a note or a look holds its slot (both are one round trip more).
const LEASE_MS: i64 = 10_000;

/// What is kept for a session that declared URL-mode elicitation.
const URL_ELICITATION: &[u8] = b"elicitation.url";

/// The MCP clients of one route, as far as they declared URL-mode elicitation.
pub(crate) struct McpClients {
    store: Arc<dyn OperationStore>,
    /// The route's name: session IDs are the MCP server's, and two routes' may be equal.
    route: String,
    /// Identifies this process in the slots' leases.
    instance: String,
    taken: AtomicU64,
}

impl McpClients {
    pub(crate) fn new(store: Arc<dyn OperationStore>, route: &str) -> McpClients {
        McpClients {
            store,
            route: route.to_owned(),
            instance: format!("mcp-{:08x}", rand::random::<u32>()),
            taken: AtomicU64::new(0),
        }
    }

    /// Note that the MCP session `session_id` declared URL-mode elicitation. A failure is
    /// logged: that session's client then gets the tool error alone.
    pub(crate) async fn note_url_elicitation(&self, session_id: &[u8]) {
        let (key, owner) = (self.key(session_id), self.owner());
        let lease = lease(&key, &owner);
        let noted = match self.store.take_message(&lease).await {
            Ok(MessageSlot::Taken) => {
                let noted = MessageAnswer {
                    key: &key,
                    owner: &owner,
                    answer: Some(URL_ELICITATION),
                    remember_until_ms: lease.now_ms.saturating_add(REMEMBERED_MS),
                };
                self.store.finish_message(&noted).await
            }
            // Noted already (an MCP session is initialized once).
            Ok(MessageSlot::Answered(_) | MessageSlot::Busy) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = noted {
            tracing::warn!(error = %e, "an MCP client's URL-mode elicitation not noted; it gets approval page links as tool errors only");
        }
    }

    /// Whether the MCP session `session_id` declared URL-mode elicitation: false when it did
    /// not, or when the store can't say now.
    pub(crate) async fn declared_url_elicitation(&self, session_id: &[u8]) -> bool {
        let (key, owner) = (self.key(session_id), self.owner());
        let lease = lease(&key, &owner);
        match self.store.take_message(&lease).await {
            Ok(MessageSlot::Answered(kept)) => kept.as_ref() == URL_ELICITATION,
            Ok(MessageSlot::Taken) => {
                // Nothing noted: let the slot this look took go again.
                let let_go = MessageAnswer {
                    key: &key,
                    owner: &owner,
                    answer: None,
                    remember_until_ms: lease.now_ms,
                };
                if let Err(e) = self.store.finish_message(&let_go).await {
                    tracing::warn!(error = %e, "an MCP client's slot not let go; it lapses by itself");
                }
                false
            }
            // Another call of the same session looks now, and nothing was noted.
            Ok(MessageSlot::Busy) => false,
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

    fn clients(store: &Arc<dyn OperationStore>, route: &str) -> McpClients {
        McpClients::new(Arc::clone(store), route)
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
        a.note_url_elicitation(b"s1").await;
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
