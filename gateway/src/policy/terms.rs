//! Terms: the values a policy extracts from a request, each from exactly one source.

use std::collections::BTreeMap;

use jsonpath_rust::JsonPath as _;
use serde_json::Value;

use super::compute::{EvalError, Expression};
use super::form_name::{FormKey, FormName};
use super::route::Captures;

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

/// A form term's value: the field of that name (a string, or a list for `name[]`), or the
/// group of fields it holds as one value (`metadata[k]=v` → `{"k": "v"}`, `items[0][price]=p`
/// → `[{"price": "p"}]`, `expand[]=a` under `expand` → `["a"]`). `form` holds every field by
/// its name, already read strictly: one shape per name, indices dense and in order.
fn form_value(form: &Value, name: &str) -> Option<Value> {
    if let Some(value) = form.get(name) {
        return Some(value.clone());
    }
    let group = FormName::parse(name).ok()?;
    let mut out: Option<Value> = None;
    for (field, value) in form.as_object()? {
        let Ok(field) = FormName::parse(field) else {
            continue;
        };
        if field.is_within(&group) {
            let rest = &field.parts()[group.parts().len()..];
            place(&mut out, rest, value)?;
        }
    }
    out
}

/// Put `value` at `path` in the tree being built. `None` if the names disagree on a shape,
/// which the strict form reader already refused.
fn place(node: &mut Option<Value>, path: &[FormKey], value: &Value) -> Option<()> {
    let Some((first, rest)) = path.split_first() else {
        return node.replace(value.clone()).is_none().then_some(());
    };
    match first {
        // `value` is already the list of a `name[]` field.
        FormKey::Append => node.replace(value.clone()).is_none().then_some(()),
        FormKey::Name(key) => {
            let map = node.get_or_insert_with(|| Value::Object(Default::default()));
            let Value::Object(map) = map else { return None };
            let mut child = map.remove(key);
            place(&mut child, rest, value)?;
            map.insert(key.clone(), child?);
            Some(())
        }
        FormKey::Index(index) => {
            let list = node.get_or_insert_with(|| Value::Array(Vec::new()));
            let Value::Array(items) = list else {
                return None;
            };
            if *index == items.len() {
                items.push(Value::Null);
            }
            let slot = items.get_mut(*index)?;
            let mut child = (!slot.is_null()).then(|| slot.take());
            place(&mut child, rest, value)?;
            *slot = child?;
            Some(())
        }
    }
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

/// JSON with object keys sorted at every level and no insignificant white space, so equal
/// values always give equal bytes (revisions and operation IDs are MACs over it).
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
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

    #[test]
    fn form_terms_by_field_name() {
        let captures = vec![];
        let headers = http::HeaderMap::new();
        let form = json!({"To": "+1555", "tags[]": ["a", "b"]});
        let terms = vec![
            ("to".to_owned(), TermSource::Form("To".into())),
            ("tags".to_owned(), TermSource::Form("tags[]".into())),
        ];
        let mut request = parts(&captures, &headers, None, None);
        request.form = Some(&form);
        let got = extract(&terms, &[], &request).unwrap();
        assert_eq!(got["to"], "+1555");
        assert_eq!(got["tags"], json!(["a", "b"]));
        let missing = vec![("to".to_owned(), TermSource::Form("to".into()))];
        let err = extract(&missing, &[], &request).unwrap_err();
        assert_eq!(
            err.to_string(),
            "term `to` is missing from the request (it comes from form field `to`)"
        );
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

    /// A form term naming a group is the group's fields as one value.
    #[test]
    fn form_groups_are_one_value() {
        let captures = vec![];
        let headers = http::HeaderMap::new();
        let form = json!({
            "metadata[order_id]": "1",
            "metadata[note][x]": "y",
            "items[0][price]": "p1",
            "items[1][price]": "p2",
            "items[0][quantity]": "2",
            "expand[]": ["customer", "invoice"],
            "t[a][]": ["1"],
        });
        let terms = vec![
            ("metadata".to_owned(), TermSource::Form("metadata".into())),
            ("items".to_owned(), TermSource::Form("items".into())),
            ("expand".to_owned(), TermSource::Form("expand".into())),
            ("listed".to_owned(), TermSource::Form("expand[]".into())),
            ("t".to_owned(), TermSource::Form("t".into())),
            ("first".to_owned(), TermSource::Form("items[0]".into())),
            ("address".to_owned(), TermSource::Form("address".into())),
        ];
        let mut request = parts(&captures, &headers, None, None);
        request.form = Some(&form);
        let got = extract(&terms, &["address".to_owned()], &request).unwrap();
        assert_eq!(
            got["metadata"],
            json!({"order_id": "1", "note": {"x": "y"}})
        );
        assert_eq!(
            got["items"],
            json!([{"price": "p1", "quantity": "2"}, {"price": "p2"}])
        );
        assert_eq!(got["expand"], json!(["customer", "invoice"]));
        assert_eq!(got["listed"], got["expand"]);
        assert_eq!(got["t"], json!({"a": ["1"]}));
        assert_eq!(got["first"], json!({"price": "p1", "quantity": "2"}));
        assert!(!got.contains_key("address"));
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

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"d": [1, {"z": 1, "y": 2}], "c": "x"}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":"x","d":[1,{"y":2,"z":1}]},"b":1}"#
        );
        let b: Value =
            serde_json::from_str(r#"{ "a": {"c":"x", "d":[1,{"y":2,"z":1}]}, "b":1 }"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
    }

    #[test]
    fn json_path_validation() {
        assert!(is_valid_json_path("$.item_id").is_ok());
        assert!(is_valid_json_path("$.[[").is_err());
    }
}
