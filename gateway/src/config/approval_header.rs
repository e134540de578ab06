//! `[upstream.approval_header]` (and `[route.upstream.approval_header]`): off unless written.
//! With it, every approved forward to that upstream carries what was approved, signed
//! (`protocol::approved`, docs/upstream-check.md).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::duration::parse_duration;
use super::error::{At, ConfigError};
use super::named_file::read_named;
use crate::protocol::approved::{ApprovalSigner, DEFAULT_NAME};
use crate::receipts::{SigningKey, pkcs8_from_pem};

/// The longest a header may be valid: it is checked when the forward arrives.
const MAX_EXPIRES_IN: Duration = Duration::from_secs(3600);

/// `[upstream.approval_header]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalHeaderFile {
    /// An Ed25519 private key, PKCS#8 PEM (relative to gateway.toml's folder).
    pub signing_key: Spanned<String>,
    /// The header's name (default `poppy-approved`).
    pub name: Option<Spanned<String>>,
    /// How long after the forward the header is valid (default 60s).
    pub expires_in: Option<Spanned<String>>,
}

/// Validate the table, reading its key; `None` after pushing its errors.
pub(super) fn compile(
    file: &ApprovalHeaderFile,
    table: &str,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<Arc<ApprovalSigner>> {
    let before = errors.len();
    let name = match &file.name {
        None => http::HeaderName::from_static(DEFAULT_NAME),
        Some(n) => match http::HeaderName::from_bytes(n.get_ref().as_bytes()) {
            // The gateway's own headers keep their meaning.
            Ok(name) if !name.as_str().starts_with("poppy-approval") && name != "poppy-session" => {
                name
            }
            _ => {
                errors.push(at(
                    n.span(),
                    format!(
                        "{table}.approval_header.name: `{}` is not a header name the gateway may send (nor Poppy-Approval or Poppy-Session)",
                        n.get_ref()
                    ),
                ));
                http::HeaderName::from_static(DEFAULT_NAME)
            }
        },
    };
    let expires_in = match &file.expires_in {
        None => Duration::from_secs(60),
        Some(e) => match parse_duration(e.get_ref()) {
            Ok(d) if !d.is_zero() && d <= MAX_EXPIRES_IN => d,
            Ok(_) => {
                errors.push(at(
                    e.span(),
                    format!("{table}.approval_header.expires_in: between 1s and 1h"),
                ));
                Duration::from_secs(60)
            }
            Err(problem) => {
                errors.push(at(
                    e.span(),
                    format!("{table}.approval_header.expires_in: {problem}"),
                ));
                Duration::from_secs(60)
            }
        },
    };
    let key = format!("{table}.approval_header.signing_key");
    let check = |pem: Vec<u8>| {
        let der = pkcs8_from_pem(&pem).map_err(|e| e.to_string())?;
        let kid = SigningKey::from_pkcs8_der(&der)
            .map_err(|e| e.to_string())?
            .kid()
            .to_owned();
        Ok((der, kid))
    };
    let (der, kid) = read_named(&file.signing_key, &key, folder, check, at, errors)?;
    (errors.len() == before).then(|| Arc::new(ApprovalSigner::new(name, &der, kid, expires_in)))
}
