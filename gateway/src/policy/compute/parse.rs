//! Tokens and the recursive-descent parser of expressions (and of conditions, which compare
//! them: `condition.rs`).

use std::fmt;

use rust_decimal::Decimal;

use super::{Function, MAX_DEPTH, Node, Op, SyntaxError, decimal};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    Number(Decimal),
    Name(String),
    Plus,
    Minus,
    Star,
    Slash,
    Open,
    Close,
    Comma,
    /// A comparison, only in conditions (`condition.rs`).
    Compare(Comparison),
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
            Token::Compare(c) => f.write_str(c.as_str()),
        }
    }
}

pub(super) fn tokenize(text: &str) -> Result<Vec<(Token, usize)>, SyntaxError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let b = bytes[at];
        let start = at;
        if let Some((comparison, len)) = Comparison::at(&bytes[at..]) {
            tokens.push((Token::Compare(comparison), start));
            at += len;
            continue;
        }
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

/// All of `text` by `rule` (an expression's or a condition's), within [`super::MAX_LEN`]:
/// the one way both are read, so their bounds and errors are the same.
pub(super) fn parse_all<T>(
    text: &str,
    keywords: bool,
    rule: impl FnOnce(&mut Parser) -> Result<T, SyntaxError>,
) -> Result<T, SyntaxError> {
    if text.len() > super::MAX_LEN {
        return Err(SyntaxError::TooLong);
    }
    let tokens = tokenize(text)?;
    if tokens.is_empty() {
        return Err(SyntaxError::Empty);
    }
    let mut parser = Parser {
        tokens,
        next: 0,
        keywords,
    };
    let root = rule(&mut parser)?;
    if let Some((token, at)) = parser.tokens.get(parser.next) {
        return Err(SyntaxError::Unexpected {
            found: token.to_string(),
            at: *at,
        });
    }
    Ok(root)
}

/// Recursive descent; `depth` counts the levels, bounded by [`MAX_DEPTH`].
pub(super) struct Parser {
    pub(super) tokens: Vec<(Token, usize)>,
    pub(super) next: usize,
    /// Parsing a condition: `and`, `or` and `not` are its words, never terms.
    pub(super) keywords: bool,
}

impl Parser {
    pub(super) fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next).map(|(t, _)| t)
    }

    pub(super) fn take(&mut self, expected: &'static str) -> Result<(Token, usize), SyntaxError> {
        let token = self
            .tokens
            .get(self.next)
            .cloned()
            .ok_or(SyntaxError::UnexpectedEnd { expected })?;
        self.next += 1;
        Ok(token)
    }

    pub(super) fn deeper(depth: usize) -> Result<usize, SyntaxError> {
        if depth >= MAX_DEPTH {
            Err(SyntaxError::TooDeep)
        } else {
            Ok(depth + 1)
        }
    }

    /// sum := product (('+' | '-') product)*
    pub(super) fn sum(&mut self, depth: usize) -> Result<Node, SyntaxError> {
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
            Token::Name(name) if self.keywords && KEYWORDS.contains(&name.as_str()) => {
                Err(SyntaxError::Unexpected { found: name, at })
            }
            Token::Name(name) => Ok(Node::Term(name)),
            other => Err(SyntaxError::Unexpected {
                found: other.to_string(),
                at,
            }),
        }
    }

    pub(super) fn close(&mut self) -> Result<(), SyntaxError> {
        match self.take("`)`")? {
            (Token::Close, _) => Ok(()),
            (other, at) => Err(SyntaxError::Unexpected {
                found: other.to_string(),
                at,
            }),
        }
    }
}

/// The words of conditions, which no term of a condition may be named.
pub(super) const KEYWORDS: [&str; 3] = ["and", "or", "not"];

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Comparison {
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Equal,
    NotEqual,
}

impl Comparison {
    /// The operator `bytes` starts with, and its length.
    pub(super) fn at(bytes: &[u8]) -> Option<(Comparison, usize)> {
        match bytes {
            [b'<', b'=', ..] => Some((Comparison::LessOrEqual, 2)),
            [b'>', b'=', ..] => Some((Comparison::GreaterOrEqual, 2)),
            [b'=', b'=', ..] => Some((Comparison::Equal, 2)),
            [b'!', b'=', ..] => Some((Comparison::NotEqual, 2)),
            [b'<', ..] => Some((Comparison::Less, 1)),
            [b'>', ..] => Some((Comparison::Greater, 1)),
            _ => None,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
            Comparison::Equal => "==",
            Comparison::NotEqual => "!=",
        }
    }

    /// Compared by value: `Decimal`'s order ignores the scale.
    pub(super) fn holds(self, a: Decimal, b: Decimal) -> bool {
        match self {
            Comparison::Less => a < b,
            Comparison::LessOrEqual => a <= b,
            Comparison::Greater => a > b,
            Comparison::GreaterOrEqual => a >= b,
            Comparison::Equal => a == b,
            Comparison::NotEqual => a != b,
        }
    }
}
