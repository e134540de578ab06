//! The request target of a Personal Agent request: one plain spelling, or a refusal.
//!
//! Any request carrying `Poppy-Session`, on any route, must have an origin-form target (`/`
//! followed by the path) in plain ASCII whose segments every common framework reads the same
//! way. Each rule below closes a spelling that some framework maps onto another path than the
//! one the gateway would match, so that a policy route could be reached unapproved:
//!
//! | refused | because |
//! | --- | --- |
//! | no leading `/` (`orders/o1/x`, `%2Forders/…`), absolute- or asterisk-form | Flask and Starlette route them as `/orders/…`; pingora forwards them verbatim |
//! | bytes outside printable ASCII, invalid `%` escapes | frameworks decode or replace them differently |
//! | `;` raw or encoded (`;jsessionid=1`, `..;/`, `%3B`) | Tomcat/Spring drop `;parameters` from a segment |
//! | `.`, `..`, encoded `/` or `\`, a decoded `%` | resolved, or decoded twice, by some servers (IIS, proxies) |
//! | decoded control characters, `%00` | C-based servers and some frameworks cut the path there |
//! | decoded non-ASCII (`%C5%BF` = `ſ`, fullwidth letters, overlong UTF-8) | Unicode case folding and compatibility forms map them onto ASCII letters |
//! | a segment starting or ending with white space, or ending with `.` | Windows/IIS and some routers trim them |
//!
//! Percent-encoded ASCII that needs no encoding (`/orders/o%31`) is accepted: every framework
//! decodes it the same way, and [`super::route`] matches the decoded path.

use super::Refusal;
// Query parameters (and form fields) that some frameworks read as the request's real method:
// a POST would run another method's handler.
use crate::policy::METHOD_OVERRIDE_NAMES;

/// A Personal Agent request's target, checked: origin-form, as received (this exact text is
/// what the gateway forwards and what a revision covers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The path, raw (not decoded), starting with `/`.
    pub path: String,
    /// The raw query, without `?`.
    pub query: Option<String>,
}

impl Target {
    /// The target as it goes upstream.
    pub(crate) fn path_and_query(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }
}

/// Check a Personal Agent request's raw target (as on the request line).
/// Printable ASCII that is neither unreserved, a sub-delimiter, `:`, `@`, `/`, `?` nor `%`
/// (RFC 3986, `pchar` and `query`); `#` has its own refusal.
const NOT_IN_A_TARGET: &[u8] = b"\"<>[\\]^`{|}";

pub fn check_target(raw: &[u8]) -> Result<Target, Refusal> {
    let Some(b'/') = raw.first() else {
        return Err(Refusal::path(
            "a Personal Agent request's target must be a path starting with `/` (origin-form); send `/path?query`",
        ));
    };
    if let Some(byte) = raw.iter().find(|b| !(0x21..=0x7e).contains(*b)) {
        return Err(Refusal::path(format!(
            "the target has the byte 0x{byte:02x}: send the path and query in printable ASCII, percent-encoding the rest"
        )));
    }
    if raw.contains(&b'#') {
        return Err(Refusal::path(
            "the target has `#`: a fragment is never sent, and a client or server cuts the target there (another route); send the path without it, or percent-encode `#` as `%23`",
        ));
    }
    // RFC 3986 allows these nowhere in a path or query: a forwarder that builds a URI refuses
    // them, and servers read them differently. Refused here, for every interface alike.
    if let Some(byte) = raw.iter().find(|b| NOT_IN_A_TARGET.contains(b)) {
        return Err(Refusal::path(format!(
            "the target has `{}`, which RFC 3986 allows nowhere in a path or query: percent-encode it (`%{byte:02X}`)",
            char::from(*byte)
        )));
    }
    // Printable ASCII is valid UTF-8.
    let text = String::from_utf8_lossy(raw).into_owned();
    let (path, query) = match text.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (text, None),
    };
    for segment in path.split('/').skip(1) {
        check_segment(segment)?;
    }
    if let Some(query) = &query {
        check_query_overrides(query)?;
    }
    Ok(Target { path, query })
}

fn check_segment(raw: &str) -> Result<(), Refusal> {
    if raw.contains(';') {
        return Err(Refusal::path(format!(
            "path segment `{raw}` has `;`: some servers drop `;parameters` from a path, so it is not accepted from a Personal Agent"
        )));
    }
    let decoded = decode_strict(raw).ok_or_else(|| {
        Refusal::path(format!(
            "path segment `{raw}` has an invalid `%` escape: write `%` as `%25`, followed by two hex digits"
        ))
    })?;
    let refuse = |why: &str| {
        Err(Refusal::path(format!(
            "path segment `{raw}` {why}; send the path in its plain form"
        )))
    };
    if decoded == b"." || decoded == b".." {
        return refuse("is a dot segment, which servers resolve");
    }
    if let Some(&byte) = decoded.iter().find(|b| **b >= 0x80) {
        return refuse(&format!(
            "decodes to a non-ASCII byte (0x{byte:02x}), which frameworks fold onto ASCII letters differently"
        ));
    }
    if decoded.iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return refuse("decodes to a control character, where some servers cut the path");
    }
    for (byte, what) in [
        (b'/', "an encoded `/`"),
        (b'\\', "a `\\`"),
        (b';', "an encoded `;`"),
        (b'%', "an encoded `%` (decoded twice by some servers)"),
    ] {
        if decoded.contains(&byte) {
            return refuse(&format!("has {what}"));
        }
    }
    let (first, last) = (decoded.first(), decoded.last());
    if first.is_some_and(u8::is_ascii_whitespace) || last.is_some_and(u8::is_ascii_whitespace) {
        return refuse("starts or ends with white space, which some servers trim");
    }
    if last == Some(&b'.') {
        return refuse("ends with `.`, which some servers trim");
    }
    Ok(())
}

/// Refuse a method override in the query, whatever its spelling.
fn check_query_overrides(query: &str) -> Result<(), Refusal> {
    for pair in query.split(['&', ';']) {
        let key = pair.split_once('=').map_or(pair, |(key, _)| key);
        let decoded = decode_strict(&key.replace('+', " ")).unwrap_or_else(|| key.into());
        let key = String::from_utf8_lossy(&decoded).to_ascii_lowercase();
        if METHOD_OVERRIDE_NAMES.contains(&key.trim()) {
            return Err(Refusal::new(
                400,
                "invalid_query",
                format!("the query parameter `{key}` overrides the method in some frameworks; send the real method instead"),
            )
            .naming("parameter", key));
        }
    }
    Ok(())
}

/// Percent-decode; `None` on an invalid escape.
pub(crate) fn decode_strict(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(raw: &str) -> bool {
        check_target(raw.as_bytes()).is_err()
    }

    #[test]
    fn plain_targets_pass_as_they_are() {
        for raw in [
            "/",
            "/orders/o1/exchanges",
            "/orders/o%31/exchanges?a=1&b=two",
            "/Orders//o1/exchanges/",
            "/a-b_c.d~e/x:y@z!$&'()*+,=",
            "/v1.0/orders",
        ] {
            let target = check_target(raw.as_bytes()).unwrap();
            assert_eq!(target.path_and_query(), raw);
        }
    }

    #[test]
    fn every_hostile_spelling_is_refused() {
        for raw in [
            "",
            "orders/o1/exchanges",
            "%2Forders/o1/exchanges",
            "*",
            "http://gateway/orders/o1/exchanges",
            "/orders/o1;x=1/exchanges",
            "/orders/o1/exchanges;jsessionid=1",
            "/orders/..;/orders/o1/exchanges",
            "/orders/o1%3B/exchanges",
            "/orders/o1/exchanges%00.txt",
            "/orders/o1/exchanges.",
            "/orders/o1/exchanges%20",
            "/orders/o1/exchanges%09",
            "/orders/o1/%20exchanges",
            "/orders/o1/exchange%C5%BF",
            "/orders/o1/%EF%BD%85xchanges",
            "/orders/o1/%C0%AFexchanges",
            "/orders/o1/ex%zzchanges",
            "/orders/o1/ex%2",
            "/orders/./o1",
            "/orders/%2e%2E/o1",
            "/orders/a%2Fb",
            "/orders/a%5Cb",
            "/orders/a\\b",
            "/orders/a%252Fb",
            "/orders/o1/exchanges?_method=DELETE",
            "/orders/o1/exchanges?a=1&_METHOD=put",
            "/orders/o1/exchanges?%5Fmethod=put",
            "/orders/o1/exchanges?x-http-method-override=PUT",
            "/caf\u{e9}",
            "/a b",
            "/orders/ord_7Hk2#x/exchanges",
            "/orders/o1/exchanges#x",
            "/orders/o1/exchanges?a=1#x",
            "/orders/a<b>/exchanges",
            "/orders/a`b/exchanges",
            "/orders/a\"b",
            "/orders/a{b}",
            "/orders/a|b",
            "/orders/a^b",
            "/orders/[a]",
            "/orders/o1/exchanges?a=<b>",
        ] {
            assert!(refused(raw), "{raw:?} was accepted");
        }
    }

    #[test]
    fn refusals_say_what_to_change() {
        let refusal = check_target(b"orders/o1").unwrap_err();
        assert_eq!((refusal.status, refusal.error), (400, "invalid_path"));
        assert!(refusal.detail.contains("origin-form"), "{}", refusal.detail);
        let refusal = check_target(b"/x?_method=PUT").unwrap_err();
        assert_eq!(refusal.names, Some(("parameter", "_method".into())));
    }
}
