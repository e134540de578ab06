//! The `init` subcommand: read the description, draft, write the file, report on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use super::draft::{Outcome, render};
use super::openapi::{Selection, Skipped};

/// Draft policies from an OpenAPI description or a running MCP server's tools.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["openapi", "mcp"])))]
pub struct InitArgs {
    /// An OpenAPI 3.0 or 3.1 description, JSON or YAML: one `[[operation]]` per write
    /// operation (POST, PUT, PATCH, DELETE).
    #[arg(long, value_name = "FILE")]
    openapi: Option<PathBuf>,
    /// A running MCP server's Streamable HTTP endpoint: one `[[tool]]` per tool not marked
    /// `readOnlyHint: true`.
    #[arg(long, value_name = "URL")]
    mcp: Option<String>,
    /// Write the drafts here instead of stdout (an existing file is kept unless --force).
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Overwrite --output.
    #[arg(long)]
    force: bool,
    /// Only operations whose operationId or path matches this glob (`*` crosses `/`);
    /// repeatable.
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// Leave out operations whose operationId or path matches this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Only operations with this tag; repeatable (any of them).
    #[arg(long, value_name = "TAG")]
    tag: Vec<String>,
    /// Only operations with this `x-` extension (set and not false), or with it equal to
    /// VALUE; repeatable (all of them).
    #[arg(long, value_name = "x-NAME[=VALUE]")]
    extension: Vec<String>,
    /// A header for every request to the MCP server (`Authorization: Bearer …`); repeatable.
    #[arg(long, value_name = "NAME: VALUE")]
    header: Vec<String>,
}

/// Runs `init`: 0 when the drafts are written (some may be commented out), 2 on bad
/// arguments or a description that can't be read.
pub fn run(args: &InitArgs) -> ExitCode {
    match drafts(args) {
        Ok((text, outcomes, skipped)) => {
            if let Err(e) = write(args, &text) {
                eprintln!("poppy-gateway init: {e}");
                return ExitCode::from(2);
            }
            report(&outcomes, &skipped);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("poppy-gateway init: {e}");
            ExitCode::from(2)
        }
    }
}

type Drafted = (String, Vec<Outcome>, Vec<Skipped>);

fn drafts(args: &InitArgs) -> Result<Drafted, String> {
    if let Some(file) = &args.openapi {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let doc = parse_description(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let (drafts, skipped, header) = super::openapi::drafts(&doc, &selection(args)?)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let header = format!("{header}\nFrom {}.", file.display());
        let (text, outcomes) = render(&header, drafts);
        return Ok((text, outcomes, skipped));
    }
    let url = args.mcp.as_deref().unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let tools = runtime
        .block_on(super::fetch::list_tools(url, &args.header))
        .map_err(|e| format!("{url}: {e}"))?;
    let (drafts, skipped) = super::mcp::drafts(&tools);
    let header = format!(
        "Draft [[tool]] policies for the MCP server at {url}, by `poppy-gateway init`.\nThey need [mcp] in gateway.toml (docs/mcp.md)."
    );
    let (text, outcomes) = render(&header, drafts);
    Ok((text, outcomes, skipped))
}

fn selection(args: &InitArgs) -> Result<Selection, String> {
    let globs = |patterns: &[String]| {
        patterns
            .iter()
            .map(|p| glob::Pattern::new(p).map_err(|e| format!("glob `{p}`: {e}")))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut extensions = Vec::new();
    for raw in &args.extension {
        let (name, value) = match raw.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (raw.as_str(), None),
        };
        if !name.starts_with("x-") {
            return Err(format!(
                "--extension `{raw}`: an extension's name starts with x-"
            ));
        }
        extensions.push((name.to_owned(), value));
    }
    Ok(Selection {
        include: globs(&args.include)?,
        exclude: globs(&args.exclude)?,
        tags: args.tag.clone(),
        extensions,
    })
}

/// JSON, or else YAML (whose keys may be numbers, as response codes are: made strings).
fn parse_description(text: &str) -> Result<Value, String> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Ok(value);
    }
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|e| format!("neither JSON nor YAML: {e}"))?;
    Ok(yaml_to_json(yaml))
}

fn yaml_to_json(yaml: serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    match yaml {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(&n).unwrap_or(Value::Null),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => serde_yaml::to_string(&other)
                            .unwrap_or_default()
                            .trim()
                            .to_owned(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(tagged) => yaml_to_json(tagged.value),
    }
}

fn write(args: &InitArgs, text: &str) -> Result<(), String> {
    let Some(path) = &args.output else {
        print!("{text}");
        return Ok(());
    };
    if path.exists() && !args.force {
        return Err(format!(
            "{} exists: choose another --output, or --force to replace it",
            path.display()
        ));
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// One line per action on stderr, then the counts.
fn report(outcomes: &[Outcome], skipped: &[Skipped]) {
    let mut commented = 0;
    for outcome in outcomes {
        match &outcome.commented {
            None => eprintln!(
                "drafted    {}  {}  ({} terms)",
                outcome.what, outcome.name, outcome.terms
            ),
            Some(reason) => {
                commented += 1;
                eprintln!("commented  {}  {}: {reason}", outcome.what, outcome.name);
            }
        }
    }
    for skip in skipped {
        eprintln!("skipped    {}: {}", skip.what, skip.reason);
    }
    eprintln!(
        "{} drafted, {commented} commented out (write those by hand), {} skipped; review every TODO, then `poppy-gateway check`",
        outcomes.len() - commented,
        skipped.len()
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn yaml_descriptions_read_with_numeric_keys_as_text() {
        let doc = parse_description("openapi: 3.0.0\npaths:\n  /a:\n    post:\n      responses:\n        200:\n          description: ok\n").unwrap();
        assert_eq!(
            doc["paths"]["/a"]["post"]["responses"]["200"]["description"],
            "ok"
        );
        assert_eq!(
            parse_description("{\"openapi\": \"3.1.0\"}").unwrap()["openapi"],
            "3.1.0"
        );
        assert!(parse_description("{ not: [ yaml").is_err());
    }
}
