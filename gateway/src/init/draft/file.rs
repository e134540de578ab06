//! The draft file: its header, the warning of every write route left unheld, then each
//! block, every live one loaded back with the gateway's own policy loader first.

use std::fmt::Write as _;
use std::path::Path;

use super::block::{commented_block, live_block, one_line, quoted};
use super::names::assign_names;
use super::overlaps::settle_overlaps;
use super::{Draft, OPTIONAL_ARGUMENT_NOTE, OPTIONAL_NOTE, Outcome, Source, Target};

/// What a file that drafts nothing says, as `nothing_to_approve` (so that it loads).
const NOTHING_TO_APPROVE: &str =
    "poppy-gateway init found no write operation, or no tool but read-only ones";

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

#[allow(clippy::unwrap_used)]
#[cfg(test)]
mod tests {
    use super::*;

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
