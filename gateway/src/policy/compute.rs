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

use std::collections::BTreeSet;
use std::fmt;

use rust_decimal::{Decimal, RoundingStrategy};
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
        if text.len() > MAX_LEN {
            return Err(SyntaxError::TooLong);
        }
        let tokens = tokenize(text)?;
        if tokens.is_empty() {
            return Err(SyntaxError::Empty);
        }
        let mut parser = Parser { tokens, next: 0 };
        let root = parser.sum(0)?;
        if let Some((token, at)) = parser.tokens.get(parser.next) {
            return Err(SyntaxError::Unexpected {
                found: token.to_string(),
                at: *at,
            });
        }
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

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(Decimal),
    Name(String),
    Plus,
    Minus,
    Star,
    Slash,
    Open,
    Close,
    Comma,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Number(n) => write!(f, "{n}"),
            Token::Name(name) => f.write_str(name),
            Token::Plus => f.write_str("+"),
            Token::Minus => f.write_str("-"),
            Token::Star => f.write_str("*"),
            Token::Slash => f.write_str("/"),
            Token::Open => f.write_str("("),
            Token::Close => f.write_str(")"),
            Token::Comma => f.write_str(","),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<(Token, usize)>, SyntaxError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let b = bytes[at];
        let start = at;
        let single = match b {
            b' ' | b'\t' => {
                at += 1;
                continue;
            }
            b'+' => Some(Token::Plus),
            b'-' => Some(Token::Minus),
            b'*' => Some(Token::Star),
            b'/' => Some(Token::Slash),
            b'(' => Some(Token::Open),
            b')' => Some(Token::Close),
            b',' => Some(Token::Comma),
            _ => None,
        };
        if let Some(token) = single {
            tokens.push((token, start));
            at += 1;
            continue;
        }
        let word = |at: &mut usize| {
            while *at < bytes.len()
                && (bytes[*at].is_ascii_alphanumeric() || matches!(bytes[*at], b'_' | b'.'))
            {
                *at += 1;
            }
            &text[start..*at]
        };
        if b.is_ascii_digit() || b == b'.' {
            let number = word(&mut at);
            let value = decimal(number).ok_or_else(|| SyntaxError::BadNumber(number.to_owned()))?;
            tokens.push((Token::Number(value), start));
        } else if b.is_ascii_alphabetic() || b == b'_' {
            let name = word(&mut at);
            if name.contains('.') {
                return Err(SyntaxError::Unexpected {
                    found: name.to_owned(),
                    at: start,
                });
            }
            tokens.push((Token::Name(name.to_owned()), start));
        } else {
            let found = text[start..]
                .chars()
                .next()
                .map(String::from)
                .unwrap_or_default();
            return Err(SyntaxError::Unexpected { found, at: start });
        }
    }
    Ok(tokens)
}

/// Recursive descent; `depth` counts the levels, bounded by [`MAX_DEPTH`].
struct Parser {
    tokens: Vec<(Token, usize)>,
    next: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next).map(|(t, _)| t)
    }

    fn take(&mut self, expected: &'static str) -> Result<(Token, usize), SyntaxError> {
        let token = self
            .tokens
            .get(self.next)
            .cloned()
            .ok_or(SyntaxError::UnexpectedEnd { expected })?;
        self.next += 1;
        Ok(token)
    }

    fn deeper(depth: usize) -> Result<usize, SyntaxError> {
        if depth >= MAX_DEPTH {
            Err(SyntaxError::TooDeep)
        } else {
            Ok(depth + 1)
        }
    }

    /// sum := product (('+' | '-') product)*
    fn sum(&mut self, depth: usize) -> Result<Node, SyntaxError> {
        let mut depth = Self::deeper(depth)?;
        let mut node = self.product(depth)?;
        while let Some(op) = match self.peek() {
            Some(Token::Plus) => Some(Op::Add),
            Some(Token::Minus) => Some(Op::Sub),
            _ => None,
        } {
            self.next += 1;
            // Each operator is a level of the (left-leaning) tree.
            depth = Self::deeper(depth)?;
            let right = self.product(depth)?;
            node = Node::Binary(op, Box::new(node), Box::new(right));
        }
        Ok(node)
    }

    /// product := unary (('*' | '/') unary)*
    fn product(&mut self, depth: usize) -> Result<Node, SyntaxError> {
        let mut depth = Self::deeper(depth)?;
        let mut node = self.unary(depth)?;
        while let Some(op) = match self.peek() {
            Some(Token::Star) => Some(Op::Mul),
            Some(Token::Slash) => Some(Op::Div),
            _ => None,
        } {
            self.next += 1;
            depth = Self::deeper(depth)?;
            let right = self.unary(depth)?;
            node = Node::Binary(op, Box::new(node), Box::new(right));
        }
        Ok(node)
    }

    /// unary := '-' unary | atom
    fn unary(&mut self, depth: usize) -> Result<Node, SyntaxError> {
        let depth = Self::deeper(depth)?;
        if self.peek() == Some(&Token::Minus) {
            self.next += 1;
            return Ok(Node::Neg(Box::new(self.unary(depth)?)));
        }
        self.atom(depth)
    }

    /// atom := number | term | function '(' sum (',' sum)* ')' | '(' sum ')'
    fn atom(&mut self, depth: usize) -> Result<Node, SyntaxError> {
        let depth = Self::deeper(depth)?;
        let (token, at) = self.take("a number, a term or `(`")?;
        match token {
            Token::Number(value) => Ok(Node::Literal(value)),
            Token::Open => {
                let inner = self.sum(depth)?;
                self.close()?;
                Ok(inner)
            }
            Token::Name(name) if self.peek() == Some(&Token::Open) => {
                let function = match name.as_str() {
                    "abs" => Function::Abs,
                    "max" => Function::Max,
                    "min" => Function::Min,
                    _ => return Err(SyntaxError::UnknownFunction(name)),
                };
                self.next += 1;
                let mut args = vec![self.sum(depth)?];
                while self.peek() == Some(&Token::Comma) {
                    self.next += 1;
                    args.push(self.sum(depth)?);
                }
                self.close()?;
                if args.len() != function.arity() {
                    return Err(SyntaxError::Arity {
                        name: match function {
                            Function::Abs => "abs",
                            Function::Max => "max",
                            Function::Min => "min",
                        },
                        wanted: function.arity(),
                        got: args.len(),
                    });
                }
                Ok(Node::Call(function, args))
            }
            Token::Name(name) => Ok(Node::Term(name)),
            other => Err(SyntaxError::Unexpected {
                found: other.to_string(),
                at,
            }),
        }
    }

    fn close(&mut self) -> Result<(), SyntaxError> {
        match self.take("`)`")? {
            (Token::Close, _) => Ok(()),
            (other, at) => Err(SyntaxError::Unexpected {
                found: other.to_string(),
                at,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::terms;
    use serde_json::json;

    fn eval(text: &str, pairs: &[(&str, Value)]) -> Result<Value, EvalError> {
        Expression::parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .evaluate(&terms(pairs))
    }

    fn value(text: &str) -> String {
        match eval(text, &[]) {
            Ok(Value::String(s)) => s,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn the_demo_difference_keeps_the_scale() {
        let got = eval(
            "replacement_price - item_price",
            &[
                ("replacement_price", json!("190.00")),
                ("item_price", json!("120.00")),
            ],
        );
        assert_eq!(got, Ok(json!("70.00")));
        assert_eq!(
            eval("a - b", &[("a", json!("120.00")), ("b", json!(190))]),
            Ok(json!("-70.00"))
        );
        // JSON numbers as serde_json prints them.
        assert_eq!(eval("a + 0", &[("a", json!(2.5))]), Ok(json!("2.5")));
        assert_eq!(eval("a * 2", &[("a", json!(7))]), Ok(json!("14")));
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(value("1 + 2 * 3"), "7");
        assert_eq!(value("(1 + 2) * 3"), "9");
        assert_eq!(value("10 - 4 - 3"), "3");
        assert_eq!(value("-2 * -3"), "6");
        assert_eq!(value("- (1 - 3)"), "2");
        assert_eq!(value("2 - -2"), "4");
        assert_eq!(value("8 / 2 / 2"), "2.00");
    }

    #[test]
    fn scales() {
        assert_eq!(value("190.00 - 120"), "70.00");
        assert_eq!(value("1.5 * 2.00"), "3.000");
        assert_eq!(value("0.1 + 0.2"), "0.3");
        assert_eq!(value("abs(-3.50)"), "3.50");
        assert_eq!(value("max(0, -5.00)"), "0.00");
        assert_eq!(value("min(0, -5.00)"), "-5.00");
        assert_eq!(value("max(1.5, 1.50)"), "1.50");
        assert_eq!(value("-0.00"), "0.00");
        assert_eq!(value("0.00 - 0"), "0.00");
    }

    #[test]
    fn division_rounds_half_to_even_to_at_least_two_places() {
        assert_eq!(value("100.00 / 3"), "33.33");
        assert_eq!(value("200.00 / 3"), "66.67");
        assert_eq!(value("10 / 4"), "2.50");
        assert_eq!(value("1 / 8"), "0.12"); // 0.125: half to even
        assert_eq!(value("3 / 8"), "0.38"); // 0.375
        assert_eq!(value("-1 / 8"), "-0.12");
        assert_eq!(value("0.125 / 1"), "0.125");
        assert_eq!(value("10 / 2"), "5.00");
        assert_eq!(eval("1 / (2 - 2)", &[]), Err(EvalError::DivisionByZero));
        assert_eq!(
            eval("a / b", &[("a", json!("1")), ("b", json!("0.00"))]),
            Err(EvalError::DivisionByZero)
        );
    }

    #[test]
    fn results_that_do_not_fit_are_errors() {
        let big = "79228162514264337593543950335";
        assert_eq!(eval(&format!("{big} + 1"), &[]), Err(EvalError::Overflow));
        assert_eq!(eval(&format!("{big} * 2"), &[]), Err(EvalError::Overflow));
        let tiny = "0.00000000000001"; // 14 places: the product would have 28
        assert_eq!(
            value(&format!("{tiny} * {tiny}")),
            format!("0.{}1", "0".repeat(27))
        );
        let tinier = "0.000000000000001"; // 15: 30 places
        assert_eq!(
            eval(&format!("{tinier} * {tinier}"), &[]),
            Err(EvalError::Overflow)
        );
    }

    #[test]
    fn operands_are_plain_decimals() {
        for bad in [
            json!("1e3"),
            json!("+1"),
            json!("1_000"),
            json!("1,000.00"),
            json!(" 1"),
            json!("1."),
            json!(".5"),
            json!(""),
            json!("NaN"),
            json!("USD 5"),
            json!(true),
            json!(["1"]),
            json!({"amount": "1"}),
            json!(1e300),
        ] {
            assert_eq!(
                eval("a + 1", &[("a", bad.clone())]),
                Err(EvalError::NotANumber { term: "a".into() }),
                "{bad}"
            );
        }
        assert_eq!(
            eval("a + 1", &[]),
            Err(EvalError::Missing { term: "a".into() })
        );
        assert_eq!(
            eval("a + 1", &[("a", Value::Null)]),
            Err(EvalError::Missing { term: "a".into() })
        );
    }

    #[test]
    fn syntax_errors() {
        let err = |text: &str| Expression::parse(text).unwrap_err();
        assert_eq!(err(""), SyntaxError::Empty);
        assert_eq!(err("   "), SyntaxError::Empty);
        assert!(matches!(err("a +"), SyntaxError::UnexpectedEnd { .. }));
        assert!(matches!(err("(a"), SyntaxError::UnexpectedEnd { .. }));
        assert!(matches!(err("a b"), SyntaxError::Unexpected { at: 2, .. }));
        assert!(matches!(err("a)"), SyntaxError::Unexpected { at: 1, .. }));
        assert!(matches!(
            err("a % b"),
            SyntaxError::Unexpected { at: 2, .. }
        ));
        assert!(matches!(err("a == b"), SyntaxError::Unexpected { .. }));
        assert!(matches!(err("$.a"), SyntaxError::Unexpected { .. }));
        assert!(matches!(err("a.b"), SyntaxError::Unexpected { .. }));
        assert_eq!(err("1e3"), SyntaxError::BadNumber("1e3".into()));
        assert_eq!(err("1.2.3"), SyntaxError::BadNumber("1.2.3".into()));
        assert_eq!(err("sqrt(2)"), SyntaxError::UnknownFunction("sqrt".into()));
        assert_eq!(
            err("max(1)"),
            SyntaxError::Arity {
                name: "max",
                wanted: 2,
                got: 1
            }
        );
        assert!(matches!(err("abs(1, 2)"), SyntaxError::Arity { .. }));
        assert!(matches!(err("max()"), SyntaxError::Unexpected { .. }));
    }

    #[test]
    fn length_and_depth_are_bounded() {
        assert_eq!(
            Expression::parse(&"1+".repeat(129)).unwrap_err(),
            SyntaxError::TooLong
        );
        assert_eq!(
            Expression::parse(&format!("{}1{}", "(".repeat(30), ")".repeat(30))).unwrap_err(),
            SyntaxError::TooDeep
        );
        assert_eq!(
            Expression::parse(&"-".repeat(200)).unwrap_err(),
            SyntaxError::TooDeep
        );
        assert_eq!(
            Expression::parse(&format!("1{}", "+1".repeat(70))).unwrap_err(),
            SyntaxError::TooDeep
        );
        // What a summary needs is far inside the bounds.
        assert_eq!(
            value("max(0, (190.00 - 120.00) * 2 - abs(-5.00)) / 1"),
            "135.00"
        );
    }

    /// Cents as the decimal string a shop would send: `-7000` is `"-70.00"`.
    fn cents(n: i64) -> String {
        let sign = if n < 0 { "-" } else { "" };
        format!(
            "{sign}{}.{:02}",
            n.unsigned_abs() / 100,
            n.unsigned_abs() % 100
        )
    }

    proptest::proptest! {
        /// No text panics the parser, nor its value the evaluator; a value is a plain decimal.
        #[test]
        fn no_expression_panics(text in "[a-c0-9 .()+*/,-]{0,80}|(abs|max|min|[a-c])[(]{0,3}[-a-c0-9 .,()+*/]{0,40}", a in "-?[0-9]{1,30}(\\.[0-9]{1,30})?|x", b in -1_000_000i64..1_000_000) {
            if let Ok(expression) = Expression::parse(&text) {
                let values = terms(&[("a", json!(a)), ("b", json!(b)), ("c", json!("0.00"))]);
                if let Ok(Value::String(out)) = expression.evaluate(&values) {
                    proptest::prop_assert!(decimal(&out).is_some(), "{} = {}", text, out);
                }
            }
        }

        /// Differences, sums and products of amounts are exact: what integer cents give.
        #[test]
        fn amounts_are_exact(x in -10_000_000_000i64..10_000_000_000, y in -10_000_000_000i64..10_000_000_000, n in 0i64..1000) {
            let values = terms(&[("x", json!(cents(x))), ("y", json!(cents(y))), ("n", json!(n))]);
            let run = |text: &str| Expression::parse(text).unwrap().evaluate(&values).unwrap();
            proptest::prop_assert_eq!(run("x - y"), json!(cents(x - y)));
            proptest::prop_assert_eq!(run("x + y"), json!(cents(x + y)));
            proptest::prop_assert_eq!(run("x * n"), json!(cents(x * n)));
            proptest::prop_assert_eq!(run("max(x, y)"), json!(cents(x.max(y))));
            proptest::prop_assert_eq!(run("abs(x - y)"), json!(cents((x - y).abs())));
        }
    }

    #[test]
    fn lists_the_terms_it_reads() {
        let e = Expression::parse("max(b, a) - a * 2 + abs(c)").unwrap();
        assert_eq!(e.terms().into_iter().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(e.to_string(), "max(b, a) - a * 2 + abs(c)");
    }
}
