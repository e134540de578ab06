//! The shared keys' checks, as `check` reports them.

use crate::config::parse_policy_file;

fn errors(terms: &str, ignore: &str, path: &str) -> Vec<String> {
    let text = format!(
        "[[operation]]\nname = \"call\"\nmethod = \"POST\"\npath = \"{path}\"\nid_prefix = \"cal\"\nexpires_in = \"15m\"\nsame_action = [\"to\"]\nsummary = \"Call {{to}}.\"\nignore = [{ignore}]\n[operation.terms]\n{terms}\n"
    );
    match parse_policy_file(std::path::Path::new("p.toml"), &text) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn form_terms_and_ignored_names_are_checked() {
    let ok = |terms: &str, ignore: &str| {
        let found = errors(terms, ignore, "/Calls.json");
        assert!(found.is_empty(), "{terms} {ignore}: {found:?}");
    };
    ok("to = { form = \"To\" }", "");
    ok(
        "to = { form = \"customer[to]\" }",
        "\"StatusCallback\", \"metadata\"",
    );
    ok("to = { form = \"to[]\" }", "\"lines[0][sku]\"");
    // Field names in `ignore` make the body a form, with no form term.
    assert!(errors("to = { path = \"x\" }", "\"Note\"", "/Calls/{x}.json").is_empty());
    let refused = |terms: &str, ignore: &str, needle: &str| {
        let found = errors(terms, ignore, "/Calls/{x}.json");
        assert!(
            found.iter().any(|e| e.contains(needle)),
            "{terms} {ignore}: {found:?}"
        );
    };
    refused("to = { form = \"a.b\" }", "", "form `a.b` has `.`");
    refused("to = { form = \"_method\" }", "", "method");
    refused("to = { form = \"a[][b]\" }", "", "`[]` before its end");
    refused(
        "to = { form = \"To\" }",
        "\"a[b\"",
        "ignore: the form field name `a[b`",
    );
    refused(
        "to = { form = \"To\" }",
        "\"$.note\"",
        "JSON or a form, not both",
    );
    let mixed = "[[operation]]\nname = \"call\"\nmethod = \"POST\"\npath = \"/c\"\nid_prefix = \"cal\"\nexpires_in = \"15m\"\nsame_action = [\"to\"]\nsummary = \"Call {to} {x}.\"\n[operation.terms]\nto = { body = \"$.to\" }\nx = { form = \"X\" }\n";
    let found = parse_policy_file(std::path::Path::new("p.toml"), mixed).unwrap_err();
    assert!(
        found.to_string().contains("JSON or a form, not both"),
        "{found}"
    );
    refused(
        "to = { body = \"$.to\" }",
        "\"Note\"",
        "JSON or a form, not both",
    );
}

/// `optional = true`: on what a request sends, written in its own section, never read
/// by a computation or a lookup's URL; each problem at its file:line:column.
#[test]
fn optional_terms_are_checked() {
    let policy = |summary: &str, terms: &str| {
        format!(
            "[[operation]]\nname = \"pay\"\nmethod = \"POST\"\npath = \"/p/{{id}}\"\nid_prefix = \"pay\"\nexpires_in = \"15m\"\nsame_action = [\"id\"]\nsummary = \"{summary}\"\n[operation.terms]\nid = {{ path = \"id\" }}\n{terms}\n"
        )
    };
    let load = |summary: &str, terms: &str| {
        parse_policy_file(std::path::Path::new("p.toml"), &policy(summary, terms))
            .map_err(|e| e.to_string())
    };
    let loaded = load(
        "Pay {id}{?coupon} with {coupon}{/coupon}.",
        "coupon = { body = \"$.coupon\", optional = true }",
    )
    .unwrap();
    assert!(loaded[0].is_optional("coupon") && !loaded[0].is_optional("id"));
    // `{...}` covers every term not written out, optional or not.
    assert!(
        load(
            "Pay {id}. {...}",
            "coupon = { body = \"$.coupon\", optional = true }\nnote = { body = \"$.n\" }"
        )
        .is_ok()
    );
    for (summary, terms, needle) in [
        (
            "Pay {id} with {coupon}.",
            "coupon = { body = \"$.coupon\", optional = true }",
            "p.toml:8:11: operation `pay`: summary writes optional term `{coupon}` outside `{?coupon}…{/coupon}`",
        ),
        (
            "Pay {id}.",
            "x = { path = \"id\", optional = true }",
            "p.toml:11:31: operation `pay`: terms.x: optional: a path capture is always in the request",
        ),
        (
            "Pay {id} {x}.",
            "x = { value = 1, optional = true }",
            "optional: only a term the request sends",
        ),
        (
            "Pay {id}{?c} {c}{/c} {d}.",
            "c = { body = \"$.c\", optional = true }\nd = { compute = \"c * 2\" }",
            "compute `c * 2` reads `c`, which is optional",
        ),
        (
            "Pay {id}{?nope}x{/nope}.",
            "",
            "summary section `{?nope}` names no term",
        ),
        (
            "Pay {id}{?c}x.",
            "c = { body = \"$.c\", optional = true }",
            "`{?c}` has no `{/c}` after it",
        ),
        (
            "Pay {id}.",
            "c = { body = \"$.c\", optional = \"yes\" }",
            "invalid type",
        ),
    ] {
        let found = load(summary, terms).unwrap_err();
        assert!(found.contains(needle), "{summary} {terms}: {found}");
    }
}

#[test]
fn form_terms_are_for_operations() {
    let text = "[[tool]]\nname = \"pay\"\ntool = \"pay\"\nid_prefix = \"pay\"\nexpires_in = \"15m\"\nsame_action = [\"to\"]\nsummary = \"Pay {to}.\"\n[tool.terms]\nto = { form = \"To\" }\n";
    let found = parse_policy_file(std::path::Path::new("p.toml"), text).unwrap_err();
    assert!(
        found
            .to_string()
            .contains("a tool's terms come from its call"),
        "{found}"
    );
}

#[test]
fn captures_with_a_prefix_or_suffix_are_templates() {
    assert!(errors("to = { path = \"Sid\" }", "", "/Calls/{Sid}.json").is_empty());
    assert!(errors("to = { path = \"v\" }", "", "/v{v}/calls").is_empty());
    let found = errors("to = { path = \"Sid\" }", "", "/Calls/{Sid}{x}");
    assert!(
        found.iter().any(|e| e.contains("one per segment")),
        "{found:?}"
    );
}

/// `needs_approval_when` is checked at its key: syntax, names that are not terms, and a
/// `value` term that is no decimal; a good one is kept on the policy.
#[test]
fn conditions_are_checked_at_their_key() {
    let text = |condition: &str| {
        format!(
            "[[operation]]\nname = \"x\"\nmethod = \"POST\"\npath = \"/x/{{id}}\"\nid_prefix = \"x\"\nexpires_in = \"15m\"\nsame_action = [\"id\"]\nsummary = \"{{...}}\"\nneeds_approval_when = \"{condition}\"\n[operation.terms]\nid = {{ path = \"id\" }}\namount = {{ body = \"$.amount\", optional = true }}\nfee = {{ value = \"1.50\" }}\nlabel = {{ value = \"gold\" }}\n"
        )
    };
    let errors =
        |condition: &str| match parse_policy_file(std::path::Path::new("p.toml"), &text(condition))
        {
            Ok(_) => String::new(),
            Err(errors) => errors.to_string(),
        };
    for (condition, expected) in [
        ("amount >", "the expression ends where"),
        ("amount", "a comparison"),
        (
            "amount = 1",
            "p.toml:9:31: operation `x`: needs_approval_when `amount = 1`: unexpected `=` at byte 7",
        ),
        ("total > 0", "names `total`, which is not a term"),
        ("label == 1", "compares `label`, whose value"),
    ] {
        let found = errors(condition);
        assert!(found.contains("p.toml:9:"), "{condition}: {found}");
        assert!(found.contains(expected), "{condition}: {found}");
    }
    // An optional term, a `value` decimal and a path capture may be compared.
    let policies = parse_policy_file(
        std::path::Path::new("p.toml"),
        &text("amount + fee >= 50.00 and not id == 0"),
    )
    .unwrap();
    assert_eq!(
        policies[0]
            .condition
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("amount + fee >= 50.00 and not id == 0")
    );
}
