//! The `init` subcommand: read the description, draft, write the file, report on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

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
    /// A header for every request to the MCP server (`Authorization: Bearer …`), sent to the
    /// --mcp URL's origin only (a redirect to another origin is refused); repeatable.
    #[arg(long, value_name = "NAME: VALUE")]
    header: Vec<String>,
    /// Takes the place of the global `--config` (clap then propagates that one's value here,
    /// default and all), so that `init --help` doesn't offer it: init reads no gateway.toml.
    #[arg(long, hide = true)]
    #[allow(dead_code)] // never read: it only hides the global option
    config: Option<PathBuf>,
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
        let doc =
            super::description::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
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
    let listing = runtime
        .block_on(super::fetch::list_tools(url, &args.header))
        .map_err(|e| format!("{url}: {e}"))?;
    for note in &listing.notes {
        eprintln!("note       {note}");
    }
    let (drafts, skipped) = super::mcp::drafts(&listing.tools);
    let server = listing
        .server
        .as_deref()
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    let header = format!(
        "Draft [[tool]] policies for the MCP server at {url}{server}, by `poppy-gateway init`.\nThey need [mcp] in gateway.toml (docs/mcp.md)."
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

/// One line per action on stderr, then the counts: a route left unheld (commented out and
/// held by no other policy) is said loudly, since its requests pass through unapproved.
fn report(outcomes: &[Outcome], skipped: &[Skipped]) {
    for outcome in outcomes {
        match &outcome.commented {
            None => eprintln!(
                "drafted    {}  {}  ({} terms)",
                outcome.what, outcome.name, outcome.terms
            ),
            Some(reason) => match &outcome.held_by {
                Some(other) => eprintln!(
                    "commented  {}  {}: {reason}; held by `{other}`",
                    outcome.what, outcome.name
                ),
                None => eprintln!(
                    "UNHELD     {}  {}: {reason}: PASSES THROUGH UNAPPROVED until you write its policy",
                    outcome.what, outcome.name
                ),
            },
        }
        for what in &outcome.refuses {
            eprintln!("refuses    {}  {}: {what}", outcome.what, outcome.name);
        }
    }
    for skip in skipped {
        eprintln!("skipped    {}: {}", skip.what, skip.reason);
    }
    let unheld = outcomes.iter().filter(|o| o.unheld()).count();
    let commented = outcomes.iter().filter(|o| o.commented.is_some()).count();
    let live = outcomes.len() - commented;
    if outcomes.is_empty() {
        eprintln!(
            "nothing drafted: no action here needs approval ({} skipped); the file says `nothing_to_approve`, which `check` accepts",
            skipped.len()
        );
    }
    let unheld = if unheld == 0 {
        String::new()
    } else {
        format!(
            "; WARNING: {unheld} write route(s) commented out PASS THROUGH UNAPPROVED until you write their policies (listed at the top of the file)"
        )
    };
    eprintln!(
        "{live} drafted, {commented} commented out, {} skipped{unheld}; review every TODO, then `poppy-gateway check`",
        skipped.len()
    );
}
