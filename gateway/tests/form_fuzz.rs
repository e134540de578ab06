//! Bounded property runs over form bodies: for any body built from honest and hostile
//! spellings, either the gateway refuses it, or every form reader we emulate reads exactly the
//! gateway's terms: flat readers (Werkzeug's first value, Starlette's last and its Latin-1
//! decoding, Python's `parse_qs` dropping empty values, ASP.NET's case-insensitive names) and
//! nested ones (PHP: `.` and ` ` in names read as `_`, last wins, `[]` appends; Rack: the same,
//! a bare name is nil; `qs`: duplicates combined, depth 5, indices up to 20, sparse arrays
//! compacted, prototype names skipped).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use http::HeaderMap;
use poppy_gateway::config::parse_policy_file;
use poppy_gateway::ingress::reading::HttpRequest;
use poppy_gateway::ingress::{RouteMatch, check_target, match_route, read_policy_request};
use poppy_gateway::policy::PolicySet;
use proptest::prelude::*;
use serde_json::Value;

const POLICY: &str = r#"
[[operation]]
name = "call"
method = "POST"
path = "/Calls.json"
id_prefix = "cal"
expires_in = "15m"
same_action = ["to"]
summary = "Call {to} for {customer} ({tags}), line {sku}."
ignore = ["Note", "Meta"]
[operation.terms]
to = { form = "To" }
customer = { form = "Customer[name]" }
tags = { form = "Tags[]" }
sku = { form = "Lines[0][sku]" }
"#;

/// Each term's field name, as its parts: a name, then `[key]` groups (`""` is `[]`).
const TERMS: [(&str, &[&str]); 4] = [
    ("to", &["To"]),
    ("customer", &["Customer", "name"]),
    ("tags", &["Tags", ""]),
    ("sku", &["Lines", "0", "sku"]),
];

/// `+` is a space; `%XX` a byte (invalid escapes kept); the bytes read as UTF-8, replacing
/// what is not (Python's `unquote_plus`), or with `latin1` each raw byte is a character first.
fn lenient_decode(raw: &[u8], latin1: bool) -> String {
    let text: Vec<u8> = if latin1 {
        raw.iter()
            .map(|&b| char::from(b))
            .collect::<String>()
            .into_bytes()
    } else {
        raw.to_vec()
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' if text
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
            {
                let hex = std::str::from_utf8(&text[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
                continue;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The body's fields, decoded: `None` for a field without `=`.
fn pairs(body: &[u8], latin1: bool) -> Vec<(String, Option<String>)> {
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.iter().position(|b| *b == b'=') {
            Some(at) => (
                lenient_decode(&pair[..at], latin1),
                Some(lenient_decode(&pair[at + 1..], latin1)),
            ),
            None => (lenient_decode(pair, latin1), None),
        })
        .collect()
}

/// A flat reader: a name is the whole field name.
#[derive(Debug, Clone, Copy)]
enum Flat {
    /// Werkzeug's `request.form.get` / `getlist`.
    First,
    /// Starlette's `form[...]` (the last value), decoding raw bytes as Latin-1.
    LastLatin1,
    /// `urllib.parse.parse_qs`: blank values dropped.
    ParseQs,
    /// ASP.NET model binding: names compared case-insensitively, first value.
    CaseInsensitive,
}

fn flat_read(reader: Flat, body: &[u8], name: &str, list: bool) -> Option<Value> {
    let latin1 = matches!(reader, Flat::LastLatin1);
    let values: Vec<String> = pairs(body, latin1)
        .into_iter()
        .filter(|(field, _)| match reader {
            Flat::CaseInsensitive => field.to_lowercase() == name.to_lowercase(),
            _ => field == name,
        })
        .filter_map(|(_, value)| match reader {
            Flat::ParseQs => value.filter(|v| !v.is_empty()),
            _ => Some(value.unwrap_or_default()),
        })
        .collect();
    if list {
        return (!values.is_empty()).then(|| Value::from(values));
    }
    match reader {
        Flat::LastLatin1 => values.last().cloned().map(Value::from),
        _ => values.first().cloned().map(Value::from),
    }
}

/// A nested reader's tree.
#[derive(Debug, Clone)]
enum Node {
    Leaf(Option<String>),
    Group(Vec<(String, Node)>),
}

impl Node {
    fn child(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Group(children) => children.iter().find(|(k, _)| k == key).map(|(_, n)| n),
            Node::Leaf(_) => None,
        }
    }

    /// The value at `parts` (a term's name): a string, or for a last `""` the list.
    fn read(&self, parts: &[&str]) -> Option<Value> {
        let (last, path) = parts.split_last()?;
        let mut node = self;
        for key in path {
            node = node.child(key)?;
        }
        if last.is_empty() {
            let Node::Group(items) = node else {
                return None;
            };
            let values: Option<Vec<Value>> = items
                .iter()
                .map(|(_, item)| match item {
                    Node::Leaf(Some(v)) => Some(Value::from(v.as_str())),
                    _ => None,
                })
                .collect();
            return values.map(Value::Array);
        }
        match node.child(last)? {
            Node::Leaf(Some(value)) => Some(Value::from(value.as_str())),
            _ => None,
        }
    }

    /// Set `value` at `keys` (`""` appends), overwriting whatever is there (PHP, Rack).
    fn assign(&mut self, keys: &[String], value: Option<String>) {
        let Some((first, rest)) = keys.split_first() else {
            *self = Node::Leaf(value);
            return;
        };
        if matches!(self, Node::Leaf(_)) {
            *self = Node::Group(Vec::new());
        }
        let Node::Group(children) = self else {
            return;
        };
        let key = if first.is_empty() {
            let next = children
                .iter()
                .filter_map(|(k, _)| k.parse::<usize>().ok())
                .max()
                .map_or(0, |m| m + 1);
            next.to_string()
        } else {
            first.clone()
        };
        let at = match children.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                children.push((key, Node::Leaf(None)));
                children.len() - 1
            }
        };
        children[at].1.assign(rest, value);
    }
}

/// PHP's reading of a name: leading spaces dropped; ` ` and `.` before the first `[` become
/// `_`; groups `[key]` until a character that opens none (the rest is dropped); an unclosed
/// first `[` becomes `_` and the rest stays in the name.
fn php_keys(name: &str) -> Vec<String> {
    let name = name.trim_start_matches(' ');
    let open = name.find('[');
    let (base, mut rest) = match open {
        Some(at) if name[at..].contains(']') => (&name[..at], &name[at..]),
        Some(at) => {
            let base = format!("{}_{}", &name[..at], &name[at + 1..]);
            return vec![base.replace([' ', '.'], "_")];
        }
        None => (name, ""),
    };
    let mut keys = vec![base.replace([' ', '.'], "_")];
    while let Some(inner) = rest.strip_prefix('[') {
        let Some(close) = inner.find(']') else { break };
        keys.push(inner[..close].to_owned());
        rest = &inner[close + 1..];
    }
    keys
}

/// PHP (`bare_is_nil: false`) or Rack (`true`): last wins, `[]` appends.
fn nested_read(body: &[u8], bare_is_nil: bool) -> Node {
    let mut root = Node::Group(Vec::new());
    for (name, value) in pairs(body, false) {
        let keys = php_keys(&name);
        if keys[0].is_empty() {
            continue;
        }
        let value = if bare_is_nil {
            value
        } else {
            Some(value.unwrap_or_default())
        };
        root.assign(&keys, value);
    }
    root
}

const PROTOTYPE: [&str; 12] = [
    "__proto__",
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

/// The first `[key]` group of `text` (no bracket inside): its start and end (after `]`).
fn next_group(text: &str) -> Option<(usize, usize)> {
    text.match_indices('[').find_map(|(at, _)| {
        let after = &text[at + 1..];
        let close = after.find(['[', ']'])?;
        (after.as_bytes()[close] == b']').then_some((at, at + close + 2))
    })
}

/// `qs` with its defaults: a name's segments. The parent is the text before the first group;
/// then up to 5 groups, found anywhere after each other (text between them is dropped);
/// beyond them, the rest from the next group is one literal key.
fn qs_keys(name: &str) -> Vec<String> {
    let Some((start, end)) = next_group(name).filter(|(start, _)| *start > 0) else {
        return vec![name.to_owned()];
    };
    let mut keys = vec![
        name[..start].to_owned(),
        name[start + 1..end - 1].to_owned(),
    ];
    let mut rest = &name[end..];
    while let Some((start, end)) = next_group(rest) {
        if keys.len() > 5 {
            keys.push(rest[start..].to_owned());
            break;
        }
        keys.push(rest[start + 1..end - 1].to_owned());
        rest = &rest[end..];
    }
    keys
}

/// `qs.parse` with its defaults: duplicate names combined into a list, `[]` and indices up to
/// 20 make arrays (compacted), prototype names skipped. Arrays are groups keyed `0`, `1`, …
fn qs_read(body: &[u8]) -> Node {
    // First: the flat names, duplicates combined in order.
    let mut flat: Vec<(String, Vec<String>)> = Vec::new();
    for (name, value) in pairs(body, false) {
        let value = value.unwrap_or_default();
        match flat.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => values.push(value),
            None => flat.push((name, vec![value])),
        }
    }
    let mut root = Node::Group(Vec::new());
    for (name, values) in flat {
        let keys = qs_keys(&name);
        if keys.iter().any(|k| PROTOTYPE.contains(&k.as_str())) {
            continue;
        }
        // An index within the limit is an array slot; beyond it, an object key.
        let keys: Vec<String> = keys
            .into_iter()
            .map(|k| match k.parse::<usize>() {
                Ok(i) if i <= 20 && i.to_string() == k => format!("#{i:03}"),
                _ => k,
            })
            .collect();
        let list = keys.last().is_some_and(String::is_empty) || values.len() > 1;
        let mut path = keys.clone();
        if path.last().is_some_and(String::is_empty) {
            path.pop();
        }
        if list {
            for value in values {
                let mut at = path.clone();
                at.push(String::new());
                root.assign(&at, Some(value));
            }
        } else {
            root.assign(&path, values.into_iter().next());
        }
    }
    compact(&mut root);
    root
}

/// Sparse arrays compacted, slots renumbered in index order (`qs`'s `compact`).
fn compact(node: &mut Node) {
    if let Node::Group(children) = node {
        for (_, child) in children.iter_mut() {
            compact(child);
        }
        if children.iter().all(|(k, _)| k.starts_with('#')) && !children.is_empty() {
            children.sort_by(|a, b| a.0.cmp(&b.0));
            for (i, (k, _)) in children.iter_mut().enumerate() {
                *k = i.to_string();
            }
        } else {
            for (k, _) in children.iter_mut() {
                if let Some(index) = k.strip_prefix('#') {
                    *k = index.trim_start_matches('0').to_owned();
                    if k.is_empty() {
                        k.push('0');
                    }
                }
            }
        }
    }
}

/// The gateway's reading: its terms, or `None` when it refuses the body.
fn gateway_terms(policies: &PolicySet, body: &[u8]) -> Option<serde_json::Map<String, Value>> {
    let target = check_target(b"/Calls.json").unwrap();
    let Ok(RouteMatch::Policy(policy, captures)) =
        match_route(policies, None, "POST", &target.path, true)
    else {
        panic!("the route matches");
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        "application/x-www-form-urlencoded".parse().unwrap(),
    );
    let request = HttpRequest {
        method: "POST",
        target: &target,
        headers: &headers,
        body,
    };
    read_policy_request(&policy, &captures, &request)
        .ok()
        .map(|reading| reading.terms.into_iter().collect())
}

/// Every spelling of each term, honest and hostile, and fields around them.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let to = prop::sample::select(vec![
        "To=%2B15551234567",
        "To=Ann+Lee",
        "To=Ann%20Lee",
        "%54o=x",
        "To=a%2Bb",
    ]);
    let customer = prop::sample::select(vec![
        "Customer[name]=Ann",
        "Customer%5Bname%5D=Bob+Lee",
        "Customer%5bname%5d=Cy",
    ]);
    let tags = prop::collection::vec(
        prop::sample::select(vec!["Tags[]=a", "Tags%5B%5D=b", "Tags[]=c+d"]),
        1..4,
    );
    let line = prop::sample::select(vec!["Lines[0][sku]=s1", "Lines%5B0%5D%5Bsku%5D=s2"]);
    let extra = prop::collection::vec(
        prop::sample::select(vec![
            "To=%2B19995550000",
            "to=y",
            "TO=z",
            "To=",
            "To",
            "T.o=1",
            "To[x]=1",
            "Customer[NAME]=D",
            "customer[name]=E",
            "Customer=F",
            "Customer[name][x]=G",
            "Customer.name=H",
            "Tags=d",
            "Tags[0]=e",
            "Tags[][x]=f",
            "Lines[1][sku]=s9",
            "Lines[0][qty]=1",
            "Lines[x][sku]=s3",
            "Lines[01][sku]=s4",
            "Lines[]=s5",
            "Note=hi",
            "Note=",
            "Note",
            "Meta[a]=1",
            "Meta[b][c][d][e][f][g]=2",
            "Meta[toString]=3",
            "_method=DELETE",
            "To=%FF",
            "To=%zz",
            "To=a%00b",
            "Note=a;To=b",
            "Note=%3B",
            "Meta[a b]=1",
            "Meta%5Bz=1",
            "Meta]=1",
            "&",
        ]),
        0..3,
    );
    (to, customer, tags, line, extra).prop_flat_map(|(to, customer, tags, line, extra)| {
        let mut pieces = vec![to, customer, line];
        pieces.extend(tags);
        pieces.extend(extra);
        Just(pieces)
            .prop_shuffle()
            .prop_map(|pieces| pieces.join("&").into_bytes())
    })
}

/// Whatever form the gateway accepts, every reader reads the gateway's terms; and enough of
/// the generated forms are accepted for that to say something.
#[test]
fn accepted_forms_read_the_same_everywhere() {
    let policies =
        PolicySet::new(parse_policy_file(std::path::Path::new("fuzz.toml"), POLICY).unwrap());
    let config = ProptestConfig {
        cases: 3000,
        ..ProptestConfig::default()
    };
    let accepted = std::cell::Cell::new(0_u32);
    let refused = std::cell::Cell::new(0_u32);
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&body(), |body| {
        let Some(terms) = gateway_terms(&policies, &body) else {
            refused.set(refused.get() + 1);
            return Ok(());
        };
        accepted.set(accepted.get() + 1);
        let text = String::from_utf8_lossy(&body).into_owned();
        let php = nested_read(&body, false);
        let rack = nested_read(&body, true);
        let qs = qs_read(&body);
        for (term, parts) in TERMS {
            let expected = terms.get(term).cloned();
            prop_assert!(expected.is_some(), "{text}: no {term}");
            let name: String = parts
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    if i == 0 {
                        (*p).to_owned()
                    } else {
                        format!("[{p}]")
                    }
                })
                .collect();
            let list = parts.last() == Some(&"");
            for reader in [
                Flat::First,
                Flat::LastLatin1,
                Flat::ParseQs,
                Flat::CaseInsensitive,
            ] {
                prop_assert_eq!(
                    flat_read(reader, &body, &name, list),
                    expected.clone(),
                    "{:?} reads {} in {}",
                    reader,
                    term,
                    text
                );
            }
            for (reader, tree) in [("PHP", &php), ("Rack", &rack), ("qs", &qs)] {
                prop_assert_eq!(
                    tree.read(parts),
                    expected.clone(),
                    "{} reads {} in {}: {:?}",
                    reader,
                    term,
                    text,
                    tree
                );
            }
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let (accepted, refused) = (accepted.get(), refused.get());
    eprintln!("{accepted} forms accepted and read alike by every reader, {refused} refused");
    assert!(
        accepted >= 300 && refused >= 300,
        "{accepted} accepted, {refused} refused: the generator no longer tests both"
    );
}

/// The emulated readers do part on what the gateway refuses: without the rules, the property
/// above would fail.
#[test]
fn the_readers_part_on_what_the_gateway_refuses() {
    let policies =
        PolicySet::new(parse_policy_file(std::path::Path::new("fuzz.toml"), POLICY).unwrap());
    let base = "Customer[name]=Ann&Tags[]=a&Lines[0][sku]=s1";
    for (extra, readers_part) in [
        ("To=1&To=2", true),
        ("to=2&To=1", true),
        ("To=1&Lines[1][sku]=s9&Lines[0][qty]=1", false),
        ("To=1&Customer[NAME]=x", false),
        ("To=1&Note=", false),
        ("To=", true),
        ("To", true),
        ("To=1&Lines[]=x", false),
    ] {
        let body = format!("{base}&{extra}");
        assert!(
            gateway_terms(&policies, body.as_bytes()).is_none(),
            "{body} is refused"
        );
        if readers_part {
            let first = flat_read(Flat::First, body.as_bytes(), "To", false);
            let others = [
                flat_read(Flat::LastLatin1, body.as_bytes(), "To", false),
                flat_read(Flat::ParseQs, body.as_bytes(), "To", false),
                flat_read(Flat::CaseInsensitive, body.as_bytes(), "To", false),
                nested_read(body.as_bytes(), true).read(&["To"]),
                qs_read(body.as_bytes()).read(&["To"]),
            ];
            assert!(
                others.iter().any(|other| *other != first),
                "{body}: every reader reads {first:?}"
            );
        }
    }
    // qs renumbers a sparse list, PHP does not.
    let sparse = b"Lines[1][sku]=s9";
    assert_eq!(
        qs_read(sparse).read(&["Lines", "0", "sku"]),
        Some("s9".into())
    );
    assert_eq!(
        nested_read(sparse, false).read(&["Lines", "0", "sku"]),
        None
    );
    // PHP reads `T.o` as `T_o`; qs keeps deep groups as one key.
    assert!(nested_read(b"T.o=1", false).child("T_o").is_some());
    assert!(
        qs_read(b"Meta[a][b][c][d][e][f]=1")
            .read(&["Meta", "a", "b", "c", "d", "e", "[f]"])
            .is_some()
    );
}

proptest! {
    /// Any bytes as a form body: read or refused, never a panic.
    #[test]
    fn any_form_body_is_read_or_refused(
        body in proptest::collection::vec(
            prop::sample::select(b"ab=&%[]+;.0Tt5 \x00\xc3\xa9F".to_vec()),
            0..80,
        ),
    ) {
        let policies = PolicySet::new(
            parse_policy_file(std::path::Path::new("fuzz.toml"), POLICY).unwrap(),
        );
        let _ = gateway_terms(&policies, &body);
    }
}
