//! Strict JSON: a body every common parser reads as the same value, or a refusal naming the
//! field that two parsers could read differently.
//!
//! Refused, beyond what RFC 8259 already forbids:
//! - a byte order mark, and text that is not UTF-8 (parsers strip, replace or reject them);
//! - a member name twice in one object (first-wins parsers act on the other value), or two
//!   names equal when case-folded (`amount`, `AMOUNT`, `amount` with `ſ`/`K` folding: Go's
//!   decoder matches struct fields case-insensitively);
//! - `\u0000` and lone surrogates in strings (C-based servers cut at NUL; parsers disagree on
//!   unpaired surrogates);
//! - a number not written as it reads (`10.50`, `1e2`, `-0`, `1.0e1`): the summary shows the
//!   number's value, so its text must be that value's one spelling, and an integer beyond
//!   ±(2^53 − 1), which JavaScript and every double-based parser round. Send such values as
//!   strings.
//! - nesting deeper than [`MAX_DEPTH`].
//!
//! Here the rules and their refusals, and [`check_value`] for a value already parsed; the
//! parser of body bytes is `parser`.

mod parser;

use serde_json::{Number, Value};

use super::Refusal;
use crate::protocol::json::{PathPart, json_path};

/// Deeper bodies are refused (recursive parsers differ in their limits).
pub(crate) const MAX_DEPTH: usize = 64;

/// The largest integer every double-based parser reads exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// What a string value reads as when [`parse_strict_eliding`] leaves it out. No body can hold
/// it: a strict body never has NUL in a string.
pub(crate) const ELIDED: &str = "\u{0}elided";

/// Parse a request body strictly.
pub(crate) fn parse_strict(bytes: &[u8]) -> Result<Value, Refusal> {
    parser::parse(bytes, None)
}

/// [`parse_strict`], but a string value longer than `over` bytes is checked by every rule and
/// not copied: it reads as [`ELIDED`]. Member names are always kept. For paths that select by
/// structure alone, the same nodes are selected as in the full reading.
pub(crate) fn parse_strict_eliding(bytes: &[u8], over: usize) -> Result<Value, Refusal> {
    parser::parse(bytes, Some(over))
}

/// Whether `value` is, or holds, a string [`parse_strict_eliding`] left out.
pub(crate) fn has_elided(value: &Value) -> bool {
    match value {
        Value::String(s) => s == ELIDED,
        Value::Array(items) => items.iter().any(has_elided),
        Value::Object(map) => map.values().any(has_elided),
        _ => false,
    }
}

/// The same rules for a value that was already parsed (MCP tool arguments, whose member names
/// the JSON-RPC reader checked for duplicates): case-folded twins and integer ranges.
pub(crate) fn check_value(value: &Value) -> Result<(), Refusal> {
    check_value_at(value, &mut vec![], 0)
}

fn check_value_at(value: &Value, path: &mut Vec<PathPart>, depth: usize) -> Result<(), Refusal> {
    if depth > MAX_DEPTH {
        return Err(too_deep(path));
    }
    match value {
        Value::Object(map) => {
            let mut folded = std::collections::HashMap::new();
            for (name, member) in map {
                path.push(PathPart::Name(name.clone()));
                if name.contains('\0') {
                    return Err(nul_in_string(path));
                }
                if let Some(other) = folded.insert(fold_case(name), name) {
                    return Err(case_twin(path, other));
                }
                check_value_at(member, path, depth + 1)?;
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(PathPart::Index(i));
                check_value_at(item, path, depth + 1)?;
                path.pop();
            }
        }
        Value::Number(number) if !is_safe_integer_or_float(number) => {
            return Err(unsafe_number(path, &number.to_string()));
        }
        // As the strict body reader: a value read (a tool's arguments) is held to the rules
        // a body is.
        Value::String(text) if text.contains('\0') => return Err(nul_in_string(path)),
        _ => {}
    }
    Ok(())
}

fn nul_in_string(path: &[PathPart]) -> Refusal {
    field(
        Refusal::body("a string has \\u0000, where some servers cut it: leave it out"),
        path,
    )
}

/// Case folding as Go's `strings.EqualFold` sees it, near enough: `ſ` is `s`, `K` (Kelvin) is
/// `k`.
pub(crate) fn fold_case(name: &str) -> String {
    // ASCII folds to its lowercase: the per-character Unicode mapping is for the rest.
    if name.is_ascii() {
        return name.to_ascii_lowercase();
    }
    name.chars()
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect()
}

fn field(refusal: Refusal, path: &[PathPart]) -> Refusal {
    refusal.naming("field", json_path(path))
}

fn too_deep(path: &[PathPart]) -> Refusal {
    field(
        Refusal::body(format!(
            "the JSON body nests deeper than {MAX_DEPTH} levels"
        )),
        path,
    )
}

fn case_twin(path: &[PathPart], other: &str) -> Refusal {
    let at = json_path(path);
    field(
        Refusal::body(format!(
            "`{at}` and `{other}` differ only in letter case: some parsers read them as one field, send one"
        )),
        path,
    )
}

fn unsafe_number(path: &[PathPart], text: &str) -> Refusal {
    let at = json_path(path);
    field(
        Refusal::body(format!(
            "`{at}` is the number {text}, which is beyond ±(2^53 − 1) or not written as it reads: parsers round or respell it differently. Write it in its shortest form (10.5, not 10.50; 100, not 1e2), or send it as a string"
        )),
        path,
    )
}

fn is_safe_integer_or_float(number: &Number) -> bool {
    if let Some(n) = number.as_u64() {
        n <= MAX_SAFE_INTEGER
    } else if let Some(n) = number.as_i64() {
        n.unsigned_abs() <= MAX_SAFE_INTEGER
    } else {
        number.as_f64().is_some_and(f64::is_finite)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ascii_folds_as_the_unicode_mapping_does() {
        let all: String = (0u8..128).map(char::from).collect();
        let unicode: String = all
            .chars()
            .flat_map(char::to_uppercase)
            .flat_map(char::to_lowercase)
            .collect();
        assert_eq!(fold_case(&all), unicode);
        assert_eq!(fold_case("\u{212A}ey"), fold_case("KEY"));
        assert_eq!(fold_case("ſku"), "sku");
    }

    #[test]
    fn parsed_values_are_checked_the_same_way() {
        assert!(check_value(&json!({"a": {"b": 1, "c": [1.5, "x"]}})).is_ok());
        assert!(check_value(&json!({"a": 1, "A": 2})).is_err());
        assert!(check_value(&json!({"a": [9_007_199_254_740_993_u64]})).is_err());
        // As in a body: NUL in a value or a name (found by conversations::tests, where a tool
        // call took what the same body was refused for).
        assert!(check_value(&json!({"a": "x\u{0}y"})).is_err());
        assert!(check_value(&json!({"a\u{0}": 1})).is_err());
    }
}
