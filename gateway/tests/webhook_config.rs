//! `[webhook]` in gateway.toml: off without the table, documented defaults, and every mistake
//! reported at its file, line and column, never with the secret in it.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on setup errors"
)]

use std::time::Duration;

use poppy_e2e::config_files::{
    ConfigFiles as Files, MINIMAL_GATEWAY_TOML as GATEWAY, assert_error_at,
};
use poppy_gateway::config::{self, EventType};

const POLICY: &str = r#"[[operation]]
name = "exchange"
method = "POST"
path = "/orders/{order_id}/exchanges"
id_prefix = "exc"
expires_in = "15m"
same_action = ["order_id"]
summary = "Exchange on order {order_id}."

[operation.terms]
order_id = { path = "order_id" }
"#;

/// The secret of the Standard Webhooks libraries' tests (24 bytes).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Lines: 9 is [webhook], 10 url, 11 secret_file, 12 and after: `extra`.
fn with_table(table: &str, secret: &str) -> Files {
    let files = Files::new(&format!("{GATEWAY}\n[webhook]\n{table}"), POLICY);
    std::fs::write(files.dir().join("webhook.secret"), secret).unwrap();
    files
}

const GOOD: &str = "url = \"https://hooks.shop.example/poppy\"\nsecret_file = \"webhook.secret\"\n";

#[test]
fn off_without_the_table_and_documented_defaults_with_it() {
    let none = Files::new(GATEWAY, POLICY).load_with(config::load).unwrap();
    assert!(none.webhook.is_none());
    let files = with_table(GOOD, &format!("{SECRET}\n"));
    let webhook = files.load_with(config::load).unwrap().webhook.unwrap();
    assert_eq!(webhook.url, "https://hooks.shop.example/poppy");
    assert_eq!(webhook.events, EventType::ALL.to_vec());
    assert_eq!(webhook.queue, 10_000);
    assert_eq!(webhook.timeout, Duration::from_secs(15));
    assert_eq!(webhook.max_attempts, 10);
    assert_eq!(webhook.max_age, Duration::from_secs(3600));
    assert_eq!(webhook.retry_backoff, Duration::from_secs(1));
    assert!(webhook.secret_source.contains("webhook.secret"));
    assert!(!format!("{webhook:?}").contains("MfKQ9r8G"));

    let chosen = with_table(
        &format!(
            "{GOOD}events = [\"unknown\", \"held\"]\nqueue = 5\ntimeout = \"2s\"\nmax_attempts = 3\nmax_age = \"10m\"\nretry_backoff = \"250ms\"\n"
        ),
        SECRET,
    );
    let webhook = chosen.load_with(config::load).unwrap().webhook.unwrap();
    // In the documented order, whatever the file's.
    assert_eq!(webhook.events, [EventType::Held, EventType::Unknown]);
    assert!(webhook.sends(EventType::Unknown) && !webhook.sends(EventType::Performed));
    assert_eq!(webhook.queue, 5);
    assert_eq!(webhook.retry_backoff, Duration::from_millis(250));
    // http:// to the loopback only, and the environment variable form.
    // A variable no test sets.
    let local = Files::new(
        &format!(
            "{GATEWAY}\n[webhook]\nurl = \"http://127.0.0.1:9999/hooks\"\nsecret_env = \"POPPY_TEST_WEBHOOK_CONFIG_SECRET_UNSET\"\n"
        ),
        POLICY,
    );
    assert_error_at(
        &local.errors_with(config::load),
        &local.gateway(),
        11,
        &["POPPY_TEST_WEBHOOK_CONFIG_SECRET_UNSET", "is not set"],
    );
}

#[test]
fn mistakes_are_reported_where_they_are_written() {
    let extra = |lines: &str| format!("{GOOD}{lines}\n");
    let cases: Vec<(String, &str, usize, &[&str])> = vec![
        (
            GOOD.replace("https://hooks.shop.example", "http://hooks.shop.example"),
            SECRET,
            10,
            &["webhook.url", "http only on a loopback address"],
        ),
        (
            GOOD.replace("https://hooks.shop.example/poppy", "hooks"),
            SECRET,
            10,
            &["webhook.url", "is not a URL"],
        ),
        (
            GOOD.replace("secret_file = \"webhook.secret\"\n", ""),
            SECRET,
            9,
            &["exactly one of secret_env", "never goes in gateway.toml"],
        ),
        (
            extra("secret_env = \"X\""),
            SECRET,
            9,
            &["exactly one of secret_env"],
        ),
        (
            GOOD.into(),
            "not a whsec secret!",
            11,
            &[
                "is not `whsec_` followed by base64",
                "openssl rand -base64 32",
            ],
        ),
        (GOOD.into(), "whsec_c2hvcnQ=", 11, &["decodes to 5 bytes"]),
        (GOOD.into(), "\n", 11, &["webhook.secret_file", "is empty"]),
        (
            extra("events = [\"held\", \"approved\"]"),
            SECRET,
            12,
            &[
                "webhook.events",
                "`approved` is not one of held, approved_on_page",
            ],
        ),
        (
            extra("events = []"),
            SECRET,
            12,
            &["webhook.events", "at least one"],
        ),
        (
            extra("queue = 0"),
            SECRET,
            12,
            &["webhook.queue", "between 1 and"],
        ),
        (
            extra("timeout = \"0s\""),
            SECRET,
            12,
            &["webhook.timeout", "more than 0"],
        ),
        (
            extra("max_age = \"soon\""),
            SECRET,
            12,
            &["webhook.max_age"],
        ),
        (
            extra("max_attempts = 0"),
            SECRET,
            12,
            &["webhook.max_attempts", "between 1 and 100"],
        ),
        (
            extra("ca_file = \"missing.pem\""),
            SECRET,
            12,
            &["webhook.ca_file", "cannot read"],
        ),
        (
            extra("retries = 3"),
            SECRET,
            12,
            &["unknown field `retries`"],
        ),
    ];
    for (table, secret, line, messages) in cases {
        let files = with_table(&table, secret);
        let errors = files.errors_with(config::load);
        assert_eq!(errors.len(), 1, "one mistake, one error: {errors:#?}");
        assert_error_at(&errors, &files.gateway(), line, messages);
        for error in &errors {
            assert!(!error.contains("MfKQ9r8G"), "the secret in {error}");
        }
    }
}
