//! Checking an operation's `terms` before asking the User (spec 5): against its `summary`
//! (the Company writes both, so the summary alone could describe other terms) and against
//! what this agent asked for.

use serde_json::Value;

use crate::display;

/// What this agent sent: the JSON body, the path segments and the query parameters.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    pub body: Option<Value>,
    pub path: String,
    pub query: Option<String>,
}

/// What the checks found. `summary_misses` and `differs` are problems; the rest is for the
/// User to know.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    /// Term values (`name`, `value`) the summary does not mention.
    pub summary_misses: Vec<(String, String)>,
    /// Terms that differ from what was asked for: `name`, asked, in the terms.
    pub differs: Vec<(String, String, String)>,
    /// Terms that aren't in the request: the Company added them (a price, a fee).
    pub added: Vec<(String, String)>,
    /// Values the request sent that no term mentions.
    pub not_in_terms: Vec<(String, String)>,
}

impl Findings {
    pub fn has_problems(&self) -> bool {
        !self.summary_misses.is_empty() || !self.differs.is_empty()
    }
}

/// Every scalar inside `value`, with its dotted path under `prefix`.
fn leaves(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(&path, inner, out);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                leaves(&format!("{prefix}[{i}]"), inner, out);
            }
        }
        Value::Null => {}
        scalar => out.push((prefix.to_owned(), display::json_text(scalar))),
    }
}

/// The last key of a dotted path (`a.b[0]` → `b`).
fn last_key(path: &str) -> &str {
    let key = path.rsplit('.').next().unwrap_or(path);
    key.split('[').next().unwrap_or(key)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Check `terms` against the `summary` and against what was asked for.
pub fn check(terms: Option<&Value>, summary: &str, asked: &Asked) -> Findings {
    let mut findings = Findings::default();
    let Some(Value::Object(terms)) = terms else {
        return findings;
    };
    // The summary as its words, without Markdown escapes or emphasis.
    let plain = display::markdown_to_plain(summary);

    let mut asked_leaves = Vec::new();
    if let Some(body) = &asked.body {
        leaves("", body, &mut asked_leaves);
    }
    let mut asked_values: Vec<String> = asked_leaves.iter().map(|(_, v)| v.clone()).collect();
    asked_values.extend(
        asked
            .path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode),
    );
    if let Some(query) = &asked.query {
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            asked_values.push(percent_decode(key));
            asked_values.push(percent_decode(value));
        }
    }

    let mut term_values = Vec::new();
    for (name, value) in terms {
        let mut term_leaves = Vec::new();
        leaves(name, value, &mut term_leaves);
        for (path, text) in &term_leaves {
            if !plain.contains(text.as_str()) && !summary.contains(text.as_str()) {
                findings.summary_misses.push((path.clone(), text.clone()));
            }
        }
        let text = display::json_text(value);
        // A body member of the same name is what this agent asked for this term to be.
        if let Some((_, sent)) = asked_leaves
            .iter()
            .find(|(path, _)| path == name || last_key(path) == name)
        {
            if *sent != text {
                findings
                    .differs
                    .push((name.clone(), sent.clone(), text.clone()));
            }
        } else if !term_leaves.iter().all(|(_, v)| asked_values.contains(v)) {
            findings.added.push((name.clone(), text.clone()));
        }
        term_values.extend(term_leaves.into_iter().map(|(_, v)| v));
    }

    for (path, sent) in asked_leaves {
        let named = terms
            .keys()
            .any(|name| *name == path || name == last_key(&path));
        if !named && !term_values.contains(&sent) {
            findings.not_in_terms.push((path, sent));
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn asked(body: Value, path: &str) -> Asked {
        Asked {
            body: Some(body),
            path: path.to_owned(),
            query: None,
        }
    }

    #[test]
    fn agreeing_terms_have_no_problems() {
        let terms = json!({"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m", "price": "190.00"});
        let findings = check(
            Some(&terms),
            r"Exchange item **itm\_4Qa** on order ord_7Hk2 for stormline-insulated-m, **190.00**.",
            &asked(
                json!({"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}),
                "/orders/ord_7Hk2/exchanges",
            ),
        );
        assert!(!findings.has_problems(), "{findings:?}");
        assert_eq!(findings.added, [("price".to_owned(), "190.00".to_owned())]);
        assert!(findings.not_in_terms.is_empty());
    }

    #[test]
    fn differences_are_found() {
        let terms =
            json!({"order_id": "o1", "replacement_sku": "hat-rain", "fee": {"amount": "5.00"}});
        let findings = check(
            Some(&terms),
            "Exchange on order o1 for hat-rain.",
            &asked(
                json!({"replacement_sku": "socks-wool", "note": "gift"}),
                "/orders/o1/exchanges",
            ),
        );
        assert!(findings.has_problems());
        assert_eq!(
            findings.differs,
            [(
                "replacement_sku".to_owned(),
                "socks-wool".to_owned(),
                "hat-rain".to_owned()
            )]
        );
        assert_eq!(
            findings.summary_misses,
            [("fee.amount".to_owned(), "5.00".to_owned())]
        );
        assert_eq!(
            findings.not_in_terms,
            [("note".to_owned(), "gift".to_owned())]
        );
    }

    #[test]
    fn query_and_encoded_path_values_count_as_asked() {
        let terms = json!({"order_id": "a b", "reason": "too small"});
        let findings = check(
            Some(&terms),
            "Cancel a b: too small",
            &Asked {
                body: None,
                path: "/orders/a%20b/cancel".into(),
                query: Some("reason=too+small".into()),
            },
        );
        assert_eq!(findings, Findings::default());
    }
}
