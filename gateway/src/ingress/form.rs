//! Strict form bodies (`application/x-www-form-urlencoded`, UTF-8): one reading that every
//! common form reader shares (Werkzeug's `request.form`, Starlette and Python's `parse_qsl`,
//! Express's `qs` and `querystring`, PHP, Rack), or a refusal naming the field where two of
//! them part. The field names follow [`FormName`].
//!
//! `+` is a space, as in every form reader (HTML forms send spaces so); `%2B` is a plus.
//! A form reader and a plain percent-decoder agree only on a body without a raw `+`, but no
//! form reader is a plain percent-decoder. Refused:
//! - a byte outside printable ASCII, raw (Starlette reads raw bytes as Latin-1, Werkzeug as
//!   UTF-8) or as an escape that is not UTF-8 (replaced by one reader, kept as `%FF` by
//!   another), an invalid escape (`%zz`), and `%00` (C-based servers cut there);
//! - `;` (older Python readers split on it, as on `&`);
//! - a name twice (`a=1&a=2`: Werkzeug acts on the first, PHP and Rack on the last, `qs` on
//!   both), including a percent-encoded or case-folded twin (`%61`, `A`: ASP.NET binds names
//!   case-insensitively), except `name[]`, a list;
//! - a field without `=` (Rack reads `nil`, the rest an empty string) or with an empty value
//!   (Python's `parse_qs` drops it, the rest keep it): leave such a field out;
//! - names that nested readers build into different shapes: a name that is both a value and
//!   a group (`a=1&a[b]=2`), a list and a group, indices out of order (`qs` compacts
//!   `a[1]=x&a[5]=y` into `a[0]`, `a[1]`) or mixed with keys, a list of more than
//!   [`MAX_LIST`] values, more than [`MAX_FIELDS`] fields (PHP and `qs` drop the rest).
//!
//! `a%5Bb%5D` is `a[b]`: nested readers (PHP, Rack, `qs`) decode a name before reading its
//! brackets, and flat readers see the same name either way; sending both is a twin.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::policy::{FormKey, FormName, MAX_LIST};

use super::Refusal;
use super::json::fold_case;
use super::target::decode_strict;

/// More fields than this are refused: PHP's `max_input_vars` and `qs`'s `parameterLimit`
/// drop the rest.
pub(crate) const MAX_FIELDS: usize = 1000;

/// A form body, read strictly.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Form {
    /// Each field in order of first appearance, with its checked name.
    pub(crate) fields: Vec<(FormName, Value)>,
}

impl Form {
    /// Every field by its name: a string, or for `name[]` the list of its values in order.
    pub(crate) fn to_object(&self) -> Value {
        let map: Map<String, Value> = self
            .fields
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
            .collect();
        Value::Object(map)
    }
}

/// Read a form body strictly.
pub(crate) fn parse_strict(bytes: &[u8]) -> Result<Form, Refusal> {
    let mut fields: Vec<(FormName, Value)> = Vec::new();
    // Folded name → the index of its field, for twins and lists.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut shapes = Shape::Group(Vec::new());
    let mut count = 0;
    for pair in bytes.split(|b| *b == b'&').filter(|pair| !pair.is_empty()) {
        count += 1;
        if count > MAX_FIELDS {
            return Err(Refusal::body(format!(
                "the form has more than {MAX_FIELDS} fields: PHP and qs (Express) drop the rest"
            )));
        }
        let (raw_name, raw_value) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], Some(&pair[at + 1..])),
            None => (pair, None),
        };
        let shown = String::from_utf8_lossy(raw_name).into_owned();
        let name_text = decode(raw_name).map_err(|why| {
            Refusal::body(format!("the form field name `{shown}` {why}")).naming("field", &shown)
        })?;
        let name = FormName::parse(&name_text).map_err(|e| {
            Refusal::body(format!("the form field name `{name_text}` {e}"))
                .naming("field", &name_text)
        })?;
        let refuse = |detail: String| Refusal::body(detail).naming("field", name.as_str());
        let value = match raw_value {
            None => {
                return Err(refuse(format!(
                    "the form field `{name}` has no `=`: Rack reads it as nil and other readers as an empty string; leave it out, or give it a value"
                )));
            }
            Some([]) => {
                return Err(refuse(format!(
                    "the form field `{name}` is empty: Python's parse_qs drops an empty field and other readers keep it; leave it out, or give it a value"
                )));
            }
            Some(raw) => decode(raw)
                .map_err(|why| refuse(format!("the value of the form field `{name}` {why}")))?,
        };
        let folded = fold_case(name.as_str());
        if let Some(&earlier) = seen.get(&folded) {
            let (first, values) = &mut fields[earlier];
            if first.as_str() != name.as_str() {
                return Err(refuse(format!(
                    "the form fields `{first}` and `{name}` differ only in letter case: some readers bind names case-insensitively, send one"
                )));
            }
            if !name.is_list() {
                return Err(refuse(format!(
                    "the form field `{name}` is sent more than once: readers keep the first, the last or both; send it once (or as `{name}[]`, a list)"
                )));
            }
            if let Value::Array(items) = values {
                if items.len() == MAX_LIST {
                    return Err(refuse(format!(
                        "the list `{name}` has more than {MAX_LIST} values: qs (Express) reads a longer one as an object"
                    )));
                }
                items.push(Value::String(value));
            }
            continue;
        }
        shapes.insert(name.parts(), &name).map_err(refuse)?;
        seen.insert(folded, fields.len());
        let value = if name.is_list() {
            Value::Array(vec![Value::String(value)])
        } else {
            Value::String(value)
        };
        fields.push((name, value));
    }
    Ok(Form { fields })
}

/// Form-decode one name or value: `+` is a space, `%XX` a byte, and the result UTF-8 text
/// without NUL; raw bytes must be printable ASCII other than `;`.
fn decode(raw: &[u8]) -> Result<String, &'static str> {
    if let Some(byte) = raw.iter().find(|b| !(0x21..=0x7e).contains(*b)) {
        return Err(if *byte >= 0x80 {
            "has a raw non-ASCII byte, which readers decode as UTF-8 or as Latin-1: percent-encode its UTF-8 bytes"
        } else {
            "has a raw space or control character: percent-encode it"
        });
    }
    if raw.contains(&b';') {
        return Err("has `;`, which older readers split fields on: percent-encode it as %3B");
    }
    // Printable ASCII is UTF-8.
    let text = String::from_utf8_lossy(raw).replace('+', " ");
    let bytes = decode_strict(&text)
        .ok_or("has an invalid `%` escape: write `%` as `%25`, followed by two hex digits")?;
    let text = String::from_utf8(bytes).map_err(
        |_| "is not UTF-8 once decoded, which readers replace or keep escaped differently",
    )?;
    if text.contains('\0') {
        return Err("has %00, where some servers cut it");
    }
    Ok(text)
}

/// The shape nested readers build from the names so far: what each name is in a tree.
#[derive(Debug)]
enum Shape {
    /// A field's value.
    Value,
    /// `name[]`.
    List,
    /// A group: its keys in order of first appearance, each with its spelling.
    Group(Vec<(Key, String, Shape)>),
}

/// A key of a group, as nested readers compare keys (and ASP.NET, case-insensitively).
#[derive(Debug, PartialEq, Eq)]
enum Key {
    /// Folded.
    Name(String),
    Index(usize),
}

/// Why two names make different shapes in nested readers.
fn clash(name: &FormName) -> String {
    format!(
        "the form field `{name}` clashes with one sent earlier: one name is a value, a list or a group of fields, not two of them, or nested readers (PHP, Rack, qs) build different shapes"
    )
}

impl Shape {
    /// Add a name's remaining `parts`; the detail of a refusal if readers would part on it.
    fn insert(&mut self, parts: &[FormKey], name: &FormName) -> Result<(), String> {
        let Shape::Group(children) = self else {
            return Err(clash(name));
        };
        let Some((first, rest)) = parts.split_first() else {
            return Err(clash(name));
        };
        let (key, spelling) = match first {
            FormKey::Name(key) => (Key::Name(fold_case(key)), key.clone()),
            FormKey::Index(index) => (Key::Index(*index), index.to_string()),
            FormKey::Append => {
                if !children.is_empty() {
                    return Err(clash(name));
                }
                // Inserted once: the caller counts the list's values.
                *self = Shape::List;
                return Ok(());
            }
        };
        let at = match children.iter().position(|(k, _, _)| *k == key) {
            Some(at) => {
                let (_, earlier, shape) = &children[at];
                if *earlier != spelling {
                    return Err(format!(
                        "the form field `{name}` spells `{spelling}` as `{earlier}` was spelled earlier, in another letter case: some readers bind names case-insensitively, send one spelling"
                    ));
                }
                if rest.is_empty() || matches!(shape, Shape::Value | Shape::List) {
                    return Err(clash(name));
                }
                at
            }
            None => {
                let indexed = matches!(key, Key::Index(_));
                if children
                    .first()
                    .is_some_and(|(k, _, _)| matches!(k, Key::Index(_)) != indexed)
                {
                    return Err(format!(
                        "the form field `{name}` mixes indices and names in one group: qs (Express) reads it as an object, PHP as an array"
                    ));
                }
                if let Key::Index(index) = key
                    && index != children.len()
                {
                    return Err(format!(
                        "the form field `{name}` has the index {index} where {} comes next: qs (Express) renumbers indices that skip or go back; number them 0, 1, 2 in order",
                        children.len()
                    ));
                }
                let shape = if rest.is_empty() {
                    Shape::Value
                } else {
                    Shape::Group(Vec::new())
                };
                children.push((key, spelling, shape));
                if rest.is_empty() {
                    return Ok(());
                }
                children.len() - 1
            }
        };
        children[at].2.insert(rest, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(body: &str) -> Result<Value, Option<String>> {
        parse_strict(body.as_bytes())
            .map(|form| form.to_object())
            .map_err(|refusal| {
                assert_eq!((refusal.status, refusal.error), (400, "invalid_body"));
                refusal.names.map(|(member, value)| {
                    assert_eq!(member, "field");
                    value
                })
            })
    }

    #[test]
    fn a_plain_form_reads_once() {
        assert_eq!(
            read(
                "To=%2B15551234567&Body=Hello+there%21&customer[name]=Ann&customer[email]=a%40b.c"
            )
            .unwrap(),
            json!({
                "To": "+15551234567",
                "Body": "Hello there!",
                "customer[name]": "Ann",
                "customer[email]": "a@b.c",
            })
        );
        assert_eq!(read("").unwrap(), json!({}));
        assert_eq!(read("a=1&&b=2&").unwrap(), json!({"a": "1", "b": "2"}));
        assert_eq!(read("a=b=c").unwrap(), json!({"a": "b=c"}));
        assert_eq!(read("a=caf%C3%A9").unwrap(), json!({"a": "café"}));
    }

    /// `+` and `%20` are both a space: every form reader reads them so (WHATWG, Werkzeug,
    /// parse_qsl, qs, querystring, PHP, Rack). A literal plus is `%2B`.
    #[test]
    fn plus_is_a_space() {
        assert_eq!(read("a=b+c").unwrap(), read("a=b%20c").unwrap());
        assert_eq!(read("a=b%2Bc").unwrap(), json!({"a": "b+c"}));
        assert_eq!(read("a+b=1").unwrap_err(), Some("a b".into()));
    }

    #[test]
    fn twins_are_refused_naming_the_field() {
        for (body, field) in [
            ("a=1&a=2", "a"),
            ("a=1&A=2", "A"),
            ("amount=1&%61mount=2", "amount"),
            ("a[b]=1&a%5Bb%5D=2", "a[b]"),
            ("a[b]=1&a[B]=2", "a[B]"),
            ("class=1&cla%C5%BF%C5%BF=2", "claſſ"),
            ("items[]=1&ITEMS[]=2", "ITEMS[]"),
        ] {
            assert_eq!(read(body).unwrap_err(), Some(field.into()), "{body}");
        }
    }

    /// Encoded brackets are the same name: clients (URLSearchParams, Python's urlencode)
    /// send them so, and nested readers decode before reading brackets.
    #[test]
    fn encoded_brackets_are_the_same_name() {
        assert_eq!(read("a%5Bb%5D=1").unwrap(), read("a[b]=1").unwrap());
    }

    #[test]
    fn lists_and_indices() {
        assert_eq!(
            read("items[]=a&x=1&items[]=b").unwrap(),
            json!({"items[]": ["a", "b"], "x": "1"})
        );
        assert_eq!(
            read("l[0][sku]=a&l[0][qty]=1&l[1][sku]=b&t[a][]=1&t[a][]=2").unwrap(),
            json!({"l[0][sku]": "a", "l[0][qty]": "1", "l[1][sku]": "b", "t[a][]": ["1", "2"]})
        );
        let twenty: Vec<String> = (0..MAX_LIST).map(|i| format!("l[]={i}")).collect();
        assert!(read(&twenty.join("&")).is_ok());
        assert_eq!(
            read(&format!("{}&l[]=x", twenty.join("&"))).unwrap_err(),
            Some("l[]".into())
        );
    }

    #[test]
    fn shapes_nested_readers_build_differently_are_refused() {
        for (body, field) in [
            ("a=1&a[b]=2", "a[b]"),
            ("a[b]=1&a=2", "a"),
            ("a[b]=1&a[b][c]=2", "a[b][c]"),
            ("a[b][c]=1&a[b]=2", "a[b]"),
            ("a[]=1&a[b]=2", "a[b]"),
            ("a[b]=1&a[]=2", "a[]"),
            ("a[]=1&a=2", "a"),
            ("a=1&a[]=2", "a[]"),
            ("a[1]=x", "a[1]"),
            ("a[0]=x&a[2]=y", "a[2]"),
            ("a[1]=x&a[0]=y", "a[1]"),
            ("a[0]=x&a[b]=y", "a[b]"),
            ("a[b]=x&a[0]=y", "a[0]"),
            ("a[][b]=1", "a[][b]"),
            ("a[b]c=1", "a[b]c"),
            ("a.b=1", "a.b"),
            ("_method=DELETE", "_method"),
            ("%5Fmethod=DELETE", "_method"),
            ("__proto__[x]=1", "__proto__[x]"),
        ] {
            assert_eq!(read(body).unwrap_err(), Some(field.into()), "{body}");
        }
        // The same group, filled in any order, is one shape.
        assert!(read("a[b]=1&c=2&a[d][e]=3&a[d][f]=4").is_ok());
        assert!(read("l[0][a]=1&l[1][a]=2&l[0][b]=3").is_ok());
    }

    #[test]
    fn empty_values_and_bare_names_are_refused() {
        assert_eq!(read("a=1&b=").unwrap_err(), Some("b".into()));
        assert_eq!(read("a=1&b").unwrap_err(), Some("b".into()));
        assert_eq!(read("=x").unwrap_err(), Some(String::new()));
    }

    #[test]
    fn bytes_readers_decode_differently_are_refused() {
        for (body, field) in [
            (&b"a=\xc3\xa9"[..], "a"),
            (b"a=%ff", "a"),
            (b"a=%C3", "a"),
            (b"a=%zz", "a"),
            (b"a=%4", "a"),
            (b"a=x%00y", "a"),
            (b"a=1;b=2", "a"),
            (b"a=1 2", "a"),
            (b"a=1\n", "a"),
            (b"\xef\xbb\xbfa=1", "\u{feff}a"),
            (b"n%ffame=1", "n%ffame"),
        ] {
            let refused = parse_strict(body).unwrap_err();
            assert_eq!(
                refused.names,
                Some(("field", field.to_owned())),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn too_many_fields_are_refused() {
        let fields: Vec<String> = (0..MAX_FIELDS).map(|i| format!("f{i}=1")).collect();
        assert!(read(&fields.join("&")).is_ok());
        assert!(read(&format!("{}&x=1", fields.join("&"))).is_err());
    }
}
