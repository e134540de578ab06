//! The fingerprint of an HTTP API request that a revision covers: an approval only ever
//! approves the request that returned the operation. Shared by the HTTP adapter and `explain`.

use serde_json::Value;

use super::terms::canonical_json;

/// Method, path, query and body, each length-prefixed. The same method, URL and body (equal
/// JSON however its keys are ordered or spaced) is the same request.
pub fn request_fingerprint(
    method: &str,
    path: &str,
    query: Option<&str>,
    parsed_body: Option<&Value>,
    raw_body: &[u8],
) -> Vec<u8> {
    let mut fingerprint = Vec::with_capacity(path.len() + raw_body.len() + 32);
    for part in [
        method.as_bytes(),
        path.as_bytes(),
        query.unwrap_or("").as_bytes(),
    ] {
        fingerprint.extend_from_slice(&(part.len() as u64).to_be_bytes());
        fingerprint.extend_from_slice(part);
    }
    match parsed_body {
        Some(json) => fingerprint.extend_from_slice(canonical_json(json).as_bytes()),
        None => fingerprint.extend_from_slice(raw_body),
    }
    fingerprint
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_json_is_the_same_request() {
        let a = request_fingerprint("POST", "/o", None, Some(&json!({"a":1,"b":2})), b"x");
        let b = request_fingerprint("POST", "/o", None, Some(&json!({"b":2,"a":1})), b"y");
        assert_eq!(a, b);
        let other =
            request_fingerprint("POST", "/o", Some("q=1"), Some(&json!({"a":1,"b":2})), b"x");
        assert_ne!(a, other);
    }
}
