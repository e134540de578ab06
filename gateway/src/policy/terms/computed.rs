//! Computed terms: evaluated once every other term (lookups included) is known, in the
//! order their operands allow.

use super::super::compute::{EvalError, Expression};
use super::{TermSource, Terms};

/// A computed term that has no value, and whether the operand at fault came from a lookup
/// (the upstream's answer: a 502, like a failed lookup) or from the request (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("computed term `{term}`: {error}")]
pub(crate) struct ComputeFailure {
    pub term: String,
    pub error: EvalError,
    pub from_lookup: bool,
}

impl ComputeFailure {
    /// The term to name in the refusal: the operand at fault, or the computed term.
    pub(crate) fn named_term(&self) -> &str {
        match &self.error {
            EvalError::NotANumber { term } | EvalError::Missing { term } => term,
            EvalError::DivisionByZero | EvalError::Overflow => &self.term,
        }
    }
}

/// Evaluate every computed term of `policy_terms` into `terms`, each once the terms it reads
/// are known (`check` refused cycles and names of no term).
pub(crate) fn compute_terms(
    policy_terms: &[(String, TermSource)],
    terms: &mut Terms,
) -> Result<(), ComputeFailure> {
    let mut pending: Vec<(&String, &Expression)> = policy_terms
        .iter()
        .filter_map(|(name, source)| match source {
            TermSource::Compute(expression) => Some((name, expression)),
            _ => None,
        })
        .collect();
    while !pending.is_empty() {
        let ready = pending.iter().position(|(_, expression)| {
            expression
                .terms()
                .iter()
                .all(|t| !pending.iter().any(|(name, _)| name.as_str() == *t))
        });
        // A cycle (which `check` refuses) leaves nothing ready: evaluate one anyway, and its
        // operand is reported missing.
        let (name, expression) = pending.remove(ready.unwrap_or(0));
        let value = expression.evaluate(terms).map_err(|error| {
            let from_lookup = match &error {
                EvalError::NotANumber { term } | EvalError::Missing { term } => {
                    reads_lookup(policy_terms, term, 0)
                }
                EvalError::DivisionByZero | EvalError::Overflow => {
                    reads_lookup(policy_terms, name, 0)
                }
            };
            ComputeFailure {
                term: name.clone(),
                error,
                from_lookup,
            }
        })?;
        terms.insert(name.clone(), value);
    }
    Ok(())
}

/// Whether term `name` comes from a lookup, itself or through the terms it computes from.
fn reads_lookup(policy_terms: &[(String, TermSource)], name: &str, depth: usize) -> bool {
    match policy_terms.iter().find(|(n, _)| n == name).map(|(_, s)| s) {
        Some(TermSource::Lookup { .. }) => true,
        Some(TermSource::Compute(expression)) if depth < policy_terms.len() => expression
            .terms()
            .iter()
            .any(|t| reads_lookup(policy_terms, t, depth + 1)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn computed_terms_are_evaluated_in_order_and_failures_say_where_from() {
        let values = |pairs: &[(&str, Value)]| -> Terms {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect()
        };
        let compute = |text: &str| TermSource::Compute(Expression::parse(text).unwrap());
        let lookup = || TermSource::Lookup {
            lookup: "order".into(),
            path: "$.price".into(),
        };
        let policy = vec![
            ("a_total".to_owned(), compute("difference * qty")),
            ("difference".to_owned(), compute("new_price - old_price")),
            ("new_price".to_owned(), TermSource::Body("$.price".into())),
            ("old_price".to_owned(), lookup()),
            ("qty".to_owned(), TermSource::Body("$.qty".into())),
        ];
        let mut got = values(&[
            ("new_price", json!("190.00")),
            ("old_price", json!("120.00")),
            ("qty", json!(2)),
        ]);
        compute_terms(&policy, &mut got).unwrap();
        assert_eq!(got["difference"], "70.00");
        assert_eq!(got["a_total"], "140.00");

        let mut bad = values(&[
            ("new_price", json!("190.00")),
            ("old_price", json!("n/a")),
            ("qty", json!(2)),
        ]);
        let failure = compute_terms(&policy, &mut bad).unwrap_err();
        assert_eq!(failure.term, "difference");
        assert_eq!(failure.named_term(), "old_price");
        assert!(failure.from_lookup);

        let mut bad = values(&[
            ("new_price", json!("free")),
            ("old_price", json!("1")),
            ("qty", json!(2)),
        ]);
        let failure = compute_terms(&policy, &mut bad).unwrap_err();
        assert_eq!(failure.named_term(), "new_price");
        assert!(!failure.from_lookup);

        let ratio = vec![
            ("q".to_owned(), compute("a / b")),
            ("a".to_owned(), TermSource::Body("$.a".into())),
            ("b".to_owned(), TermSource::Body("$.b".into())),
        ];
        let mut zero = values(&[("a", json!(1)), ("b", json!("0"))]);
        let failure = compute_terms(&ratio, &mut zero).unwrap_err();
        assert_eq!(failure.error, EvalError::DivisionByZero);
        assert_eq!(failure.named_term(), "q");
        assert!(!failure.from_lookup);
        // Through a computed term that reads a lookup: the upstream's answer is at fault.
        assert!(reads_lookup(&policy, "a_total", 0));
    }
}
