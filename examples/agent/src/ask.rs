//! Showing the User the Company's name, the summary and the terms, and taking their answer
//! on this agent's own terminal (spec 5).

use std::io::{BufRead, Write};

use crate::check::Findings;
use crate::display;
use crate::operation::Operation;

/// Print what the User decides on, to stderr (stdout is for the API's answer).
pub fn show(company: &str, operation: &Operation, findings: &Findings) {
    let mut out = String::new();
    out.push_str("\n----------------------------------------------------------------\n");
    out.push_str(&format!(
        "{} asks for your approval. The action has NOT been performed.\n\n",
        display::value(company)
    ));
    for line in display::summary(&operation.summary).lines() {
        out.push_str(&format!("    {line}\n"));
    }
    if let Some(serde_json::Value::Object(terms)) = &operation.terms {
        out.push_str("\nTerms:\n");
        for (name, value) in terms {
            out.push_str(&format!(
                "    {:<22} {}\n",
                display::value(name),
                display::value(&display::json_text(value))
            ));
        }
    }
    out.push_str(&format!(
        "\nApproval accepted until {} (operation {}, revision {}).\n",
        display::value(&operation.expires_at),
        operation.operation_id,
        operation.revision
    ));
    for (name, value) in &findings.summary_misses {
        out.push_str(&format!(
            "! The summary does not mention the term {} = {}.\n",
            display::value(name),
            display::value(value)
        ));
    }
    for (name, asked, got) in &findings.differs {
        out.push_str(&format!(
            "! You asked for {} = {}, but the terms say {}.\n",
            display::value(name),
            display::value(asked),
            display::value(got)
        ));
    }
    for (name, value) in &findings.added {
        out.push_str(&format!(
            "  Note: {} = {} comes from the company, not from your request.\n",
            display::value(name),
            display::value(value)
        ));
    }
    for (name, value) in &findings.not_in_terms {
        out.push_str(&format!(
            "  Note: you sent {} = {}, which the terms don't mention.\n",
            display::value(name),
            display::value(value)
        ));
    }
    if findings.has_problems() {
        out.push_str("! The terms don't agree with the summary or with what you asked for. Read carefully.\n");
    }
    eprint!("{out}");
}

/// Ask `Approve? [y/N]` and read one line from stdin. Only `y` or `yes` approves; anything
/// else, an empty line or the end of input is No.
pub fn ask() -> bool {
    eprint!("Approve? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => {
            eprintln!();
            false
        }
        Ok(_) => {
            if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                // Typed answers echo themselves; piped ones are shown, so the log reads right.
                eprintln!("{}", display::value(line.trim()));
            }
            matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
        }
    }
}
