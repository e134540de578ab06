//! Config errors that name the file, line and column.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in a config or policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the problem has no place in the file (e.g. it can't be read).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl ConfigError {
    pub fn at(
        file: &Path,
        source: &str,
        span: Option<Range<usize>>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = span.map(|s| line_column(source, s.start)).unwrap_or((0, 0));
        ConfigError {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }

    pub(crate) fn whole_file(file: &Path, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line: 0,
            column: 0,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found, so `check` can show them all at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> Self {
        ConfigErrors(vec![error])
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, column)
}

/// A TOML syntax or shape error (unknown key, wrong type) as a [`ConfigError`].
/// Where a config value is: the error for a message at its span.
pub(crate) type At<'a> = &'a dyn Fn(Range<usize>, String) -> ConfigError;

pub(crate) fn from_toml(file: &Path, source: &str, error: &toml::de::Error) -> ConfigError {
    let message = error.message().trim();
    // serde's type errors ("invalid type: integer `8080`, expected a string") name no key:
    // the key whose value the error points at is put first.
    let message = match error.span().and_then(|span| key_at(source, span)) {
        Some(key) if !message.contains(&format!("`{key}`")) => format!("{key}: {message}"),
        _ => message.to_owned(),
    };
    ConfigError::at(file, source, error.span(), message)
}

/// The dotted key (`server.listen`, `operation[2].terms.x.body`) of the innermost value whose
/// span holds `span`, or `None` when the text does not parse or no value holds it.
fn key_at(source: &str, span: std::ops::Range<usize>) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    /// Whether `value` (at `at`) or a value inside it holds `span`; `path` then names it.
    /// Children first: a table's own span may be only its `[header]`.
    fn find(
        value: &DeValue<'_>,
        at: std::ops::Range<usize>,
        span: &std::ops::Range<usize>,
        path: &mut Vec<String>,
    ) -> bool {
        let inside = match value {
            DeValue::Table(table) => table.iter().any(|(key, item)| {
                path.push(key.get_ref().to_string());
                let found = find(item.get_ref(), item.span(), span, path);
                if !found {
                    path.pop();
                }
                found
            }),
            DeValue::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let before = path.last().cloned();
                if let Some(last) = path.last_mut() {
                    last.push_str(&format!("[{i}]"));
                }
                let found = find(item.get_ref(), item.span(), span, path);
                if !found && let (Some(last), Some(before)) = (path.last_mut(), before) {
                    *last = before;
                }
                found
            }),
            _ => false,
        };
        inside || (at.start <= span.start && span.end <= at.end)
    }
    let parsed = DeTable::parse(source).ok()?;
    let mut path = Vec::new();
    let root = DeValue::Table(parsed.into_inner());
    (find(&root, 0..0, &span, &mut path) && !path.is_empty()).then(|| path.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based() {
        let src = "a = 1\nbb = 2\n";
        assert_eq!(line_column(src, 0), (1, 1));
        assert_eq!(line_column(src, 6), (2, 1));
        assert_eq!(line_column(src, 9), (2, 4));
        let e = ConfigError::at(Path::new("g.toml"), src, Some(6..8), "bad");
        assert_eq!(e.to_string(), "g.toml:2:1: bad");
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Server {
        listen: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Term {
        body: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Operation {
        terms: std::collections::BTreeMap<String, Term>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct File {
        server: Option<Server>,
        operation: Option<Vec<Operation>>,
    }

    fn error_of(src: &str) -> String {
        let error = toml::from_str::<File>(src).unwrap_err();
        from_toml(Path::new("g.toml"), src, &error).to_string()
    }

    #[test]
    fn type_errors_name_their_key() {
        assert_eq!(
            error_of("[server]\nlisten = 8080\n"),
            "g.toml:2:10: server.listen: invalid type: integer `8080`, expected a string"
        );
        let policies = "[[operation]]\n[operation.terms]\na = { body = \"$.a\" }\n\n[[operation]]\n[operation.terms]\nx = { body = 5 }\n";
        assert_eq!(
            error_of(policies),
            "g.toml:7:14: operation[1].terms.x.body: invalid type: integer `5`, expected a string"
        );
        // Errors that name their key already are left as they are.
        assert!(error_of("[server]\n").contains("missing field `listen`"));
    }
}
