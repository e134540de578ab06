//! Validate policy files into [`Policy`] values.

use std::path::Path;

use toml::Spanned;

use super::action::{ActionKeys, Table, compile_action};
use super::error::{ConfigError, ConfigErrors, from_toml};
use super::file::{OperationFile, PolicyFile};
use super::tool_policy::compile_tool;
use crate::policy::{PathTemplate, Policy, Route};

/// Load one policy file.
pub(crate) fn load_policy_file(path: &Path) -> Result<Vec<Policy>, ConfigErrors> {
    let source = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::whole_file(path, format!("cannot read: {e}")))?;
    parse_policy_file(path, &source)
}

/// Validate a policy file's text; `path` names it in errors.
pub fn parse_policy_file(path: &Path, source: &str) -> Result<Vec<Policy>, ConfigErrors> {
    let source = source.to_owned();
    let file: PolicyFile = toml::from_str(&source).map_err(|e| from_toml(path, &source, &e))?;
    let mut errors = Vec::new();
    let mut policies = Vec::new();
    for operation in &file.operation {
        if let Some(policy) = compile_operation(path, &source, operation, &mut errors) {
            policies.push(policy);
        }
    }
    for tool in &file.tool {
        if let Some(policy) = compile_tool(path, &source, tool, &mut errors) {
            policies.push(policy);
        }
    }
    let tables = file.operation.len() + file.tool.len();
    match &file.nothing_to_approve {
        None if tables == 0 => errors.push(ConfigError::whole_file(
            path,
            "no [[operation]] or [[tool]] table: a policy file names at least one action, or says `nothing_to_approve = \"why\"`",
        )),
        None => {}
        Some(why) if tables > 0 => errors.push(ConfigError::at(
            path,
            &source,
            Some(why.span()),
            format!("nothing_to_approve: the file holds {tables} [[operation]] or [[tool]] table(s): remove one or the other"),
        )),
        Some(why) if why.get_ref().trim().is_empty() => errors.push(ConfigError::at(
            path,
            &source,
            Some(why.span()),
            "nothing_to_approve: say why nothing here needs approval (not empty)".to_owned(),
        )),
        Some(_) => {}
    }
    if errors.is_empty() {
        Ok(policies)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn compile_operation(
    path: &Path,
    source: &str,
    op: &OperationFile,
    errors: &mut Vec<ConfigError>,
) -> Option<Policy> {
    let start = errors.len();
    let name = op.name.get_ref();
    let at = |span: std::ops::Range<usize>, message: String| {
        ConfigError::at(
            path,
            source,
            Some(span),
            format!("operation `{name}`: {message}"),
        )
    };
    let method = op.method.get_ref().to_ascii_uppercase();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        errors.push(at(
            op.method.span(),
            format!("method: `{}` is not an HTTP method", op.method.get_ref()),
        ));
    }
    let template = PathTemplate::parse(op.path.get_ref())
        .map_err(|e| errors.push(at(op.path.span(), format!("path: {e}"))))
        .ok();
    let keys = ActionKeys {
        table: Table::Operation,
        name: &op.name,
        id_prefix: &op.id_prefix,
        expires_in: &op.expires_in,
        same_action: &op.same_action,
        summary: &op.summary,
        terms: &op.terms,
        ignore: op.ignore.as_ref(),
        condition: op.needs_approval_when.as_ref(),
    };
    let action = compile_action(path, source, &keys, template.as_ref(), errors);
    let ignore_query = op
        .ignore_query
        .as_ref()
        .map(|names| names.get_ref().clone())
        .unwrap_or_default();
    for name in &ignore_query {
        let is_term = op
            .terms
            .values()
            .any(|t| t.get_ref().query.as_deref() == Some(name));
        if name.is_empty() || is_term {
            let span = op
                .ignore_query
                .as_ref()
                .map(Spanned::span)
                .unwrap_or_default();
            errors.push(at(
                span,
                format!("ignore_query: `{name}` is empty or a term's own parameter"),
            ));
        }
    }
    let mut ignore_headers = Vec::new();
    if let Some(names) = &op.ignore_headers {
        for name in names.get_ref() {
            let is_term = op.terms.values().any(|t| {
                t.get_ref()
                    .header
                    .as_deref()
                    .is_some_and(|h| h.eq_ignore_ascii_case(name))
            });
            match http::HeaderName::from_bytes(name.as_bytes()) {
                Ok(header) if !is_term && header != http::header::CONTENT_TYPE => {
                    ignore_headers.push(header.as_str().to_owned());
                }
                _ => errors.push(at(
                    names.span(),
                    format!("ignore_headers: `{name}` is not a header name, or is Content-Type or a term's own header (those are always bound)"),
                )),
            }
        }
    }
    let overrides = op
        .overrides
        .as_ref()
        .map(|names| names.get_ref().clone())
        .unwrap_or_default();
    for (i, other) in overrides.iter().enumerate() {
        if other.is_empty() || other == name || overrides[..i].contains(other) {
            let span = op.overrides.as_ref().map(Spanned::span).unwrap_or_default();
            errors.push(at(
                span,
                format!("overrides: `{other}` is empty, this policy itself, or named twice"),
            ));
        }
    }
    let mut problems = Vec::new();
    let approval =
        super::action::approval_via(op.approval.as_ref(), op.proof.as_ref(), &mut problems);
    for (span, problem) in problems {
        errors.push(at(span, problem));
    }
    let lookups = super::lookup::compile_lookups(
        op.lookup.as_ref(),
        &op.lookups,
        &op.terms,
        template.as_ref(),
    )
    .unwrap_or_else(|problems| {
        for (span, problem) in problems {
            errors.push(at(span, problem));
        }
        Vec::new()
    });
    if errors.len() > start {
        return None;
    }
    Some(Policy {
        route: template.map(|path| Route { method, path }),
        lookups,
        ignore_query,
        ignore_headers,
        overrides,
        ..action?.into_policy(approval)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn errors(text: &str) -> String {
        parse_policy_file(Path::new("p.toml"), text)
            .unwrap_err()
            .to_string()
    }

    /// A file may hold no policy only when it says so, and why: one whose every block was
    /// commented out is still an error.
    #[test]
    fn a_file_without_policy_must_say_nothing_to_approve() {
        let said = "# read-only tools\nnothing_to_approve = \"every tool is read-only\"\n";
        assert!(
            parse_policy_file(Path::new("p.toml"), said)
                .unwrap()
                .is_empty()
        );
        assert!(errors("# [[tool]]\n").contains("or says `nothing_to_approve"));
        assert!(
            errors("nothing_to_approve = \" \"\n")
                .contains("p.toml:1:22: nothing_to_approve: say why")
        );
        let both = "nothing_to_approve = \"x\"\n[[tool]]\nname = \"t\"\ntool = \"t\"\nid_prefix = \"t\"\nexpires_in = \"1m\"\nsame_action = [\"a\"]\nsummary = \"{a}\"\n[tool.terms]\na = { argument = \"$.a\" }\n";
        assert!(
            errors(both).contains("the file holds 1 [[operation]] or [[tool]] table(s)"),
            "{}",
            errors(both)
        );
    }
}
