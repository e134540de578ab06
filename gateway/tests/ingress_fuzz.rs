//! Bounded property runs over the ingress: for any request target, query and JSON body, either
//! the gateway refuses the request, or every reading that a strict or a lenient framework makes
//! of it gives the same route and exactly the terms the gateway extracted (so the terms the User
//! approves are the terms that run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt;

use poppy_gateway::config::parse_policy_file;
use poppy_gateway::ingress::reading::HttpRequest;
use poppy_gateway::ingress::{RouteMatch, check_target, match_route, read_policy_request};
use poppy_gateway::policy::{PathTemplate, PolicySet, percent_decode};
use proptest::prelude::*;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

const POLICIES: &str = r#"
[[operation]]
name = "transfer"
method = "POST"
path = "/accounts/{account}/transfers"
id_prefix = "trf"
expires_in = "15m"
same_action = ["account"]
summary = "Send {amount} {currency} from {account} to {to}."
[operation.terms]
account = { path = "account" }
amount = { body = "$.amount" }
to = { body = "$.to" }
currency = { query = "currency" }

[[operation]]
name = "confirm"
method = "GET"
path = "/confirm/{code}"
id_prefix = "cnf"
expires_in = "15m"
same_action = ["code"]
summary = "Confirm {code}."
[operation.terms]
code = { path = "code" }
"#;

fn policies() -> PolicySet {
    PolicySet::new(parse_policy_file(std::path::Path::new("fuzz.toml"), POLICIES).unwrap())
}

/// What lenient frameworks make of a path: each transformation alone, and all together.
fn lenient_readings(raw: &str) -> Vec<String> {
    let rooted = if raw.starts_with('/') {
        raw.to_owned()
    } else {
        format!("/{raw}")
    };
    let decoded = percent_decode(&rooted);
    let lossy = String::from_utf8_lossy(
        &rooted
            .split('/')
            .map(|s| percent_decode(s).into_bytes())
            .collect::<Vec<_>>()
            .join(&b'/'),
    )
    .into_owned();
    let steps: [fn(&str) -> String; 6] = [
        |p| {
            p.split('/')
                .map(|s| s.split(';').next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("/")
        },
        |p| p.split('\0').next().unwrap_or("").to_owned(),
        |p| {
            p.split('/')
                .map(|s| s.trim_end_matches(['.', ' ', '\t']))
                .collect::<Vec<_>>()
                .join("/")
        },
        |p| match p.trim_end_matches('/').rsplit_once('.') {
            Some((stem, ext)) if !ext.contains('/') && !ext.is_empty() => stem.to_owned(),
            _ => p.to_owned(),
        },
        |p| {
            p.chars()
                .map(|c| match c {
                    '\u{17f}' => 's',
                    '\u{212a}' => 'k',
                    '\u{ff01}'..='\u{ff5e}' => char::from_u32(c as u32 - 0xfee0).unwrap_or(c),
                    c => c,
                })
                .flat_map(char::to_lowercase)
                .collect()
        },
        |p| {
            let mut out: Vec<&str> = Vec::new();
            for segment in p.split('/') {
                match segment {
                    "." => {}
                    ".." => {
                        out.pop();
                    }
                    s => out.push(s),
                }
            }
            out.join("/")
        },
    ];
    let mut readings = vec![decoded.clone(), lossy.clone()];
    for step in steps {
        readings.push(step(&lossy));
    }
    let mut all = lossy;
    for step in steps {
        all = step(&all);
    }
    readings.push(all);
    readings
}

fn segment() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "accounts",
        "ACCOUNTS",
        "a1",
        "a%31",
        "transfers",
        "Transfers",
        "transfers.json",
        "a1;x=1",
        "..",
        ".",
        "%2e%2e",
        "%2F",
        "a%2Fb",
        "tran%73fers",
        "tran%C5%BFfers",
        "%EF%BD%94ransfers",
        "transfers.",
        "transfers%20",
        "transfers%00",
        "",
        "x",
        "confirm",
        "c1",
        "..;",
        "%3B",
        "tran%C1%B3fers",
        "a\\b",
        "%5C",
    ])
    .prop_map(str::to_owned)
}

fn target() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(segment(), 0..5)).prop_map(|(slash, segments)| {
        let path = segments.join("/");
        if slash { format!("/{path}") } else { path }
    })
}

fn method() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["POST", "post", "GET", "HEAD", "DELETE", "PUT"])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    /// A target the gateway accepts reaches, in every lenient reading, the route the gateway
    /// matched (with the same captures) or no policy route at all.
    #[test]
    fn accepted_targets_read_the_same_everywhere(method in method(), raw in target()) {
        let policies = policies();
        let mcp = PathTemplate::parse("/mcp").unwrap();
        let Ok(checked) = check_target(raw.as_bytes()) else { return Ok(()) };
        let Ok(route) = match_route(&policies, Some(&mcp), method, &checked.path, false) else {
            return Ok(());
        };
        let effective = if method.eq_ignore_ascii_case("HEAD") { "GET" } else { method };
        for reading in lenient_readings(&checked.path) {
            let lenient = policies.find_route(effective, &reading);
            match (&route, lenient) {
                (_, None) => {}
                (RouteMatch::Policy(policy, captures), Some((other, other_captures))) => {
                    prop_assert_eq!(&policy.name, &other.name, "{} read as {}", raw, reading);
                    // Compared without case: the folding reading lowercases the whole path,
                    // where a framework folds only for matching.
                    let fold = |c: &[(String, String)]| {
                        c.iter().map(|(n, v)| (n.clone(), v.to_lowercase())).collect::<Vec<_>>()
                    };
                    prop_assert_eq!(fold(captures), fold(&other_captures), "{} read as {}", raw, reading);
                }
                (_, Some((other, _))) => {
                    prop_assert!(false, "{} {} passes through, but reads as {} ({})", method, raw, reading, other.name);
                }
            }
        }
    }
}

fn query_pair() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "currency",
            "CURRENCY",
            "%63urrency",
            "currenc%79",
            "fee",
            "",
            "cur+rency",
        ]),
        prop::sample::select(vec!["USD", "EUR", "%zz", "a+b", "%C3%A9", "", "%ff"]),
        any::<bool>(),
    )
        .prop_map(|(k, v, eq)| if eq { format!("{k}={v}") } else { k.to_owned() })
}

fn query() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["USD", "EUR", "a+b", "%C3%A9", "%zz"]),
        prop_oneof![3 => Just(Vec::new()), 1 => prop::collection::vec(query_pair(), 1..3)],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(currency, mut pairs, semicolon)| {
            pairs.insert(0, format!("currency={currency}"));
            pairs.join(if semicolon { ";" } else { "&" })
        })
}

fn member() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "amount",
            "AMOUNT",
            "Amount",
            "to",
            "tO",
            "note",
            "am\\u006funt",
            "\u{17f}ome",
        ]),
        prop::sample::select(vec![
            "\"10.00\"",
            "10",
            "10.5",
            "10.50",
            "1e2",
            "-0",
            "9007199254740993",
            "9007199254740991",
            "\"bob\"",
            "null",
            "{}",
            "{\"a\":1,\"a\":2}",
            "[1,2]",
            "\"a\\u0000b\"",
            "\"\\ud800\"",
            "1.0",
            "0.1",
        ]),
    )
        .prop_map(|(k, v)| format!("\"{k}\":{v}"))
}

fn body() -> impl Strategy<Value = String> {
    let value = || {
        prop::sample::select(vec![
            "\"10.00\"",
            "10",
            "10.5",
            "\"bob\"",
            "0.1",
            "10.50",
            "1e2",
            "9007199254740993",
            "{\"a\":1,\"a\":2}",
            "\"a\\u0000b\"",
            "\"x\"",
            "7",
            "2.25",
        ])
    };
    let extra = prop_oneof![3 => Just(Vec::new()), 1 => prop::collection::vec(member(), 1..3)];
    (value(), value(), extra, any::<bool>()).prop_map(|(amount, to, mut extra, first)| {
        let required = [format!("\"amount\":{amount}"), format!("\"to\":{to}")];
        if first {
            extra.splice(0..0, required);
        } else {
            extra.extend(required);
        }
        format!("{{{}}}", extra.join(","))
    })
}

/// First-wins JSON, as some parsers read duplicate keys.
struct FirstWins(Value);

impl<'de> Deserialize<'de> for FirstWins {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FirstWinsVisitor)
    }
}

struct FirstWinsVisitor;

impl<'de> Visitor<'de> for FirstWinsVisitor {
    type Value = FirstWins;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<FirstWins, E> {
        Ok(FirstWins(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<FirstWins, E> {
        Ok(FirstWins(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<FirstWins, E> {
        Ok(FirstWins(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<FirstWins, E> {
        Ok(FirstWins(Value::from(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<FirstWins, E> {
        Ok(FirstWins(Value::from(v)))
    }
    fn visit_unit<E>(self) -> Result<FirstWins, E> {
        Ok(FirstWins(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FirstWins, A::Error> {
        let mut items = Vec::new();
        while let Some(FirstWins(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(FirstWins(Value::Array(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FirstWins, A::Error> {
        let mut out = Map::new();
        while let Some((k, FirstWins(v))) = map.next_entry::<String, FirstWins>()? {
            out.entry(k).or_insert(v);
        }
        Ok(FirstWins(Value::Object(out)))
    }
}

/// Go's decoder: the exact key, else the first key equal under case folding.
fn go_lookup<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).or_else(|| {
        object
            .iter()
            .find(|(k, _)| {
                k.to_lowercase() == key.to_lowercase()
                    || k.replace('\u{17f}', "s").to_lowercase() == key
            })
            .map(|(_, v)| v)
    })
}

fn numbers_read_alike(value: &Value) -> bool {
    match value {
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.unsigned_abs() < (1 << 53),
            (_, Some(u), _) => u < (1 << 53),
            (_, _, Some(f)) => {
                serde_json::Number::from_f64(f).is_some_and(|r| r.to_string() == n.to_string())
            }
            _ => false,
        },
        Value::Array(items) => items.iter().all(numbers_read_alike),
        Value::Object(map) => map.values().all(numbers_read_alike),
        _ => true,
    }
}

/// Every way of reading a query parameter: first, last, any case.
fn query_readings(query: &str, name: &str) -> Vec<Option<String>> {
    let pairs: Vec<(String, String)> = query
        .split(['&', ';'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let d = |s: &str| percent_decode(&s.replace('+', " "));
            (d(k), d(v))
        })
        .collect();
    let exact: Vec<&String> = pairs
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v)
        .collect();
    let folded: Vec<&String> = pairs
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .collect();
    vec![
        exact.first().map(|v| (*v).clone()),
        exact.last().map(|v| (*v).clone()),
        folded.first().map(|v| (*v).clone()),
        folded.last().map(|v| (*v).clone()),
    ]
}

/// A request to the transfer the gateway accepts gives every parser (last-wins, first-wins,
/// Go's case-insensitive fields, double-based numbers, first/last/any-case query readers)
/// exactly the gateway's terms.
#[test]
fn accepted_bodies_and_queries_give_every_parser_the_terms() {
    let policies = policies();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 4000,
        ..ProptestConfig::default()
    });
    let accepted = std::cell::Cell::new(0usize);
    runner
        .run(
            &(query(), body(), prop::bool::weighted(0.8)),
            |(query, body, json_type)| {
                let target_text = format!("/accounts/a1/transfers?{query}");
                let Ok(target) = check_target(target_text.as_bytes()) else {
                    return Ok(());
                };
                let Ok(RouteMatch::Policy(policy, captures)) =
                    match_route(&policies, None, "POST", &target.path, false)
                else {
                    return Ok(());
                };
                let mut headers = http::HeaderMap::new();
                let content_type = if json_type {
                    "application/json"
                } else {
                    "application/x-www-form-urlencoded"
                };
                headers.insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
                let request = HttpRequest {
                    method: "POST",
                    target: &target,
                    headers: &headers,
                    body: body.as_bytes(),
                };
                let Ok(reading) = read_policy_request(&policy, &captures, &request) else {
                    return Ok(());
                };
                accepted.set(accepted.get() + 1);
                prop_assert!(json_type, "a form body was accepted: {}", body);

                let last_wins: Value = serde_json::from_str(&body).unwrap();
                let FirstWins(first_wins) = serde_json::from_str(&body).unwrap();
                prop_assert_eq!(&last_wins, &first_wins, "{}", body);
                prop_assert!(numbers_read_alike(&last_wins), "{}", body);
                let object = last_wins.as_object().unwrap();
                for term in ["amount", "to"] {
                    prop_assert_eq!(
                        go_lookup(object, term),
                        reading.terms.get(term),
                        "{} in {}",
                        term,
                        body
                    );
                    prop_assert_eq!(
                        object.get(term),
                        reading.terms.get(term),
                        "{} in {}",
                        term,
                        body
                    );
                }
                let currency = reading
                    .terms
                    .get("currency")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                for read in query_readings(target.query.as_deref().unwrap_or(""), "currency") {
                    prop_assert_eq!(&read, &currency, "currency in {}", query);
                }
                Ok(())
            },
        )
        .unwrap();
    eprintln!(
        "{} of 4000 generated requests accepted and checked",
        accepted.get()
    );
    // Not vacuous: a good share of the generated requests is accepted and checked.
    assert!(
        accepted.get() >= 200,
        "only {} of 4000 accepted",
        accepted.get()
    );
}
