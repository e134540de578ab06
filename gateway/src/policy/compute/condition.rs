//! Conditions: `needs_approval_when = "difference > 0"`, when a policy's action needs
//! approval, as a test over its terms (request, looked-up and computed ones).
//!
//! The grammar is the expression language's, with comparisons on top:
//! - `a < b`, `a <= b`, `a > b`, `a >= b`, `a == b`, `a != b` compare two expressions by
//!   their exact decimal values (`1.0 == 1.00`);
//! - `not t`, `t and u`, `t or u` (`not` binds tightest, then `and`, then `or`), and
//!   parentheses; `and`, `or` and `not` are words of conditions, never terms;
//! - every comparison is evaluated (no short cut): a term without a value, or an expression
//!   that has none (division by zero, overflow), makes the whole condition have no value,
//!   and the policy then holds the request as it would without a condition.
//!
//! Bounded as expressions are: [`MAX_LEN`] bytes, [`MAX_DEPTH`] levels (each `or`, `and`,
//! `not`, comparison and parenthesis is one more).

use std::collections::BTreeSet;
use std::fmt;

use super::parse::{Comparison, Parser, Token, parse_all};
use super::{EvalError, Node, SyntaxError, Terms};

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    text: String,
    root: Test,
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Compare(Comparison, Node, Node),
    Not(Box<Test>),
    And(Box<Test>, Box<Test>),
    Or(Box<Test>, Box<Test>),
}

impl Condition {
    pub fn parse(text: &str) -> Result<Condition, SyntaxError> {
        let root = parse_all(text, true, |parser| parser.any(0))?;
        Ok(Condition {
            text: text.to_owned(),
            root,
        })
    }

    /// The terms the condition reads, each once.
    pub fn terms(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.root.terms(&mut out);
        out
    }

    /// Whether the condition holds for `terms`; `Err`: it has no value for them.
    pub fn evaluate(&self, terms: &Terms) -> Result<bool, EvalError> {
        self.root.holds(terms)
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Test {
    fn terms<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            Test::Compare(_, a, b) => {
                a.terms(out);
                b.terms(out);
            }
            Test::Not(inner) => inner.terms(out),
            Test::And(a, b) | Test::Or(a, b) => {
                a.terms(out);
                b.terms(out);
            }
        }
    }

    /// Every part is evaluated: one without a value leaves the whole without one.
    fn holds(&self, terms: &Terms) -> Result<bool, EvalError> {
        match self {
            Test::Compare(comparison, a, b) => {
                let (a, b) = (a.evaluate(terms)?, b.evaluate(terms)?);
                Ok(comparison.holds(a, b))
            }
            Test::Not(inner) => Ok(!inner.holds(terms)?),
            Test::And(a, b) => {
                let (a, b) = (a.holds(terms)?, b.holds(terms)?);
                Ok(a && b)
            }
            Test::Or(a, b) => {
                let (a, b) = (a.holds(terms)?, b.holds(terms)?);
                Ok(a || b)
            }
        }
    }
}

impl Parser {
    fn word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Name(name)) if name == word)
    }

    /// any := all ('or' all)*
    fn any(&mut self, depth: usize) -> Result<Test, SyntaxError> {
        let mut depth = Self::deeper(depth)?;
        let mut test = self.all(depth)?;
        while self.word("or") {
            self.next += 1;
            depth = Self::deeper(depth)?;
            let right = self.all(depth)?;
            test = Test::Or(Box::new(test), Box::new(right));
        }
        Ok(test)
    }

    /// all := negation ('and' negation)*
    fn all(&mut self, depth: usize) -> Result<Test, SyntaxError> {
        let mut depth = Self::deeper(depth)?;
        let mut test = self.negation(depth)?;
        while self.word("and") {
            self.next += 1;
            depth = Self::deeper(depth)?;
            let right = self.negation(depth)?;
            test = Test::And(Box::new(test), Box::new(right));
        }
        Ok(test)
    }

    /// negation := 'not' negation | '(' any ')' | comparison
    fn negation(&mut self, depth: usize) -> Result<Test, SyntaxError> {
        let depth = Self::deeper(depth)?;
        if self.word("not") {
            self.next += 1;
            return Ok(Test::Not(Box::new(self.negation(depth)?)));
        }
        if self.peek() == Some(&Token::Open) {
            // `(a > b) and …` groups a condition, `(a - b) > 0` an expression: tried as a
            // group first, then (from the same token) as a comparison.
            let mark = self.next;
            self.next += 1;
            let grouped = self.any(depth).and_then(|test| self.close().map(|()| test));
            let continues_an_expression = matches!(
                self.peek(),
                Some(Token::Compare(_) | Token::Plus | Token::Minus | Token::Star | Token::Slash)
            );
            match grouped {
                Ok(test) if !continues_an_expression => return Ok(test),
                _ => self.next = mark,
            }
        }
        self.comparison(depth)
    }

    /// comparison := sum ('<' | '<=' | '>' | '>=' | '==' | '!=') sum
    fn comparison(&mut self, depth: usize) -> Result<Test, SyntaxError> {
        let depth = Self::deeper(depth)?;
        let left = self.sum(depth)?;
        let comparison = match self.take("a comparison (<, <=, >, >=, == or !=)")? {
            (Token::Compare(comparison), _) => comparison,
            (other, at) => {
                return Err(SyntaxError::Unexpected {
                    found: other.to_string(),
                    at,
                });
            }
        };
        let right = self.sum(depth)?;
        Ok(Test::Compare(comparison, left, right))
    }
}

#[cfg(test)]
#[path = "condition_tests.rs"]
mod tests;
