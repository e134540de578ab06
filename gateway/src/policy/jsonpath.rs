//! JSONPath queries with each expression parsed once per thread rather than once per request:
//! re-parsing `$.item_id` was 13% of a mint's CPU (BENCHMARKS.md). Expressions come from the
//! policies only, so the cache stays small; it is emptied should it ever pass a bound (every
//! reload may bring new expressions, and a forgotten one is only parsed again).

use std::cell::RefCell;
use std::collections::HashMap;

use jsonpath_rust::parser::model::JpQuery;
use jsonpath_rust::parser::parse_json_path;
use jsonpath_rust::query::js_path_process;
use serde_json::Value;

/// Distinct expressions kept per thread at most.
const MAX_CACHED: usize = 1024;

thread_local! {
    static COMPILED: RefCell<HashMap<Box<str>, JpQuery>> = RefCell::new(HashMap::new());
}

/// What `path` selects in `value`, exactly as `jsonpath_rust::JsonPath::query` answers, with
/// the expression's parse remembered. `None` when `path` is not a valid JSONPath, or the query
/// fails.
pub(crate) fn query<'a>(value: &'a Value, path: &str) -> Option<Vec<&'a Value>> {
    COMPILED.with(|cache| {
        let mut cache = cache.borrow_mut();
        if !cache.contains_key(path) {
            let parsed = parse_json_path(path).ok()?;
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
            cache.insert(path.into(), parsed);
        }
        let compiled = cache.get(path)?;
        let found = js_path_process(compiled, value).ok()?;
        Some(found.into_iter().map(|r| r.val()).collect())
    })
}

#[cfg(test)]
mod tests {
    use jsonpath_rust::JsonPath as _;
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_as_the_library_does() {
        let doc = json!({"a": {"b": [1, 2, {"c": "x"}]}, "n": null, "s": "t"});
        for path in [
            "$.a.b[2].c",
            "$.a.b[*]",
            "$.a.b",
            "$.missing",
            "$.n",
            "$.s",
            "$..c",
            "$.a.b[?@ > 1]",
            "$",
        ] {
            // Twice: parsed, then from the cache.
            for _ in 0..2 {
                assert_eq!(query(&doc, path), doc.query(path).ok(), "{path}");
            }
        }
    }

    #[test]
    fn invalid_expressions_select_nothing_and_are_not_kept() {
        let doc = json!({"a": 1});
        assert_eq!(query(&doc, "$.["), None);
        assert!(COMPILED.with(|c| !c.borrow().contains_key("$.[")));
    }
}
