//! What the expressions of a policy may read: computed terms (`compute = "…"`) and the
//! condition of `needs_approval_when`, checked against the policy's terms.

use std::ops::Range;

use toml::Spanned;

use crate::policy::{Condition, ExpressionError, TermSource, is_operand};

/// What is wrong with the computed terms: an expression that names no term or an optional
/// one (it would have no value), or computed terms that need each other (a cycle, which could
/// never be evaluated).
pub(super) fn compute_problems(
    terms: &[(String, TermSource)],
    optional: &[String],
) -> Vec<(String, String)> {
    let computed = |name: &str| {
        terms.iter().find_map(|(n, s)| match s {
            TermSource::Compute(expression) if n == name => Some(expression),
            _ => None,
        })
    };
    let mut problems = Vec::new();
    for (name, source) in terms {
        let TermSource::Compute(expression) = source else {
            continue;
        };
        for operand in expression.terms() {
            if !terms.iter().any(|(n, _)| n == operand) {
                problems.push((
                    name.clone(),
                    format!("compute `{expression}` names `{operand}`, which is not a term"),
                ));
            }
            if optional.iter().any(|o| o == operand) {
                problems.push((
                    name.clone(),
                    format!("compute `{expression}` reads `{operand}`, which is optional: a request without it would have no value"),
                ));
            }
        }
        // Depth-first from this term: reaching it again is a cycle.
        let mut stack: Vec<(&str, Vec<&str>)> = vec![(name.as_str(), vec![name.as_str()])];
        let mut seen = std::collections::BTreeSet::new();
        while let Some((current, path)) = stack.pop() {
            let Some(expression) = computed(current) else {
                continue;
            };
            for operand in expression.terms() {
                if operand == name {
                    let mut cycle = path.clone();
                    cycle.push(operand);
                    problems.push((
                        name.clone(),
                        format!(
                            "computed terms need each other ({}): none could be computed",
                            cycle.join(" → ")
                        ),
                    ));
                    stack.clear();
                    break;
                }
                if seen.insert(operand) {
                    let mut next = path.clone();
                    next.push(operand);
                    stack.push((operand, next));
                }
            }
        }
    }
    problems
}

/// `needs_approval_when`, parsed and checked against the terms: every term it compares is one
/// of the policy's, and a `value` term it reads is a decimal. A term of the request, a
/// looked-up or an optional one is read per request: without a decimal value, the condition
/// has none, and the request is held.
pub(super) fn compile_condition(
    text: &Spanned<String>,
    source: &str,
    terms: &[(String, TermSource)],
) -> Result<Condition, (Range<usize>, String)> {
    let span = text.span();
    let text = text.get_ref();
    let condition = Condition::parse(text).map_err(|e| {
        let at = match &e {
            ExpressionError::Unexpected { at, .. } => within(source, &span, text, *at),
            _ => span.clone(),
        };
        (at, format!("needs_approval_when `{text}`: {e}"))
    })?;
    let mut problems = Vec::new();
    for operand in condition.terms() {
        match terms.iter().find(|(n, _)| n == operand) {
            None => problems.push(format!("names `{operand}`, which is not a term")),
            Some((_, TermSource::Value(value))) if !is_operand(value) => {
                problems.push(format!(
                    "compares `{operand}`, whose value {} is not a decimal number (a decimal string like \"50.00\", or a number without exponent)",
                    value
                ))
            }
            Some(_) => {}
        }
    }
    if problems.is_empty() {
        Ok(condition)
    } else {
        let problem = format!("needs_approval_when `{text}` {}", problems.join("; "));
        Err((span, problem))
    }
}

/// Where byte `at` of the condition is in the file, so that `check` points at it: inside
/// the quotes when the value is written as it reads (no escapes), else at the whole value.
fn within(source: &str, span: &Range<usize>, text: &str, at: usize) -> Range<usize> {
    let quoted = matches!(source.as_bytes().get(span.start), Some(b'"' | b'\''));
    let inside = span.start + 1..span.start + 1 + text.len();
    let plain = quoted && inside.end < span.end && source.get(inside) == Some(text);
    if plain && at < text.len() {
        let start = span.start + 1 + at;
        start..start + 1
    } else {
        span.clone()
    }
}
