//! The `explain` subcommand's arguments and I/O: read `@file`s, build the request, print.

use std::process::ExitCode;

use crate::config::{Config, ConfigErrors};

use super::{ExplainRequest, explain, render};

/// `poppy-gateway explain --method POST --path /orders/o1/exchanges --body @req.json`
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The request's method.
    #[arg(long, default_value = "POST")]
    pub method: String,
    /// The request's path; a `?query` here is the same as --query. Required unless --tool.
    #[arg(long, required_unless_present = "tool")]
    pub path: Option<String>,
    /// The query string, without `?`.
    #[arg(long)]
    pub query: Option<String>,
    /// A request header, `Name: value` (repeat for several). A `Poppy-Session` or
    /// `Authorization` given here is used to decide who may approve.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// The request body: the text itself, or `@file` to read it from a file (sent as
    /// `Content-Type: application/json` unless a `--header` says otherwise).
    #[arg(long)]
    pub body: Option<String>,
    /// Explain the request as signed in (with a made-up bearer token, unless --header gives one).
    #[arg(long)]
    pub signed_in: bool,
    /// The upstream's answer to the policy's `[operation.lookup]` (text or `@file`), or
    /// `NAME=…` to one of its `[operation.lookups.NAME]` (repeat for several); the terms of a
    /// lookup without one are shown as placeholders.
    #[arg(long, value_name = "[NAME=]ANSWER")]
    pub lookup_answer: Vec<String>,
    /// Explain an MCP `tools/call` of this tool instead of an HTTP request.
    #[arg(long)]
    pub tool: Option<String>,
    /// The tool call's `arguments` (JSON text or `@file`), with --tool.
    #[arg(long, requires = "tool", default_value = "{}")]
    pub arguments: String,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ArgsError {
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("--header `{0}`: write it `Name: value`")]
    Header(String),
    #[error("--method `{0}` is not an HTTP method")]
    Method(String),
}

/// Exit 0 when a Personal Agent would receive an operation, 1 when it would not (no match,
/// a missing term), 2 when the config or the arguments are wrong.
pub fn run(loaded: Result<Config, ConfigErrors>, args: &ExplainArgs) -> ExitCode {
    let config = match loaded {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::from(2);
        }
    };
    let request = match request(args) {
        Ok(request) => request,
        Err(e) => {
            eprintln!("poppy-gateway explain: {e}");
            return ExitCode::from(2);
        }
    };
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let explanation = explain(&config, &request, now);
    print!("{}", render(&explanation, &request));
    if explanation.is_operation() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn request(args: &ExplainArgs) -> Result<ExplainRequest, ArgsError> {
    let method = args.method.to_ascii_uppercase();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(ArgsError::Method(args.method.clone()));
    }
    let raw_path = args.path.clone().unwrap_or_else(|| "/".to_owned());
    let (path, query) = match raw_path.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (raw_path.clone(), None),
    };
    let mut headers = http::HeaderMap::new();
    for raw in &args.headers {
        let (name, value) = raw
            .split_once(':')
            .ok_or_else(|| ArgsError::Header(raw.clone()))?;
        let name = http::HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| ArgsError::Header(raw.clone()))?;
        let value = http::HeaderValue::from_str(value.trim())
            .map_err(|_| ArgsError::Header(raw.clone()))?;
        headers.append(name, value);
    }
    let body = args
        .body
        .as_deref()
        .map(text_or_file)
        .transpose()?
        .unwrap_or_default();
    // A body is JSON unless `-H 'Content-Type: …'` says otherwise, as agents send it.
    if !body.is_empty() && !headers.contains_key(http::header::CONTENT_TYPE) {
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
    }
    Ok(ExplainRequest {
        method,
        path,
        query: args.query.clone().or(query),
        headers,
        body,
        signed_in: args.signed_in,
        lookup_answers: args
            .lookup_answer
            .iter()
            .map(|arg| {
                // `NAME=` names a lookup; JSON text and `@file` can't start that way.
                let named = arg.split_once('=').filter(|(name, _)| {
                    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                });
                let (name, answer) = named.unwrap_or(("", arg));
                Ok((name.to_owned(), text_or_file(answer)?))
            })
            .collect::<Result<_, ArgsError>>()?,
        tool: match &args.tool {
            Some(tool) => Some((tool.clone(), text_or_file(&args.arguments)?)),
            None => None,
        },
    })
}

/// `@path` reads the file; anything else is the text itself.
fn text_or_file(arg: &str) -> Result<Vec<u8>, ArgsError> {
    match arg.strip_prefix('@') {
        Some(path) => std::fs::read(path).map_err(|error| ArgsError::Read {
            path: path.to_owned(),
            error,
        }),
        None => Ok(arg.as_bytes().to_vec()),
    }
}
