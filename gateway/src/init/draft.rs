//! A drafted policy, rendered as the TOML of a policy file: one `[[operation]]` or `[[tool]]`
//! per action, or the same commented out with the reason it could not be drafted.
//!
//! Every draft rendered live is parsed back with the gateway's own policy loader first, and
//! two drafted routes that can match one request are settled as `check` wants (`overrides` by
//! the more specific, or the later commented out), so a draft file always passes `check`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use crate::policy::PathTemplate;

/// Where a term's value comes from, as a policy writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Path(String),
    Body(String),
    Form(String),
    Query(String),
    Header(String),
    Argument(String),
    /// A constant: what an action without any other term does, so the User still reads it.
    Value(String),
}

impl Source {
    fn key(&self) -> (&'static str, &str) {
        match self {
            Source::Path(v) => ("path", v),
            Source::Body(v) => ("body", v),
            Source::Form(v) => ("form", v),
            Source::Query(v) => ("query", v),
            Source::Header(v) => ("header", v),
            Source::Argument(v) => ("argument", v),
            Source::Value(v) => ("value", v),
        }
    }
}

/// One term of a draft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Term {
    pub(crate) name: String,
    pub(crate) source: Source,
    /// Optional in the description: an `optional = true` term (see [`OPTIONAL_NOTE`]).
    pub(crate) optional: bool,
}

/// What the draft is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Operation { method: String, path: String },
    Tool { tool: String },
}

/// A drafted policy, before rendering.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    /// The operationId or tool name the name and prefix come from (may be empty).
    pub(crate) key: String,
    /// What the action does, in the description's words, for the summary.
    pub(crate) title: String,
    pub(crate) target: Target,
    pub(crate) terms: Vec<Term>,
    /// Term names; empty means "the path terms, else the required ones, else all".
    pub(crate) same_action: Vec<String>,
    /// Comment lines inside the table (fields left out and why, choices made).
    pub(crate) notes: Vec<String>,
    /// Requests the live policy refuses though the description accepts them (a body the
    /// gateway can't read, a field no term can name): the route is held all the same.
    pub(crate) refuses: Vec<String>,
    /// Set when the action can't be drafted: the block is commented out with this reason.
    pub(crate) unexpressible: Option<String>,
    /// Set by [`render`] on a block commented out as the same route as another live one,
    /// which holds its requests: that one's name.
    pub(crate) held_by: Option<String>,
    /// Set by [`render`]: policies this one wins over.
    pub(crate) overrides: Vec<String>,
}

impl Draft {
    pub(crate) fn new(key: &str, title: &str, target: Target) -> Draft {
        Draft {
            key: key.to_owned(),
            title: title.to_owned(),
            target,
            terms: Vec::new(),
            same_action: Vec::new(),
            notes: Vec::new(),
            refuses: Vec::new(),
            unexpressible: None,
            held_by: None,
            overrides: Vec::new(),
        }
    }

    /// `POST /x` or `tool x`, for the report.
    pub(crate) fn describe(&self) -> String {
        match &self.target {
            Target::Operation { method, path } => format!("{method} {path}"),
            Target::Tool { tool } => format!("tool {tool}"),
        }
    }

    /// Adds a term named after `raw` (made a valid, unused term name).
    pub(crate) fn add_term(&mut self, raw: &str, source: Source, optional: bool) -> String {
        let taken: BTreeSet<String> = self.terms.iter().map(|t| t.name.clone()).collect();
        let name = unique(&term_name(raw), &taken, usize::MAX);
        self.terms.push(Term {
            name: name.clone(),
            source,
            optional,
        });
        name
    }

    /// The route is held, but requests of this kind are refused (a `400` naming what to fix)
    /// rather than passed through: said in the block and on stderr.
    pub(crate) fn hold_refusing(&mut self, what: String) {
        self.refuses.push(what);
    }

    /// Marks the draft as one the operator writes by hand (the first reason wins): only for
    /// what the policy language can't hold at all, since a commented-out route passes through.
    pub(crate) fn refuse(&mut self, reason: String) {
        if self.unexpressible.is_none() {
            self.unexpressible = Some(reason);
        }
    }
}

/// The explanation of optional fields, once at the top of every draft file of operations.
pub(crate) const OPTIONAL_NOTE: &str = "\
# Every field a request may send is a term: anything that can change the action must be in
# what the User approves. Fields the description does not require are `optional = true`: a
# request may leave them out, and is then approved without them (adding one later is new
# terms). Grouped form fields (`metadata[key]`, `items[0][price]`, `expand[]`) are one term
# each. The summary shows an optional term only when the request sets it (`{?term}…{/term}`,
# or `{...}`, which lists the terms the request sets that the sentence does not name).
# Move a field to `ignore` only if it cannot change what the action does (a free-text note).";

/// The same for tool drafts, whose optional arguments are `optional = true` terms.
pub(crate) const OPTIONAL_ARGUMENT_NOTE: &str = "\
# Every argument a call may send is a term. Those with a default or not required are
# `optional = true`: a call may leave them out (and the User approves the call without them),
# and the summary shows them only when sent ({?term}…{/term}). A call with an argument that is
# not a term is refused. Move an argument to `ignore` only if it cannot change what the tool does.";

/// What a file that drafts nothing says, as `nothing_to_approve` (so that it loads).
const NOTHING_TO_APPROVE: &str =
    "poppy-gateway init found no write operation, or no tool but read-only ones";

/// How one action came out, for the report on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) what: String,
    pub(crate) name: String,
    /// `None`: drafted; `Some(reason)`: commented out.
    pub(crate) commented: Option<String>,
    /// A commented-out route another live policy holds (the same route).
    pub(crate) held_by: Option<String>,
    /// Requests the live policy refuses though the description accepts them.
    pub(crate) refuses: Vec<String>,
    pub(crate) terms: usize,
}

impl Outcome {
    /// Commented out and held by no other policy: its requests pass through unapproved.
    pub(crate) fn unheld(&self) -> bool {
        self.commented.is_some() && self.held_by.is_none()
    }
}

/// The file's text and one outcome per draft, in order. `header` is the file's opening
/// comment (where the drafts come from).
pub(crate) fn render(header: &str, mut drafts: Vec<Draft>) -> (String, Vec<Outcome>) {
    let names = assign_names(&drafts);
    // Each draft alone first (`overrides` are checked across policies), then the overlaps
    // among those left live.
    for (draft, (name, prefix)) in drafts.iter_mut().zip(&names) {
        if draft.unexpressible.is_none() {
            give_a_term(draft);
            if let Err(problem) = loads(&live_block(draft, name, prefix)) {
                draft.refuse(format!("the draft does not load: {problem}"));
            }
        }
    }
    settle_overlaps(&mut drafts, &names);
    let outcomes: Vec<Outcome> = drafts
        .iter()
        .zip(&names)
        .map(|(draft, (name, _))| Outcome {
            what: draft.describe(),
            name: name.clone(),
            commented: draft.unexpressible.clone(),
            held_by: draft.held_by.clone(),
            refuses: draft.refuses.clone(),
            terms: draft.terms.len(),
        })
        .collect();
    let mut text = String::new();
    for line in header.lines() {
        let _ = writeln!(text, "# {}", one_line(line));
    }
    // How optional fields are drafted, where anything is.
    if drafts
        .iter()
        .all(|d| matches!(d.target, Target::Tool { .. }))
    {
        if !drafts.is_empty() {
            let _ = writeln!(text, "#\n{OPTIONAL_ARGUMENT_NOTE}");
        }
    } else {
        let _ = writeln!(text, "#\n{OPTIONAL_NOTE}");
    }
    text.push_str(&unheld_block(&outcomes));
    if outcomes.is_empty() {
        let _ = writeln!(
            text,
            "#\n# Nothing here needs approval: no write operation, or no tool but read-only ones.\n# The file holds no policy and says so: `check` accepts it (with a warning), and the\n# gateway holds none of these requests.\nnothing_to_approve = {}",
            quoted(NOTHING_TO_APPROVE)
        );
    }
    for (draft, (name, prefix)) in drafts.iter().zip(&names) {
        let block = match &draft.unexpressible {
            None => live_block(draft, name, prefix),
            Some(reason) => commented_block(draft, name, prefix, reason),
        };
        text.push('\n');
        text.push_str(&block);
    }
    (text, outcomes)
}

/// The warning at the top of a file that leaves write routes unheld: each of them, since a
/// commented-out policy holds nothing and its route passes straight through.
fn unheld_block(outcomes: &[Outcome]) -> String {
    let unheld: Vec<&Outcome> = outcomes.iter().filter(|o| o.unheld()).collect();
    if unheld.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "#\n# WARNING: {} write route(s) below are commented out, so they PASS THROUGH UNAPPROVED\n# until you write their policies (or block them in front of the gateway):\n",
        unheld.len()
    );
    for outcome in unheld {
        let reason = outcome.commented.as_deref().unwrap_or_default();
        let _ = writeln!(
            out,
            "#   {} ({}): {}",
            one_line(&outcome.what),
            outcome.name,
            one_line(reason)
        );
    }
    out
}

/// An action with no term to read (a write without parameters or body, a tool without
/// arguments) is still held: its one term is a constant naming the call, for the summary.
fn give_a_term(draft: &mut Draft) {
    if !draft.terms.is_empty() {
        return;
    }
    let call = match &draft.target {
        Target::Operation { method, path } => format!("{method} {path}"),
        Target::Tool { tool } => tool.clone(),
    };
    draft.add_term("action", Source::Value(call), false);
    draft.notes.push(
        "nothing in the request to approve but the call itself: its one term is a constant naming it (TODO: say what it does)"
            .to_owned(),
    );
}

/// Whether one block loads as a policy file, as `check` loads it.
fn loads(block: &str) -> Result<(), String> {
    crate::config::parse_policy_file(Path::new("draft"), block)
        .map(|_| ())
        .map_err(|errors| {
            errors
                .0
                .iter()
                .map(|e| e.to_string().replace('\n', " "))
                .collect::<Vec<_>>()
                .join("; ")
        })
}

/// A commented-out block: the reason, then whatever could be drafted, for the operator.
fn commented_block(draft: &Draft, name: &str, prefix: &str, reason: &str) -> String {
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
    let title = super::text::first_block(&draft.title);
    let title = if title.is_empty() {
        String::new()
    } else {
        format!(": {title}")
    };
    one_line(&format!("{}{key}{title}", draft.describe()))
}

/// Text fit for a TOML comment: one line, control characters shown as `?`.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The table of a draft, with its terms.
fn live_block(draft: &Draft, name: &str, prefix: &str) -> String {
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

/// "Title: label {term}, label {term}." naming every term (the loader wants each in the
/// summary): the required ones first, then the optional ones in sections.
fn summary(draft: &Draft) -> String {
    let title = plain(&draft.title);
    let title = if title.is_empty() {
        humanize(&draft.key)
    } else {
        title
    };
    let required: Vec<String> = draft
        .terms
        .iter()
        .filter(|t| !t.optional)
        .map(|t| format!("{} {{{}}}", t.name.replace('_', " "), t.name))
        .collect();
    sectioned(title.trim_end_matches('.'), &required, draft)
}

/// "Title: label {term}{?opt}, label {opt}{/opt}.": an optional term only in its own section,
/// shown when the request has it (the loader refuses one outside). Past [`MAX_SECTIONS`]
/// optional terms, `{...}` on a line of its own lists those the request sets instead, so a
/// User reads one sentence and the values set, not a template with two hundred blanks.
fn sectioned(title: &str, required: &[String], draft: &Draft) -> String {
    let mut text = if required.is_empty() {
        title.to_owned()
    } else {
        format!("{title}: {}", required.join(", "))
    };
    let optional: Vec<&Term> = draft.terms.iter().filter(|t| t.optional).collect();
    if optional.len() > MAX_SECTIONS {
        text.push_str(".\n\n{...}");
        return text;
    }
    let joint = if required.is_empty() { "; " } else { ", " };
    for term in optional {
        let label = term.name.replace('_', " ");
        let name = &term.name;
        let _ = write!(text, "{{?{name}}}{joint}{label} {{{name}}}{{/{name}}}");
    }
    text.push('.');
    text
}

/// A description's text made safe for a summary template: its first sentence as plain text
/// (no HTML, no Markdown: [`super::text`]), braces doubled, and no character that could
/// make Markdown again (the summary rules forbid links, images and HTML).
fn plain(text: &str) -> String {
    let line = super::text::first_block(text);
    // No heading, list or rule from a leading `#`, `-`, `+`, `=` or number; then the first
    // sentence, at most MAX_TITLE characters, cut at a word.
    let line = line.trim_start_matches(|c: char| !c.is_alphabetic());
    let sentence = line.split(". ").next().unwrap_or_default();
    let kept: String = sentence
        .chars()
        .filter(|c| !matches!(c, '[' | ']' | '<' | '>' | '`' | '!' | '*' | '|' | '\\'))
        .collect();
    let mut title = String::new();
    for word in kept.split(' ') {
        if title.chars().count() + word.chars().count() + 1 > MAX_TITLE {
            break;
        }
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(word);
    }
    title.replace('{', "{{").replace('}', "}}")
}

/// The most optional terms a summary writes in sections; more are listed by `{...}`.
const MAX_SECTIONS: usize = 6;

/// The longest title a summary starts with.
const MAX_TITLE: usize = 100;

/// `emails/send` → "Emails send"; `UpdateCall` → "Update call".
fn humanize(key: &str) -> String {
    let words = term_name(key).replace('_', " ");
    let mut chars = words.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Perform this action".to_owned(),
    }
}

fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

fn list(items: &[String]) -> String {
    items
        .iter()
        .map(|s| quoted(s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A term name (`A-Z a-z 0-9 _`) in snake case: `AccountSid` → `account_sid`,
/// `Customer[name]` → `customer_name`, `api-key` → `api_key`.
pub(crate) fn term_name(raw: &str) -> String {
    let chars: Vec<char> = raw.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_alphanumeric() {
            let boundary = c.is_ascii_uppercase()
                && i > 0
                && (chars[i - 1].is_ascii_lowercase()
                    || chars[i - 1].is_ascii_digit()
                    || (chars[i - 1].is_ascii_uppercase()
                        && chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase())));
            if boundary && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    let out = out.trim_end_matches('_').to_owned();
    if out.is_empty() {
        "value".to_owned()
    } else {
        out
    }
}

/// A policy name (`A-Z a-z 0-9 _ -`) from an operationId: other characters become `_`.
pub(crate) fn policy_name(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

/// `base`, or `base_2`, `base_3`… : the first not in `taken`, at most `max` characters.
fn unique(base: &str, taken: &BTreeSet<String>, max: usize) -> String {
    let base: String = base.chars().take(max).collect();
    if !taken.contains(&base) {
        return base;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = max.saturating_sub(suffix.len()).min(base.len());
            format!("{}{suffix}", &base[..keep])
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_default()
}

/// Unique names and id prefixes, in draft order.
fn assign_names(drafts: &[Draft]) -> Vec<(String, String)> {
    let mut names = BTreeSet::new();
    let mut prefixes = BTreeSet::new();
    drafts
        .iter()
        .map(|draft| {
            let mut base = policy_name(&draft.key);
            if base.is_empty() {
                base = match &draft.target {
                    Target::Operation { method, path } => {
                        policy_name(&format!("{}_{path}", method.to_lowercase()))
                    }
                    Target::Tool { tool } => policy_name(tool),
                };
            }
            if base.is_empty() {
                base = "action".to_owned();
            }
            let name = unique(&base, &names, usize::MAX);
            names.insert(name.clone());
            let alnum: String = name
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .map(|c| c.to_ascii_lowercase())
                .collect();
            let alnum = if alnum.is_empty() {
                "op".to_owned()
            } else {
                alnum
            };
            let prefix = unique_alnum(&alnum, &prefixes);
            prefixes.insert(prefix.clone());
            (name, prefix)
        })
        .collect()
}

/// An id prefix of 1 to 16 of `A-Z a-z 0-9`, not in `taken`.
fn unique_alnum(base: &str, taken: &BTreeSet<String>) -> String {
    let first: String = base.chars().take(16).collect();
    if !taken.contains(&first) {
        return first;
    }
    (2u32..)
        .map(|n| {
            let digits = n.to_string();
            let keep = 16usize.saturating_sub(digits.len()).min(base.len());
            format!("{}{digits}", &base[..keep])
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_default()
}

/// Two live drafts of one method whose paths can match the same request: the more specific
/// overrides the other; the same route twice, or two that neither covers, leave the later
/// commented out (`check` would refuse them, and which should win is the operator's call).
fn settle_overlaps(drafts: &mut [Draft], names: &[(String, String)]) {
    let templates: Vec<Option<(String, PathTemplate)>> = drafts
        .iter()
        .map(|d| match &d.target {
            Target::Operation { method, path } => PathTemplate::parse(path)
                .ok()
                .map(|t| (method.to_ascii_uppercase(), t)),
            Target::Tool { .. } => None,
        })
        .collect();
    for later in 0..drafts.len() {
        for earlier in 0..later {
            let (Some((m1, a)), Some((m2, b))) = (&templates[earlier], &templates[later]) else {
                continue;
            };
            if m1 != m2
                || drafts[earlier].unexpressible.is_some()
                || drafts[later].unexpressible.is_some()
                || !a.overlaps(b)
            {
                continue;
            }
            let (a_covers, b_covers) = (a.covers(b), b.covers(a));
            let other = |i: usize| names[i].0.clone();
            match (a_covers, b_covers) {
                (true, false) => drafts[later].overrides.push(other(earlier)),
                (false, true) => drafts[earlier].overrides.push(other(later)),
                (true, true) => {
                    drafts[later].refuse(format!(
                        "the same route as `{}` ({m1} {a}): one policy per request",
                        other(earlier)
                    ));
                    drafts[later].held_by = Some(other(earlier));
                }
                (false, false) => drafts[later].refuse(format!(
                    "can match the same requests as `{}` ({m1} {a}) and neither is more specific: choose which holds them",
                    other(earlier)
                )),
            }
        }
    }
    // A draft commented out after another came to override it is overridden by none.
    let commented: Vec<String> = drafts
        .iter()
        .zip(names)
        .filter(|(d, _)| d.unexpressible.is_some())
        .map(|(_, (name, _))| name.clone())
        .collect();
    for draft in drafts.iter_mut() {
        draft.overrides.retain(|name| !commented.contains(name));
        if draft
            .held_by
            .as_ref()
            .is_some_and(|h| commented.contains(h))
        {
            draft.held_by = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn term_names_are_snake_case_and_valid() {
        assert_eq!(term_name("AccountSid"), "account_sid");
        assert_eq!(term_name("Customer[name]"), "customer_name");
        assert_eq!(term_name("api-key"), "api_key");
        assert_eq!(term_name("HTTPMethod"), "http_method");
        assert_eq!(term_name("email_id"), "email_id");
        assert_eq!(term_name("Tags[]"), "tags");
        assert_eq!(term_name("¿?"), "value");
    }

    #[test]
    fn policy_names_and_prefixes_are_sanitised_and_unique() {
        assert_eq!(policy_name("emails/send"), "emails_send");
        assert_eq!(policy_name("UpdateCall"), "UpdateCall");
        assert_eq!(policy_name("/x.y/"), "x_y");
        let op = |key: &str| {
            Draft::new(
                key,
                "",
                Target::Operation {
                    method: "POST".into(),
                    path: "/x".into(),
                },
            )
        };
        let names = assign_names(&[
            op("emails/send"),
            op("emails.send"),
            op(""),
            op("averyveryverylongoperationname"),
            op("averyveryverylongoperationname2"),
        ]);
        assert_eq!(names[0], ("emails_send".into(), "emailssend".into()));
        assert_eq!(names[1], ("emails_send_2".into(), "emailssend2".into()));
        assert_eq!(names[2].0, "post_x");
        assert_eq!(names[3].1, "averyveryverylon");
        assert_eq!(names[4].1, "averyveryverylo2");
    }

    #[test]
    fn a_summary_names_every_term_and_no_markdown_link() {
        let mut draft = Draft::new(
            "UpdateCall",
            "Update a [call](https://x) {now}",
            Target::Operation {
                method: "POST".into(),
                path: "/Calls/{Sid}.json".into(),
            },
        );
        draft.add_term("Sid", Source::Path("Sid".into()), false);
        draft.add_term("Status", Source::Form("Status".into()), true);
        let text = summary(&draft);
        assert_eq!(
            text,
            "Update a call {{now}}: sid {sid}{?status}, status {status}{/status}."
        );
        let (file, outcomes) = render("test", vec![draft]);
        assert_eq!(outcomes[0].commented, None, "{file}");
        assert!(file.contains("status = { form = \"Status\", optional = true }\n"));
        assert!(file.contains("# TODO: rewrite in plain language\nsummary = "));
    }

    #[test]
    fn titles_are_one_plain_sentence_cut_at_a_word() {
        assert_eq!(
            plain("Delete a Call record. Once deleted, it is gone"),
            "Delete a Call record"
        );
        assert_eq!(plain("# 1. Send *now*\nmore"), "Send now");
        let long = "word ".repeat(40);
        assert!(plain(&long).len() <= MAX_TITLE && plain(&long).ends_with("word"));
    }

    #[test]
    fn overlapping_routes_get_overrides_or_are_commented_out() {
        let op = |key: &str, path: &str| {
            let mut d = Draft::new(
                key,
                "",
                Target::Operation {
                    method: "POST".into(),
                    path: path.into(),
                },
            );
            for capture in path.split('{').skip(1) {
                let name = capture.split('}').next().unwrap_or_default();
                d.add_term(name, Source::Path(name.into()), false);
            }
            if d.terms.is_empty() {
                d.add_term("x", Source::Body("$.x".into()), false);
            }
            d
        };
        let (file, outcomes) = render(
            "test",
            vec![
                op("general", "/domains/{id}"),
                op("claim", "/domains/claim"),
                op("again", "/domains/{other}"),
                op("cross_a", "/a/{x}/c"),
                op("cross_b", "/a/b/{y}"),
            ],
        );
        assert_eq!(outcomes[0].commented, None);
        assert_eq!(outcomes[1].commented, None, "{file}");
        assert!(file.contains("overrides = [\"general\"]"));
        assert!(
            outcomes[2]
                .commented
                .as_deref()
                .unwrap()
                .contains("same route")
        );
        assert_eq!(outcomes[3].commented, None);
        assert!(
            outcomes[4]
                .commented
                .as_deref()
                .unwrap()
                .contains("neither is more specific")
        );
        assert!(file.contains("# NOT DRAFTED: the same route as `general`"));
    }

    #[test]
    fn a_draft_the_loader_refuses_is_commented_out_with_its_error() {
        let mut draft = Draft::new(
            "bad",
            "",
            Target::Operation {
                method: "POST".into(),
                path: "/x/{a-b}".into(),
            },
        );
        draft.add_term("x", Source::Body("$.x".into()), false);
        let (file, outcomes) = render("test", vec![draft]);
        let reason = outcomes[0].commented.clone().unwrap();
        assert!(reason.contains("the draft does not load"), "{reason}");
        assert!(
            file.lines().all(|l| l.starts_with('#') || l.is_empty()),
            "{file}"
        );
    }
}
