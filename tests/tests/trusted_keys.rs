//! A `jwks_url` that gives no keys (issue 39): `check` fetches every configured one and fails
//! on a server that answers with something other than a JWK set (a wrong URL), warns about one
//! it cannot reach (it may be reachable only from where the gateway runs); the running gateway
//! fetches each at start and logs an error for one it cannot read, while it stays ready (its
//! other traffic is served). The keys are a real OpenID Provider's (`oidc-provider`, npm):
//! its `/jwks` is a JWK set, its discovery document is JSON that is not one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::page::PageProvider;
use poppy_e2e::ports::refusing_port;
use poppy_e2e::wait::until;
use poppy_e2e::{GatewayBuilder, Run, Stack, Store, store_tests};

/// `[session]` trusting issuer `agent` with `agent_url`'s keys and access tokens of the
/// provider with `token_url`'s.
fn session(agent_url: &str, token_url: &str, issuer: &str) -> String {
    format!(
        r#"verify = "required"
audience = ["https://shop.test"]

[[session.agent]]
issuer = "agent"
jwks_url = "{agent_url}"

[session.token]
issuer = "{issuer}"
jwks_url = "{token_url}"
audience = ["https://shop.test"]
"#
    )
}

fn check(session_lines: &str) -> Run {
    GatewayBuilder::new("http://127.0.0.1:9")
        .session(session_lines)
        .write()
        .run("check", &[])
}

fn describe(run: &Run) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        run.code, run.stdout, run.stderr
    )
}

#[test]
fn check_reads_every_jwks_url() {
    let provider = PageProvider::start("http://127.0.0.1:1");
    let issuer = provider.issuer();
    let jwks = format!("{issuer}/jwks");
    let run = check(&session(&jwks, &jwks, &issuer));
    assert!(run.success(), "{}", describe(&run));
    assert!(
        run.stdout.contains(&format!(
            "trusted keys of \"agent\" from jwks_url {jwks}: 2 key(s)"
        )),
        "{}",
        describe(&run)
    );
    assert!(!run.stderr.contains("warning"), "{}", describe(&run));
}

#[test]
fn check_fails_on_a_document_that_is_not_a_jwk_set() {
    let provider = PageProvider::start("http://127.0.0.1:1");
    let issuer = provider.issuer();
    let jwks = format!("{issuer}/jwks");
    // The provider's discovery document: JSON, from a server that answers, but no key set.
    let discovery = format!("{issuer}/.well-known/openid-configuration");
    let run = check(&session(&jwks, &discovery, &issuer));
    assert_eq!(run.code, Some(1), "{}", describe(&run));
    assert!(
        run.stderr.contains(&format!(
            "jwks_url {discovery} (issuer {issuer:?}): not a usable JWK set: not a JWKS: no \"keys\" array"
        )),
        "{}",
        describe(&run)
    );
    assert!(
        run.stderr.contains("check failed: 1 problem(s)"),
        "{}",
        describe(&run)
    );
    assert!(!run.stdout.contains(": ok"), "{}", describe(&run));
    // A URL the server does not have is a wrong URL too.
    let missing = format!("{issuer}/no-such-jwks");
    let run = check(&session(&missing, &jwks, &issuer));
    assert_eq!(run.code, Some(1), "{}", describe(&run));
    assert!(
        run.stderr.contains(&format!(
            "jwks_url {missing} (issuer \"agent\"): not a usable JWK set: answered 404"
        )),
        "{}",
        describe(&run)
    );
}

#[test]
fn check_warns_about_a_jwks_url_out_of_reach() {
    let provider = PageProvider::start("http://127.0.0.1:1");
    let issuer = provider.issuer();
    let jwks = format!("{issuer}/jwks");
    let (port, _held) = refusing_port();
    let unreachable = format!("http://127.0.0.1:{port}/jwks");
    let run = check(&session(&unreachable, &jwks, &issuer));
    // Out of reach from here is not a wrong config: the gateway may run where it is reachable.
    assert!(run.success(), "{}", describe(&run));
    assert!(
        run.stderr.contains(&format!(
            "warning: jwks_url {unreachable} (issuer \"agent\") cannot be fetched from here:"
        )),
        "{}",
        describe(&run)
    );
    assert!(
        run.stderr
            .contains("the gateway would start and refuse this issuer's Sessions and tokens until a fetch succeeds"),
        "{}",
        describe(&run)
    );
}

/// At start the gateway fetches each `jwks_url` and logs an error for each that gives no keys,
/// naming it; it still reports ready (passthrough and other issuers are served).
async fn start_logs_a_jwks_url_that_gives_no_keys(store: Store) {
    let provider = PageProvider::start("http://127.0.0.1:1");
    let issuer = provider.issuer();
    let discovery = format!("{issuer}/.well-known/openid-configuration");
    let (port, _held) = refusing_port();
    let unreachable = format!("http://127.0.0.1:{port}/jwks");
    let lines = session(&unreachable, &discovery, &issuer);
    let stack = Stack::start_with(store, |b| b.session(&lines));
    let logged = |url: &str| {
        stack.gateway.log().lines().any(|line| {
            line.contains("cannot read trusted keys")
                && line.contains("ERROR")
                && line.contains(&format!("jwks_url {url}"))
        })
    };
    let both = until(Duration::from_secs(15), || {
        logged(&unreachable) && logged(&discovery)
    })
    .await;
    assert!(
        both,
        "no error logged for each source:\n{}",
        stack.gateway.log()
    );
    let ready = stack.gateway.admin_get("/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.text());
}

store_tests!(start_logs_a_jwks_url_that_gives_no_keys);
