//! `{name}` placeholders in text: the one tokenizer behind summary and lookup templates.

/// A run of literal text, or a placeholder naming a term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Piece {
    Text(String),
    Term(String),
    /// Summaries only: `{?name}`, the start of a section shown only when term `name` is
    /// in the terms.
    Open(String),
    /// Summaries only: `{/name}`, the end of that section.
    Close(String),
    /// Summaries only: `{...}`, every term the rest of the template does not write out.
    Rest,
}

/// Why a template does not tokenize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Syntax {
    /// A `{` at this byte with no `}` after it.
    Unclosed(usize),
    /// A `}` at this byte with no `{` before it.
    Unmatched(usize),
    /// A placeholder whose name is not `A-Z a-z 0-9 _`.
    BadName(String),
}

/// Split `text` into literal runs and placeholders. With `brace_escapes`, `{{` and `}}` are
/// literal braces (summaries); without, any brace is a placeholder's (URL paths have none).
pub(super) fn tokenize(text: &str, brace_escapes: bool) -> Result<Vec<Piece>, Syntax> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let doubled = brace_escapes && chars.peek().map(|p| p.1) == Some(c);
        match c {
            '{' | '}' if doubled => {
                chars.next();
                literal.push(c);
            }
            '}' => return Err(Syntax::Unmatched(at)),
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some((_, '}')) => break,
                        Some((_, c)) => name.push(c),
                        None => return Err(Syntax::Unclosed(at)),
                    }
                }
                let is_name = |n: &str| {
                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                };
                // Sections and `{...}` are summary syntax: lookup URLs have plain names only.
                let piece = match (brace_escapes, name.as_str()) {
                    (_, n) if is_name(n) => Piece::Term(name),
                    (true, "...") => Piece::Rest,
                    (true, n) if n.starts_with('?') && is_name(&n[1..]) => {
                        Piece::Open(n[1..].to_owned())
                    }
                    (true, n) if n.starts_with('/') && is_name(&n[1..]) => {
                        Piece::Close(n[1..].to_owned())
                    }
                    _ => return Err(Syntax::BadName(name)),
                };
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(piece);
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_only_where_asked() {
        assert_eq!(
            tokenize("a {{b}} {c}", true),
            Ok(vec![Piece::Text("a {b} ".into()), Piece::Term("c".into())])
        );
        assert_eq!(
            tokenize("a {{b}}", false),
            Err(Syntax::BadName("{b".into()))
        );
        assert_eq!(tokenize("x}", true), Err(Syntax::Unmatched(1)));
        assert_eq!(tokenize("x{y", false), Err(Syntax::Unclosed(1)));
    }
}
