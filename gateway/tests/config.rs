//! Loading gateway.toml and policy files: defaults, and errors that name file, line, column
//! and key.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on setup errors"
)]

use std::path::Path;

use poppy_e2e::config_files::{
    ConfigFiles as Files, MINIMAL_GATEWAY_TOML as GATEWAY, assert_error_at,
};
use poppy_gateway::config;

const POLICY: &str = r#"[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id", "item_id"]
summary = "Exchange item **{item_id}** on order {order_id} for {replacement_sku}."

[operation.terms]
order_id = { path = "order_id" }
item_id = { body = "$.item_id" }
replacement_sku = { body = "$.replacement_sku" }
"#;

#[test]
fn a_minimal_config_gets_documented_defaults() {
    let files = Files::new(GATEWAY, POLICY);
    let config = files.load_with(config::load).unwrap();
    assert_eq!(config.server.threads, 2);
    assert_eq!(config.server.max_body_bytes, 1024 * 1024);
    assert_eq!(config.store.url, "memory://");
    assert_eq!(config.store.namespace, "poppy");
    assert_eq!(
        config.default_route().unwrap().upstream.release_statuses,
        vec![401, 429]
    );
    assert_eq!(config.session.session_claim, "sid");
    assert_eq!(config.admin_listen, None);
    let policy = config.policies.iter().next().unwrap();
    assert_eq!(policy.name, "exchange");
    assert!(
        config
            .policies
            .find_route("POST", "/orders/o1/exchanges")
            .is_some()
    );
    assert!(
        config
            .policies
            .find_route("GET", "/orders/o1/exchanges")
            .is_none()
    );
}

#[test]
fn the_example_shop_config_loads() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/shop/gateway.toml");
    let config = config::load(&example).unwrap();
    assert!(config.policies.iter().count() >= 2);
}

#[test]
fn unknown_keys_are_errors_with_their_place() {
    let files = Files::new(
        &GATEWAY.replace("[upstream]", "[upstream]\nretries = 3"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        7,
        &["retries"],
    );

    let files = Files::new(GATEWAY, &POLICY.replace("expires_in", "expire_in"));
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        6,
        &["expire_in"],
    );
}

#[test]
fn toml_syntax_errors_have_line_and_column() {
    let files = Files::new(
        &GATEWAY.replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:8080"),
        POLICY,
    );
    assert_error_at(&files.errors_with(config::load), &files.gateway(), 4, &[]);
}

#[test]
fn summaries_must_mention_every_term_and_only_terms() {
    let files = Files::new(GATEWAY, &POLICY.replace(" for {replacement_sku}", ""));
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        8,
        &["summary leaves out term `replacement_sku`"],
    );

    let files = Files::new(
        GATEWAY,
        &POLICY.replace("{order_id} for", "{order_id} ({price}) for"),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        8,
        &["`{price}` names no term"],
    );
}

#[test]
fn same_action_must_name_terms() {
    let files = Files::new(
        GATEWAY,
        &POLICY.replace(r#"["order_id", "item_id"]"#, r#"["order_id", "line"]"#),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        7,
        &["same_action", "`line`"],
    );
}

#[test]
fn a_term_has_exactly_one_valid_source() {
    let files = Files::new(
        GATEWAY,
        &POLICY.replace(
            r#"{ path = "order_id" }"#,
            r#"{ path = "order_id", query = "o" }"#,
        ),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        11,
        &["terms.order_id", "exactly one source"],
    );

    let files = Files::new(
        GATEWAY,
        &POLICY.replace(r#"{ path = "order_id" }"#, r#"{ path = "order" }"#),
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        11,
        &["not a capture"],
    );

    let files = Files::new(GATEWAY, &POLICY.replace(r#""$.item_id""#, r#""$.[[""#));
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        12,
        &["not a JSONPath"],
    );
}

#[test]
fn policy_globs_must_match_and_urls_must_parse() {
    let files = Files::new(
        &GATEWAY.replace("policies/*.toml", "nowhere/*.toml"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        1,
        &["matches no file"],
    );

    let files = Files::new(
        &GATEWAY.replace("http://127.0.0.1:9000", "http://127.0.0.1:9000/api"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        7,
        &["upstream.url"],
    );

    let files = Files::new(
        &format!("{GATEWAY}\n[store]\nurl = \"postgres://x\"\n"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        10,
        &["store.url"],
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let broken = POLICY
        .replace(" for {replacement_sku}", "")
        .replace("15m", "15 minutes")
        .replace("\"exc\"", "\"e-c\"");
    let files = Files::new(GATEWAY, &broken);
    let errors = files.errors_with(config::load);
    assert!(errors.len() >= 3, "{errors:#?}");
}

#[test]
fn duplicate_policy_names_are_refused() {
    let files = Files::new(
        GATEWAY,
        &format!("{POLICY}\n{}", POLICY.replace("/exchanges", "/swaps")),
    );
    let errors = files.errors_with(config::load);
    assert!(
        errors.iter().any(|e| e.contains("used twice")),
        "{errors:#?}"
    );
}

/// Two policies that can hold the same request are refused at the later one's name, naming
/// both, unless the more specific one `overrides` the other; then it wins in any file order.
#[test]
fn overlapping_policy_routes_need_the_more_specific_to_override() {
    let general = POLICY.replace("\"exchange\"", "\"general\"").replace(
        "/orders/{order_id}/exchanges",
        "/orders/{order_id}/{action}",
    );
    let files = Files::new(GATEWAY, &format!("{POLICY}\n{general}"));
    assert_error_at(
        &files.errors_with(config::load),
        &files.policy(),
        16,
        &[
            "`exchange`",
            "`general`",
            "POST /orders/x/exchanges",
            "overrides",
        ],
    );

    let marked = POLICY.replace("summary =", "overrides = [\"general\"]\nsummary =");
    for text in [
        format!("{marked}\n{general}"),
        format!("{general}\n{marked}"),
    ] {
        let config = Files::new(GATEWAY, &text).load_with(config::load).unwrap();
        let held = |path: &str| {
            config
                .policies
                .find_route("POST", path)
                .unwrap()
                .0
                .name
                .clone()
        };
        assert_eq!(held("/orders/o1/exchanges"), "exchange");
        assert_eq!(held("/ORDERS/o1/Exchanges/"), "exchange");
        assert_eq!(held("/orders/o1/returns"), "general");
    }

    for (overrides, needle) in [
        ("[\"nope\"]", "not a policy of this route"),
        ("[\"exchange\"]", "this policy itself"),
    ] {
        let text = POLICY.replace("summary =", &format!("overrides = {overrides}\nsummary ="));
        let errors = Files::new(GATEWAY, &text).errors_with(config::load);
        assert!(errors.iter().any(|e| e.contains(needle)), "{errors:#?}");
    }
}

#[test]
fn store_cluster_urls_and_replica_waits() {
    let store = |table: &str| Files::new(&format!("{GATEWAY}\n[store]\n{table}\n"), POLICY);

    let files = store("url = \"redis+cluster://10.0.0.1:7000,10.0.0.2:7001\"\nwait_replicas = 1");
    let config = files.load_with(config::load).unwrap();
    assert_eq!(config.store.wait_replicas, 1);
    assert_eq!(
        config.store.wait_timeout,
        std::time::Duration::from_millis(50)
    );
    let wait = config.store.options().wait.unwrap();
    assert_eq!((wait.replicas, wait.timeout.as_millis()), (1, 50));
    assert_eq!(
        Files::new(GATEWAY, POLICY)
            .load_with(config::load)
            .unwrap()
            .store
            .options()
            .wait,
        None,
        "off by default"
    );

    let files =
        store("url = \"redis://127.0.0.1:7000/0\"\nwait_replicas = 2\nwait_timeout = \"200ms\"");
    assert_eq!(
        files.load_with(config::load).unwrap().store.wait_timeout,
        std::time::Duration::from_millis(200)
    );

    for (table, line, needle) in [
        ("url = \"redis+cluster://a:7000/0\"", 10, "store.url"),
        ("url = \"redis+cluster://\"", 10, "store.url"),
        ("wait_replicas = 1", 10, "store.wait_replicas"),
        (
            "url = \"redis://a:7000\"\nwait_timeout = \"50ms\"",
            11,
            "store.wait_timeout",
        ),
        (
            "url = \"redis://a:7000\"\nwait_replicas = 1\nwait_timeout = \"0ms\"",
            12,
            "store.wait_timeout",
        ),
        (
            "url = \"redis://a:7000\"\nwait_replicas = 1\nwait_timeout = \"5s\"",
            12,
            "store.wait_timeout",
        ),
    ] {
        let files = store(table);
        assert_error_at(
            &files.errors_with(config::load),
            &files.gateway(),
            line,
            &[needle],
        );
    }
}

#[test]
fn store_caps_and_durability_keys() {
    let store = |table: &str| Files::new(&format!("{GATEWAY}\n[store]\n{table}\n"), POLICY);

    let defaults = Files::new(GATEWAY, POLICY)
        .load_with(config::load)
        .unwrap()
        .store;
    assert!(!defaults.require_durable);
    assert!(!defaults.wait_replicas_set);
    assert_eq!(
        defaults.memory_limits,
        poppy_gateway::store::MemoryLimits::default()
    );

    let config = store("memory_max_records = 10\nmemory_max_bytes = 4096")
        .load_with(config::load)
        .unwrap();
    assert_eq!(config.store.memory_limits.max_records, 10);
    assert_eq!(config.store.options().memory_limits.max_bytes, 4096);

    let config = store("url = \"redis://a:7000\"\nwait_replicas = 0\nrequire_durable = true")
        .load_with(config::load)
        .unwrap();
    assert!(config.store.require_durable && config.store.wait_replicas_set);
    assert_eq!(config.store.options().wait, None);

    for (table, line, needle) in [
        (
            "url = \"redis://a:7000\"\nmemory_max_records = 10",
            11,
            "store.memory_max_records",
        ),
        ("memory_max_bytes = 0", 10, "store.memory_max_bytes"),
    ] {
        let files = store(table);
        assert_error_at(
            &files.errors_with(config::load),
            &files.gateway(),
            line,
            &[needle],
        );
    }
}

/// `[session] verify` has no default: a config that does not choose is refused, and the error
/// says exactly what to add (the migration for configs written before the key existed).
#[test]
fn session_verify_must_be_chosen() {
    let files = Files::exactly(GATEWAY, POLICY);
    let errors = files.errors_with(config::load);
    assert!(
        errors.iter().any(|e| e.contains("session.verify: not set")
            && e.contains("verify = \"required\"")
            && e.contains("verify = \"off\"")
            && e.contains("[session]")),
        "{errors:#?}"
    );

    let files = Files::new(
        &format!("{GATEWAY}\n[session]\nverify = \"maybe\"\n"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        10,
        &["session.verify", "\"maybe\"", "\"required\"", "\"off\""],
    );

    let config = Files::new(GATEWAY, POLICY).load_with(config::load).unwrap();
    assert!(config.session.verify.is_off());
}

/// `verify = "required"` needs an audience and trusted agents with exactly one key source; a
/// JWKS file that is missing or holds no usable key is an error at the agent's table.
#[test]
fn required_verification_needs_trusted_agents() {
    let keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/keys");
    let session = |body: &str| format!("{GATEWAY}\n[session]\nverify = \"required\"\n{body}");
    let agent = |source: &str| {
        format!(
            "audience = [\"https://shop.test\"]\n\n[[session.agent]]\nissuer = \"agent_1\"\n{source}\n"
        )
    };

    let files = Files::new(&session(""), POLICY);
    let errors = files.errors_with(config::load);
    assert!(
        errors.iter().any(|e| e.contains("[[session.agent]]")),
        "{errors:#?}"
    );
    let files = Files::new(
        &session("\n[[session.agent]]\nissuer = \"agent_1\"\njwks_url = \"https://a.test/j\"\n"),
        POLICY,
    );
    let errors = files.errors_with(config::load);
    assert!(
        errors.iter().any(|e| e.contains("needs session.audience")),
        "an agent with static keys needs an audience: {errors:#?}"
    );

    let good = format!(
        "jwks_file = \"{}\"",
        keys.join("es256-a.jwks.json").display()
    );
    let config = Files::new(&session(&agent(&good)), POLICY)
        .load_with(config::load)
        .unwrap();
    assert!(matches!(
        config.session.verify,
        config::VerifySettings::Required(_)
    ));
    // Key material never shows in the config's debug output (reload compares it).
    let debug = format!("{:?}", config.session);
    assert!(
        debug.contains("agent_1") && !debug.contains("\"x\""),
        "{debug}"
    );

    for (source, needle) in [
        ("jwks_file = \"missing.json\"", "cannot read"),
        ("jwks_file = \"gateway.toml\"", "not a JWKS"),
        ("jwks_url = \"ftp://keys\"", "not an http(s) URL"),
        ("", "exactly one of jwks_file and jwks_url"),
        (
            &format!("{good}\njwks_url = \"https://agent.test/jwks\""),
            "exactly one of jwks_file and jwks_url",
        ),
        (
            "jwks_url = \"https://a.test/j\"\njwks_refresh = \"1ms\"",
            "at least 2s",
        ),
    ] {
        let files = Files::new(&session(&agent(source)), POLICY);
        assert_error_at(
            &files.errors_with(config::load),
            &files.gateway(),
            13,
            &[needle],
        );
    }

    for (token, needle) in [
        (
            "introspection_url = \"https://as.test/introspect\"",
            "go together",
        ),
        ("issuer = \"https://as.test\"", "go together"),
        ("client_id = \"x\"", "go together"),
    ] {
        let text = format!("{}\n[session.token]\n{token}\n", session(&agent(&good)));
        let errors = Files::new(&text, POLICY).errors_with(config::load);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("session.token") && e.contains(needle)),
            "{token}: {errors:#?}"
        );
    }
    let with_token = format!(
        "{}\n[session.token]\nintrospection_url = \"https://as.test/introspect\"\nclient_id = \"gw\"\nclient_secret = \"s\"\n",
        session(&agent(&good))
    );
    let config = Files::new(&with_token, POLICY)
        .load_with(config::load)
        .unwrap();
    let debug = format!("{:?}", config.session);
    assert!(
        !debug.contains("client_secret: \"s\"") && !debug.contains("\"s\""),
        "{debug}"
    );

    // What introspection may cost; only with an endpoint; and introspected tokens need an
    // audience to be held to, as JWTs do.
    for (lines, needle) in [
        (
            "introspection_cache = \"2h\"",
            "introspection_cache: at most 3600s",
        ),
        (
            "introspection_cache_refused = \"soon\"",
            "introspection_cache_refused",
        ),
        (
            "introspection_cache_entries = 0",
            "introspection_cache_entries: must be 1",
        ),
        ("introspection_rate = 0", "introspection_rate: must be 1"),
        (
            "introspection_burst = 1000000",
            "introspection_burst: must be 1",
        ),
    ] {
        let text = format!("{with_token}{lines}\n");
        let errors = Files::new(&text, POLICY).errors_with(config::load);
        assert!(
            errors
                .iter()
                .any(|e| e.contains("session.token") && e.contains(needle)),
            "{lines}: {errors:#?}"
        );
    }
    let limits = "introspection_cache = \"1m\"\nintrospection_cache_refused = \"5s\"\nintrospection_cache_entries = 100\nintrospection_rate = 5\nintrospection_burst = 10\n";
    Files::new(&format!("{with_token}{limits}"), POLICY)
        .load_with(config::load)
        .unwrap();
    let jwt_only = format!(
        "{}\n[session.token]\nissuer = \"https://as.test\"\n{good}\nintrospection_rate = 5\n",
        session(&agent(&good))
    );
    let errors = Files::new(&jwt_only, POLICY).errors_with(config::load);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("introspection_rate: has no effect without introspection_url")),
        "{errors:#?}"
    );
    let no_audience = format!(
        "{GATEWAY}\n[session]\nverify = \"required\"\n\n[[session.agent]]\nissuer = \"agent_1\"\n{good}\n\n[session.token]\nintrospection_url = \"https://as.test/introspect\"\nclient_id = \"gw\"\nclient_secret = \"s\"\n"
    );
    let errors = Files::new(&no_audience, POLICY).errors_with(config::load);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("session.token: audience") && e.contains("introspected")),
        "{errors:#?}"
    );

    let files = Files::new(
        &format!("{GATEWAY}\n[session]\nverify = \"off\"\n{}", agent(&good)),
        POLICY,
    );
    let errors = files.errors_with(config::load);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("\"off\" verifies nothing")),
        "{errors:#?}"
    );
}

/// `[conversations]`: off without the table; its listen address and its token source (an
/// environment variable or a file, never the token itself) are checked where they are written.
#[test]
fn conversations_are_checked_where_they_are_written() {
    let with = |lines: &str| format!("{GATEWAY}\n[conversations]\n{lines}");
    assert!(
        Files::new(GATEWAY, POLICY)
            .load_with(config::load)
            .unwrap()
            .conversations
            .is_none()
    );

    let files = Files::new(
        &with("listen = \"127.0.0.1:8090\"\ntoken_file = \"service.token\"\n"),
        POLICY,
    );
    std::fs::write(
        files.dir().join("service.token"),
        "0123456789abcdef-token\n",
    )
    .unwrap();
    let conversations = files
        .load_with(config::load)
        .unwrap()
        .conversations
        .unwrap();
    assert_eq!(conversations.listen, "127.0.0.1:8090");
    assert!(conversations.token.matches(b"0123456789abcdef-token"));
    assert!(!format!("{conversations:?}").contains("0123456789abcdef-token"));

    // Lines: 9 is [conversations], 10 listen, 11 the token's source.
    let files = Files::new(&with("listen = \"127.0.0.1:8090\"\n"), POLICY);
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        9,
        &["exactly one of token_env"],
    );
    let files = Files::new(
        &with("listen = \"127.0.0.1:8090\"\ntoken_env = \"A\"\ntoken_file = \"b\"\n"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        9,
        &["exactly one of token_env"],
    );
    let files = Files::new(
        &with("listen = \"here\"\ntoken_file = \"service.token\"\n"),
        POLICY,
    );
    std::fs::write(files.dir().join("service.token"), "0123456789abcdef-token").unwrap();
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        10,
        &["conversations.listen"],
    );
    let files = Files::new(
        &with("listen = \"127.0.0.1:8080\"\ntoken_file = \"service.token\"\n"),
        POLICY,
    );
    std::fs::write(files.dir().join("service.token"), "0123456789abcdef-token").unwrap();
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        10,
        &["already another listener's address"],
    );
    let files = Files::new(
        &with("listen = \"127.0.0.1:8090\"\ntoken_env = \"POPPY_E2E_NO_SUCH_VARIABLE_EVER\"\n"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        11,
        &["POPPY_E2E_NO_SUCH_VARIABLE_EVER", "not set"],
    );
    let files = Files::new(
        &with("listen = \"127.0.0.1:8090\"\ntoken_file = \"missing.token\"\n"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        11,
        &["token_file", "cannot be read"],
    );
    let files = Files::new(
        &with("listen = \"127.0.0.1:8090\"\ntoken_file = \"short.token\"\n"),
        POLICY,
    );
    std::fs::write(files.dir().join("short.token"), "short\n").unwrap();
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        11,
        &["at least 16 bytes"],
    );
    let files = Files::new(
        &with("listen = \"127.0.0.1:8090\"\ntoken = \"inline-secret-0123456789\"\n"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        11,
        &["token"],
    );
}

/// An agent known by its metadata document (`client_id`) needs the public origins its
/// Sessions are signed for, takes its keys from the document only, and `ca_file` must read.
/// An agent's documents are fetched from global addresses only: a `client_id` on a loopback
/// or private address is an error at its table unless `allow_private_hosts` names its host;
/// an entry that is no host is an error at the key.
#[test]
fn agents_on_private_addresses_must_be_allowed() {
    let session = |body: &str| {
        format!(
            "{GATEWAY}\n[session]\nverify = \"required\"\norigins = [\"https://api.shop.test\"]\n{body}"
        )
    };
    let agent = |url: &str| format!("\n[[session.agent]]\nclient_id = \"{url}\"\n");
    for url in [
        "http://127.0.0.1:8084/agent.json",
        "https://10.0.0.7/agent.json",
        "https://[fd00::7]/agent.json",
        "https://169.254.169.254/agent.json",
    ] {
        let errors = Files::new(&session(&agent(url)), POLICY).errors_with(config::load);
        assert!(
            errors.iter().any(|e| e.contains("gateway.toml:")
                && e.contains(&format!("client_id {url:?}"))
                && e.contains("allow_private_hosts")),
            "{url}: {errors:#?}"
        );
    }
    for (allowed, url) in [
        ("\"127.0.0.1\"", "http://127.0.0.1:8084/agent.json"),
        ("\"fd00::7\"", "https://[fd00::7]/agent.json"),
        ("\"agent.internal\"", "https://agent.internal/agent.json"),
    ] {
        let body = format!("allow_private_hosts = [{allowed}]\n{}", agent(url));
        Files::new(&session(&body), POLICY)
            .load_with(config::load)
            .unwrap_or_else(|e| panic!("{allowed}: {e:?}"));
    }
    let body = format!(
        "allow_private_hosts = [\"http://127.0.0.1:8084\"]\n{}",
        agent("https://agent.test/agent.json")
    );
    let errors = Files::new(&session(&body), POLICY).errors_with(config::load);
    assert!(
        errors.iter().any(|e| e.contains("gateway.toml:")
            && e.contains(
                "session.allow_private_hosts: \"http://127.0.0.1:8084\" is not a host name"
            )),
        "{errors:#?}"
    );
    let off =
        format!("{GATEWAY}\n[session]\nverify = \"off\"\nallow_private_hosts = [\"127.0.0.1\"]\n");
    let errors = Files::new(&off, POLICY).errors_with(config::load);
    assert!(
        errors.iter().any(|e| e.contains("allow_private_hosts")),
        "{errors:#?}"
    );
}

#[test]
fn delegated_agents_need_origins() {
    let session = |body: &str| format!("{GATEWAY}\n[session]\nverify = \"required\"\n{body}");
    let agent = "\n[[session.agent]]\nclient_id = \"https://agent.test/agent.json\"\n";

    let config = Files::new(
        &session(&format!("origins = [\"https://api.shop.test\"]\n{agent}")),
        POLICY,
    )
    .load_with(config::load)
    .unwrap();
    assert!(matches!(
        config.session.verify,
        config::VerifySettings::Required(_)
    ));

    for (body, needle) in [
        (agent.to_owned(), "needs session.origins"),
        (
            format!("origins = [\"https://api.shop.test/\"]\n{agent}"),
            "no path",
        ),
        (format!("origins = []\n{agent}"), "at least one origin"),
        (
            format!("origins = [\"https://API.shop.test\"]\n{agent}"),
            "lowercase",
        ),
        (
            format!("origins = [\"https://api.shop.test\"]\n{agent}jwks_url = \"https://agent.test/jwks\"\n"),
            "publishes its keys in its metadata document",
        ),
        (
            format!("origins = [\"https://api.shop.test\"]\n{agent}issuer = \"agent_1\"\n"),
            "exactly one of client_id",
        ),
        (
            "origins = [\"https://api.shop.test\"]\n\n[[session.agent]]\nclient_id = \"agent.test\"\n".to_owned(),
            "not the URL of a metadata document",
        ),
        (
            format!("origins = [\"https://api.shop.test\"]\nca_file = \"missing.pem\"\n{agent}"),
            "session.ca_file: cannot read",
        ),
        (
            format!("origins = [\"https://api.shop.test\"]\nca_file = \"gateway.toml\"\n{agent}"),
            "session.ca_file",
        ),
    ] {
        let errors = Files::new(&session(&body), POLICY).errors_with(config::load);
        assert!(
            errors.iter().any(|e| e.contains(needle)),
            "{body}: expected {needle:?} in {errors:#?}"
        );
    }
}

#[test]
fn receipts_keys_and_replicas_are_checked_where_they_are_written() {
    use base64::Engine as _;
    use poppy_gateway::receipts::ReceiptTarget;
    let with = |lines: &str| format!("{GATEWAY}\n[receipts]\n{lines}");
    let pkcs8 =
        ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref())
    );

    // Lines: 9 is [receipts], 10 path, 11 signing_key, 12 replica.
    let files = Files::new(
        &with("path = \"receipts.jsonl\"\nsigning_key = \"receipts.pem\"\nreplica = \"gw-1\"\n"),
        POLICY,
    );
    std::fs::write(files.dir().join("receipts.pem"), &pem).unwrap();
    let receipts = files.load_with(config::load).unwrap().receipts.unwrap();
    assert_eq!(
        receipts.target,
        ReceiptTarget::File {
            path: files.dir().join("receipts.gw-1.jsonl"),
            configured: files.dir().join("receipts.jsonl"),
        }
    );
    let key = receipts.signing_key.unwrap();
    assert_eq!(key.kid().len(), 43);
    assert_eq!(format!("{key:?}"), format!("SigningKey(kid {})", key.kid()));
    assert_eq!(receipts.replica.as_deref(), Some("gw-1"));

    // Without a key: unsigned (the startup warns), as before.
    let files = Files::new(&with("path = \"receipts.jsonl\"\n"), POLICY);
    let receipts = files.load_with(config::load).unwrap().receipts.unwrap();
    assert!(receipts.signing_key.is_none() && receipts.replica.is_none());

    let files = Files::new(
        &with("path = \"receipts.jsonl\"\nsigning_key = \"missing.pem\"\n"),
        POLICY,
    );
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        11,
        &["receipts.signing_key", "missing.pem", "cannot read"],
    );
    let files = Files::new(
        &with("path = \"receipts.jsonl\"\nsigning_key = \"public.pem\"\n"),
        POLICY,
    );
    std::fs::write(
        files.dir().join("public.pem"),
        "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n",
    )
    .unwrap();
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        11,
        &[
            "receipts.signing_key",
            "not an Ed25519 private key",
            "genpkey",
        ],
    );
    for bad in ["../elsewhere", "", ".hidden", "a b"] {
        let files = Files::new(
            &with(&format!(
                "path = \"receipts.jsonl\"\nsigning_key = \"receipts.pem\"\nreplica = \"{bad}\"\n"
            )),
            POLICY,
        );
        std::fs::write(files.dir().join("receipts.pem"), &pem).unwrap();
        assert_error_at(
            &files.errors_with(config::load),
            &files.gateway(),
            12,
            &["receipts.replica"],
        );
    }
}

/// `[approval_page]`: off without the table; its listen address, URLs, Company name and
/// client secret source (never the secret itself) are checked where they are written; a
/// policy's `approval` key takes `"poppy"` (the default) or `"either"`.
#[test]
fn the_approval_page_is_checked_where_it_is_written() {
    let with = |lines: &str| format!("{GATEWAY}\n[approval_page]\n{lines}");
    let good = "listen = \"127.0.0.1:8091\"\npublic_url = \"https://approve.shop.example/\"\ncompany_name = \"Shop\"\nissuer = \"https://id.shop.example\"\nclient_id = \"page\"\nclient_secret_file = \"page.secret\"\n";
    assert!(
        Files::new(GATEWAY, POLICY)
            .load_with(config::load)
            .unwrap()
            .approval_page
            .is_none()
    );
    let files = Files::new(&with(good), POLICY);
    std::fs::write(files.dir().join("page.secret"), "s3cret-value\n").unwrap();
    let page = files
        .load_with(config::load)
        .unwrap()
        .approval_page
        .unwrap();
    assert_eq!(page.public_url, "https://approve.shop.example");
    assert_eq!(page.company_name, "Shop");
    assert!(!format!("{page:?}").contains("s3cret-value"));

    // Lines: 9 is [approval_page], 10 listen, 11 public_url, 12 company_name, 13 issuer,
    // 15 the secret's source.
    let cases: [(&str, &str, usize, &str); 5] = [
        (
            "listen = \"127.0.0.1:8091\"",
            "listen = \"127.0.0.1:8080\"",
            10,
            "another listener's address",
        ),
        (
            "https://approve.shop.example/",
            "http://approve.shop.example",
            11,
            "must be https://",
        ),
        (
            "company_name = \"Shop\"",
            "company_name = \" \"",
            12,
            "company_name: must not be empty",
        ),
        (
            "https://id.shop.example",
            "https://id.shop.example/?x=1",
            13,
            "no query",
        ),
        (
            "client_secret_file = \"page.secret\"",
            "client_secret_file = \"page.secret\"\nclient_secret_env = \"X\"",
            9,
            "exactly one of client_secret_env",
        ),
    ];
    for (from, to, line, message) in cases {
        let files = Files::new(&with(&good.replace(from, to)), POLICY);
        std::fs::write(files.dir().join("page.secret"), "s3cret-value\n").unwrap();
        assert_error_at(
            &files.errors_with(config::load),
            &files.gateway(),
            line,
            &[message],
        );
    }
    let files = Files::new(
        &with(&good.replace("company_name = \"Shop\"\n", "")),
        POLICY,
    );
    std::fs::write(files.dir().join("page.secret"), "s3cret-value\n").unwrap();
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        9,
        &["set company_name"],
    );
    let files = Files::new(&with(good), POLICY);
    assert_error_at(
        &files.errors_with(config::load),
        &files.gateway(),
        15,
        &["client_secret_file", "cannot be read"],
    );

    // Line 7 of the policy is the key.
    for (key, value, message) in [
        ("approval", "page", "is not one of"),
        ("proof", "agent", "is not \"company_page\""),
    ] {
        let policy = POLICY.replacen("expires_in", &format!("{key} = \"{value}\"\nexpires_in"), 1);
        let files = Files::new(GATEWAY, &policy);
        assert_error_at(
            &files.errors_with(config::load),
            &files.policy(),
            6,
            &[message],
        );
    }
    let policy = POLICY.replacen("expires_in", "approval = \"either\"\nexpires_in", 1);
    let files = Files::new(&with(good), &policy);
    std::fs::write(files.dir().join("page.secret"), "s3cret-value\n").unwrap();
    assert!(files.load_with(config::load).is_ok());
    // Without the page, a policy can't offer it.
    let errors = Files::new(GATEWAY, &policy).errors_with(config::load);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("approval = \"either\" or \"company_page\", or proof = \"company_page\", which needs [approval_page]")),
        "{errors:#?}"
    );
}

#[test]
fn tracing_is_off_without_its_table_and_checked_where_it_is_written() {
    let with = |lines: &str| format!("{GATEWAY}\n[tracing]\n{lines}");
    assert!(
        Files::new(GATEWAY, POLICY)
            .load_with(config::load)
            .unwrap()
            .tracing
            .is_none()
    );
    let good = "endpoint = \"http://collector:4318\"\nsampling_ratio = 0.25\nservice_name = \"edge\"\nexport_interval = \"2s\"\nmax_queue_size = 100\nheaders = { \"x-api-key\" = \"k\" }\n";
    let tracing = Files::new(&with(good), POLICY)
        .load_with(config::load)
        .unwrap()
        .tracing
        .unwrap();
    assert_eq!(
        tracing.endpoint.as_deref(),
        Some("http://collector:4318/v1/traces")
    );
    assert_eq!(tracing.sampling_ratio, 0.25);
    assert_eq!(tracing.service_name.as_deref(), Some("edge"));
    assert_eq!(tracing.export_interval, std::time::Duration::from_secs(2));
    assert_eq!(tracing.max_queue_size, 100);
    assert_eq!(
        tracing.headers,
        vec![("x-api-key".to_owned(), "k".to_owned())]
    );

    // Line 9 is [tracing]: 10 endpoint, 11 sampling_ratio, 13 export_interval, 14 the queue.
    let cases: [(&str, &str, usize, &str); 4] = [
        (
            "\"http://collector:4318\"",
            "\"collector:4318\"",
            10,
            "tracing.endpoint",
        ),
        ("0.25", "1.5", 11, "tracing.sampling_ratio"),
        ("\"2s\"", "\"2\"", 13, "tracing.export_interval"),
        (
            "max_queue_size = 100",
            "max_queue_size = 0",
            14,
            "tracing.max_queue_size",
        ),
    ];
    for (from, to, line, message) in cases {
        let files = Files::new(&with(&good.replace(from, to)), POLICY);
        assert_error_at(
            &files.errors_with(config::load),
            &files.gateway(),
            line,
            &[message],
        );
    }
}

/// `[approval_page.agents]`: `every_request`, or `clients` only with verified bearer tokens
/// (an unverified token's client is whatever its sender wrote); never an empty rule.
#[test]
fn the_agents_rule_is_checked_where_it_is_written() {
    // Lines: 9 is [approval_page], 16 [approval_page.agents], 17 its first key.
    let with = |agents: &str| {
        format!(
            "{GATEWAY}\n[approval_page]\nlisten = \"127.0.0.1:8091\"\npublic_url = \"https://approve.shop.example/\"\ncompany_name = \"Shop\"\nissuer = \"https://id.shop.example\"\nclient_id = \"page\"\nclient_secret_file = \"page.secret\"\n[approval_page.agents]\n{agents}"
        )
    };
    let files = |agents: &str| {
        let files = Files::new(&with(agents), POLICY);
        std::fs::write(files.dir().join("page.secret"), "s3cret-value\n").unwrap();
        files
    };
    assert!(
        files("every_request = true\n")
            .load_with(config::load)
            .is_ok()
    );
    for (agents, line, message) in [
        (
            "clients = [\"claude-desktop\"]\n",
            17,
            "needs verified bearer tokens",
        ),
        ("", 16, "says no request is an agent's"),
        (
            "every_request = false\n",
            16,
            "says no request is an agent's",
        ),
        ("clients = []\n", 17, "clients: empty"),
        (
            "clients = [\" \"]\nevery_request = true\n",
            17,
            "must not be empty",
        ),
        (
            "clients = [\"a\"]\nevery_request = true\n",
            17,
            "clients and every_request = true together",
        ),
        ("client = [\"a\"]\n", 17, "unknown field"),
    ] {
        let files = files(agents);
        assert_error_at(
            &files.errors_with(config::load),
            &files.gateway(),
            line,
            &[message],
        );
    }
}
