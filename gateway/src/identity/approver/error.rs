//! Why no approver could be read from a request, and how that refusal is answered.

use crate::identity::{TokenError, VerifyError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApproverError {
    #[error("Poppy-Session is not a JWT (three base64url parts with a JSON object payload)")]
    NotAJwt,
    #[error("Poppy-Session has no string claim `{0}`")]
    MissingClaim(String),
    #[error("Poppy-Session: {0}")]
    InvalidSession(#[from] VerifyError),
    #[error("{0}")]
    InvalidToken(#[from] TokenError),
}

impl ApproverError {
    /// The `error` code of the answer that refuses the request.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            _ if self.unavailable() => "token_check_unavailable",
            ApproverError::InvalidToken(_) => "invalid_token",
            _ => "invalid_session",
        }
    }

    /// Its status: a bad access token is an authorization error (`401`); a bad Session is a
    /// `403` with a JSON body, as the extension describes `invalid_session` (docs/sessions.md);
    /// an identity provider that could not be asked is no verdict on the token: `503`.
    pub(crate) fn status(&self) -> u16 {
        match self {
            _ if self.unavailable() => 503,
            ApproverError::InvalidToken(_) => 401,
            _ => 403,
        }
    }

    /// Seconds to wait before the same request, when the refusal is no verdict (`503`):
    /// until the rate limit of introspection allows a call, or 1.
    pub(crate) fn retry_after(&self) -> Option<u32> {
        match self {
            ApproverError::InvalidToken(TokenError::IntrospectionBusy { retry_after }) => {
                Some((*retry_after).max(1))
            }
            _ => self.unavailable().then_some(1),
        }
    }

    /// The token could not be checked (introspection failed or is at its rate limit, or the
    /// issuer's keys could not be read): nothing is known about it yet.
    fn unavailable(&self) -> bool {
        matches!(
            self,
            ApproverError::InvalidToken(
                TokenError::IntrospectionFailed(_)
                    | TokenError::IntrospectionBusy { .. }
                    | TokenError::Jwt(VerifyError::NoKeys { .. })
            )
        )
    }
}
