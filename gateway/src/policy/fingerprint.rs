//! The fingerprint of an HTTP API request that a revision covers: an approval only ever
//! approves the request that returned the operation, byte for byte as it is forwarded.
//! Shared by the ingress and `explain`.

use sha2::{Digest, Sha256};

/// SHA-256 of the method, target (path and query exactly as forwarded), the headers that bind
/// it (name and raw value: `Content-Type` and every term header) and the body bytes, each
/// length-prefixed. A digest rather than a copy: a held request costs its body once, not twice.
pub(crate) fn request_fingerprint(
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> Vec<u8> {
    let mut fingerprint = Sha256::new();
    let mut push = |part: &[u8]| {
        fingerprint.update((part.len() as u64).to_be_bytes());
        fingerprint.update(part);
    };
    push(method.as_bytes());
    push(path_and_query.as_bytes());
    for (name, value) in headers {
        push(name.as_bytes());
        push(value);
    }
    push(body);
    fingerprint.finalize().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_that_is_forwarded_counts() {
        let json: &[(&str, &[u8])] = &[("content-type", b"application/json")];
        let a = request_fingerprint("POST", "/o", json, br#"{"a":1,"b":2}"#);
        assert_eq!(
            a,
            request_fingerprint("POST", "/o", json, br#"{"a":1,"b":2}"#)
        );
        for other in [
            request_fingerprint("POST", "/o", json, br#"{"b":2,"a":1}"#),
            request_fingerprint("POST", "/o?q=1", json, br#"{"a":1,"b":2}"#),
            request_fingerprint("PUT", "/o", json, br#"{"a":1,"b":2}"#),
            request_fingerprint(
                "POST",
                "/o",
                &[("content-type", b"text/plain")],
                br#"{"a":1,"b":2}"#,
            ),
        ] {
            assert_ne!(a, other);
        }
        // Length prefixes: moving a byte between parts is another request.
        assert_ne!(
            request_fingerprint("POST", "/ab", &[], b"c"),
            request_fingerprint("POST", "/a", &[], b"bc")
        );
    }
}
