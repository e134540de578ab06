//! Self-test of the harness: needs redis-server, not the gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use poppy_e2e::agent::jwt_payload;
use poppy_e2e::gateway::http_client;
use poppy_e2e::markdown::{assert_safe_summary, has_unescaped, unescape};
use poppy_e2e::{
    Client, GatewayBuilder, RedisServer, Request, Session, Upstream, approval_header, binaries,
    rawhttp, tamper, wait,
};
use serde_json::json;

#[test]
fn redis_starts_stops_and_restarts_on_the_same_port() {
    let mut redis = RedisServer::start();
    let port = redis.port();
    assert_ne!(port, 6379, "never the default Redis port");
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{port}/0"));
    assert!(redis.ping(), "a started server answers PING");
    assert_eq!(redis.command(&["SET", "k", "v"]).unwrap(), "OK");
    assert_eq!(redis.command(&["GET", "k"]).unwrap(), "v");
    assert!(redis.command(&["NO-SUCH-COMMAND"]).is_err());

    redis.stop();
    assert!(!redis.is_running());
    assert!(!redis.ping(), "a stopped server does not answer");

    redis.restart();
    assert_eq!(redis.port(), port, "restart keeps the port");
    assert!(redis.ping(), "a restarted server answers PING");
    assert_eq!(
        redis.command(&["GET", "k"]).unwrap(),
        "(nil)",
        "it never saves, so a restart starts empty"
    );

    let addr = redis.addr();
    drop(redis);
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
        "dropping the handle kills the server"
    );
}

#[test]
fn two_redis_servers_are_separate() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    a.command(&["SET", "only", "a"]).unwrap();
    assert_eq!(b.command(&["GET", "only"]).unwrap(), "(nil)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_counts_and_answers() {
    let upstream = Upstream::start();
    let client = Client::new(&upstream.url());

    let first = client
        .send(
            &Request::plain("POST", "/orders/o1/exchanges?x=1")
                .header("X-Custom", "yes")
                .json(&json!({"item_id": "i1"})),
        )
        .await;
    first.assert_upstream_answer(1, "POST", "/orders/o1/exchanges");
    let second = client.send(&Request::plain("GET", "/orders/o1")).await;
    second.assert_upstream_answer(2, "GET", "/orders/o1");
    let teapot = client.send(&Request::plain("GET", "/status/418")).await;
    teapot.assert_status(418, "GET /status/418");
    assert_eq!(teapot.json()["execution"], 3);

    let well_known = client
        .send(&Request::plain("GET", "/.well-known/poppy.json"))
        .await;
    well_known.assert_status(200, "well-known");
    assert_eq!(
        well_known.json(),
        poppy_e2e::upstream::well_known_document()
    );

    assert_eq!(upstream.count(), 3, "poppy.json is not an execution");
    assert_eq!(upstream.well_known_hits(), 1);
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges"), 1);
    assert_eq!(upstream.count_for("POST", "/orders/o1/exchanges?x=1"), 1);
    assert_eq!(upstream.count_for("GET", "/orders/o1/exchanges"), 0);
    let recorded = &upstream.requests()[0];
    assert_eq!(recorded.execution, 1);
    assert_eq!(recorded.path_and_query, "/orders/o1/exchanges?x=1");
    assert_eq!(recorded.header("x-custom"), Some("yes"));
    assert_eq!(recorded.body_json(), json!({"item_id": "i1"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_records_large_bodies_whole() {
    let upstream = Upstream::start();
    let body: Vec<u8> = (0..2 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    Client::new(&upstream.url())
        .send(&Request::plain("PUT", "/upload").body(body.clone(), "application/octet-stream"))
        .await
        .assert_status(200, "PUT /upload");
    assert_eq!(upstream.requests()[0].body, body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_gate_holds_requests_until_released() {
    let upstream = Upstream::start();
    let client = Client::new(&upstream.url());
    upstream.hold();
    let held = {
        let client = client.clone();
        tokio::spawn(async move { client.send(&Request::plain("POST", "/a")).await })
    };
    let also_held = {
        let client = client.clone();
        tokio::spawn(async move { client.send(&Request::plain("POST", "/b")).await })
    };
    upstream.wait_for_count(2, Duration::from_secs(5)).await;
    assert_eq!(upstream.count(), 2, "held requests count on arrival");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !held.is_finished() && !also_held.is_finished(),
        "the gate holds answers"
    );
    upstream.release();
    let (a, b) = (held.await.unwrap(), also_held.await.unwrap());
    a.assert_status(201, "released");
    b.assert_status(201, "released");
    let mut executions = [a.json()["execution"].clone(), b.json()["execution"].clone()];
    executions.sort_by_key(|v| v.as_u64());
    assert_eq!(executions, [json!(1), json!(2)]);

    // Open again: not held.
    client
        .send(&Request::plain("GET", "/c"))
        .await
        .assert_upstream_answer(3, "GET", "/c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_delay_delays_answers() {
    let upstream = Upstream::start();
    upstream.set_delay(Duration::from_millis(300));
    let started = std::time::Instant::now();
    Client::new(&upstream.url())
        .send(&Request::plain("GET", "/slow"))
        .await
        .assert_status(200, "GET /slow");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_count_panics_when_not_reached() {
    let upstream = Upstream::start();
    let outcome =
        tokio::spawn(async move { upstream.wait_for_count(1, Duration::from_millis(100)).await })
            .await;
    assert!(
        outcome.is_err(),
        "waiting for an execution that never comes fails"
    );
}

#[test]
fn raw_http_reads_a_status() {
    let upstream = Upstream::start();
    assert_eq!(
        rawhttp::get_status(upstream.addr(), "/status/204", Duration::from_secs(5)),
        Ok(204)
    );
    let chunked = b"POST /chunked HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
        Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    let response =
        rawhttp::exchange(upstream.addr(), chunked, Duration::from_secs(5)).expect("answer");
    assert_eq!(response.status, 201);
    assert_eq!(upstream.requests()[1].body, b"abc");
}

#[test]
fn sessions_make_session_jwts_and_bearer_tokens() {
    let signed_out = Session::signed_out("ses_1");
    assert_eq!(
        jwt_payload(&signed_out.header()).unwrap(),
        json!({"sid": "ses_1", "iss": "agent_1", "sub": "user_1"})
    );
    let header = signed_out.header();
    let parts: Vec<&str> = header.split('.').collect();
    assert_eq!(parts.len(), 3);
    assert_eq!(
        jwt_payload(&format!("x.{}.y", parts[0])).unwrap(),
        json!({"alg": "none", "typ": "poppy-session+jwt"})
    );
    assert!(signed_out.authorization().is_none());

    let signed_in = Session::signed_in("ses_2", "acct_1").with_agent("agent_9");
    let bearer = signed_in.authorization().unwrap();
    let token = bearer.strip_prefix("Bearer ").unwrap();
    assert_eq!(jwt_payload(token).unwrap()["sub"], "acct_1");
    assert_eq!(jwt_payload(&signed_in.header()).unwrap()["iss"], "agent_9");
    assert!(signed_in.signed_out_twin().authorization().is_none());

    let request = Request::exchange(&signed_in, "o1", "i1", "s1");
    assert_eq!(
        request.header_value("poppy-extensions"),
        Some("\"operations\";v=\"2\"")
    );
    assert_eq!(request.header_value("authorization"), Some(bearer.as_str()));
    let out = request.session(&signed_out);
    assert!(out.header_value("authorization").is_none());

    assert_eq!(
        approval_header("exc_1", "r-1"),
        "operation_id=\"exc_1\", revision=\"r-1\""
    );
    assert_ne!(tamper("abcA"), "abcA");
    assert_eq!(tamper("abcA").len(), 4);
}

#[test]
fn summary_checks_catch_links_html_and_bidi() {
    assert!(has_unescaped("a](http://x)", "]("));
    assert!(!has_unescaped("a\\](http://x)", "]("));
    assert!(
        has_unescaped("a\\\\](http://x)", "]("),
        "an escaped backslash escapes nothing"
    );
    assert_eq!(unescape("itm\\_4Qa \\*x\\*"), "itm_4Qa *x*");
    assert_safe_summary("Exchange item **x\\](http://evil)** for \\<b\\>.");
    for unsafe_summary in ["[a](http://e)", "<img src=x>", "a\u{202E}b", "a\nb"] {
        assert!(
            std::panic::catch_unwind(|| assert_safe_summary(unsafe_summary)).is_err(),
            "{unsafe_summary:?} must be flagged"
        );
    }
}

#[test]
fn binaries_are_looked_up_next_to_the_test_executable() {
    let dir = binaries::profile_dir();
    assert!(
        dir.join("deps").is_dir(),
        "{} should be a target profile directory",
        dir.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_are_bounded() {
    assert!(wait::until(Duration::from_millis(50), || true).await);
    assert!(!wait::until(Duration::from_millis(50), || false).await);
    let found = wait::until_some(Duration::from_millis(50), || async { Some(7) }).await;
    assert_eq!(found, Some(7));
    let started = std::time::Instant::now();
    wait::until_clock_passes(wait::unix_now() + 0.2, Duration::from_secs(1)).await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    let _ = http_client(Duration::from_secs(1));
}

fn fake_gateway() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_fake-gateway"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_process_starts_restarts_and_is_killed() {
    let mut gateway = GatewayBuilder::new("http://127.0.0.1:9")
        .binary(&fake_gateway())
        .start();
    let config = std::fs::read_to_string(gateway.config_path()).unwrap();
    assert!(config.contains(&format!("listen = \"{}\"", gateway.listen_addr())));
    assert!(config.contains(&format!("listen = \"{}\"", gateway.admin_addr())));
    assert!(config.contains("url = \"memory://\""));
    let policies = gateway.config_path().parent().unwrap().join("policies");
    assert_eq!(
        std::fs::read_to_string(policies.join(poppy_e2e::policies::DEFAULT_FILE)).unwrap(),
        poppy_e2e::policies::DEFAULT
    );
    gateway
        .admin_get("/healthz")
        .await
        .assert_status(200, "fake /healthz");
    let proxied = gateway.send(&Request::plain("GET", "/x")).await;
    assert_eq!(proxied.json(), json!({"fake": "proxy"}));
    assert!(gateway.log().contains("keys=set"), "{}", gateway.log());

    let listen = gateway.listen_addr();
    gateway.kill();
    assert!(!gateway.is_running());
    assert!(
        std::net::TcpStream::connect_timeout(&listen, Duration::from_millis(500)).is_err(),
        "a killed gateway's port is closed"
    );
    gateway.restart();
    assert!(gateway.is_running());
    gateway
        .send(&Request::plain("GET", "/y"))
        .await
        .assert_status(200, "after restart");
    assert_eq!(gateway.log().matches("fake-gateway: listen=").count(), 2);

    let listen = gateway.listen_addr();
    drop(gateway);
    assert!(
        std::net::TcpStream::connect_timeout(&listen, Duration::from_millis(500)).is_err(),
        "dropping the handle kills the gateway"
    );
}

#[test]
fn gateway_without_keys_runs_without_the_variable() {
    let gateway = GatewayBuilder::new("http://127.0.0.1:9")
        .binary(&fake_gateway())
        .keys(None)
        .start();
    assert!(gateway.log().contains("keys=unset"), "{}", gateway.log());
}

#[test]
fn gateway_that_exits_at_startup_fails_with_its_output() {
    let outcome = std::panic::catch_unwind(|| {
        GatewayBuilder::new("http://127.0.0.1:9")
            .binary(&fake_gateway())
            .env("FAKE_GATEWAY_EXIT", "7")
            .start()
    });
    let message = match outcome {
        Ok(_) => panic!("a gateway that exits must not count as started"),
        Err(panic) => panic.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(message.contains("exited during startup"), "{message}");
    assert!(
        message.contains("exiting with 7 as asked"),
        "the panic shows the gateway's output: {message}"
    );
}

/// The JSON of part `index` of a compact JWS, and the JWS verified with `jwk` as `alg`.
fn verified_part(jws: &str, jwk: &serde_json::Value, alg: jsonwebtoken::Algorithm) -> bool {
    let (input, signature) = jws.rsplit_once('.').unwrap();
    let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwk.clone()).unwrap();
    let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
    jsonwebtoken::crypto::verify(signature, input.as_bytes(), &key, alg).unwrap_or(false)
}

fn public_jwk(name: &str) -> serde_json::Value {
    let jwks: serde_json::Value =
        serde_json::from_str(&poppy_e2e::identity::jwks_of(&[name])).unwrap();
    jwks["keys"][0].clone()
}

/// The test signer signs as docs/sessions.md says: a delegation signed by the long-term key
/// (`kid`, `alg`, `typ` `poppy-dlg+jwt`; `iss`, `cnf.jwk`, `iat`, `exp` = `iat` + 3600) in the
/// `poppy_dlg` header of a Session JWT signed by the delegated key (`typ`
/// `poppy-session+jwt`; `iss`, `sid`, `sub`, `iat`, `exp` = `iat` + 120, `jti`, `htu`,
/// `htm`); a new JWT for every request, one delegated key per Session unless asked otherwise.
#[test]
fn the_signer_signs_sessions_with_delegated_keys() {
    use jsonwebtoken::Algorithm;
    use poppy_e2e::signer::{PUBLIC_ORIGIN, part};

    for long_term in ["es256-a", "rs256-a"] {
        let session = Session::signed_out("ses_signer")
            .with_agent("http://127.0.0.1:1/agent.json")
            .with_long_term_key(long_term);
        let jwt = session.signed_header("POST", "/orders/o1/exchanges?x=1");
        let header = part(&jwt, 0).unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["typ"], "poppy-session+jwt");
        let dlg = header["poppy_dlg"].as_str().unwrap();
        let dlg_header = part(dlg, 0).unwrap();
        assert_eq!(
            dlg_header,
            json!({"alg": format!("{:?}", poppy_e2e::identity::alg_of(long_term)),
                   "kid": long_term, "typ": "poppy-dlg+jwt"})
        );
        let alg = poppy_e2e::identity::alg_of(long_term);
        assert!(
            verified_part(dlg, &public_jwk(long_term), alg),
            "{long_term}: the delegation verifies with the long-term key"
        );
        let dlg_claims = part(dlg, 1).unwrap();
        assert_eq!(dlg_claims["iss"], "http://127.0.0.1:1/agent.json");
        assert_eq!(
            dlg_claims["exp"].as_i64().unwrap() - dlg_claims["iat"].as_i64().unwrap(),
            3600
        );
        let delegated = dlg_claims["cnf"]["jwk"].clone();
        assert_eq!(delegated, session.delegated_jwk());
        assert!(
            verified_part(&jwt, &delegated, Algorithm::ES256),
            "the Session JWT verifies with the delegated key"
        );
        assert!(
            !verified_part(&jwt, &public_jwk("es256-a"), Algorithm::ES256),
            "and with no other"
        );
        let claims = part(&jwt, 1).unwrap();
        assert_eq!(claims["iss"], "http://127.0.0.1:1/agent.json");
        assert_eq!(claims["sid"], "ses_signer");
        assert_eq!(claims["sub"], "user_1");
        assert_eq!(
            claims["htu"],
            format!("{PUBLIC_ORIGIN}/orders/o1/exchanges"),
            "htu: the origin and the path, no query"
        );
        assert_eq!(claims["htm"], "POST");
        assert_eq!(
            claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
            120
        );
        let again = session.signed_header("POST", "/orders/o1/exchanges?x=1");
        assert_ne!(again, jwt, "a new JWT for every request");
        assert_ne!(part(&again, 1).unwrap()["jti"], claims["jti"]);
        let again_dlg = part(&again, 0).unwrap()["poppy_dlg"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            part(&again_dlg, 1).unwrap()["cnf"]["jwk"],
            delegated,
            "the same delegated key for the whole Session"
        );
    }

    // One delegated key per Session: the same Session made twice shares it, another sid or a
    // new key does not; per request, every JWT has its own.
    let one = Session::signed_out("ses_keys");
    assert_eq!(
        one.delegated_jwk(),
        Session::signed_out("ses_keys").delegated_jwk()
    );
    assert_eq!(
        one.delegated_jwk(),
        Session::signed_in("ses_keys", "acct_1").delegated_jwk(),
        "signing in keeps the Session's key"
    );
    assert_ne!(
        one.delegated_jwk(),
        Session::signed_out("ses_keys_2").delegated_jwk()
    );
    assert_ne!(
        one.delegated_jwk(),
        one.clone().with_new_delegated_key().delegated_jwk()
    );
    let per_request = Session::signed_out("ses_keys").with_key_per_request();
    let key_of = |jwt: String| {
        let dlg = part(&jwt, 0).unwrap()["poppy_dlg"]
            .as_str()
            .unwrap()
            .to_owned();
        part(&dlg, 1).unwrap()["cnf"]["jwk"].clone()
    };
    assert_ne!(
        key_of(per_request.signed_header("GET", "/")),
        key_of(per_request.signed_header("GET", "/"))
    );

    // The unsigned legacy form stays the same bytes.
    let legacy = Session::signed_out("ses_legacy").unsigned();
    assert_eq!(legacy.signed_header("POST", "/a"), legacy.header());
    assert_eq!(
        legacy.signed_header("POST", "/a"),
        legacy.signed_header("GET", "/b")
    );
}

/// Each fault breaks the one thing it names.
#[test]
fn the_signer_faults_break_one_check_each() {
    use poppy_e2e::Fault;
    use poppy_e2e::signer::part;

    let base = Session::signed_out("ses_fault").with_agent("https://agent.example/agent.json");
    let claims = |fault: Fault| {
        let jwt = base
            .clone()
            .with_fault(fault)
            .signed_header("POST", "/orders/o1/exchanges");
        let header = part(&jwt, 0).unwrap();
        let dlg = header["poppy_dlg"].as_str().unwrap().to_owned();
        (
            header,
            part(&jwt, 1).unwrap(),
            part(&dlg, 0).unwrap(),
            part(&dlg, 1).unwrap(),
            dlg,
        )
    };
    // The signer reads the clock itself, possibly a second later than this test: a lower
    // bound compares with the time read before signing, an upper bound with the time after.
    let now = poppy_e2e::identity::now();

    let (_, _, dlg_header, _, dlg) = claims(Fault::DelegationSignedBy("es256-b".into()));
    assert_eq!(dlg_header["kid"], "es256-a");
    assert!(!verified_part(
        &dlg,
        &public_jwk("es256-a"),
        jsonwebtoken::Algorithm::ES256
    ));
    assert!(verified_part(
        &dlg,
        &public_jwk("es256-b"),
        jsonwebtoken::Algorithm::ES256
    ));

    let (_, _, dlg_header, _, _) = claims(Fault::DelegationKid("es256-b".into()));
    assert_eq!(dlg_header["kid"], "es256-b");

    let (_, _, dlg_header, _, dlg) = claims(Fault::DelegationAlg("RS256".into()));
    assert_eq!(
        (&dlg_header["kid"], &dlg_header["alg"]),
        (&json!("es256-a"), &json!("RS256"))
    );
    assert!(verified_part(
        &dlg,
        &public_jwk("rs256-a"),
        jsonwebtoken::Algorithm::RS256
    ));

    let (_, _, _, dlg_claims, _) = claims(Fault::DelegationExpired);
    assert!(dlg_claims["exp"].as_i64().unwrap() <= poppy_e2e::identity::now() - 600);
    let (_, _, _, dlg_claims, _) = claims(Fault::DelegationNotYetValid);
    assert!(dlg_claims["nbf"].as_i64().unwrap() >= now + 600);
    let (_, _, _, dlg_claims, _) =
        claims(Fault::DelegationOfAgent("https://other.example/a".into()));
    assert_eq!(dlg_claims["iss"], "https://other.example/a");

    let (header, _, _, _, _) = claims(Fault::SessionAlg("RS256".into()));
    assert_eq!(header["alg"], "RS256");
    let (_, session_claims, _, _, _) = claims(Fault::SessionExpired);
    assert!(session_claims["exp"].as_i64().unwrap() <= poppy_e2e::identity::now() - 300);
    let (_, session_claims, _, _, _) = claims(Fault::SessionNotYetValid);
    assert!(session_claims["iat"].as_i64().unwrap() >= now + 300);
    let (_, session_claims, _, _, _) = claims(Fault::SessionTooLong);
    assert_eq!(
        session_claims["exp"].as_i64().unwrap() - session_claims["iat"].as_i64().unwrap(),
        600
    );
    let (_, session_claims, _, _, _) = claims(Fault::Origin("https://evil.example".into()));
    assert_eq!(
        session_claims["htu"],
        "https://evil.example/orders/o1/exchanges"
    );
    let (_, session_claims, _, _, _) = claims(Fault::Path("/orders/o2/exchanges".into()));
    assert_eq!(
        session_claims["htu"],
        format!("{}/orders/o2/exchanges", poppy_e2e::PUBLIC_ORIGIN)
    );
    let (_, session_claims, _, _, _) = claims(Fault::Method("GET".into()));
    assert_eq!(session_claims["htm"], "GET");
}

/// A request made for a Session is signed again every time it is sent (a retry is never
/// byte-identical); one whose `Poppy-Session` a test set keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_signed_again_at_send_time() {
    let upstream = Upstream::start();
    let session = Session::signed_in("ses_wire", "acct_1");
    let request = Request::exchange(&session, "o1", "i1", "s1");
    assert!(request.header_value("poppy-session").is_none());
    let client = Client::new(&upstream.url());
    client.send(&request).await;
    client.send(&request).await;
    client
        .send(&request.clone().header("Poppy-Session", "raw.value.sig"))
        .await;
    client
        .send(&request.clone().without_header("Poppy-Session"))
        .await;
    let seen = upstream.requests();
    let first = seen[0].header("poppy-session").unwrap();
    let second = seen[1].header("poppy-session").unwrap();
    assert_ne!(first, second, "a new JWT on every send");
    for jwt in [first, second] {
        poppy_e2e::signer::assert_session_of(&session, jwt, "POST", "/orders/o1/exchanges");
    }
    assert_eq!(
        seen[0].header("authorization"),
        seen[1].header("authorization"),
        "the access token stays the same"
    );
    assert_eq!(seen[2].header("poppy-session"), Some("raw.value.sig"));
    assert_eq!(seen[3].header("poppy-session"), None);
}

/// The test agent serves its metadata document and JWKS (http, and https with its CA), counts
/// the fetches, and misbehaves on request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_agent_serves_its_metadata() {
    use poppy_e2e::{Serving, TestAgent};

    let agent = TestAgent::start();
    let client = Client::new(&agent.document_url().replace("/agent.json", ""));
    let document = client.send(&Request::plain("GET", "/agent.json")).await;
    document.assert_status(200, "the document");
    assert_eq!(
        document.json(),
        json!({"client_id": agent.client_id(), "client_name": "Test agent",
               "jwks_uri": agent.client_id().replace("agent.json", "jwks.json")})
    );
    let jwks = client.send(&Request::plain("GET", "/jwks.json")).await;
    assert_eq!(jwks.json()["keys"][0]["kid"], "es256-a");
    assert_eq!((agent.document_fetches(), agent.jwks_fetches()), (1, 1));
    assert!(agent.session_lines().contains(&format!(
        "[[session.agent]]\nclient_id = \"{}\"",
        agent.client_id()
    )));

    agent.set_serving(Serving::TooLarge);
    let large = client.send(&Request::plain("GET", "/agent.json")).await;
    assert!(large.body.len() > poppy_e2e::test_agent::DOCUMENT_LIMIT);
    assert_eq!(large.json()["client_id"], agent.client_id());

    agent.set_serving(Serving::Slow);
    let slow = tokio::spawn({
        let client = client.clone();
        async move { client.send(&Request::plain("GET", "/agent.json")).await }
    });
    assert!(
        wait::until(Duration::from_secs(5), || agent.document_fetches() == 3).await,
        "the slow fetch arrives"
    );
    assert!(!slow.is_finished(), "held until released");
    agent.release();
    slow.await.unwrap().assert_status(200, "released");

    // https: curl trusts the agent's CA; the redirect points to an http document.
    let redirecting = TestAgent::redirecting_to_http();
    let ca = redirecting.ca_file().unwrap();
    assert!(redirecting.client_id().starts_with("https://127.0.0.1:"));
    let output = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "-D", "-", "--cacert"])
        .arg(&ca)
        .arg(redirecting.client_id())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text} {:?}", output.stderr);
    assert!(text.starts_with("HTTP/1.1 302"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("location: http://127.0.0.1:"),
        "{text}"
    );
    let https = TestAgent::start_https("rs256-a", Serving::Document);
    let output = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(https.ca_file().unwrap())
        .arg(https.client_id().replace("agent.json", "jwks.json"))
        .output()
        .unwrap();
    let jwks: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(jwks["keys"][0]["kid"], "rs256-a");
    assert!(https.session_lines().contains("ca_file = "));

    let unreachable = TestAgent::unreachable();
    assert!(
        Client::new(&unreachable.client_id().replace("/agent.json", ""))
            .try_send(&Request::plain("GET", "/agent.json"))
            .await
            .is_err()
    );
}
