//! Bounded property runs over everything a hostile agent or a policy author controls: header
//! parsing, policy loading, summary rendering, route matching. No input may panic, and no
//! revision the gateway did not mint is ever accepted.

use std::path::Path;

use poppy_gateway::config::parse_policy_file;
use poppy_gateway::ingress::check_target;
use poppy_gateway::policy::{PathTemplate, SummaryTemplate, Terms, escape_value};
use poppy_gateway::protocol::{
    ApprovalHeader, Keys, OperationId, Revision, RevisionInput, SigningKey, declared_operations,
};
use proptest::prelude::*;

const POLICY: &str = r#"[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on order {order_id} for {sku}."
[operation.terms]
order_id = { path = "order_id" }
sku = { body = "$.sku" }
"#;

fn keys() -> Keys {
    Keys::new(vec![SigningKey::new(b"fuzzing key 0123456789".to_vec())])
        .unwrap_or_else(|| unreachable!())
}

fn input(request: &[u8]) -> RevisionInput<'_> {
    RevisionInput {
        operation_id: "exc_sAAAAAAAAAAAAAAAABBBBBBBB",
        summary: "s",
        terms: "{}",
        scope: "s:1:a:1:b",
        request,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn header_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = ApprovalHeader::parse([bytes.as_slice()]);
        let _ = declared_operations([bytes.as_slice()]);
    }

    #[test]
    fn approval_like_headers_never_panic(id in "[ -~]{0,40}", rev in "[ -~]{0,60}", extra in "[ -~]{0,20}") {
        let header = format!("operation_id=\"{id}\", revision=\"{rev}\", {extra}");
        if let Ok(approval) = ApprovalHeader::parse([header.as_bytes()]) {
            prop_assert!(approval.operation_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
            let _ = OperationId::parse(&approval.operation_id);
            prop_assert!(Revision::check(&keys(), &approval.revision, &input(b"r"), 0) == Revision::Invalid);
        }
    }

    /// Any change to a minted revision (a character replaced, removed or added) is refused.
    #[test]
    fn mutated_revisions_are_never_accepted(position in 0usize..40, replacement in "[A-Za-z0-9_-]", cut in any::<bool>()) {
        let keys = keys();
        let minted = Revision::mint(keys.current(), &input(b"r"), 4_000_000_000);
        let mut mutated: Vec<char> = minted.chars().collect();
        let at = position % mutated.len();
        let replacement = replacement.chars().next().unwrap_or('A');
        if cut {
            mutated.remove(at);
        } else if mutated[at] == replacement {
            mutated.insert(at, replacement);
        } else {
            mutated[at] = replacement;
        }
        let mutated: String = mutated.into_iter().collect();
        prop_assert_ne!(&mutated, &minted);
        prop_assert_eq!(Revision::check(&keys, &mutated, &input(b"r"), 0), Revision::Invalid);
    }

    #[test]
    fn policy_loading_never_panics(text in "[ -~\n]{0,400}") {
        let _ = parse_policy_file(Path::new("fuzz.toml"), &text);
    }

    /// Policies that are one edit away from a valid one: loading reports errors, never panics.
    #[test]
    fn near_valid_policies_never_panic(position in 0usize..400, insert in "[ -~\n]{0,8}") {
        let mut text = POLICY.to_owned();
        let at = position % text.len();
        if text.is_char_boundary(at) {
            text.insert_str(at, &insert);
        }
        let _ = parse_policy_file(Path::new("fuzz.toml"), &text);
    }

    #[test]
    fn summaries_never_panic_and_values_stay_inert(template in "[ -~]{0,80}", value in "\\PC{0,40}") {
        if let Ok(summary) = SummaryTemplate::parse(&template) {
            let names: Vec<String> = summary.placeholders().map(str::to_owned).collect();
            let terms: Terms = names.into_iter().map(|n| (n, serde_json::Value::from(value.clone()))).collect();
            let _ = summary.render(&terms);
        }
        let escaped: Vec<char> = escape_value(&value).chars().collect();
        for (i, c) in escaped.iter().enumerate() {
            if matches!(c, '[' | ']' | '<' | '>' | '!' | '`' | '*') {
                prop_assert!(i > 0 && escaped[i - 1] == '\\', "unescaped {:?} in {:?}", c, escaped);
            }
        }
    }

    #[test]
    fn route_matching_never_panics(template in "/[ -~]{0,30}", path in "[ -~]{0,60}") {
        if let Ok(t) = PathTemplate::parse(&template) {
            let _ = t.matches(&path);
        }
        // The ingress's target rules replaced the older dot-segment check.
        let _ = check_target(path.as_bytes());
    }
}
