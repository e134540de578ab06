//! Where a request without a `Poppy-Session` carries an OAuth access token, read as the
//! resource servers behind the gateway read it, for `[approval_page.agents]` (issue 37): the
//! one rule the HTTP proxy, the MCP endpoint and the conversations service share.
//!
//! The servers read a token from three places (RFC 6750 section 2): `Authorization`, an
//! `access_token` form field (2.2) and an `access_token` query parameter (2.3). oauthlib and
//! Authlib split `Authorization` on any Unicode whitespace (a no-break space or NEL byte,
//! read as Latin-1, is one), passport-http-bearer on a space; oauthlib falls back to the query
//! and body, passport refuses a token in two places. So a token anywhere makes the request a
//! candidate (its client then decides whether it is an agent's), and a value the gateway
//! can't read as exactly one token in one place is refused, never passed through as the
//! Company's own:
//!
//! - `Authorization` more than once, with a byte outside printable ASCII or a control
//!   character (tab included), with two schemes, or a `Bearer`/`DPoP` value that is not
//!   `Scheme SP token68`;
//! - `access_token` twice, empty, not a token68, or as a list or object (`access_token[]`);
//! - a token in two places; a form the gateway can't read for one (compressed, another
//!   charset); a multipart form that names `access_token`.
//!
//! A form body is read only when the head carries no token (then only the body can make it
//! an agent's): a request whose header token is the Company's keeps its body unread.

use http::HeaderMap;

use super::Refusal;
use super::headers::{is_uncompressed, is_urlencoded_form_content_type};
use super::target::decode_strict;
use crate::protocol::authorization::{TOKEN_SCHEMES, bearer_token, is_token_scheme, is_token68};

/// The form field and query parameter RFC 6750 names.
const FIELD: &str = "access_token";

/// Where a token travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Header,
    Query,
    Body,
}

/// An access token, and where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) place: Place,
    /// The `Authorization` value as sent; for a query or body token, `Bearer <token>`, the
    /// value that would carry it (the identity module reads tokens from such a value).
    authorization: Vec<u8>,
}

impl Token {
    /// The token as an `Authorization` value.
    pub(crate) fn authorization(&self) -> &[u8] {
        &self.authorization
    }

    fn carried(place: Place, token: &str) -> Token {
        Token {
            place,
            authorization: format!("Bearer {token}").into_bytes(),
        }
    }
}

/// What a request's head carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// In `Authorization` or the query.
    token: Option<Token>,
    /// The body is a form a server would read `access_token` from.
    form: Option<Form>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Urlencoded,
    Multipart,
}

impl Found {
    /// The token the head carries.
    pub(crate) fn token(&self) -> Option<&Token> {
        self.token.as_ref()
    }

    /// Whether only the body can tell: no token in the head, and a form body.
    pub(crate) fn needs_body(&self) -> bool {
        self.token.is_none() && self.form.is_some()
    }

    /// Whether the request may carry a token (it is then routed and read, not passed
    /// through unread).
    pub(crate) fn may_carry(&self) -> bool {
        self.token.is_some() || self.form.is_some()
    }

    /// The request's one token, its body read too: refused when the body carries one besides
    /// the head's, or can't be read for one.
    pub(crate) fn with_body(self, body: &[u8]) -> Result<Option<Token>, Refusal> {
        let in_body = match self.form {
            Some(Form::Urlencoded) => {
                access_token(body, Place::Body)?.map(|t| Token::carried(Place::Body, &t))
            }
            Some(Form::Multipart) if names_access_token(body) => {
                return Err(body_refusal(
                    "the multipart body names `access_token`: a token must travel in `Authorization` (or a urlencoded form), where the gateway reads it as the upstream does",
                ));
            }
            Some(Form::Multipart) | None => None,
        };
        match (self.token, in_body) {
            (Some(head), Some(_)) => Err(two_places(head.place, Place::Body)),
            (head, body) => Ok(head.or(body)),
        }
    }
}

/// The token in the request's head (`query`: the raw query, without `?`), and whether its
/// body may hold one; refused when either can be read differently.
pub(crate) fn in_head(headers: &HeaderMap, query: Option<&str>) -> Result<Found, Refusal> {
    let header = in_authorization(headers)?;
    let query = match query {
        Some(query) => access_token(query.as_bytes(), Place::Query)?
            .map(|token| Token::carried(Place::Query, &token)),
        None => None,
    };
    let token = match (header, query) {
        (Some(_), Some(_)) => return Err(two_places(Place::Header, Place::Query)),
        (header, query) => header.or(query),
    };
    Ok(Found {
        form: form_of(headers, token.is_none())?,
        token,
    })
}

/// `Authorization`: a `Bearer`/`DPoP` token, another scheme (none), or a refusal.
fn in_authorization(headers: &HeaderMap) -> Result<Option<Token>, Refusal> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let refuse = |detail: &str| Refusal::header("authorization", detail);
    if values.next().is_some() {
        return Err(refuse(
            "`Authorization` is sent more than once: servers differ on which one counts (or join them), send it once",
        ));
    }
    let bytes = value.as_bytes();
    if let Some(byte) = bytes.iter().find(|b| !(0x20..=0x7e).contains(*b)) {
        return Err(refuse(&format!(
            "`Authorization` has the byte 0x{byte:02x}: some OAuth servers read such a byte (a no-break space, NEL, a tab) as the space between scheme and token and others don't; send `Bearer <token>` in printable ASCII"
        )));
    }
    // Printable ASCII: text.
    let text = String::from_utf8_lossy(bytes);
    let mut words = text.split([' ', ',']).filter(|w| !w.is_empty());
    let Some(scheme) = words.next() else {
        return Ok(None);
    };
    let names_a_scheme = |word: &str| {
        TOKEN_SCHEMES.iter().any(|s| {
            word.get(..s.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(s))
        })
    };
    if words.any(is_token_scheme) {
        return Err(refuse(
            "`Authorization` names two schemes: servers differ on which one they read; send one credential",
        ));
    }
    if !names_a_scheme(scheme) {
        // `Basic`, `Digest`...: no OAuth client in it.
        return Ok(None);
    }
    match bearer_token(bytes) {
        Some(_) => Ok(Some(Token {
            place: Place::Header,
            authorization: bytes.to_vec(),
        })),
        None => Err(refuse(
            "`Authorization` names the Bearer (or DPoP) scheme but is not `Bearer <token>` (one space, one token of RFC 6750's characters): servers split it differently",
        )),
    }
}

/// The `access_token` of a query or urlencoded form, read as any common parser would (split
/// on `&` and `;`, percent-decoded, `+` a space, the name's case folded): none, one token, or
/// a refusal naming it.
fn access_token(text: &[u8], place: Place) -> Result<Option<String>, Refusal> {
    let mut found = None;
    for pair in text.split(|b| *b == b'&' || *b == b';') {
        let (name, value) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        let name = decode(name);
        let Some(rest) = name
            .get(..FIELD.len())
            .filter(|head| head.eq_ignore_ascii_case(FIELD.as_bytes()))
            .map(|_| &name[FIELD.len()..])
        else {
            continue;
        };
        if rest.first() == Some(&b'[') {
            return Err(place_refusal(
                place,
                "`access_token` is sent as a list or object: send one token",
            ));
        }
        if !rest.is_empty() {
            continue;
        }
        if found.is_some() {
            return Err(place_refusal(
                place,
                "`access_token` is sent more than once: servers pick different ones, send it once",
            ));
        }
        let token = String::from_utf8(decode(value)).unwrap_or_default();
        if !is_token68(token.as_bytes()) {
            return Err(place_refusal(
                place,
                "`access_token` is empty or not a token (RFC 6750's characters): servers read it differently",
            ));
        }
        found = Some(token);
    }
    Ok(found)
}

/// Percent-decoded, `+` a space; an invalid escape is kept as it is, as lenient decoders do.
fn decode(raw: &[u8]) -> Vec<u8> {
    let spaced: Vec<u8> = raw
        .iter()
        .map(|b| if *b == b'+' { b' ' } else { *b })
        .collect();
    std::str::from_utf8(&spaced)
        .ok()
        .and_then(decode_strict)
        .unwrap_or(spaced)
}

/// The form a server would read `access_token` from, if the body is one. Read only when
/// `readable` (the head has no token); then it must be a form the gateway reads as the
/// server does: uncompressed, and a urlencoded one in UTF-8.
fn form_of(headers: &HeaderMap, readable: bool) -> Result<Option<Form>, Refusal> {
    let mut form = None;
    for value in headers.get_all(http::header::CONTENT_TYPE) {
        let essence = value
            .as_bytes()
            .split(|b| *b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        if essence.eq_ignore_ascii_case(b"application/x-www-form-urlencoded") {
            form = Some(Form::Urlencoded);
        } else if essence.eq_ignore_ascii_case(b"multipart/form-data") {
            form = form.or(Some(Form::Multipart));
        }
    }
    if form.is_none() || !readable {
        return Ok(form);
    }
    let unreadable = !is_uncompressed(headers)
        || (form == Some(Form::Urlencoded) && !is_urlencoded_form_content_type(headers));
    if unreadable {
        return Err(Refusal::new(
            415,
            "unsupported_media_type",
            "a form body on a route that needs approval is read for an `access_token`: send it uncompressed, one `Content-Type`, in UTF-8",
        )
        .naming("header", "content-type"));
    }
    Ok(form)
}

/// Whether a multipart body names `access_token` anywhere (a part's name, escaped or
/// percent-encoded as some parsers accept): such a body is refused rather than parsed.
fn names_access_token(body: &[u8]) -> bool {
    let plain: Vec<u8> = body
        .iter()
        .filter(|b| **b != b'\\')
        .map(u8::to_ascii_lowercase)
        .collect();
    [&b"access_token"[..], b"access%5ftoken"]
        .iter()
        .any(|needle| plain.windows(needle.len()).any(|w| w == *needle))
}

/// A token in `first` and another in `second`, refused naming `second`.
fn two_places(first: Place, second: Place) -> Refusal {
    let named = |place| match place {
        Place::Header => "`Authorization`",
        Place::Query => "the query's `access_token`",
        Place::Body => "the form's `access_token`",
    };
    place_refusal(
        second,
        &format!(
            "the request carries an access token in {} and in {}: servers differ on which one counts, send one",
            named(first),
            named(second)
        ),
    )
}

fn place_refusal(place: Place, detail: &str) -> Refusal {
    match place {
        Place::Header => Refusal::header("authorization", detail),
        Place::Query => Refusal::new(400, "invalid_query", detail).naming("parameter", FIELD),
        Place::Body => body_refusal(detail),
    }
}

fn body_refusal(detail: &str) -> Refusal {
    Refusal::body(detail).naming("field", FIELD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    fn token_of(headers: &[(&str, &[u8])], query: Option<&str>) -> Result<Option<Place>, Refusal> {
        in_head(&head(headers), query).map(|found| found.token().map(|t| t.place))
    }

    /// Every spelling a resource server reads a token from is a candidate; other schemes are
    /// not; every spelling servers read differently is refused, naming what to fix.
    #[test]
    fn the_head_is_read_once() {
        for value in ["Bearer t.k-n_~+/==", "bearer t", "BEARER t", "DPoP t"] {
            assert_eq!(
                token_of(&[("authorization", value.as_bytes())], None),
                Ok(Some(Place::Header)),
                "{value}"
            );
        }
        for value in ["Basic dTpw", "Digest username=\"u\", realm=\"r\"", ""] {
            assert_eq!(
                token_of(&[("authorization", value.as_bytes())], None),
                Ok(None)
            );
        }
        for value in [
            &b"Bearer\xa0t"[..],
            b"Bearer\x85t",
            b"\xa0Bearer t",
            b"Bearer \xe2\x80\x83t",
            b"Bearer\tt",
            b"Bearer  t",
            b"Bearer",
            b"Bearer t u",
            b"Bearer t,",
            b"Basic dTpw, Bearer t",
            b"Basic bearer",
            b"Bearer: t",
            b"Bearer=t",
        ] {
            let refused = token_of(&[("authorization", value)], None).unwrap_err();
            assert_eq!(refused.status, 400, "{value:?}");
            assert_eq!(refused.names, Some(("header", "authorization".into())));
        }
        let two = [
            ("authorization", &b"Basic dTpw"[..]),
            ("authorization", b"Bearer t"),
        ];
        assert!(token_of(&two, None).is_err());
        for query in [
            "access_token=t",
            "a=1&access_token=t",
            "ACCESS_TOKEN=t",
            "access%5Ftoken=t",
            "x=1;access_token=t",
        ] {
            assert_eq!(
                token_of(&[], Some(query)),
                Ok(Some(Place::Query)),
                "{query}"
            );
        }
        assert_eq!(token_of(&[], Some("token=t&access_tokens=x")), Ok(None));
        for query in [
            "access_token=a&access_token=b",
            "access_token=",
            "access_token",
            "access_token[]=t",
            "access_token=t%20u",
        ] {
            let refused = token_of(&[], Some(query)).unwrap_err();
            assert_eq!(refused.names, Some(("parameter", FIELD.into())), "{query}");
        }
        let both = token_of(&[("authorization", b"Bearer t")], Some("access_token=u"));
        assert_eq!(both.unwrap_err().error, "invalid_query");
    }

    /// A form body is read only when the head has no token; a token in the head and the body
    /// is refused; a multipart form that names `access_token` too.
    #[test]
    fn a_form_body_is_read_when_only_it_can_tell() {
        let form = ("content-type", &b"application/x-www-form-urlencoded"[..]);
        let found = in_head(&head(&[form]), None).unwrap();
        assert!(found.needs_body() && found.may_carry());
        assert_eq!(
            found
                .clone()
                .with_body(b"a=1&access_token=t")
                .unwrap()
                .map(|t| t.place),
            Some(Place::Body)
        );
        assert_eq!(found.clone().with_body(b"a=1").unwrap(), None);
        assert!(found.with_body(b"access_token=a&access_token=b").is_err());
        let with_header = in_head(&head(&[form, ("authorization", b"Bearer t")]), None).unwrap();
        assert!(!with_header.needs_body());
        let refused = with_header.with_body(b"access_token=u").unwrap_err();
        assert_eq!(refused.names, Some(("field", FIELD.into())));
        let multipart = in_head(
            &head(&[("content-type", b"multipart/form-data; boundary=x")]),
            None,
        )
        .unwrap();
        assert!(multipart.needs_body());
        assert!(multipart.clone().with_body(b"--x\r\nContent-Disposition: form-data; name=\"access\\_token\"\r\n\r\nt\r\n--x--").is_err());
        assert_eq!(
            multipart
                .with_body(b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--"),
            Ok(None)
        );
        let gzipped = head(&[form, ("content-encoding", b"gzip")]);
        assert_eq!(in_head(&gzipped, None).unwrap_err().status, 415);
        let latin1 = head(&[(
            "content-type",
            b"application/x-www-form-urlencoded; charset=latin1",
        )]);
        assert_eq!(in_head(&latin1, None).unwrap_err().status, 415);
        let json = in_head(&head(&[("content-type", b"application/json")]), None).unwrap();
        assert!(!json.may_carry());
    }
}
