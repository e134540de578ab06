//! `[approval_page]`: the Company's own approval page (`crate::approval_page`), off unless the
//! table is there. Like `[conversations]`' token, the OpenID client secret comes from an
//! environment variable or a file, never from gateway.toml itself.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::error::ConfigError;
use super::secret::{SecretSource, check_listen, read_secret};
use crate::ingress::admit::Agents;

/// `[approval_page]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalPageFile {
    /// Where the page listens (its own listener, apart from the proxy's).
    pub listen: Spanned<String>,
    /// The page's address as the User's browser reaches it (the links are made with it).
    pub public_url: Spanned<String>,
    /// The name the page shows; poppy.json's `name` (`[well_known] file`) when not set.
    pub company_name: Option<Spanned<String>>,
    /// The Company's OpenID provider (its discovery document is `{issuer}/.well-known/openid-configuration`).
    pub issuer: Spanned<String>,
    /// The page's client at that provider.
    pub client_id: Spanned<String>,
    /// The name of the environment variable that holds the client secret.
    pub client_secret_env: Option<Spanned<String>>,
    /// A file (relative to gateway.toml's folder) that holds the client secret.
    pub client_secret_file: Option<Spanned<String>>,
    /// `[approval_page.agents]`: which requests without a `Poppy-Session` are an agent's.
    pub agents: Option<Spanned<AgentsFile>>,
}

/// `[approval_page.agents]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentsFile {
    /// OAuth clients whose verified bearer tokens make a request an agent's.
    pub clients: Option<Spanned<Vec<Spanned<String>>>>,
    /// Every request without a `Poppy-Session` is an agent's.
    pub every_request: Option<Spanned<bool>>,
}

/// `[approval_page]`, validated.
#[derive(Debug, Clone)]
pub struct ApprovalPage {
    pub listen: String,
    /// Without a trailing `/`.
    pub public_url: String,
    pub company_name: String,
    /// Without a trailing `/`.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: ClientSecret,
    /// Where the secret comes from, for `check` (never the secret).
    pub client_secret_source: String,
    /// `[approval_page.agents]`: `None` leaves every request without a `Poppy-Session` to
    /// pass through, as the Company's own clients' do.
    pub(crate) agents: Option<Agents>,
}

/// The OpenID client secret: sent to the provider's token endpoint, so kept as it is, but
/// never printed.
#[derive(Clone)]
pub struct ClientSecret(Arc<str>);

impl std::fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientSecret(..)")
    }
}

impl ApprovalPage {
    /// Which requests without a `Poppy-Session` are agents' (`[approval_page.agents]`), for
    /// `check`: `None` without the table.
    pub fn agents_rule(&self) -> Option<String> {
        let agents = self.agents.as_ref()?;
        Some(if agents.every_request {
            "every request without a Poppy-Session".to_owned()
        } else {
            format!(
                "a verified bearer token of client {}",
                agents.clients.join(", ")
            )
        })
    }
}

impl ClientSecret {
    /// The secret, for the token request only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    #[cfg(test)]
    pub(crate) fn for_tests(secret: &str) -> ClientSecret {
        ClientSecret(secret.into())
    }
}

/// What `[approval_page]` is checked against: the other listen addresses of this config,
/// poppy.json (for the Company's name), and whether bearer tokens are verified
/// (`[session.token]`, for `agents.clients`).
pub(super) struct Context<'a> {
    pub(super) taken: &'a [&'a str],
    pub(super) well_known: Option<&'a serde_json::Value>,
    pub(super) tokens_verified: bool,
}

/// Validate `[approval_page]`; `None` after pushing its errors.
pub(super) fn compile(
    table: &Spanned<ApprovalPageFile>,
    folder: &Path,
    context: &Context<'_>,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<ApprovalPage> {
    let (taken, well_known) = (context.taken, context.well_known);
    let before = errors.len();
    let file = table.get_ref();
    let agents = file
        .agents
        .as_ref()
        .and_then(|agents| compile_agents(agents, context.tokens_verified, at, errors));
    let listen = file.listen.get_ref();
    check_listen(
        "approval_page",
        "127.0.0.1:8091",
        &file.listen,
        taken,
        at,
        errors,
    );
    let public_url = web_origin("approval_page.public_url", &file.public_url, at, errors);
    let issuer = web_origin("approval_page.issuer", &file.issuer, at, errors);
    let client_id = file.client_id.get_ref().trim();
    if client_id.is_empty() {
        errors.push(at(
            file.client_id.span(),
            "approval_page.client_id: the page's client ID at the OpenID provider must not be empty".into(),
        ));
    }
    let company_name = match &file.company_name {
        Some(name) if name.get_ref().trim().is_empty() => {
            errors.push(at(
                name.span(),
                "approval_page.company_name: must not be empty".into(),
            ));
            None
        }
        Some(name) => Some(name.get_ref().trim().to_owned()),
        None => match well_known
            .and_then(|doc| doc.get("name"))
            .and_then(|n| n.as_str())
        {
            Some(name) if !name.trim().is_empty() => Some(name.trim().to_owned()),
            _ => {
                errors.push(at(
                    table.span(),
                    "approval_page: set company_name (the name the page shows), or a poppy.json with `name` in [well_known] file".into(),
                ));
                None
            }
        },
    };
    let secret = read_secret(
        &SecretSource {
            section: "approval_page",
            key: "client_secret",
            what: "the OpenID client secret",
            env: file.client_secret_env.as_ref(),
            file: file.client_secret_file.as_ref(),
            table: table.span(),
        },
        folder,
        at,
        errors,
    );
    let (secret, client_secret_source) = secret?;
    let Ok(secret) = String::from_utf8(secret) else {
        errors.push(at(
            table.span(),
            format!(
                "approval_page: the OpenID client secret ({client_secret_source}) is not UTF-8"
            ),
        ));
        return None;
    };
    (errors.len() == before).then(|| ApprovalPage {
        listen: listen.clone(),
        public_url: public_url.unwrap_or_default(),
        company_name: company_name.unwrap_or_default(),
        issuer: issuer.unwrap_or_default(),
        client_id: client_id.to_owned(),
        client_secret: ClientSecret(secret.into()),
        client_secret_source,
        agents,
    })
}

/// `[approval_page.agents]`: a list of verified clients, or every request; never neither.
fn compile_agents(
    table: &Spanned<AgentsFile>,
    tokens_verified: bool,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<Agents> {
    let before = errors.len();
    let file = table.get_ref();
    let every_request = file.every_request.as_ref().is_some_and(|e| *e.get_ref());
    let mut clients = Vec::new();
    if let Some(list) = &file.clients {
        if list.get_ref().is_empty() {
            errors.push(at(
                list.span(),
                "approval_page.agents.clients: empty; name the OAuth clients (their client_id) whose users' tokens are agents'".into(),
            ));
        }
        for client in list.get_ref() {
            let name = client.get_ref().trim();
            if name.is_empty() {
                errors.push(at(
                    client.span(),
                    "approval_page.agents.clients: a client ID must not be empty".into(),
                ));
            } else {
                clients.push(name.to_owned());
            }
        }
        if every_request {
            errors.push(at(
                list.span(),
                "approval_page.agents: clients and every_request = true together: every_request already makes every request without a Poppy-Session an agent's; keep one".into(),
            ));
        } else if !tokens_verified {
            // An unverified token's client_id is whatever the sender wrote: an agent could
            // name the Company's own client and pass through unapproved.
            errors.push(at(
                list.span(),
                "approval_page.agents.clients: needs verified bearer tokens ([session] verify = \"required\" with [session.token]): a client is told apart only by a token the gateway verified".into(),
            ));
        }
    } else if !every_request {
        errors.push(at(
            table.span(),
            "approval_page.agents: says no request is an agent's; set clients = [\"<client_id>\", ...] or every_request = true, or remove the table".into(),
        ));
    }
    (errors.len() == before).then_some(Agents {
        clients,
        every_request,
    })
}

/// An `https://` URL (or `http://` to a loopback host, for tests and local demos) without
/// query or fragment, returned without its trailing `/`.
fn web_origin(
    key: &str,
    value: &Spanned<String>,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
    errors: &mut Vec<ConfigError>,
) -> Option<String> {
    let text = value.get_ref().trim();
    let uri = text.parse::<http::Uri>().ok();
    let problem = match uri.as_ref() {
        None => Some("is not a URL"),
        Some(uri) => {
            let host = uri.host().unwrap_or_default();
            let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1");
            match uri.scheme_str() {
                _ if host.is_empty() => Some("has no host"),
                _ if uri.query().is_some() || text.contains('#') => {
                    Some("must have no query or fragment")
                }
                Some("https") => None,
                Some("http") if loopback => None,
                Some("http") => Some("must be https:// (http:// only to localhost)"),
                _ => Some("must be an https:// URL"),
            }
        }
    };
    match problem {
        None => Some(text.trim_end_matches('/').to_owned()),
        Some(problem) => {
            errors.push(at(value.span(), format!("{key}: `{text}` {problem}")));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let secret = ClientSecret("s3cret".into());
        assert_eq!(format!("{secret:?}"), "ClientSecret(..)");
        assert_eq!(secret.expose(), "s3cret");
    }
}
