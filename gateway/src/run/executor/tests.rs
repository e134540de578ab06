//! The executor against a real memory store and an upstream that refuses connections:
//! what it carries out, and that it counts nothing itself (`RequestOutcome::record` does,
//! called once by service.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde_json::json;

use super::*;
use crate::clock::SystemClock;
use crate::identity::Approver;
use crate::metrics::Outcome;
use crate::metrics::Rejection;
use crate::policy::PolicySet;
use crate::protocol::ApprovalHeader;
use crate::protocol::SigningKey;
use crate::store::MemoryStore;
use crate::upstream::forwarded::ProxyContext;

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

impl Executor {
    /// A request decided and carried out with no lookup headers: the unit tests'.
    async fn run(&self, request: OperationRequest, forward: &ForwardRequest) -> Executed {
        let reading = Reading::plain(ProxyContext::default());
        let headers = HeaderMap::new();
        match self
            .drive(request, Approves::Agent, headers, forward.clone(), &reading)
            .await
        {
            Operated::Decided(executed) => executed,
            Operated::Refused(refusal, _) => panic!("refused: {}", refusal.detail),
            Operated::NotHeld(_) => panic!("not held"),
        }
    }
}

struct World {
    executor: Executor,
    store: Arc<dyn OperationStore>,
    metrics: Arc<Metrics>,
    policy: Arc<Policy>,
    /// Bound and never listening: every connection is refused, so nothing is sent.
    _refusing: tokio::net::TcpSocket,
}

fn world() -> World {
    world_on(None)
}

/// A world whose executor serves `route` (`None`: the default route).
fn world_on(route: Option<&str>) -> World {
    let refusing = tokio::net::TcpSocket::new_v4().unwrap();
    refusing.bind(([127, 0, 0, 1], 0).into()).unwrap();
    let address = refusing.local_addr().unwrap().to_string();
    let settings = Upstream {
        url: format!("http://{address}"),
        tls: false,
        address: address.clone(),
        host: "127.0.0.1".into(),
        connect_timeout: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        release_statuses: vec![401, 429],
        release_503_with_retry_after: true,
        passthrough: crate::config::Passthrough::default(),
        approval_header: None,
    };
    let policies = crate::config::parse_policy_file(Path::new("exchange.toml"), POLICY).unwrap();
    let policy = Arc::new(policies[0].clone());
    let store: Arc<dyn OperationStore> = Arc::new(MemoryStore::new());
    let metrics = Arc::new(Metrics::new().unwrap());
    metrics.policies(["exchange"]);
    let executor = Executor::new(ExecutorParts {
        keys: Keys::new(vec![SigningKey::new(b"executor-test-key-0123".to_vec())]).unwrap(),
        store: Arc::clone(&store),
        upstream: Arc::new(UpstreamClient::new(&settings)),
        settings,
        route: route.map(str::to_owned),
        remember_grace: Duration::from_secs(60),
        page_url: None,
        agents: None,
        policies: LivePolicies::new(PolicySet::new(policies)),
        metrics: Arc::clone(&metrics),
        drain: Arc::new(Drain::default()),
        receipts: None,
        clock: Arc::new(SystemClock),
    });
    World {
        executor,
        store,
        metrics,
        policy,
        _refusing: refusing,
    }
}

fn request(policy: &Arc<Policy>, approval: Option<ApprovalHeader>) -> OperationRequest {
    let part = |v: serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let session = format!(
        "{}.{}.x",
        part(json!({"alg": "none"})),
        part(json!({"sid": "s1"}))
    );
    let claims = crate::testkit::claims_off();
    OperationRequest {
        policy: Arc::clone(policy),
        approver: Approver::from_headers(session.as_bytes(), None, &claims).unwrap(),
        approval,
        terms: [("order_id".to_owned(), json!("o1"))].into_iter().collect(),
        fingerprint: b"POST /orders/o1/exchanges".to_vec(),
    }
}

fn forward() -> ForwardRequest {
    ForwardRequest {
        method: http::Method::POST,
        path_and_query: "/orders/o1/exchanges".into(),
        headers: Vec::new(),
        body: Bytes::new(),
    }
}

fn operations_total(metrics: &Metrics, outcome: &str) -> String {
    let text = String::from_utf8(metrics.render(crate::metrics::Format::Text)).unwrap();
    let series = format!("poppy_operations_total{{operation=\"exchange\",outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series).map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test]
async fn an_unreachable_upstream_releases_the_claim_and_counts_nothing_itself() {
    let world = world();
    let held = world
        .executor
        .run(request(&world.policy, None), &forward())
        .await;
    let Decision::ApprovalRequired {
        operation,
        rejected: false,
    } = &held.decision
    else {
        panic!("expected an operation to approve, got {:?}", held.decision)
    };
    assert!(matches!(
        &held.outcome,
        RequestOutcome::Decided {
            outcome: Outcome::Held,
            asked: Some(_),
            ..
        }
    ));
    // Decided, not yet counted: only RequestOutcome::record counts.
    assert_eq!(operations_total(&world.metrics, "held"), "0");
    held.outcome.record(&world.metrics);
    assert_eq!(operations_total(&world.metrics, "held"), "1");

    let approval = ApprovalHeader {
        operation_id: operation.operation_id.clone(),
        revision: operation.revision.clone(),
    };
    let approved = request(&world.policy, Some(approval.clone()));
    let sent = world.executor.run(approved.clone(), &forward()).await;
    assert!(
        matches!(sent.decision, Decision::UpstreamUnavailable),
        "{:?}",
        sent.decision
    );
    // Nothing was sent, so the claim is gone and the same approval may come again.
    let id = OperationId::parse(&approval.operation_id).unwrap();
    assert_eq!(world.store.lookup(&id).await.unwrap(), None);
    let again = world.executor.run(approved, &forward()).await;
    assert!(matches!(again.decision, Decision::UpstreamUnavailable));
    assert_eq!(
        operations_total(&world.metrics, "upstream_unavailable"),
        "0"
    );
}

#[tokio::test]
async fn a_refused_approval_carries_its_reason_to_the_count() {
    let world = world();
    let forged = ApprovalHeader {
        operation_id: "not-ours".into(),
        revision: "1-x".into(),
    };
    let executed = world
        .executor
        .run(request(&world.policy, Some(forged)), &forward())
        .await;
    assert!(matches!(
        executed.decision,
        Decision::ApprovalRequired { rejected: true, .. }
    ));
    assert!(matches!(
        &executed.outcome,
        RequestOutcome::Decided {
            outcome: Outcome::Rejected,
            rejection: Some(Rejection::NotOurs),
            operation_id,
            ..
        } if operation_id.starts_with("exc_")
    ));
}

/// The same policy, keys and request on two routes: an approval returned on one is a
/// refused approval on the other (a new operation to hold), and is performed on its own.
#[tokio::test]
async fn an_approval_is_bound_to_the_route_that_returned_it() {
    let (a, b) = (world_on(Some("a")), world_on(Some("b")));
    let held = a.executor.run(request(&a.policy, None), &forward()).await;
    let Decision::ApprovalRequired { operation, .. } = &held.decision else {
        panic!("expected an operation, got {:?}", held.decision)
    };
    let approval = ApprovalHeader {
        operation_id: operation.operation_id.clone(),
        revision: operation.revision.clone(),
    };
    let elsewhere = b
        .executor
        .run(request(&b.policy, Some(approval.clone())), &forward())
        .await;
    assert!(
        matches!(
            elsewhere.decision,
            Decision::ApprovalRequired { rejected: true, .. }
        ),
        "{:?}",
        elsewhere.decision
    );
    let id = OperationId::parse(&approval.operation_id).unwrap();
    assert_eq!(b.store.lookup(&id).await.unwrap(), None, "nothing claimed");
    // On its own route the approval is good: it is claimed and forwarded (to an upstream
    // that refuses the connection, so the claim is released).
    let home = a
        .executor
        .run(request(&a.policy, Some(approval)), &forward())
        .await;
    assert!(
        matches!(home.decision, Decision::UpstreamUnavailable),
        "{:?}",
        home.decision
    );
    // The default route's revisions are not a [[route]]'s either.
    let default = world();
    let unbound = default
        .executor
        .run(
            request(
                &default.policy,
                Some(ApprovalHeader {
                    operation_id: operation.operation_id.clone(),
                    revision: operation.revision.clone(),
                }),
            ),
            &forward(),
        )
        .await;
    assert!(matches!(
        unbound.decision,
        Decision::ApprovalRequired { rejected: true, .. }
    ));
}
