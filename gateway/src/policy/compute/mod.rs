//! Computed terms: `{ compute = "replacement_price - item_price" }`, a small expression
//! language over other terms, so that a summary can state the amount an action charges.
//!
//! Exact decimal arithmetic only (`rust_decimal`), never floats. The rules, which
//! policies/README.md repeats:
//! - operands are terms whose values are decimal strings (`"190.00"`, `"-3"`) or JSON numbers
//!   without an exponent (read as serde_json prints them: `190.0` is `"190.0"`), and literals
//!   written in the expression (`0`, `1.5`);
//! - `a + b`, `a - b`, `max(a, b)`, `min(a, b)` keep the larger scale of the two
//!   (`190.00 - 120 = 70.00`); `a * b` has the sum of their scales (`1.5 * 2.00 = 3.000`);
//!   `-a` and `abs(a)` keep `a`'s;
//! - `a / b` is rounded to the larger of 2 and both operands' scales, half to even
//!   (`100.00 / 3 = 33.33`, `10 / 4 = 2.50`, `0.125 / 1 = 0.125`);
//! - a result that does not fit exactly (over 28 decimal places, or beyond ±7.9e28) is an error,
//!   never a rounded value; so is a division by zero;
//! - the value is a decimal string, with no exponent, at its scale (`"70.00"`).
//!
//! Expressions are at most [`MAX_LEN`] bytes and [`MAX_DEPTH`] levels deep, so parsing and
//! evaluating (both recursive) are bounded.

mod condition;
mod parse;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;

use rust_decimal::{Decimal, RoundingStrategy};

pub use condition::Condition;
use parse::parse_all;
use serde_json::Value;

/// Term values by name (`policy::Terms`).
type Terms = std::collections::BTreeMap<String, Value>;

/// The longest expression, in bytes.
pub(crate) const MAX_LEN: usize = 256;
/// The deepest parse (each operator and unary minus is a level, each parenthesis or call four).
pub(crate) const MAX_DEPTH: usize = 64;
/// Rust_decimal's largest scale.
const MAX_SCALE: u32 = 28;
/// The fewest places a quotient has.
const DIVISION_MIN_SCALE: u32 = 2;

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expression {
    text: String,
    root: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Literal(Decimal),
    Term(String),
    Neg(Box<Node>),
    Binary(Op, Box<Node>, Box<Node>),
    Call(Function, Vec<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Function {
    Abs,
    Max,
    Min,
}

impl Function {
    fn arity(self) -> usize {
        match self {
            Function::Abs => 1,
            Function::Max | Function::Min => 2,
        }
    }
}

/// Why an expression does not parse (`check` reports it at the term).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error("an expression is at most {MAX_LEN} bytes")]
    TooLong,
    #[error("the expression nests more than {MAX_DEPTH} levels deep")]
    TooDeep,
    #[error("the expression is empty")]
    Empty,
    #[error("unexpected `{found}` at byte {at}")]
    Unexpected { found: String, at: usize },
    #[error("the expression ends where {expected} was expected")]
    UnexpectedEnd { expected: &'static str },
    #[error("`{0}` is not a number: write digits with at most one `.` (no exponent)")]
    BadNumber(String),
    #[error("`{0}` is not a function: use abs(x), max(a, b) or min(a, b)")]
    UnknownFunction(String),
    #[error("{name}() takes {wanted} argument(s), not {got}")]
    Arity {
        name: &'static str,
        wanted: usize,
        got: usize,
    },
}

/// Why a computed term has no value for this request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error(
        "term `{term}` is not a decimal number (a decimal string like \"190.00\", or a JSON number without exponent)"
    )]
    NotANumber { term: String },
    #[error("term `{term}` has no value")]
    Missing { term: String },
    #[error("division by zero")]
    DivisionByZero,
    #[error("the exact result does not fit a decimal of 28 places and 96 bits")]
    Overflow,
}

impl Expression {
    pub fn parse(text: &str) -> Result<Expression, SyntaxError> {
        let root = parse_all(text, false, |parser| parser.sum(0))?;
        Ok(Expression {
            text: text.to_owned(),
            root,
        })
    }

    /// The terms the expression reads, each once.
    pub fn terms(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.root.terms(&mut out);
        out
    }

    /// The value: a decimal string at the result's scale.
    pub fn evaluate(&self, terms: &Terms) -> Result<Value, EvalError> {
        let mut value = self.root.evaluate(terms)?;
        if value.is_zero() {
            value.set_sign_positive(true);
        }
        Ok(Value::String(value.to_string()))
    }
}

impl fmt::Display for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Node {
    fn terms<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            Node::Literal(_) => {}
            Node::Term(name) => {
                out.insert(name);
            }
            Node::Neg(inner) => inner.terms(out),
            Node::Binary(_, a, b) => {
                a.terms(out);
                b.terms(out);
            }
            Node::Call(_, args) => args.iter().for_each(|a| a.terms(out)),
        }
    }

    fn evaluate(&self, terms: &Terms) -> Result<Decimal, EvalError> {
        match self {
            Node::Literal(value) => Ok(*value),
            Node::Term(name) => operand(name, terms),
            Node::Neg(inner) => Ok(-inner.evaluate(terms)?),
            Node::Binary(op, a, b) => {
                let (a, b) = (a.evaluate(terms)?, b.evaluate(terms)?);
                let larger = a.scale().max(b.scale());
                match op {
                    Op::Add => exact(a.checked_add(b), larger),
                    Op::Sub => exact(a.checked_sub(b), larger),
                    Op::Mul => exact(a.checked_mul(b), a.scale() + b.scale()),
                    Op::Div => {
                        if b.is_zero() {
                            return Err(EvalError::DivisionByZero);
                        }
                        let scale = larger.max(DIVISION_MIN_SCALE);
                        let quotient = a.checked_div(b).ok_or(EvalError::Overflow)?;
                        let rounded = quotient
                            .round_dp_with_strategy(scale, RoundingStrategy::MidpointNearestEven);
                        exact(Some(rounded), scale)
                    }
                }
            }
            Node::Call(function, args) => {
                let values = args
                    .iter()
                    .map(|a| a.evaluate(terms))
                    .collect::<Result<Vec<_>, _>>()?;
                match (function, values.as_slice()) {
                    (Function::Abs, [a]) => Ok(a.abs()),
                    (Function::Max | Function::Min, [a, b]) => {
                        let scale = a.scale().max(b.scale());
                        let pick = if *function == Function::Max {
                            (*a).max(*b)
                        } else {
                            (*a).min(*b)
                        };
                        exact(Some(pick), scale)
                    }
                    // The parser checked every call's arity.
                    _ => Err(EvalError::Overflow),
                }
            }
        }
    }
}

/// `value` at exactly `scale` places, or `Overflow` if that would change it.
fn exact(value: Option<Decimal>, scale: u32) -> Result<Decimal, EvalError> {
    let value = value.ok_or(EvalError::Overflow)?;
    if scale > MAX_SCALE {
        return Err(EvalError::Overflow);
    }
    let mut scaled = value;
    scaled.rescale(scale);
    if scaled != value || scaled.scale() != scale {
        return Err(EvalError::Overflow);
    }
    Ok(scaled)
}

/// A term's value as an operand.
fn operand(name: &str, terms: &Terms) -> Result<Decimal, EvalError> {
    let not_a_number = || EvalError::NotANumber {
        term: name.to_owned(),
    };
    let text = match terms.get(name) {
        None | Some(Value::Null) => {
            return Err(EvalError::Missing {
                term: name.to_owned(),
            });
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => return Err(not_a_number()),
    };
    decimal(&text).ok_or_else(not_a_number)
}

/// A plain decimal: an optional `-`, digits, and an optional `.` with digits. No `+`, no
/// exponent, no separators: what the value means must not depend on a parser's leniency.
fn decimal(text: &str) -> Option<Decimal> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match digits.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (digits, None),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || fraction.is_some_and(|f| !all_digits(f)) {
        return None;
    }
    Decimal::from_str_exact(text).ok()
}

/// Whether `value` can be an operand: a decimal string or a JSON number without exponent
/// (`check` reads a `value` term a condition compares with this).
pub(crate) fn is_operand(value: &Value) -> bool {
    let terms = Terms::from([(String::new(), value.clone())]);
    operand("", &terms).is_ok()
}
