//! What several config sections share: a listener's own address (`[server]`, `[admin]`,
//! `[conversations]`, `[approval_page]`), and a secret named by an environment variable or a file (`token_env` / `token_file`, `client_secret_env` /
//! `client_secret_file`), never written in gateway.toml.

use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use super::error::{At, ConfigError};

/// `KEY.listen`: a socket address no other listener of the config has. `example` shows one.
pub(super) fn check_listen(
    section: &str,
    example: &str,
    listen: &Spanned<String>,
    taken: &[&str],
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) {
    let address = listen.get_ref();
    if address.parse::<std::net::SocketAddr>().is_err() {
        errors.push(at(
            listen.span(),
            format!("{section}.listen: `{address}` is not an address like {example}"),
        ));
    } else if taken.contains(&address.as_str()) {
        errors.push(at(
            listen.span(),
            format!("{section}.listen: `{address}` is already another listener's address (server, admin, conversations or approval_page)"),
        ));
    }
}

/// Where a secret is named: `{key}_env` or `{key}_file` of `[section]`, exactly one.
pub(super) struct SecretSource<'a> {
    pub(super) section: &'a str,
    pub(super) key: &'a str,
    /// What it is, for messages ("the service token").
    pub(super) what: &'a str,
    pub(super) env: Option<&'a Spanned<String>>,
    pub(super) file: Option<&'a Spanned<String>>,
    /// The table's span, for a message about both or neither.
    pub(super) table: Range<usize>,
}

/// The secret's bytes, trimmed of surrounding white space (a file's trailing newline is not
/// part of it), and where it came from; `None` after pushing an error. Never empty.
pub(super) fn read_secret(
    source: &SecretSource<'_>,
    folder: &Path,
    at: At<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<(Vec<u8>, String)> {
    let SecretSource {
        section, key, what, ..
    } = source;
    // `from` is what `check` prints; `named` what an error names.
    let (bytes, from, named, span, key_name) = match (source.env, source.file) {
        (Some(name), None) => {
            let var = name.get_ref();
            let bytes = std::env::var_os(var).map(|v| v.into_encoded_bytes());
            (
                bytes.ok_or("is not set".to_owned()),
                format!("environment variable {var}"),
                format!("the environment variable `{var}`"),
                name.span(),
                format!("{key}_env"),
            )
        }
        (None, Some(file)) => {
            let path = folder.join(file.get_ref());
            let bytes = std::fs::read(&path).map_err(|e| format!("cannot be read: {e}"));
            (
                bytes,
                format!("file {}", path.display()),
                format!("the file {}", path.display()),
                file.span(),
                format!("{key}_file"),
            )
        }
        _ => {
            errors.push(at(
                source.table.clone(),
                format!("{section}: set exactly one of {key}_env (an environment variable's name) and {key}_file (a file holding {what}); the secret itself never goes in gateway.toml"),
            ));
            return None;
        }
    };
    let problem = match bytes {
        Ok(bytes) if !bytes.trim_ascii().is_empty() => {
            return Some((bytes.trim_ascii().to_vec(), from));
        }
        Ok(_) => "is empty".to_owned(),
        Err(problem) => problem,
    };
    errors.push(at(
        span,
        format!("{section}.{key_name}: {named} {problem}; it must hold {what}"),
    ));
    None
}
