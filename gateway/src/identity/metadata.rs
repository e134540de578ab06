//! An agent's client metadata document (the OAuth Client ID Metadata Document draft): fetched
//! from its `client_id` URL, it names the agent's long-term keys, by `jwks_uri` or inline
//! (`jwks`). `parse` is pure; `fetch_keys` is the I/O.

use std::time::Duration;

use serde_json::Value;

use super::http::{GetError, HttpClient, check_document_url};
use super::jwks::{JwksError, KeySet};
use crate::protocol::json;

/// The largest metadata document read.
pub(crate) const MAX_METADATA_BYTES: usize = 64 * 1024;
/// The largest JWKS document read.
pub(crate) const MAX_JWKS_BYTES: usize = 256 * 1024;
/// How long one fetch (the document, then its keys) may take.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// What the gateway reads of a metadata document.
#[derive(Debug)]
pub(crate) struct ClientMetadata {
    pub(crate) keys: MetadataKeys,
}

/// Where the agent's long-term keys are.
#[derive(Debug)]
pub(crate) enum MetadataKeys {
    /// `jwks_uri`: a URL under the same rules as the document's.
    Uri(String),
    /// `jwks`: the keys themselves.
    Inline(KeySet),
}

/// Why a metadata document gave no keys. Messages name URLs and members, never key material.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MetadataError {
    #[error("client metadata URL: {0}")]
    Url(String),
    #[error("cannot fetch the client metadata: {0}")]
    Fetch(GetError),
    #[error("the client metadata is not a JSON object (with each member once)")]
    NotAnObject,
    #[error("the client metadata's client_id is not its URL {0:?}")]
    ClientId(String),
    #[error("the client metadata names no keys: give jwks_uri or jwks")]
    NoKeys,
    #[error("the client metadata gives both jwks_uri and jwks: give exactly one")]
    BothKeys,
    #[error("the client metadata's jwks_uri: {0}")]
    JwksUri(String),
    #[error("cannot fetch the client's jwks_uri: {0}")]
    FetchJwks(GetError),
    #[error("the client's keys: {0}")]
    Jwks(JwksError),
}

impl MetadataError {
    /// A document or key set that could not be fetched now ([`GetError::unreachable`]).
    pub(crate) fn unreachable(&self) -> bool {
        match self {
            MetadataError::Fetch(e) | MetadataError::FetchJwks(e) => e.unreachable(),
            _ => false,
        }
    }
}

/// Read the metadata document fetched from `url`: a JSON object whose `client_id` is `url`
/// exactly, with exactly one of `jwks_uri` (https, or http on loopback) and `jwks`.
pub(crate) fn parse(url: &str, bytes: &[u8]) -> Result<ClientMetadata, MetadataError> {
    let Ok(Value::Object(doc)) = json::from_slice::<Value>(bytes) else {
        return Err(MetadataError::NotAnObject);
    };
    // Byte for byte: a document that names another client_id is that client's, wherever it
    // is served from.
    if doc.get("client_id").and_then(Value::as_str) != Some(url) {
        return Err(MetadataError::ClientId(url.to_owned()));
    }
    let keys = match (doc.get("jwks_uri"), doc.get("jwks")) {
        (Some(_), Some(_)) => return Err(MetadataError::BothKeys),
        (None, None) => return Err(MetadataError::NoKeys),
        (Some(Value::String(uri)), None) => {
            check_document_url(uri).map_err(MetadataError::JwksUri)?;
            MetadataKeys::Uri(uri.clone())
        }
        (Some(_), None) => return Err(MetadataError::JwksUri("not a string".into())),
        (None, Some(jwks @ Value::Object(_))) => {
            let bytes = serde_json::to_vec(jwks)
                .map_err(|e| MetadataError::Jwks(JwksError::NotAJwks(e.to_string())))?;
            MetadataKeys::Inline(KeySet::parse(&bytes).map_err(MetadataError::Jwks)?)
        }
        (None, Some(_)) => {
            return Err(MetadataError::Jwks(JwksError::NotAJwks(
                "jwks is not a JSON object".into(),
            )));
        }
    };
    Ok(ClientMetadata { keys })
}

/// Fetch the agent's metadata document from its `client_id` URL, then its keys.
pub(crate) async fn fetch_keys(http: &HttpClient, url: &str) -> Result<KeySet, MetadataError> {
    check_document_url(url).map_err(MetadataError::Url)?;
    let bytes = http
        .get(url, FETCH_TIMEOUT, MAX_METADATA_BYTES)
        .await
        .map_err(MetadataError::Fetch)?;
    match parse(url, &bytes)?.keys {
        MetadataKeys::Inline(keys) => Ok(keys),
        MetadataKeys::Uri(uri) => {
            let bytes = http
                .get(&uri, FETCH_TIMEOUT, MAX_JWKS_BYTES)
                .await
                .map_err(MetadataError::FetchJwks)?;
            KeySet::parse(&bytes).map_err(MetadataError::Jwks)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::identity::testkeys::{AGENT, jwk};

    fn parsed(doc: Value) -> Result<ClientMetadata, MetadataError> {
        parse(AGENT, doc.to_string().as_bytes())
    }

    #[test]
    fn keys_by_uri_or_inline() {
        let by_uri = parsed(
            json!({"client_id": AGENT, "client_name": "Agent", "jwks_uri": "https://agent.example/jwks.json"}),
        );
        assert!(matches!(
            by_uri.unwrap().keys,
            MetadataKeys::Uri(uri) if uri == "https://agent.example/jwks.json"
        ));
        let local =
            parsed(json!({"client_id": AGENT, "jwks_uri": "http://127.0.0.1:9000/jwks.json"}));
        assert!(local.is_ok());
        let inline =
            parsed(json!({"client_id": AGENT, "jwks": {"keys": [jwk("es256-a"), jwk("rs256-a")]}}));
        let MetadataKeys::Inline(keys) = inline.unwrap().keys else {
            panic!("inline keys")
        };
        assert_eq!(keys.len(), 2);
    }

    #[test]
    fn the_document_must_be_the_agents_own() {
        let uri = "https://agent.example/jwks.json";
        for other in [
            json!("https://agent.example/other.json"),
            json!("https://AGENT.example/client.json"),
            json!("https://agent.example/client.json/"),
            json!(null),
        ] {
            let doc = json!({"client_id": other, "jwks_uri": uri});
            assert!(matches!(parsed(doc), Err(MetadataError::ClientId(_))));
        }
        assert!(matches!(
            parsed(json!({"jwks_uri": uri})),
            Err(MetadataError::ClientId(_))
        ));
        assert!(matches!(
            parse(AGENT, b"[1]"),
            Err(MetadataError::NotAnObject)
        ));
        assert!(matches!(
            parse(AGENT, b"{"),
            Err(MetadataError::NotAnObject)
        ));
    }

    #[test]
    fn exactly_one_key_source_with_the_url_rules() {
        let jwks = json!({"keys": [jwk("es256-a")]});
        let both = json!({"client_id": AGENT, "jwks_uri": "https://agent.example/jwks.json", "jwks": jwks});
        assert!(matches!(parsed(both), Err(MetadataError::BothKeys)));
        assert!(matches!(
            parsed(json!({"client_id": AGENT})),
            Err(MetadataError::NoKeys)
        ));
        for bad in [
            json!("http://agent.example/jwks.json"),
            json!("jwks.json"),
            json!(7),
        ] {
            let doc = json!({"client_id": AGENT, "jwks_uri": bad});
            assert!(
                matches!(parsed(doc), Err(MetadataError::JwksUri(_))),
                "{bad}"
            );
        }
        let secret =
            json!({"client_id": AGENT, "jwks": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}});
        assert!(matches!(
            parsed(secret),
            Err(MetadataError::Jwks(JwksError::NoUsableKey))
        ));
        let not_jwks = json!({"client_id": AGENT, "jwks": [jwk("es256-a")]});
        assert!(matches!(parsed(not_jwks), Err(MetadataError::Jwks(_))));
    }

    /// An HTTP/1.1 server on loopback; `routes` gets its base URL and gives, per path, the
    /// status, the `location` (or "") and the body.
    async fn serve(routes: impl FnOnce(&str) -> Vec<(String, u16, String, String)>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let routes = routes(&base);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let path = text.split(' ').nth(1).unwrap_or("/");
                let (status, location, body) = routes
                    .iter()
                    .find(|(p, ..)| p == path)
                    .map_or((404, "", ""), |(_, s, l, b)| (*s, l.as_str(), b.as_str()));
                let location = if location.is_empty() {
                    String::new()
                } else {
                    format!("location: {location}\r\n")
                };
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{location}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        base
    }

    fn route(
        path: &str,
        status: u16,
        location: &str,
        body: String,
    ) -> (String, u16, String, String) {
        (path.into(), status, location.into(), body)
    }

    #[tokio::test]
    async fn keys_are_fetched_from_the_document_then_its_jwks_uri() {
        let http = HttpClient::new(None).unwrap();
        let base = serve(|base| {
            let doc = json!({"client_id": format!("{base}/client.json"), "jwks_uri": format!("{base}/jwks.json")});
            let inline = json!({"client_id": format!("{base}/inline.json"), "jwks": {"keys": [jwk("es256-a")]}});
            let jwks = json!({"keys": [jwk("es256-a"), jwk("rs256-a")]});
            let big = format!("{{\"client_id\": \"{base}/big.json\", \"pad\": \"{}\"}}", "x".repeat(MAX_METADATA_BYTES));
            vec![
                route("/client.json", 200, "", doc.to_string()),
                route("/inline.json", 200, "", inline.to_string()),
                route("/jwks.json", 200, "", jwks.to_string()),
                // Moved within the limit: the document still names its client_id URL.
                route("/moved.json", 302, "/hop1", String::new()),
                route("/hop1", 302, "/hop2", String::new()),
                route("/hop2", 302, "/client.json", String::new()),
                route("/loop", 302, "/loop", String::new()),
                route("/downgrade.json", 302, "https://127.0.0.1:1/client.json", String::new()),
                route("/big.json", 200, "", big),
            ]
        })
        .await;
        let keys = fetch_keys(&http, &format!("{base}/client.json"))
            .await
            .unwrap();
        assert_eq!(keys.len(), 2);
        let keys = fetch_keys(&http, &format!("{base}/inline.json"))
            .await
            .unwrap();
        assert_eq!(keys.len(), 1);
        // Three redirects are followed; the document is then not the moved URL's own.
        let moved = fetch_keys(&http, &format!("{base}/moved.json")).await;
        assert!(
            matches!(moved, Err(MetadataError::ClientId(_))),
            "{moved:?}"
        );
        let looped = fetch_keys(&http, &format!("{base}/loop"))
            .await
            .unwrap_err();
        assert!(
            looped.to_string().contains("more than 3 redirects"),
            "{looped}"
        );
        let other_scheme = fetch_keys(&http, &format!("{base}/downgrade.json"))
            .await
            .unwrap_err();
        assert!(
            other_scheme.to_string().contains("from http to https"),
            "{other_scheme}"
        );
        let big = fetch_keys(&http, &format!("{base}/big.json"))
            .await
            .unwrap_err();
        assert!(big.to_string().contains("larger than"), "{big}");
        let missing = fetch_keys(&http, &format!("{base}/none.json"))
            .await
            .unwrap_err();
        assert!(missing.to_string().contains("404"), "{missing}");
    }

    #[tokio::test]
    async fn urls_are_checked_before_any_fetch() {
        let http = HttpClient::new(None).unwrap();
        // No network needed: these are refused before a request is made.
        for url in ["http://agent.example/client.json", "ftp://agent.example/c"] {
            assert!(matches!(
                fetch_keys(&http, url).await,
                Err(MetadataError::Url(_))
            ));
        }
    }
}
