//! The one syntax of an `Authorization` value that carries an OAuth access token, read by the
//! front door (`ingress::credentials`, which finds it) and the approver (`identity`, which
//! verifies it) alike: `Bearer` or `DPoP` (any case), one space, an RFC 6750 `b64token`. A
//! value spelled otherwise is read differently by common resource servers (oauthlib and
//! Authlib split on any Unicode whitespace, passport-http-bearer on one space), so it is
//! never taken as a token here.

/// Schemes whose token names an OAuth client, lower case.
pub(crate) const TOKEN_SCHEMES: [&str; 2] = ["bearer", "dpop"];

/// Whether `word` is one of [`TOKEN_SCHEMES`], in any case.
pub(crate) fn is_token_scheme(word: &str) -> bool {
    TOKEN_SCHEMES.iter().any(|s| word.eq_ignore_ascii_case(s))
}

/// The token of `Scheme SP b64token`, or `None`.
pub(crate) fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let at = value.iter().position(|b| *b == b' ')?;
    let scheme = std::str::from_utf8(&value[..at]).ok()?;
    let token = &value[at + 1..];
    (is_token_scheme(scheme) && is_token68(token)).then_some(token)
}

/// RFC 6750's `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
pub(crate) fn is_token68(token: &[u8]) -> bool {
    let padding = token.iter().rev().take_while(|b| **b == b'=').count();
    let body = &token[..token.len() - padding];
    !body.is_empty()
        && body
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_scheme_one_space_one_token() {
        for (value, token) in [
            ("Bearer t.k-n_~+/==", "t.k-n_~+/=="),
            ("bearer t", "t"),
            ("DPOP t", "t"),
        ] {
            assert_eq!(bearer_token(value.as_bytes()), Some(token.as_bytes()));
        }
        for value in [
            &b"Bearer  t"[..],
            b"Bearer\tt",
            b"Bearer\xa0t",
            b"Bearer t ",
            b"Bearer t u",
            b"Bearer =",
            b"Bearer ",
            b"Bearer",
            b"Basic dTpw",
            b"Bearer t,",
        ] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }
}
