//! One drafted table as TOML: live, or commented out with the reason and what could be
//! drafted, for the operator to finish.

use std::fmt::Write as _;

use super::summary::{MAX_SECTIONS, summary};
use super::{Draft, Source, Target, Term};

/// A commented-out block: the reason, then whatever could be drafted, for the operator.
pub(super) fn commented_block(draft: &Draft, name: &str, prefix: &str, reason: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}", origin_line(draft));
    match &draft.held_by {
        Some(other) => {
            let _ = writeln!(out, "# NOT DRAFTED: {}", one_line(reason));
            let _ = writeln!(
                out,
                "# Its requests are held by `{other}`; merge what differs into that one:"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "# NOT DRAFTED, so this route PASSES THROUGH UNAPPROVED: {}",
                one_line(reason)
            );
            let _ = writeln!(out, "# Write this policy by hand:");
        }
    }
    for line in live_block(draft, name, prefix).lines().skip(1) {
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            let _ = writeln!(out, "# {line}");
        }
    }
    out
}

fn origin_line(draft: &Draft) -> String {
    let key = if draft.key.is_empty() {
        String::new()
    } else {
        match draft.target {
            Target::Operation { .. } => format!(" (operationId {})", draft.key),
            Target::Tool { .. } => String::new(),
        }
    };
    let title = crate::init::text::first_block(&draft.title);
    let title = if title.is_empty() {
        String::new()
    } else {
        format!(": {title}")
    };
    one_line(&format!("{}{key}{title}", draft.describe()))
}

/// Text fit for a TOML comment: one line, control characters shown as `?`.
pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The table of a draft, with its terms.
pub(super) fn live_block(draft: &Draft, name: &str, prefix: &str) -> String {
    let table = match draft.target {
        Target::Operation { .. } => "operation",
        Target::Tool { .. } => "tool",
    };
    let mut out = String::new();
    let _ = writeln!(out, "# {}", origin_line(draft));
    let _ = writeln!(out, "[[{table}]]");
    let _ = writeln!(out, "name = {}", quoted(name));
    match &draft.target {
        Target::Operation { method, path } => {
            let _ = writeln!(out, "method = {}", quoted(method));
            let _ = writeln!(out, "path = {}", quoted(path));
        }
        Target::Tool { tool } => {
            let _ = writeln!(out, "tool = {}", quoted(tool));
        }
    }
    let _ = writeln!(out, "id_prefix = {}", quoted(prefix));
    let _ = writeln!(
        out,
        "expires_in = \"15m\"  # TODO: how long the User's approval stays valid"
    );
    let (same, why) = same_action(draft);
    let _ = writeln!(out, "same_action = [{}]  # {why}", list(&same));
    if !draft.overrides.is_empty() {
        let _ = writeln!(
            out,
            "overrides = [{}]  # the more specific route wins where both match",
            list(&draft.overrides)
        );
    }
    let _ = writeln!(out, "# TODO: rewrite in plain language");
    let optional = draft.terms.iter().filter(|t| t.optional).count();
    if optional > MAX_SECTIONS {
        let _ = writeln!(
            out,
            "# TODO: {optional} optional terms, listed by {{...}} when the request sets them: write those the User must read into the sentence"
        );
    }
    let _ = writeln!(out, "summary = {}", quoted(&summary(draft)));
    for note in &draft.notes {
        let _ = writeln!(out, "# {}", one_line(note));
    }
    for what in &draft.refuses {
        let _ = writeln!(
            out,
            "# HELD, BUT REFUSED (400, nothing forwarded): {}",
            one_line(what)
        );
    }
    let _ = writeln!(out, "\n[{table}.terms]");
    for term in &draft.terms {
        let (key, value) = term.source.key();
        let flag = if term.optional {
            ", optional = true"
        } else {
            ""
        };
        let _ = writeln!(out, "{} = {{ {key} = {}{flag} }}", term.name, quoted(value));
    }
    out
}

/// `same_action` and why: the draft's own choice, else the path terms (which resource the
/// action is on), else the required terms, else every term.
fn same_action(draft: &Draft) -> (Vec<String>, &'static str) {
    if !draft.same_action.is_empty() {
        return (
            draft.same_action.clone(),
            "TODO: the terms that say which action this is",
        );
    }
    let of = |keep: &dyn Fn(&Term) -> bool| -> Vec<String> {
        draft
            .terms
            .iter()
            .filter(|t| keep(t))
            .map(|t| t.name.clone())
            .collect()
    };
    let path = of(&|t| matches!(t.source, Source::Path(_)));
    if !path.is_empty() {
        return (path, "the path parameters: which resource the action is on");
    }
    let required = of(&|t| !t.optional);
    if !required.is_empty() {
        return (
            required,
            "TODO: the required terms for now: keep those that say which action this is",
        );
    }
    (
        of(&|_| true),
        "TODO: every term for now: keep those that say which action this is",
    )
}

pub(super) fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

fn list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| quoted(s))
        .collect::<Vec<_>>()
        .join(", ")
}
