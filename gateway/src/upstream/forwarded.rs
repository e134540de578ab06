//! What the upstream learns about each request: `Forwarded` / `X-Forwarded-*` (kept from
//! trusted proxies, replaced otherwise), the request ID, and the `Host` to send.
//!
//! Passthrough applies these in pingora's `upstream_request_filter`; requests the gateway
//! sends itself (approved forwards, lookups, poppy.json, MCP messages) get them from the one
//! upstream writer (`head.rs`), passed the request's [`ProxyContext`]. What became
//! of an operation is noted by the service, from the request's outcome (`service.rs`).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use http::{HeaderName, HeaderValue};
use pingora::http::RequestHeader;
use pingora::proxy::Session;

use crate::config::{Passthrough, ProxyHeaders};

pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// The headers the gateway sets or vouches for upstream, whose `_` spellings are dropped.
const UNDERSCORE_TWINS_OF: [&str; 7] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-real-ip",
    "forwarded",
    "x-request-id",
];
const FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// The headers that describe the client, as they go upstream with one request.
#[derive(Debug, Clone, Default)]
pub(crate) struct UpstreamHeaders {
    /// Set (replacing what came) on every upstream request.
    set: Vec<(HeaderName, HeaderValue)>,
    /// Removed when the client is not a trusted proxy and the gateway sets nothing in its place.
    remove: Vec<HeaderName>,
    /// `[upstream] host_header`, else the client's authority for requests that lack `Host`
    /// (HTTP/2 sends `:authority` instead).
    host: Option<HeaderValue>,
    host_configured: bool,
}

/// What one request says about its client, read once from the session.
#[derive(Debug, Clone)]
pub(crate) struct ClientFacts {
    pub(crate) peer: Option<IpAddr>,
    pub(crate) tls: bool,
    pub(crate) http2: bool,
    /// `Host`, or the HTTP/2 `:authority`.
    pub(crate) host: Option<String>,
}

impl ClientFacts {
    pub(crate) fn of(session: &Session) -> ClientFacts {
        let header = session.req_header();
        let host = header
            .headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| header.uri.authority().map(|a| a.as_str().to_owned()));
        ClientFacts {
            peer: session
                .client_addr()
                .and_then(|a| a.as_inet())
                .map(|a| a.ip()),
            tls: session.digest().is_some_and(|d| d.ssl_digest.is_some()),
            http2: session.as_downstream().is_http2(),
            host,
        }
    }

    pub(crate) fn proto(&self) -> &'static str {
        if self.tls { "https" } else { "http" }
    }
}

/// An `X-Request-Id` worth keeping: 1 to 128 visible ASCII characters, no quotes or spaces
/// (it is written into log lines and headers as is).
pub(crate) fn well_formed_request_id(value: &[u8]) -> bool {
    (1..=128).contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b','))
}

/// The client's request ID if well formed, else a new one.
pub(crate) fn request_id(headers: &http::HeaderMap) -> String {
    match headers.get(&X_REQUEST_ID) {
        Some(v) if well_formed_request_id(v.as_bytes()) => {
            String::from_utf8_lossy(v.as_bytes()).into_owned()
        }
        _ => new_request_id(),
    }
}

/// 32 lowercase hex digits of a random `u128`, without `format!` (every request without an
/// ID of its own gets one: it is on the passthrough path).
fn new_request_id() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = rand::random::<u128>();
    let digits: Vec<u8> = (0..32)
        .rev()
        .map(|i| HEX[((bits >> (i * 4)) & 0xf) as usize])
        .collect();
    String::from_utf8(digits).unwrap_or_default()
}

/// Append a `Forwarded` node: IPv6 addresses are bracketed and quoted (RFC 7239 section 6).
fn push_node(out: &mut String, ip: IpAddr, text: &str) {
    match ip {
        IpAddr::V4(_) => out.push_str(text),
        IpAddr::V6(_) => {
            out.push_str("\"[");
            out.push_str(text);
            out.push_str("]\"");
        }
    }
}

/// Append a `Forwarded` value: a token, or a quoted string when it is not one.
fn push_forwarded_value(out: &mut String, value: &str) {
    let token = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if token {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        if matches!(c, '\\' | '"') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

impl UpstreamHeaders {
    pub(crate) fn new(
        facts: &ClientFacts,
        incoming: &http::HeaderMap,
        request_id: &str,
        settings: &ProxyHeaders,
        upstream: &Passthrough,
    ) -> UpstreamHeaders {
        let trusted = facts.peer.is_some_and(|ip| settings.trusts(ip));
        // What a trusted proxy said about earlier hops, joined; each list is then extended.
        let kept = |name: &HeaderName| -> Option<String> {
            if !trusted {
                return None;
            }
            let values: Vec<&str> = incoming
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            (!values.is_empty()).then(|| values.join(", "))
        };
        let mut set = Vec::with_capacity(5);
        let mut push = |name: HeaderName, value: String| {
            if let Ok(value) = HeaderValue::try_from(value) {
                set.push((name, value));
            }
        };
        push(X_REQUEST_ID, request_id.to_owned());
        let peer = facts.peer.map(|ip| (ip, ip.to_string()));
        if settings.x_forwarded {
            if let Some((_, peer)) = &peer {
                let xff = match kept(&X_FORWARDED_FOR) {
                    Some(before) => before + ", " + peer,
                    None => peer.clone(),
                };
                push(X_FORWARDED_FOR, xff);
            }
            push(
                X_FORWARDED_PROTO,
                kept(&X_FORWARDED_PROTO).unwrap_or_else(|| facts.proto().to_owned()),
            );
            if let Some(host) = kept(&X_FORWARDED_HOST).or_else(|| facts.host.clone()) {
                push(X_FORWARDED_HOST, host);
            }
        }
        if settings.forwarded {
            let mut value = kept(&FORWARDED).map_or_else(String::new, |before| before + ", ");
            if let Some((ip, text)) = &peer {
                value.push_str("for=");
                push_node(&mut value, *ip, text);
                value.push(';');
            }
            if let Some(host) = &facts.host {
                value.push_str("host=");
                push_forwarded_value(&mut value, host);
                value.push(';');
            }
            value.push_str("proto=");
            value.push_str(facts.proto());
            push(FORWARDED, value);
        }
        // What a client that is not a trusted proxy says about earlier hops is not passed on;
        // only headers it sent need removing.
        let mut remove: Vec<HeaderName> = if trusted {
            Vec::new()
        } else {
            [
                X_FORWARDED_FOR,
                X_FORWARDED_PROTO,
                X_FORWARDED_HOST,
                FORWARDED,
            ]
            .into_iter()
            .filter(|name| incoming.contains_key(name) && !set.iter().any(|(n, _)| n == name))
            .collect()
        };
        // CGI, WSGI and Rack servers read `X_Forwarded_For` as `X-Forwarded-For`: a spelling
        // with `_` of a header the gateway vouches for is never passed on, whoever sent it.
        remove.extend(
            incoming
                .keys()
                .filter(|name| {
                    let name = name.as_str();
                    name.contains('_')
                        && UNDERSCORE_TWINS_OF.contains(&name.replace('_', "-").as_str())
                })
                .cloned(),
        );
        let configured = upstream
            .host_header
            .as_deref()
            .and_then(|h| HeaderValue::from_str(h).ok());
        UpstreamHeaders {
            set,
            remove,
            host_configured: configured.is_some(),
            host: configured.or_else(|| {
                facts
                    .host
                    .as_deref()
                    .and_then(|h| HeaderValue::from_str(h).ok())
            }),
        }
    }

    /// Apply to a request about to go upstream.
    pub(crate) fn apply(&self, request: &mut RequestHeader) -> pingora::Result<()> {
        for name in &self.remove {
            request.remove_header(name);
        }
        for (name, value) in &self.set {
            request.insert_header(name.clone(), value.clone())?;
        }
        if let Some(host) = &self.host
            && (self.host_configured || !request.headers.contains_key(http::header::HOST))
        {
            request.insert_header(http::header::HOST, host.clone())?;
        }
        Ok(())
    }
}

/// What the request being handled noted for its access-log line, shared between its context
/// and the task that classifies it.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    pub(crate) operation_id: Option<String>,
    pub(crate) outcome: Option<&'static str>,
    pub(crate) upstream_status: Option<u16>,
}

/// One request's part in what the gateway sends upstream for it: its proxy headers, and its
/// notes (the upstream's status). Taken from the request's context and passed explicitly to
/// every request the gateway sends itself for it (approved forwards, lookups, poppy.json,
/// MCP messages); the default (the conversations service's) adds no proxy header.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProxyContext {
    headers: Arc<UpstreamHeaders>,
    notes: Arc<Mutex<Notes>>,
}

impl ProxyContext {
    pub(crate) fn new(headers: Arc<UpstreamHeaders>, notes: Arc<Mutex<Notes>>) -> ProxyContext {
        ProxyContext { headers, notes }
    }

    /// Apply the request's upstream headers to a request the gateway sends for it.
    pub(crate) fn apply(&self, request: &mut RequestHeader) -> pingora::Result<()> {
        self.headers.apply(request)
    }

    /// Note the upstream's status for the request's access-log line.
    pub(crate) fn upstream_status(&self, status: u16) {
        if let Ok(mut notes) = self.notes.lock() {
            notes.upstream_status = Some(status);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn facts(peer: &str) -> ClientFacts {
        ClientFacts {
            peer: Some(peer.parse().unwrap()),
            tls: true,
            http2: false,
            host: Some("shop.example".into()),
        }
    }

    fn headers_for(peer: &str, trusted: &[&str], incoming: &[(&str, &str)]) -> RequestHeader {
        let mut map = http::HeaderMap::new();
        for (n, v) in incoming {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let settings = ProxyHeaders {
            trusted_proxies: trusted.iter().map(|t| t.parse().unwrap()).collect(),
            ..ProxyHeaders::default()
        };
        let upstream = UpstreamHeaders::new(
            &facts(peer),
            &map,
            "rid-1",
            &settings,
            &Passthrough::default(),
        );
        let mut request = RequestHeader::build("GET", b"/", None).unwrap();
        for (n, v) in incoming {
            request.append_header(n.to_string(), *v).unwrap();
        }
        upstream.apply(&mut request).unwrap();
        request
    }

    fn get<'a>(request: &'a RequestHeader, name: &str) -> &'a str {
        request.headers.get(name).unwrap().to_str().unwrap()
    }

    #[test]
    fn an_untrusted_client_cannot_forge_earlier_hops() {
        let r = headers_for(
            "203.0.113.7",
            &["10.0.0.0/8"],
            &[
                ("x-forwarded-for", "1.2.3.4"),
                ("forwarded", "for=1.2.3.4"),
                ("x-forwarded-proto", "http"),
            ],
        );
        assert_eq!(get(&r, "x-forwarded-for"), "203.0.113.7");
        assert_eq!(get(&r, "x-forwarded-proto"), "https");
        assert_eq!(
            get(&r, "forwarded"),
            "for=203.0.113.7;host=shop.example;proto=https"
        );
        assert_eq!(get(&r, "x-request-id"), "rid-1");
        assert_eq!(r.headers.get_all("x-forwarded-for").iter().count(), 1);
    }

    /// `X_Forwarded_For` is `X-Forwarded-For` to CGI, WSGI and Rack: never passed on, from a
    /// trusted proxy or anybody else.
    #[test]
    fn underscore_spellings_of_proxy_headers_are_dropped() {
        for peer in ["203.0.113.7", "10.1.2.3"] {
            let r = headers_for(
                peer,
                &["10.0.0.0/8"],
                &[
                    ("x_forwarded_for", "1.2.3.4"),
                    ("X_Real_IP", "1.2.3.4"),
                    ("x_request_id", "forged"),
                    ("x_tenant", "kept"),
                ],
            );
            for twin in ["x_forwarded_for", "x_real_ip", "x_request_id"] {
                assert!(r.headers.get(twin).is_none(), "{peer}: {twin} passed on");
            }
            assert_eq!(get(&r, "x_tenant"), "kept", "not a proxy header");
            assert_eq!(get(&r, "x-request-id"), "rid-1");
        }
    }

    #[test]
    fn a_trusted_proxy_is_appended_to() {
        let r = headers_for(
            "10.1.2.3",
            &["10.0.0.0/8"],
            &[
                ("x-forwarded-for", "198.51.100.1"),
                ("forwarded", "for=198.51.100.1"),
                ("x-forwarded-proto", "http"),
            ],
        );
        assert_eq!(get(&r, "x-forwarded-for"), "198.51.100.1, 10.1.2.3");
        assert_eq!(get(&r, "x-forwarded-proto"), "http");
        assert_eq!(
            get(&r, "forwarded"),
            "for=198.51.100.1, for=10.1.2.3;host=shop.example;proto=https"
        );
    }

    #[test]
    fn ipv6_nodes_are_quoted() {
        let r = headers_for("::1", &[], &[]);
        assert_eq!(
            get(&r, "forwarded"),
            "for=\"[::1]\";host=shop.example;proto=https"
        );
    }

    #[test]
    fn new_request_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (new_request_id(), new_request_id());
        assert_eq!(a.len(), 32, "{a}");
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(request_id(&http::HeaderMap::new()).len(), 32);
    }

    #[test]
    fn quoted_forwarded_hosts_escape_quotes_and_backslashes() {
        let mut out = String::new();
        push_forwarded_value(&mut out, "a\"b\\c d");
        assert_eq!(out, "\"a\\\"b\\\\c d\"");
    }

    #[test]
    fn request_ids_are_kept_only_when_well_formed() {
        assert!(well_formed_request_id(b"abc-123_x.y:z"));
        assert!(!well_formed_request_id(b""));
        assert!(!well_formed_request_id(b"a b"));
        assert!(!well_formed_request_id(b"a\"b"));
        assert!(!well_formed_request_id(&[b'a'; 129]));
    }
}
