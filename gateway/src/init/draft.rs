//! A drafted policy, rendered as the TOML of a policy file: one `[[operation]]` or `[[tool]]`
//! per action, or the same commented out with the reason it could not be drafted.
//!
//! Every draft rendered live is parsed back with the gateway's own policy loader first, and
//! two drafted routes that can match one request are settled as `check` wants (`overrides` by
//! the more specific, or the later commented out), so a draft file always passes `check`.
//!
//! The pieces: [`names`] (term, policy and prefix names), [`summary`] (the sentence the User
//! reads), [`block`] (one table, live or commented out), [`overlaps`] (routes that can match
//! one request) and [`file`] (the whole file, every live block loaded back first).

mod block;
mod file;
mod names;
mod overlaps;
mod summary;

use std::collections::BTreeSet;

pub(crate) use self::file::render;
pub(crate) use self::names::term_name;
use self::names::unique;

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
