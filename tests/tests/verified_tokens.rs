//! `[session] verify = "required"` with a real OpenID Provider (`oidc-provider` from npm, in
//! tests/deps/node/oidc): Session keys from a JWKS URL, JWT access tokens verified against the
//! provider's JWKS, opaque tokens resolved by RFC 7662 introspection. The account is then the
//! verified subject: a refreshed token replays instead of executing again (issue 15).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use poppy_e2e::identity::{keys_dir, session_claims, sign};
use poppy_e2e::thirdparty::node_project;
use poppy_e2e::{Request, Session, Stack, Store, store_tests};
use serde_json::Value;

const AUDIENCE: &str = "https://shop.test";
/// The Personal Agent: the provider's client `agent`, whose access tokens carry `client_id` =
/// `agent`, the same agent as its Sessions' `iss` (the gateway compares them).
const TOKEN_AGENT: &str = "agent";

/// oidc-provider on a port it picked, signing with test keys es256-a (first) and rs256-a.
struct OpenIdProvider {
    child: Child,
    port: u16,
}

impl OpenIdProvider {
    fn start() -> OpenIdProvider {
        let dir = node_project("oidc");
        let mut child = Command::new("node")
            .current_dir(&dir)
            .arg(dir.join("provider.mjs"))
            .arg(keys_dir().join("es256-a.pem"))
            .arg(keys_dir().join("rs256-a.pem"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start node provider.mjs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok).unwrap_or_default();
            let _ = sender.send(first);
            // Keep reading: the provider writes warnings to stdout later, and a closed pipe
            // would end it.
            for _ in lines {}
        });
        let line = receiver
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("provider.mjs did not say its port within 30 s")
            });
        let port = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| {
                panic!("provider.mjs's first line is not {{\"port\": N}}: {line:?}")
            });
        OpenIdProvider { child, port }
    }

    fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A new access token for client `agent` (client credentials): a JWT for `resource`
    /// `https://shop.test`, an opaque one for `urn:shop:opaque`.
    async fn token(&self, resource: &str) -> String {
        let answer: Value = reqwest::Client::new()
            .post(format!("{}/token", self.issuer()))
            .basic_auth("agent", Some("agent-secret"))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "shop"),
                ("resource", resource),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {answer}"))
            .to_owned()
    }
}

impl Drop for OpenIdProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sessions of the provider's client `agent` (the same agent as its tokens' `client_id`) verified with the provider's JWKS URL; tokens with its JWKS and its
/// introspection endpoint. The account is the token's `client_id` (client-credentials tokens
/// have no user).
fn stack(store: Store, provider: &OpenIdProvider) -> Stack {
    let issuer = provider.issuer();
    let lines = format!(
        r#"verify = "required"
audience = ["{AUDIENCE}"]
account_claim = "client_id"

[[session.agent]]
issuer = "{TOKEN_AGENT}"
jwks_url = "{issuer}/jwks"

[session.token]
issuer = "{issuer}"
jwks_url = "{issuer}/jwks"
audience = ["{AUDIENCE}", "urn:shop:opaque"]
introspection_url = "{issuer}/token/introspection"
client_id = "gateway"
client_secret = "gateway-secret"
"#
    );
    Stack::start_with(store, |b| b.session(&lines))
}

fn request(sid: &str, token: &str) -> Request {
    Request::exchange(&Session::signed_out("unused"), "o1", "i1", "s1")
        .header(
            "Poppy-Session",
            &sign(
                "es256-a",
                "poppy-session+jwt",
                &session_claims(TOKEN_AGENT, sid, AUDIENCE),
            ),
        )
        .header("Authorization", &format!("Bearer {token}"))
}

/// A refreshed token of the same subject is the same account: the approval sent with it is
/// replayed, not executed again; JWT (verified with the JWKS URL) and opaque (introspected).
async fn refreshed_tokens_replay(store: Store) {
    let provider = OpenIdProvider::start();
    let stack = stack(store, &provider);
    for (n, resource) in ["https://shop.test", "urn:shop:opaque"].iter().enumerate() {
        let sid = format!("ses_{n}");
        let first_token = provider.token(resource).await;
        let op = stack
            .gateway
            .send(&request(&sid, &first_token))
            .await
            .operation();
        let approved = request(&sid, &first_token).approve(&op);
        let first = stack.gateway.send(&approved).await;
        first.assert_status(201, resource);
        let refreshed = provider.token(resource).await;
        assert_ne!(refreshed, first_token);
        stack
            .gateway
            .send(&request(&sid, &refreshed).approve(&op))
            .await
            .assert_replay_of(&first, &format!("{resource}: a refreshed token"));
        stack.assert_executions(n + 1, resource);
    }
}

/// Tokens the provider did not issue, or not for this gateway, are refused with
/// `401 invalid_token`; nothing is forwarded.
async fn bad_tokens_are_refused(store: Store) {
    let provider = OpenIdProvider::start();
    let stack = stack(store, &provider);
    let wrong_audience = provider.token("https://elsewhere.test").await;
    let forged = sign(
        "es256-b",
        "at+jwt",
        &serde_json::json!({"iss": provider.issuer(), "aud": AUDIENCE, "client_id": "agent", "exp": poppy_e2e::identity::now() + 60}),
    );
    for (what, token, needle) in [
        (
            "an opaque token the provider never issued",
            "not-a-real-token".to_owned(),
            "not active",
        ),
        ("a JWT for another audience", wrong_audience, "audience"),
        (
            "a JWT signed with a key the provider does not publish",
            forged,
            "no key",
        ),
    ] {
        let answer = stack.gateway.send(&request("ses_bad", &token)).await;
        let body = answer.assert_error(401, "invalid_token", what);
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(needle), "{what}: {detail}");
        assert!(
            !detail.contains(&token),
            "{what}: the detail repeats the token"
        );
    }
    stack.assert_executions(0, "bad tokens");
}

store_tests!(refreshed_tokens_replay, bad_tokens_are_refused);
