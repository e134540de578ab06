//! Files that gateway.toml names (certificate authorities, a signing key, a document), read
//! and checked at load: a problem is a config error at the key that names the file.

use std::path::Path;

use toml::Spanned;

use super::error::{At, ConfigError};
use crate::identity::HttpClient;

/// The file `file` names, relative to gateway.toml's `folder`, read and turned into a `T` by
/// `check`; `None` after pushing an error that names `key` and the file.
pub(super) fn read_named<T>(
    file: &Spanned<String>,
    key: &str,
    folder: &Path,
    check: impl FnOnce(Vec<u8>) -> Result<T, String>,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<T> {
    let path = folder.join(file.get_ref());
    let problem = match std::fs::read(&path) {
        Ok(bytes) => match check(bytes) {
            Ok(value) => return Some(value),
            Err(problem) => format!("{key}: {}: {problem}", path.display()),
        },
        Err(e) => format!("{key}: cannot read {}: {e}", path.display()),
    };
    errors.push(at(file.span(), problem));
    None
}

/// A `ca_file`: extra certificate authorities (PEM) for the gateway's own fetches, besides
/// the built-in roots; read and checked now.
pub(super) fn read_ca_file(
    file: &Spanned<String>,
    key: &str,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<Vec<u8>> {
    let check = |pem: Vec<u8>| HttpClient::check_roots(&pem).map(|()| pem);
    read_named(file, key, folder, check, at, errors)
}
