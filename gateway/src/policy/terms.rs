//! Terms: the values a policy extracts from a request, each from exactly one source.

use std::collections::BTreeMap;

use jsonpath_rust::JsonPath as _;
use serde_json::Value;

use super::compute::Expression;
use super::route::Captures;

mod canonical;
mod computed;
mod form;

pub(crate) use canonical::canonical_json;
pub(crate) use computed::compute_terms;
use form::form_value;

/// Where a term's value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TermSource {
    /// A `{name}` capture of the path template.
    Path(String),
    /// A JSONPath into the JSON request body.
    Body(String),
    /// A field of a form request body (`application/x-www-form-urlencoded`), by its name
    /// (`To`, `customer[name]`, `items[]`).
    Form(String),
    /// A query-string parameter.
    Query(String),
    /// A request header (name in lower case).
    Header(String),
    /// A constant from the policy.
    Value(Value),
    /// A JSONPath into an MCP tool call's `arguments`.
    Argument(String),
    /// A JSONPath into the upstream's answer to one of the policy's lookups (see
    /// [`super::lookup`]): `lookup` names it, `""` for the unnamed `[operation.lookup]`.
    /// Filled only by interfaces that run the lookups.
    Lookup { lookup: String, path: String },
    /// An expression over other terms (see [`super::compute`]), evaluated once every other
    /// term (lookups included) is known.
    Compute(Expression),
}

impl TermSource {
    /// How the source is written in a policy, for error messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            TermSource::Path(name) => format!("path capture `{name}`"),
            TermSource::Body(path) => format!("body `{path}`"),
            TermSource::Form(name) => format!("form field `{name}`"),
            TermSource::Query(name) => format!("query parameter `{name}`"),
            TermSource::Header(name) => format!("header `{name}`"),
            TermSource::Value(_) => "constant value".to_owned(),
            TermSource::Argument(path) => format!("tool argument `{path}`"),
            TermSource::Lookup { lookup, path } if lookup.is_empty() => {
                format!("lookup `{path}`")
            }
            TermSource::Lookup { lookup, path } => format!("lookup `{lookup}` at `{path}`"),
            TermSource::Compute(expression) => format!("compute `{expression}`"),
        }
    }

    pub(crate) fn needs_body(&self) -> bool {
        matches!(self, TermSource::Body(_) | TermSource::Form(_))
    }
}

/// Extracted terms, ordered by name.
pub type Terms = BTreeMap<String, Value>;

/// What the policy reads a request from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestParts<'a> {
    pub captures: &'a Captures,
    /// The raw query string, without `?`.
    pub query: Option<&'a str>,
    pub headers: &'a http::HeaderMap,
    /// The body parsed as JSON, when a term needs it (`None` if no term does).
    pub body: Option<&'a Value>,
    /// A form body's fields by name (a string, or a list for `name[]`), for `form` terms.
    pub form: Option<&'a Value>,
    /// MCP tool arguments, for `argument` terms.
    pub arguments: Option<&'a Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TermError {
    #[error("term `{term}` is missing from the request (it comes from {from})")]
    Missing { term: String, from: String },
    #[error("term `{term}`: header `{header}` is not valid UTF-8 text")]
    HeaderNotText { term: String, header: String },
}

impl TermError {
    pub(crate) fn term(&self) -> &str {
        match self {
            TermError::Missing { term, .. } | TermError::HeaderNotText { term, .. } => term,
        }
    }
}

/// Extract every term but the computed ones. A `null` JSON value counts as missing, and so
/// does a `lookup` term: an interface that doesn't run lookups must refuse the request, never
/// render a summary without the looked-up values.
pub(crate) fn extract(
    terms: &[(String, TermSource)],
    optional: &[String],
    request: &RequestParts<'_>,
) -> Result<Terms, TermError> {
    extract_terms(terms, optional, request, false)
}

/// Extract every term but the `lookup` ones, which the caller then reads from the upstream's
/// answer (`lookup::extract_from_answer`), and the computed ones, evaluated after them
/// (`compute_terms`).
pub(crate) fn extract_from_request(
    terms: &[(String, TermSource)],
    optional: &[String],
    request: &RequestParts<'_>,
) -> Result<Terms, TermError> {
    extract_terms(terms, optional, request, true)
}

/// `optional`: the terms a request may leave out. Absent, such a term is not in the terms at
/// all (its absence is what the User approves); a JSON `null` is a value the request sends, so
/// an optional term sent as `null` is `null`.
fn extract_terms(
    terms: &[(String, TermSource)],
    optional: &[String],
    request: &RequestParts<'_>,
    skip_lookups: bool,
) -> Result<Terms, TermError> {
    let mut out = Terms::new();
    for (name, source) in terms {
        // Computed terms are evaluated by the executor, after the lookups (`compute_terms`).
        if matches!(source, TermSource::Compute(_))
            || (skip_lookups && matches!(source, TermSource::Lookup { .. }))
        {
            continue;
        }
        let missing = || TermError::Missing {
            term: name.clone(),
            from: source.describe(),
        };
        let value = match source {
            TermSource::Path(capture) => request
                .captures
                .iter()
                .find(|(n, _)| n == capture)
                .map(|(_, v)| Value::from(v.as_str())),
            TermSource::Body(path) => request.body.and_then(|body| query_json(body, path)),
            TermSource::Form(name) => request.form.and_then(|form| form_value(form, name)),
            TermSource::Argument(path) => request.arguments.and_then(|args| query_json(args, path)),
            TermSource::Query(param) => query_param(request.query, param).map(Value::from),
            TermSource::Header(header) => match request.headers.get(header.as_str()) {
                None => None,
                Some(value) => Some(Value::from(value.to_str().map_err(|_| {
                    TermError::HeaderNotText {
                        term: name.clone(),
                        header: header.clone(),
                    }
                })?)),
            },
            TermSource::Value(value) => Some(value.clone()),
            TermSource::Lookup { .. } | TermSource::Compute(_) => None,
        };
        let optional = optional.iter().any(|o| o == name);
        match value {
            None if optional => {}
            Some(Value::Null) if !optional => return Err(missing()),
            None => return Err(missing()),
            Some(value) => {
                out.insert(name.clone(), value);
            }
        }
    }
    Ok(out)
}

/// One match is the value; several are an array of them; none is `None`.
pub(super) fn query_json(value: &Value, path: &str) -> Option<Value> {
    let found = super::jsonpath::query(value, path)?;
    match found.as_slice() {
        [] => None,
        [one] => Some((*one).clone()),
        many => Some(Value::Array(many.iter().map(|v| (*v).clone()).collect())),
    }
}

/// Whether a JSONPath expression parses.
pub(crate) fn is_valid_json_path(path: &str) -> Result<(), JsonPathError> {
    // The parser's own word for a missing root is its grammar rule ("expected jp_query").
    if !path.starts_with('$') {
        return Err(JsonPathError(format!(
            "a JSONPath starts at the root, `$` (for example `$.{}`)",
            path.trim_start_matches('.')
        )));
    }
    Value::Null
        .query(path)
        .map(|_| ())
        .map_err(|e| JsonPathError(e.to_string()))
}

/// A JSONPath that does not parse, with the parser's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct JsonPathError(String);

/// The first value of a query parameter, form-decoded (`+` is a space).
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| super::route::percent_decode(&s.replace('+', " "));
        (decode(key) == name).then(|| decode(value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_path_without_its_root_says_so() {
        let e = is_valid_json_path("item_id").unwrap_err().to_string();
        assert_eq!(
            e,
            "a JSONPath starts at the root, `$` (for example `$.item_id`)"
        );
        assert!(is_valid_json_path("$.item_id").is_ok());
        assert!(
            !is_valid_json_path("$[")
                .unwrap_err()
                .to_string()
                .contains("root")
        );
    }
    use serde_json::json;

    fn parts<'a>(
        captures: &'a Captures,
        headers: &'a http::HeaderMap,
        body: Option<&'a Value>,
        query: Option<&'a str>,
    ) -> RequestParts<'a> {
        RequestParts {
            captures,
            query,
            headers,
            body,
            form: None,
            arguments: None,
        }
    }

    #[test]
    fn extracts_from_every_source() {
        let captures = vec![("order_id".to_owned(), "o1".to_owned())];
        let mut headers = http::HeaderMap::new();
        headers.insert("x-store", "north".parse().unwrap());
        let body = json!({"item": {"id": "i1"}, "qty": 2});
        let terms = vec![
            ("order_id".to_owned(), TermSource::Path("order_id".into())),
            ("item_id".to_owned(), TermSource::Body("$.item.id".into())),
            ("qty".to_owned(), TermSource::Body("$.qty".into())),
            ("store".to_owned(), TermSource::Header("x-store".into())),
            ("reason".to_owned(), TermSource::Query("reason".into())),
            ("currency".to_owned(), TermSource::Value(json!("USD"))),
        ];
        let got = extract(
            &terms,
            &[],
            &parts(
                &captures,
                &headers,
                Some(&body),
                Some("a=1&reason=too+small%21"),
            ),
        )
        .unwrap();
        assert_eq!(got["order_id"], "o1");
        assert_eq!(got["item_id"], "i1");
        assert_eq!(got["qty"], 2);
        assert_eq!(got["store"], "north");
        assert_eq!(got["reason"], "too small!");
        assert_eq!(got["currency"], "USD");
    }

    /// An optional term absent from the request is absent from the terms; present (even as
    /// `null`, which the request does send), it is bound like any term.
    #[test]
    fn optional_terms_are_absent_or_bound() {
        let captures = vec![];
        let headers = http::HeaderMap::new();
        let terms = vec![
            ("amount".to_owned(), TermSource::Body("$.amount".into())),
            ("coupon".to_owned(), TermSource::Body("$.coupon".into())),
            ("reason".to_owned(), TermSource::Query("reason".into())),
        ];
        let optional = ["coupon".to_owned(), "reason".to_owned()];
        let body = json!({"amount": 5});
        let got = extract(
            &terms,
            &optional,
            &parts(&captures, &headers, Some(&body), None),
        )
        .unwrap();
        assert_eq!(got, crate::testkit::terms(&[("amount", json!(5))]));
        let body = json!({"amount": 5, "coupon": null});
        let got = extract(
            &terms,
            &optional,
            &parts(&captures, &headers, Some(&body), Some("reason=x")),
        )
        .unwrap();
        assert_eq!(got["coupon"], Value::Null);
        assert_eq!(got["reason"], "x");
        // Required stays required.
        let body = json!({"coupon": "c"});
        let err = extract(
            &terms,
            &optional,
            &parts(&captures, &headers, Some(&body), None),
        )
        .unwrap_err();
        assert_eq!(err.term(), "amount");
    }

    #[test]
    fn missing_and_null_terms_are_named() {
        let captures = vec![];
        let headers = http::HeaderMap::new();
        let body = json!({"item_id": null});
        let terms = vec![("item_id".to_owned(), TermSource::Body("$.item_id".into()))];
        let err = extract(&terms, &[], &parts(&captures, &headers, Some(&body), None)).unwrap_err();
        assert_eq!(err.term(), "item_id");
        assert!(err.to_string().contains("$.item_id"));
    }

    #[test]
    fn lookup_terms_are_missing_unless_the_caller_runs_the_lookup() {
        let captures = vec![("order_id".to_owned(), "o1".to_owned())];
        let headers = http::HeaderMap::new();
        let terms = vec![
            ("order_id".to_owned(), TermSource::Path("order_id".into())),
            (
                "price".to_owned(),
                TermSource::Lookup {
                    lookup: String::new(),
                    path: "$.price".into(),
                },
            ),
            (
                "twice".to_owned(),
                TermSource::Compute(Expression::parse("price * 2").unwrap()),
            ),
        ];
        let request = parts(&captures, &headers, None, None);
        assert_eq!(extract(&terms, &[], &request).unwrap_err().term(), "price");
        let got = extract_from_request(&terms, &[], &request).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got["order_id"], "o1");
    }

    #[test]
    fn json_path_validation() {
        assert!(is_valid_json_path("$.item_id").is_ok());
        assert!(is_valid_json_path("$.[[").is_err());
    }
}
