//! Credentials, one reading (issue 37): with `[approval_page.agents] clients`, a request
//! without a `Poppy-Session` is an agent's when any place a real OAuth resource server reads
//! a token from holds a listed client's token, and a value the gateway can't read one way is
//! refused, never passed through as the Company's own.
//!
//! Behind the gateway, three real resource servers that count executions, each reading the
//! token where it does in production (tests/deps/oauth): oauthlib's `ResourceEndpoint` and
//! Authlib's `ResourceProtector` on Flask (both split `Authorization` on any Unicode
//! whitespace; oauthlib also reads `access_token` from the query and a form body), and
//! passport-http-bearer on Express (header, form body, query). Tokens are real JWTs of the
//! test provider (tests/deps/node/oidc): `agent` (listed) and `company-web` (the Company's own
//! front end). Every spelling of an agent's token is held or refused with nothing executed;
//! the Company's token passes through and executes, from the header, the query or the body
//! (its form sent upstream byte for byte); an agent's token in the query, approved on the
//! page, executes once. Both stores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use poppy_e2e::announced;
use poppy_e2e::frameworks::body_of;
use poppy_e2e::page::{PAGE_CLIENT_SECRET, PAGE_SECRET_ENV, PageProvider, approve_on_page};
use poppy_e2e::rawhttp::{self, RawResponse, bearer_line as bearer, header_line as header};
use poppy_e2e::thirdparty::{deps_dir, node_project, python};
use poppy_e2e::{Gateway, GatewayBuilder, RedisServer, Store, store_tests, wait};
use serde_json::Value;

const ACCOUNT: &str = "acct-1";

const POLICY: &str = r#"
[[operation]]
name = "pay"
method = "POST"
path = "/pay/{to}"
id_prefix = "pay"
approval = "either"
expires_in = "15m"
same_action = ["to"]
summary = "Pay {to}."
ignore_query = ["access_token"]

[operation.terms]
to = { path = "to" }

[[operation]]
name = "pay_by_form"
method = "POST"
path = "/pay-form/{to}"
id_prefix = "pbf"
approval = "either"
expires_in = "15m"
same_action = ["to"]
summary = "Pay {to}."
ignore = ["access_token", "note"]

[operation.terms]
to = { path = "to" }
"#;

/// Which resource server is behind the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Oauthlib,
    Authlib,
    Passport,
}

impl Server {
    /// Whether it reads `access_token` from the query and a form body (Authlib reads only
    /// `Authorization`).
    fn reads_query_and_body(self) -> bool {
        self != Server::Authlib
    }
}

/// A resource server on a free port, killed on drop.
struct ResourceServer {
    child: Child,
    port: u16,
}

impl ResourceServer {
    fn start(server: Server) -> ResourceServer {
        let dir = deps_dir().join("oauth");
        let mut command = match server {
            Server::Oauthlib | Server::Authlib => {
                let mut c = Command::new(python("oauth"));
                c.arg("resource_server.py").arg(match server {
                    Server::Oauthlib => "oauthlib",
                    _ => "authlib",
                });
                c
            }
            Server::Passport => {
                node_project("oauth");
                let mut c = Command::new("node");
                c.arg("passport_app.js");
                c
            }
        };
        command.current_dir(dir).stderr(Stdio::null());
        let (child, port) = announced::spawn(command, &format!("{server:?}"));
        ResourceServer { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every execution so far (`to`, `client`, `account`), read from the server directly.
    fn executions(&self) -> Vec<Value> {
        let request = b"GET /__executions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        let answer = rawhttp::exchange(
            ([127, 0, 0, 1], self.port).into(),
            request,
            Duration::from_secs(10),
        )
        .expect("/__executions");
        serde_json::from_slice(&body_of(&answer)).expect("/__executions is JSON")
    }
}

impl Drop for ResourceServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One stack: the provider, a resource server, the gateway listing only `agent`'s tokens.
struct World {
    provider: PageProvider,
    server: ResourceServer,
    gateway: Gateway,
    _redis: Option<RedisServer>,
}

impl World {
    async fn start(server: Server, store: Store) -> World {
        let (provider, table) = PageProvider::with_page();
        let table = table.agents("clients = [\"agent\"]");
        let resource = ResourceServer::start(server);
        let redis = (store == Store::Redis).then(RedisServer::start);
        let mut builder = GatewayBuilder::new(&resource.url())
            .policy("pay.toml", POLICY)
            .session(&provider.verified_tokens())
            .env(PAGE_SECRET_ENV, PAGE_CLIENT_SECRET)
            .extra_config(&table.toml());
        if let Some(redis) = &redis {
            builder = builder.store_url(&redis.url());
        }
        let gateway = builder.start();
        let page = table.url();
        let address = page.trim_start_matches("http://").to_owned();
        let up = wait::until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(&address).is_ok()
        })
        .await;
        assert!(up, "the approval page did not listen within 10 s");
        World {
            provider,
            server: resource,
            gateway,
            _redis: redis,
        }
    }

    /// `POST target` with these header lines (raw bytes, as a hostile agent writes them) and
    /// body, no `Poppy-Session`.
    fn send(&self, target: &str, headers: &[Vec<u8>], body: &[u8]) -> RawResponse {
        let mut request = format!("POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n").into_bytes();
        for line in headers {
            request.extend_from_slice(line);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(
            format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        request.extend_from_slice(body);
        rawhttp::exchange(
            self.gateway.listen_addr(),
            &request,
            Duration::from_secs(15),
        )
        .unwrap_or_else(|e| panic!("POST {target}: {e}"))
    }

    fn executed(&self) -> usize {
        self.server.executions().len()
    }
}

fn json_of(answer: &RawResponse) -> Value {
    serde_json::from_slice(&body_of(answer)).unwrap_or(Value::Null)
}

const FORM: &str = "Content-Type: application/x-www-form-urlencoded";

/// What the gateway may answer an agent's spelling: held for the page, or refused `400`
/// naming what to fix (`names`: the member and its value).
enum Expect {
    Held,
    Refused(&'static str, &'static str),
}

/// What a spelling is, its target, header lines, body, and the answer it gets.
type Case = (&'static str, String, Vec<Vec<u8>>, Vec<u8>, Expect);

async fn an_agents_token_is_never_executed_unapproved(server: Server, store: Store) {
    let world = World::start(server, store).await;
    let agent = world.provider.token("agent", ACCOUNT).await;
    let company = world.provider.token("company-web", ACCOUNT).await;
    let form_of = |token: &str| format!("note=hi&access_token={token}").into_bytes();
    let mut first = b"\xa0Bearer ".to_vec();
    first.extend_from_slice(agent.as_bytes());
    let cases: Vec<Case> = vec![
        (
            "no-break space",
            "/pay/bob".to_owned(),
            vec![bearer(b"\xa0", &agent)],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "NEL",
            "/pay/bob".to_owned(),
            vec![bearer(b"\x85", &agent)],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "an em space in UTF-8",
            "/pay/bob".to_owned(),
            vec![bearer("\u{2003}".as_bytes(), &agent)],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "such a byte first",
            "/pay/bob".to_owned(),
            vec![header("Authorization", &first)],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "a tab",
            "/pay/bob".to_owned(),
            vec![bearer(b"\t", &agent)],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "two spaces",
            "/pay/bob".to_owned(),
            vec![bearer(b"  ", &agent)],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "lower case",
            "/pay/bob".to_owned(),
            vec![header(
                "Authorization",
                format!("bearer {agent}").as_bytes(),
            )],
            vec![],
            Expect::Held,
        ),
        (
            "upper case",
            "/pay/bob".to_owned(),
            vec![header(
                "Authorization",
                format!("BEARER {agent}").as_bytes(),
            )],
            vec![],
            Expect::Held,
        ),
        (
            "two Authorization headers",
            "/pay/bob".to_owned(),
            vec![header("Authorization", b"Basic dTpw"), bearer(b" ", &agent)],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "two schemes",
            "/pay/bob".to_owned(),
            vec![header(
                "Authorization",
                format!("Basic dTpw, Bearer {agent}").as_bytes(),
            )],
            vec![],
            Expect::Refused("header", "authorization"),
        ),
        (
            "the query",
            format!("/pay/bob?access_token={agent}"),
            vec![],
            vec![],
            Expect::Held,
        ),
        (
            "a form body",
            "/pay-form/bob".to_owned(),
            vec![FORM.as_bytes().to_vec()],
            form_of(&agent),
            Expect::Held,
        ),
        (
            "the Company's header and the agent's query",
            format!("/pay/bob?access_token={agent}"),
            vec![bearer(b" ", &company)],
            vec![],
            Expect::Refused("parameter", "access_token"),
        ),
        (
            "the agent's header and a form body",
            "/pay/bob".to_owned(),
            vec![bearer(b" ", &agent), FORM.as_bytes().to_vec()],
            form_of(&company),
            Expect::Refused("field", "access_token"),
        ),
        (
            "twice in the query",
            format!("/pay/bob?access_token={company}&access_token={agent}"),
            vec![],
            vec![],
            Expect::Refused("parameter", "access_token"),
        ),
    ];
    for (what, target, headers, body, expect) in &cases {
        let answer = world.send(target, headers, body);
        let json = json_of(&answer);
        match expect {
            Expect::Held => {
                assert_eq!(
                    answer.status, 403,
                    "{server:?}, {what}: {} {json}",
                    answer.head
                );
                assert_eq!(
                    json["error"], "approval_required",
                    "{server:?}, {what}: {json}"
                );
                assert!(
                    json["approval_url"].is_string(),
                    "{server:?}, {what}: {json}"
                );
            }
            Expect::Refused(member, value) => {
                assert_eq!(
                    answer.status, 400,
                    "{server:?}, {what}: {} {json}",
                    answer.head
                );
                assert!(
                    json["error"].is_string() && json["detail"].is_string(),
                    "{server:?}, {what}: {json}"
                );
                assert_eq!(
                    json[member], *value,
                    "{server:?}, {what}: names what to fix: {json}"
                );
            }
        }
        assert_eq!(
            world.executed(),
            0,
            "{server:?}, {what}: executed unapproved"
        );
    }

    // The Company's own client passes through and executes, wherever its server reads its
    // token; its form goes upstream as it came.
    let mut executed = 0;
    let answer = world.send("/pay/carol", &[bearer(b" ", &company)], b"");
    assert_eq!(
        answer.status, 201,
        "{server:?}, the Company's header: {}",
        answer.head
    );
    executed += 1;
    for (what, target, headers, body) in [
        (
            "query",
            format!("/pay/carol?access_token={company}"),
            vec![],
            vec![],
        ),
        (
            "form body",
            "/pay/carol".to_owned(),
            vec![FORM.as_bytes().to_vec()],
            form_of(&company),
        ),
    ] {
        let answer = world.send(&target, &headers, &body);
        if server.reads_query_and_body() {
            assert_eq!(
                answer.status,
                201,
                "{server:?}, the Company's {what}: {} {:?}",
                answer.head,
                json_of(&answer)
            );
            executed += 1;
        } else {
            // Authlib reads only the header: its own 401, passed through.
            assert_eq!(
                answer.status, 401,
                "{server:?}, the Company's {what}: {}",
                answer.head
            );
        }
    }
    let executions = world.server.executions();
    assert_eq!(executions.len(), executed, "{server:?}: {executions:?}");
    for execution in &executions {
        assert_eq!(
            execution["client"], "company-web",
            "{server:?}: {execution}"
        );
        assert_eq!(execution["to"], "carol", "{server:?}: {execution}");
    }
}

/// An agent's token in the query (where oauthlib and passport read it) is held, approved on
/// the page by the account it acts for, then executed once with that token; the Company's
/// form body larger than what can be forwarded after reading is refused, never cut.
async fn an_agents_query_token_is_approved_then_executed_once(server: Server, store: Store) {
    let world = World::start(server, store).await;
    let target = |token: &str| format!("/pay/dave?access_token={token}");
    let agent = world.provider.token("agent", ACCOUNT).await;
    let held = world.send(&target(&agent), &[], b"");
    let json = json_of(&held);
    assert_eq!(held.status, 403, "{server:?}: {json}");
    let link = json["approval_url"]
        .as_str()
        .expect("approval_url")
        .to_owned();
    approve_on_page(&link, ACCOUNT, "approve").await;
    assert_eq!(world.executed(), 0, "approving performs nothing by itself");
    // The same token: in the query, it is part of the request the revision covers.
    let performed = world.send(&target(&agent), &[], b"");
    assert_eq!(performed.status, 201, "{server:?}: {}", performed.head);
    let replayed = world.send(&target(&agent), &[], b"");
    assert_eq!(replayed.status, 201, "{server:?}: {}", replayed.head);
    let executions = world.server.executions();
    assert_eq!(
        executions.len(),
        1,
        "{server:?}: executed once: {executions:?}"
    );
    assert_eq!(executions[0]["client"], "agent");
    assert_eq!(executions[0]["account"], ACCOUNT);

    let company = world.provider.token("company-web", ACCOUNT).await;
    let mut large = format!("access_token={company}&note=").into_bytes();
    large.resize(70 * 1024, b'a');
    let refused = world.send("/pay/carol", &[FORM.as_bytes().to_vec()], &large);
    assert_eq!(refused.status, 413, "{server:?}: {}", refused.head);
    assert_eq!(json_of(&refused)["error"], "body_too_large");
    assert_eq!(world.executed(), 1, "nothing forwarded");
}

macro_rules! resource_server_tests {
    ($($name:ident => $server:expr),+ $(,)?) => {
        $(
            mod $name {
                use super::*;

                async fn never_unapproved(store: Store) {
                    an_agents_token_is_never_executed_unapproved($server, store).await
                }

                store_tests!(never_unapproved);
            }
        )+
    };
}

resource_server_tests!(
    oauthlib => Server::Oauthlib,
    authlib => Server::Authlib,
    passport => Server::Passport,
);

async fn oauthlib_query_approved(store: Store) {
    an_agents_query_token_is_approved_then_executed_once(Server::Oauthlib, store).await
}

async fn passport_query_approved(store: Store) {
    an_agents_query_token_is_approved_then_executed_once(Server::Passport, store).await
}

store_tests!(oauthlib_query_approved, passport_query_approved);
