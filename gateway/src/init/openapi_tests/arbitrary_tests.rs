//! Arbitrary descriptions: whatever they say, drafting never panics and its live drafts load.

use proptest::prelude::*;

use super::*;

/// Names as descriptions write them, odd ones included.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z][A-Za-z0-9_]{0,8}",
        "[a-z]{1,4}[-./ \\[\\]{}'\"$@é]{1,2}[a-z]{0,4}",
        ".{0,6}",
    ]
}

fn schema() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(json!({"type": "string"})),
        Just(json!({"type": ["integer", "null"]})),
        Just(json!({"type": "array", "items": {"type": "string"}})),
        Just(json!({"type": "object", "properties": {"a": {"type": "string"}}})),
        Just(json!({"$ref": "#/components/schemas/S"})),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        (
            prop::collection::vec((name(), inner), 0..4),
            prop::collection::vec(name(), 0..2),
        )
            .prop_map(|(props, required)| {
                let properties: serde_json::Map<String, Value> = props.into_iter().collect();
                json!({"type": "object", "properties": properties, "required": required})
            })
    })
}

fn operation() -> impl Strategy<Value = Value> {
    (
        name(),
        prop::sample::select(vec![
            "application/json",
            "application/x-www-form-urlencoded",
            "application/merge-patch+json",
            "text/plain",
        ]),
        schema(),
        prop::collection::vec(
            (
                name(),
                prop::sample::select(vec!["query", "header", "cookie"]),
                any::<bool>(),
            ),
            0..3,
        ),
    )
        .prop_map(|(id, media, schema, params)| {
            let parameters: Vec<Value> = params
                .into_iter()
                .map(|(n, at, required)| json!({"name": n, "in": at, "required": required}))
                .collect();
            json!({"operationId": id, "parameters": parameters,
                   "requestBody": {"content": {media: {"schema": schema}}}})
        })
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            name(),
            name().prop_map(|n| format!("{{{n}}}")),
            name().prop_map(|n| format!("{{{n}}}.json"))
        ],
        1..4,
    )
    .prop_map(|segments| format!("/{}", segments.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever the description says, drafting never panics and what it leaves live loads
    /// as a policy file (names unique, every term in its summary).
    #[test]
    fn live_drafts_always_load(
        ops in prop::collection::vec((path(), prop::sample::select(vec!["post", "put", "patch", "delete"]), operation()), 1..5),
        s in schema(),
    ) {
        let mut paths = serde_json::Map::new();
        for (path, method, op) in ops {
            paths.entry(path).or_insert_with(|| json!({}))[method] = op;
        }
        let d = json!({"openapi": "3.1.0", "paths": paths, "components": {"schemas": {"S": s}}});
        let (text, outcomes, _) = draft_all(&d);
        if outcomes.iter().any(|o| o.commented.is_none()) {
            let loaded = crate::config::parse_policy_file(std::path::Path::new("drafts.toml"), &text);
            prop_assert!(loaded.is_ok(), "{:?}\n{text}", loaded.err().map(|e| e.to_string()));
            let policies = loaded.unwrap_or_default();
            let mut names: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            prop_assert_eq!(names.len(), policies.len());
            prop_assert!(crate::policy::conflicts(&policies).is_empty(), "{text}");
        }
    }
}
