//! Header rules: the headers that would let an upstream run another method or path than the
//! one the gateway matched, or read a header the gateway reads differently.

use http::HeaderMap;

use super::Refusal;

/// Headers some frameworks read to run a handler for another method than the request's.
const METHOD_OVERRIDES: [&str; 4] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-method",
];

/// Headers some servers (IIS, Symfony, Zend/Laminas, nginx setups) route by instead of the
/// request target.
const URL_REWRITES: [&str; 5] = [
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",
    "x-forwarded-uri",
    "x-forwarded-path",
];

/// The Personal Agent headers the gateway reads itself.
const POPPY_HEADERS: [&str; 3] = ["poppy-session", "poppy-approval", "poppy-extensions"];

/// Every request, Personal Agent or not: a Poppy header spelled with `_` is refused. CGI,
/// WSGI and Rack servers read `Poppy_Session` as `Poppy-Session`, so the upstream would see a
/// Personal Agent request that the gateway passed through as the company's own traffic.
pub(crate) fn check_all(headers: &HeaderMap) -> Result<(), Refusal> {
    for name in headers.keys() {
        let name = name.as_str();
        if name.contains('_') {
            let dashed = name.replace('_', "-");
            if POPPY_HEADERS.contains(&dashed.as_str()) {
                return Err(Refusal::header(
                    name,
                    format!("`{name}` is read as `{dashed}` by some servers: spell it with `-`"),
                ));
            }
        }
    }
    Ok(())
}

/// Every Personal Agent request (it carries `Poppy-Session`), on any route.
pub(crate) fn check_personal_agent(headers: &HeaderMap) -> Result<(), Refusal> {
    for name in ["poppy-session", "authorization", "host"] {
        if headers.get_all(name).iter().count() > 1 {
            return Err(Refusal::header(
                name,
                format!(
                    "`{name}` is sent more than once: servers differ on which one counts, send it once"
                ),
            ));
        }
    }
    for name in headers.keys() {
        let name = name.as_str();
        if METHOD_OVERRIDES.contains(&name) {
            return Err(Refusal::header(
                name,
                format!("{name} is not accepted from a Personal Agent: send the real method"),
            ));
        }
        if URL_REWRITES.contains(&name) {
            return Err(Refusal::header(
                name,
                format!(
                    "{name} is not accepted from a Personal Agent: some servers route by it instead of the request's path"
                ),
            ));
        }
        if name.contains('_') {
            return Err(Refusal::header(
                name,
                format!(
                    "header names with `_` are not accepted from a Personal Agent: some servers read `{name}` as `{}`",
                    name.replace('_', "-")
                ),
            ));
        }
    }
    Ok(())
}

/// A Personal Agent request the gateway answers itself (a policy route, the MCP endpoint): it
/// must not switch protocols, and its body must be readable as sent.
pub(crate) fn check_operation_request(headers: &HeaderMap) -> Result<(), Refusal> {
    let upgrade = headers.contains_key(http::header::UPGRADE)
        || headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    if upgrade {
        return Err(Refusal::header(
            "upgrade",
            "a request that needs approval can't switch protocols: send it without `Upgrade`",
        ));
    }
    if !is_uncompressed(headers) {
        return Err(Refusal::new(
            415,
            "unsupported_content_encoding",
            "a request that needs approval must send its body uncompressed: the gateway checks the terms in the bytes the upstream receives",
        )
        .naming("header", "content-encoding"));
    }
    Ok(())
}

/// The value of a header term: exactly one, as text.
pub(crate) fn single_value<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, Refusal> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refusal::header(
            name,
            format!(
                "`{name}` carries a term and is sent more than once: servers join or pick repeated headers differently, send it once"
            ),
        ));
    }
    first.to_str().map(Some).map_err(|_| {
        Refusal::header(
            name,
            format!("`{name}` carries a term and is not valid text"),
        )
    })
}

/// Whether a `Content-Type` is JSON in UTF-8: `application/json` or `application/*+json`, with
/// no `charset` or `charset=utf-8`.
pub(crate) fn is_json_content_type(headers: &HeaderMap) -> bool {
    utf8_content_type(headers).is_some_and(|essence| {
        essence == "application/json"
            || essence
                .strip_prefix("application/")
                .is_some_and(|sub| sub.ends_with("+json") && !sub.contains('/'))
    })
}

/// Whether every `Content-Encoding` (none at all included) is `identity`: the body's bytes are
/// the ones the upstream reads.
pub(crate) fn is_uncompressed(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .all(|value| {
            value.to_str().is_ok_and(|v| {
                v.split(',')
                    .all(|c| c.trim().eq_ignore_ascii_case("identity"))
            })
        })
}

/// Whether a `Content-Type` is a form in UTF-8: `application/x-www-form-urlencoded`, with no
/// `charset` or `charset=utf-8` (readers decode other charsets, or ignore them, differently).
pub(crate) fn is_urlencoded_form_content_type(headers: &HeaderMap) -> bool {
    utf8_content_type(headers).is_some_and(|essence| essence == FORM_URLENCODED)
}

const FORM_URLENCODED: &str = "application/x-www-form-urlencoded";

/// The one `Content-Type`'s essence, lower case, when its only parameter, if any, is
/// `charset=utf-8`.
fn utf8_content_type(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(http::header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let mut parts = value.to_str().ok()?.split(';');
    let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    parts
        .all(|parameter| {
            let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
            name.trim().eq_ignore_ascii_case("charset")
                && value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        })
        .then_some(essence)
}

/// Whether the body is a form (`application/x-www-form-urlencoded`, `multipart/form-data`),
/// whose `_method` field some frameworks read as the real method.
pub(crate) fn is_form_content_type(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            let essence = v.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case(FORM_URLENCODED)
                || essence.eq_ignore_ascii_case("multipart/form-data")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn underscore_poppy_headers_are_refused_for_everyone() {
        assert!(check_all(&headers(&[("poppy_session", "x")])).is_err());
        assert!(check_all(&headers(&[("x_other", "x")])).is_ok());
    }

    #[test]
    fn personal_agent_header_rules() {
        for bad in [
            vec![("poppy-session", "a"), ("poppy-session", "b")],
            vec![("authorization", "a"), ("authorization", "b")],
            vec![("x-http-method-override", "PUT")],
            vec![("x-original-url", "/orders/o1/exchanges")],
            vec![("x-rewrite-url", "/orders/o1/exchanges")],
            vec![("x_store", "north")],
        ] {
            assert!(check_personal_agent(&headers(&bad)).is_err(), "{bad:?}");
        }
        assert!(check_personal_agent(&headers(&[("poppy-session", "a")])).is_ok());
    }

    #[test]
    fn upgrades_and_encodings() {
        assert!(check_operation_request(&headers(&[("upgrade", "websocket")])).is_err());
        assert!(
            check_operation_request(&headers(&[("connection", "keep-alive, Upgrade")])).is_err()
        );
        let gzip = check_operation_request(&headers(&[("content-encoding", "gzip")])).unwrap_err();
        assert_eq!(gzip.status, 415);
        assert!(check_operation_request(&headers(&[("content-encoding", "identity")])).is_ok());
    }

    #[test]
    fn json_content_types() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
            "application/json;charset=\"UTF-8\"",
        ] {
            assert!(
                is_json_content_type(&headers(&[("content-type", ok)])),
                "{ok}"
            );
        }
        for bad in [
            "application/x-www-form-urlencoded",
            "text/plain",
            "application/json; charset=utf-16",
            "application/json; boundary=x",
            "application/jsonx",
        ] {
            assert!(
                !is_json_content_type(&headers(&[("content-type", bad)])),
                "{bad}"
            );
        }
        assert!(!is_json_content_type(&headers(&[
            ("content-type", "application/json"),
            ("content-type", "text/plain")
        ])));
    }

    #[test]
    fn form_content_types() {
        for ok in [
            "application/x-www-form-urlencoded",
            "Application/X-WWW-Form-Urlencoded; charset=UTF-8",
            "application/x-www-form-urlencoded;charset=\"utf-8\"",
        ] {
            assert!(
                is_urlencoded_form_content_type(&headers(&[("content-type", ok)])),
                "{ok}"
            );
        }
        for bad in [
            "application/x-www-form-urlencoded; charset=latin1",
            "application/x-www-form-urlencoded; charset=iso-8859-1",
            "application/x-www-form-urlencoded; charset=utf-16",
            "application/x-www-form-urlencoded; boundary=x",
            "multipart/form-data; boundary=x",
            "application/json",
        ] {
            assert!(
                !is_urlencoded_form_content_type(&headers(&[("content-type", bad)])),
                "{bad}"
            );
        }
    }

    #[test]
    fn repeated_term_headers_are_refused() {
        let map = headers(&[("x-store", "a"), ("x-store", "b")]);
        assert!(single_value(&map, "x-store").is_err());
        assert_eq!(single_value(&map, "x-none"), Ok(None));
    }
}
