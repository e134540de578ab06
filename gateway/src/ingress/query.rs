//! Strict query strings on policy routes: one reading that every framework shares.

use std::collections::HashMap;

use super::Refusal;
use super::json::fold_case;
use super::target::decode_strict;

/// The query's parameters, form-decoded (`+` is a space), in order. Refused: `;` (an old
/// separator some parsers still split on), invalid escapes or UTF-8, an empty name, and any
/// name twice, including percent-encoded and case-folded twins (`a`, `%61`, `A`): Starlette
/// acts on the last value, Flask on the first, ASP.NET joins them.
pub(crate) fn parse_strict(query: Option<&str>) -> Result<Vec<(String, String)>, Refusal> {
    let Some(query) = query else {
        return Ok(Vec::new());
    };
    let refuse = |detail: String| Refusal::new(400, "invalid_query", detail);
    if query.contains(';') {
        return Err(refuse(
            "the query has `;`, which some parsers read as a separator: percent-encode it as %3B"
                .into(),
        ));
    }
    let decode = |text: &str| {
        decode_strict(&text.replace('+', " ")).and_then(|bytes| String::from_utf8(bytes).ok())
    };
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut parameters = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let (Some(name), Some(value)) = (decode(raw_name), decode(raw_value)) else {
            return Err(refuse(format!(
                "query parameter `{pair}` has an invalid `%` escape or is not UTF-8"
            )));
        };
        if name.is_empty() {
            return Err(refuse(format!("query parameter `{pair}` has no name")));
        }
        if let Some(earlier) = seen.insert(fold_case(&name), name.clone()) {
            return Err(refuse(format!(
                "query parameter `{name}` is sent more than once (with `{earlier}`): frameworks pick different ones, send it once"
            ))
            .naming("parameter", name));
        }
        parameters.push((name, value));
    }
    Ok(parameters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_query_reads_once() {
        assert_eq!(
            parse_strict(Some("a=1&b=two+words&c=%21&d")).unwrap(),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "two words".into()),
                ("c".into(), "!".into()),
                ("d".into(), String::new()),
            ]
        );
        assert!(parse_strict(None).unwrap().is_empty());
    }

    #[test]
    fn twins_and_odd_spellings_are_refused() {
        for query in [
            "amount=10&amount=9999",
            "amount=10&%61mount=9999",
            "amount=10&AMOUNT=9999",
            "amount=10;amount=9999",
            "amount=%zz",
            "amount=%ff",
            "=x",
        ] {
            assert!(parse_strict(Some(query)).is_err(), "{query}");
        }
        let refusal = parse_strict(Some("a=1&a=2")).unwrap_err();
        assert_eq!(refusal.names, Some(("parameter", "a".into())));
    }
}
