//! Terms from the upstream's own records: `[operation.lookup] url = "/catalog/{replacement_sku}"`
//! and terms `{ lookup = "$.price.amount" }`; or several, named:
//! `[operation.lookups.order] url = "/orders/{order_id}"` and `{ lookup = "order", at = "$.x" }`;
//! and quotes, `method = "POST"`: the request's own body sent to a preview endpoint.
//!
//! The pure half: filling the URL template from terms already extracted from the request, and
//! reading the lookup terms out of the upstream's JSON answer. The fetch itself is the HTTP
//! adapter's (`proxy::http_api`). Every failure is an error, never an empty value: a summary
//! with a hole in it could be approved for terms nobody saw.

use std::fmt;

use serde_json::Value;

use super::placeholders::{Piece, Syntax, tokenize};
use super::terms::{TermSource, Terms, query_json};
use crate::protocol::json;

/// One lookup of a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// `""` for the unnamed `[operation.lookup]`.
    pub name: String,
    /// A quote: `POST` the request's own body (with its `Content-Type`) instead of a `GET`.
    pub quote: bool,
    pub url: LookupTemplate,
}

impl Lookup {
    /// How the policy file names it, for messages and logs.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            "[operation.lookup]".to_owned()
        } else {
            format!("[operation.lookups.{}]", self.name)
        }
    }
}

/// A lookup URL template: a path (and optional query) on the upstream, with `{term}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupTemplate {
    text: String,
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupTemplateError {
    #[error(
        "a lookup url is a path on the upstream starting with '/' (the gateway sends it to [upstream] url)"
    )]
    NotAPath,
    #[error("a lookup url has no fragment (`#`) and no white space")]
    BadCharacter,
    #[error("unclosed `{{` at byte {0}")]
    Unclosed(usize),
    #[error("unmatched `}}` at byte {0}")]
    Unmatched(usize),
    #[error("`{{{0}}}`: a placeholder names a term with A-Z a-z 0-9 _")]
    BadName(String),
}

/// Why a lookup URL could not be filled from the request's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FillError {
    #[error("term `{0}` has no value to put in the lookup url")]
    Missing(String),
    #[error("term `{term}` cannot go in the lookup url: {why}")]
    Unusable { term: String, why: &'static str },
}

impl FillError {
    pub(crate) fn term(&self) -> &str {
        match self {
            FillError::Missing(term) | FillError::Unusable { term, .. } => term,
        }
    }
}

/// Why the upstream's answer to a lookup gave no terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AnswerError {
    #[error("the lookup answer is not JSON")]
    NotJson,
    /// A member twice: readers disagree on which value is the term, so none is taken.
    #[error("the lookup answer can be read two ways: {0}")]
    Ambiguous(String),
    #[error("term `{term}`: the lookup answer has no value at `{path}`")]
    Missing { term: String, path: String },
}

impl LookupTemplate {
    pub fn parse(text: &str) -> Result<LookupTemplate, LookupTemplateError> {
        // A path on the configured upstream only: never another host, never `//host`.
        if !text.starts_with('/') || text.starts_with("//") {
            return Err(LookupTemplateError::NotAPath);
        }
        if text.contains('#') || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(LookupTemplateError::BadCharacter);
        }
        let pieces = tokenize(text, false).map_err(|e| match e {
            Syntax::Unclosed(at) => LookupTemplateError::Unclosed(at),
            Syntax::Unmatched(at) => LookupTemplateError::Unmatched(at),
            Syntax::BadName(name) => LookupTemplateError::BadName(name),
        })?;
        Ok(LookupTemplate {
            text: text.to_owned(),
            pieces,
        })
    }

    /// The term names the template uses, in order, with repeats.
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Term(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The path and query to GET, with each value percent-encoded.
    ///
    /// Values that an upstream could resolve to another resource (empty, `.`, `..`, or with
    /// a slash or backslash, encoded or not) are refused rather than encoded: some servers
    /// decode before routing, and the lookup must read the record the policy names.
    pub(crate) fn fill(&self, terms: &Terms) -> Result<String, FillError> {
        let mut out = String::with_capacity(self.text.len() + 16);
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Term(name) => {
                    let value = terms
                        .get(name)
                        .ok_or_else(|| FillError::Missing(name.clone()))?;
                    let unusable = |why| FillError::Unusable {
                        term: name.clone(),
                        why,
                    };
                    let text = match value {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Null => return Err(FillError::Missing(name.clone())),
                        Value::Array(_) | Value::Object(_) => {
                            return Err(unusable("it is not a single string, number or boolean"));
                        }
                    };
                    if text.is_empty() || text == "." || text == ".." {
                        return Err(unusable("it is empty, `.` or `..`"));
                    }
                    if text.contains(['/', '\\']) {
                        return Err(unusable("it contains a slash or backslash"));
                    }
                    out.push_str(&percent_encode(&text));
                }
                // Summary syntax: a lookup template never holds it (tokenized without it).
                Piece::Open(_) | Piece::Close(_) | Piece::Rest => {}
            }
        }
        Ok(out)
    }
}

impl fmt::Display for LookupTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Percent-encode everything but RFC 3986 unreserved characters.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Read every term of lookup `lookup` (`""`: the unnamed one) out of the upstream's answer
/// body into `out`. A `null` counts as missing, as it does for request terms.
pub(crate) fn extract_from_answer(
    lookup: &str,
    terms: &[(String, TermSource)],
    body: &[u8],
    out: &mut Terms,
) -> Result<(), AnswerError> {
    let answer: Value = json::from_slice(body).map_err(|e| match e {
        json::ReadError::Duplicate(_) => AnswerError::Ambiguous(e.to_string()),
        json::ReadError::Invalid(_) => AnswerError::NotJson,
    })?;
    for (name, source) in terms {
        let TermSource::Lookup { lookup: from, path } = source else {
            continue;
        };
        if from != lookup {
            continue;
        }
        match query_json(&answer, path) {
            Some(Value::Null) | None => {
                return Err(AnswerError::Missing {
                    term: name.clone(),
                    path: path.clone(),
                });
            }
            Some(value) => {
                out.insert(name.clone(), value);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::terms;
    use serde_json::json;

    #[test]
    fn fills_and_encodes_values() {
        let t = LookupTemplate::parse("/catalog/{sku}?store={store}&n={n}").unwrap();
        assert_eq!(t.placeholders().collect::<Vec<_>>(), ["sku", "store", "n"]);
        let got = t
            .fill(&terms(&[
                ("sku", json!("stormline insulated?m&x=1")),
                ("store", json!("nörth")),
                ("n", json!(2)),
            ]))
            .unwrap();
        assert_eq!(
            got,
            "/catalog/stormline%20insulated%3Fm%26x%3D1?store=n%C3%B6rth&n=2"
        );
    }

    #[test]
    fn refuses_values_that_could_reach_another_resource() {
        let t = LookupTemplate::parse("/catalog/{sku}").unwrap();
        for bad in [
            json!(""),
            json!("."),
            json!(".."),
            json!("../orders"),
            json!("a\\b"),
            json!(["a"]),
            json!({"a": 1}),
        ] {
            let err = t.fill(&terms(&[("sku", bad.clone())])).unwrap_err();
            assert_eq!(err.term(), "sku", "{bad}");
        }
        assert_eq!(t.fill(&Terms::new()), Err(FillError::Missing("sku".into())));
        assert_eq!(
            t.fill(&terms(&[("sku", json!("a.b"))])).unwrap(),
            "/catalog/a.b"
        );
    }

    #[test]
    fn bad_templates() {
        for bad in [
            "catalog/{sku}",
            "http://evil/{sku}",
            "//evil/{sku}",
            "/a/{sku",
            "/a/sku}",
            "/a/{}",
            "/a/{a b}",
            "/a#{sku}",
            "/a /{sku}",
        ] {
            assert!(LookupTemplate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_lookup_terms_from_the_answer() {
        let lookup = |from: &str, path: &str| TermSource::Lookup {
            lookup: from.into(),
            path: path.into(),
        };
        let policy_terms = vec![
            ("sku".to_owned(), TermSource::Body("$.sku".into())),
            ("price".to_owned(), lookup("", "$.price.amount")),
            ("name".to_owned(), lookup("", "$.name")),
            ("paid".to_owned(), lookup("order", "$.paid")),
        ];
        let mut out = terms(&[("sku", json!("s1"))]);
        extract_from_answer(
            "order",
            &policy_terms,
            br#"{"paid":"120.00","name":"not this one"}"#,
            &mut out,
        )
        .unwrap();
        assert_eq!(out["paid"], "120.00");
        assert!(!out.contains_key("name"), "the other lookup's term");
        extract_from_answer(
            "",
            &policy_terms,
            br#"{"name":"Jacket","price":{"amount":"190.00","currency":"USD"}}"#,
            &mut out,
        )
        .unwrap();
        assert_eq!(out["price"], "190.00");
        assert_eq!(out["name"], "Jacket");
        assert_eq!(out["sku"], "s1");

        let mut out = Terms::new();
        assert_eq!(
            extract_from_answer("", &policy_terms, br#"{"name":"Jacket"}"#, &mut out),
            Err(AnswerError::Missing {
                term: "price".into(),
                path: "$.price.amount".into()
            })
        );
        assert_eq!(
            extract_from_answer(
                "",
                &policy_terms,
                br#"{"name":null,"price":{"amount":"1"}}"#,
                &mut out
            ),
            Err(AnswerError::Missing {
                term: "name".into(),
                path: "$.name".into()
            })
        );
        assert_eq!(
            extract_from_answer("", &policy_terms, b"<html>", &mut out),
            Err(AnswerError::NotJson)
        );
        // Read last-wins, this would take 0.01 where a first-wins reader sees 10.00.
        let mut out = Terms::new();
        let twice = br#"{"name":"Jacket","price":{"amount":"10.00","amount":"0.01"}}"#;
        assert!(matches!(
            extract_from_answer("", &policy_terms, twice, &mut out),
            Err(AnswerError::Ambiguous(why)) if why.contains("$.price.amount")
        ));
        assert!(out.is_empty(), "no term taken from it");
    }
}
