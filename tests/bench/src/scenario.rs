//! What a load connection sends, row by row: plain requests (no `Poppy-Session`), mints,
//! mint + approve pairs, and replays. Each iteration is one request, or one pair.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::http1::{self, Conn, Response};
use crate::signer::Signer;

/// The exchange request's JSON body (the policy's terms `item_id` and `replacement_sku`).
pub const ITEM_BODY: &str = r#"{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}"#;
/// What the gateway answers a mint of [`ITEM_BODY`] with (a 469-byte `403`): the fixed body
/// of the reference rows that answer requests themselves (`2a`, `2pa`).
pub const MINT_ANSWER: &str = r#"{"detail":"this action needs the user's approval of these terms; retry the same request with a Poppy-Approval header","error":"approval_required","operation":{"expires_at":"2026-12-03T15:09:40Z","operation_id":"exc_shCy2akQ3FCWFjcmgNAonVa37","revision":"1796310580-22rM0eSRW4if4s_RmJ294z","summary":"Exchange item **itm_4Qa** on order ord_bench for stormline-insulated-m.","terms":{"item_id":"itm_4Qa","order_id":"ord_bench","replacement_sku":"stormline-insulated-m"}}}"#;
/// The body of [`Scenario::MintLarge`]: the two required terms, a nested `shipping` object,
/// an `items` array of objects and ten of the 66 flat optional terms.
pub const LARGE_BODY: &str = r#"{"amount":1250,"currency":"eur","shipping":{"name":"Ann Lee","address":{"line1":"1 rue X","city":"Paris","postal_code":"75001","country":"FR"}},"items":[{"sku":"stormline-insulated-m","quantity":1},{"sku":"gift-wrap","quantity":2}],"opt01":"a1","opt02":"b2","opt03":"c3","opt04":"d4","opt05":"e5","opt06":"f6","opt07":"g7","opt08":"h8","opt09":"i9","opt10":"j10"}"#;
/// The order of plain and minting rows.
pub const ORDER: &str = "ord_bench";

/// One row's traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scenario {
    /// Rows 1–3: the company's own traffic, no `Poppy-Session`. POST sends [`ITEM_BODY`].
    Plain { method: String, path: String },
    /// A Personal Agent request with no approval: `403 approval_required`.
    Mint,
    /// A mint whose body carries a `note` of `pad_bytes` (an ignored member, not a term): the
    /// body-size scaling rows.
    MintPadded { pad_bytes: usize },
    /// A Personal Agent `GET /orders/ord_bench`, a read no policy names: forwarded, `200`.
    AgentGet,
    /// Mint, then approve with the returned operation_id and revision: `403`, then the
    /// upstream's `201`. Every pair is a fresh operation (its own order_id). `pad_bytes` adds a
    /// `note` of that many bytes to the body (not a term), for the memory measurement.
    Approve {
        order_prefix: String,
        pad_bytes: usize,
    },
    /// Retries of `ops` performed approvals: the recorded `201`, upstream not called.
    Replay { ops: usize },
    /// A mint on the payment policy ([`crate::gateway::LARGE_POLICY`]: 71 terms, 68 of them
    /// optional, a nested body) sending [`LARGE_BODY`]: issue 38's policy size.
    MintLarge,
}

impl Scenario {
    /// Plain `POST /orders/ord_bench/exchanges` with the exchange body.
    pub fn plain_post() -> Scenario {
        Scenario::Plain {
            method: "POST".into(),
            path: format!("/orders/{ORDER}/exchanges"),
        }
    }

    /// Plain `GET /orders/ord_bench`.
    pub fn plain_get() -> Scenario {
        Scenario::Plain {
            method: "GET".into(),
            path: format!("/orders/{ORDER}"),
        }
    }

    pub fn approve() -> Scenario {
        Scenario::Approve {
            order_prefix: "ord".into(),
            pad_bytes: 0,
        }
    }

    /// The padding that makes [`item_body`] exactly `bytes` long (none below its unpadded size).
    pub fn pad_for(bytes: usize) -> usize {
        bytes.saturating_sub(ITEM_BODY.len() + NOTE_OVERHEAD)
    }

    /// Bytes of the request body this scenario sends (0 for a GET).
    pub fn body_bytes(&self) -> usize {
        match self {
            Scenario::Plain { method, .. } if method == "GET" => 0,
            Scenario::AgentGet => 0,
            Scenario::MintPadded { pad_bytes } | Scenario::Approve { pad_bytes, .. } => {
                item_body(*pad_bytes).len()
            }
            Scenario::MintLarge => LARGE_BODY.len(),
            _ => ITEM_BODY.len(),
        }
    }

    /// Requests per iteration.
    pub fn requests_per_iteration(&self) -> u64 {
        match self {
            Scenario::Approve { .. } => 2,
            _ => 1,
        }
    }
}

/// The `Poppy-Session` of every Personal Agent request: an unsigned JWT (the gateway reads
/// claims, it does not verify them). One Session, so replays are approvable by the requester.
pub fn session_jwt() -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"poppy-session+jwt"}"#);
    let payload =
        URL_SAFE_NO_PAD.encode(r#"{"sid":"sess_bench","iss":"bench-agent","sub":"user_bench"}"#);
    format!("{header}.{payload}.sig")
}

/// What the `note` member adds to [`ITEM_BODY`] besides its padding: `,"note":""`.
const NOTE_OVERHEAD: usize = 10;

/// The exchange body, with a `note` of `pad` bytes when `pad > 0`.
pub fn item_body(pad: usize) -> Vec<u8> {
    if pad == 0 {
        return ITEM_BODY.as_bytes().to_vec();
    }
    let mut body = ITEM_BODY.trim_end_matches('}').as_bytes().to_vec();
    body.extend_from_slice(br#","note":""#);
    body.extend(std::iter::repeat_n(b'x', pad));
    body.extend_from_slice(br#""}"#);
    body
}

/// The headers every Personal Agent request carries.
fn agent_headers(session: &str) -> Vec<(&str, &str)> {
    vec![
        ("Poppy-Session", session),
        ("Poppy-Version", "0.4"),
        ("Poppy-Extensions", "\"operations\";v=\"2\""),
    ]
}

/// A Personal Agent `GET /orders/ord_bench`: a read no policy names.
pub fn agent_get(session: &str) -> Vec<u8> {
    http1::request(
        "GET",
        &format!("/orders/{ORDER}"),
        &agent_headers(session),
        b"",
    )
}

/// The exchange's path for `order`.
pub fn exchange_path(order: &str) -> String {
    format!("/orders/{order}/exchanges")
}

/// A Personal Agent `POST /orders/{order}/exchanges`, with an approval when given.
pub fn agent_request(session: &str, order: &str, body: &[u8], approval: Option<&str>) -> Vec<u8> {
    agent_post(session, &exchange_path(order), body, approval)
}

/// A Personal Agent JSON `POST` of `path`, with an approval when given.
pub fn agent_post(session: &str, path: &str, body: &[u8], approval: Option<&str>) -> Vec<u8> {
    let mut headers = agent_headers(session);
    headers.push(("Content-Type", "application/json"));
    if let Some(approval) = approval {
        headers.push(("Poppy-Approval", approval));
    }
    http1::request("POST", path, &headers, body)
}

#[derive(Deserialize)]
struct Held {
    operation: HeldOperation,
}

#[derive(Deserialize)]
struct HeldOperation {
    operation_id: String,
    revision: String,
}

/// The `Poppy-Approval` value for a `403 approval_required` body.
pub fn approval_for(body: &[u8]) -> anyhow::Result<String> {
    let held: Held = serde_json::from_slice(body).context("403 body without an operation")?;
    Ok(format!(
        "operation_id=\"{}\", revision=\"{}\"",
        held.operation.operation_id, held.operation.revision
    ))
}

/// A connection that reconnects when the server closed it or a request failed.
pub struct Link {
    addr: SocketAddr,
    timeout: Duration,
    conn: Option<Conn>,
}

impl Link {
    pub fn new(addr: SocketAddr, timeout: Duration) -> Link {
        Link {
            addr,
            timeout,
            conn: None,
        }
    }

    /// Send and expect `status`; the error says what came instead.
    pub async fn expect(&mut self, request: &[u8], status: u16) -> anyhow::Result<Response> {
        let response = self.send(request).await?;
        if response.status != status {
            bail!(
                "expected {status}, got {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body[..response.body.len().min(300)])
            );
        }
        Ok(response)
    }

    async fn send(&mut self, request: &[u8]) -> anyhow::Result<Response> {
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => Conn::connect(self.addr, self.timeout).await?,
        };
        let response = tokio::time::timeout(self.timeout, conn.send(request))
            .await
            .map_err(|_| anyhow::anyhow!("no response within {:?}", self.timeout))??;
        if !response.close {
            self.conn = Some(conn);
        }
        Ok(response)
    }
}

/// Pre-signed Sessions per request of a signed mint or replay row: the gateway verifies
/// each one (it keeps no `jti` and caches no Session), and signing each request in the load
/// generator would make its shared core, not the gateway, the limit of those rows.
const SIGNED_POOL: usize = 512;

/// Where Personal Agent requests get their `Poppy-Session`.
pub enum Sessions {
    /// The one unsigned JWT of [`session_jwt`] (claims only).
    Unsigned(String),
    /// Signed by a delegated key for each request ([`crate::signer`]).
    Signed(Box<Signer>),
}

impl Sessions {
    /// The Session for `method` `path`: a new JWT when signed.
    pub fn for_request(&self, method: &str, path: &str) -> anyhow::Result<String> {
        match self {
            Sessions::Unsigned(jwt) => Ok(jwt.clone()),
            Sessions::Signed(signer) => signer.session(method, path),
        }
    }

    /// How many distinct Sessions a row cycles through for one request (1 unsigned).
    fn pool(&self) -> usize {
        match self {
            Sessions::Unsigned(_) => 1,
            Sessions::Signed(_) => SIGNED_POOL,
        }
    }
}

/// What every connection of a row shares, made once before the load starts.
pub struct Prepared {
    sessions: Sessions,
    plain: Vec<u8>,
    plain_status: u16,
    /// Mints (one unsigned; a pool of signed ones), padded on `MintPadded` rows.
    mints: Vec<Vec<u8>>,
    agent_get: Vec<u8>,
    /// Replay rows: the approved requests to retry (signed: a pool for each).
    replays: Vec<Vec<u8>>,
    /// Distinguishes this run's order_ids from any earlier run's against the same store.
    run_tag: String,
}

impl Prepared {
    /// Build the requests; a replay row first performs its approvals (on one connection).
    /// `agent`: sign Sessions as the agent of this `client_id` (none: unsigned).
    pub async fn new(
        scenario: &Scenario,
        addr: SocketAddr,
        timeout: Duration,
        agent: Option<&str>,
    ) -> anyhow::Result<Prepared> {
        let sessions = match agent {
            Some(client_id) => Sessions::Signed(Box::new(Signer::new(client_id)?)),
            None => Sessions::Unsigned(session_jwt()),
        };
        let (plain, plain_status) = match scenario {
            Scenario::Plain { method, path } if method == "POST" => (
                http1::request(
                    "POST",
                    path,
                    &[("Content-Type", "application/json")],
                    ITEM_BODY.as_bytes(),
                ),
                201,
            ),
            Scenario::Plain { method, path } => (http1::request(method, path, &[], b""), 200),
            _ => (Vec::new(), 0),
        };
        let (mint_path, mint_body) = match scenario {
            Scenario::MintPadded { pad_bytes } => (exchange_path(ORDER), item_body(*pad_bytes)),
            Scenario::MintLarge => (
                format!("/orders/{ORDER}/payments"),
                LARGE_BODY.as_bytes().to_vec(),
            ),
            _ => (exchange_path(ORDER), ITEM_BODY.as_bytes().to_vec()),
        };
        let mints = match scenario {
            Scenario::Mint | Scenario::MintPadded { .. } | Scenario::MintLarge => (0..sessions
                .pool())
                .map(|_| {
                    let session = sessions.for_request("POST", &mint_path)?;
                    Ok(agent_post(&session, &mint_path, &mint_body, None))
                })
                .collect::<anyhow::Result<_>>()?,
            _ => Vec::new(),
        };
        let agent_get = agent_get(&sessions.for_request("GET", &format!("/orders/{ORDER}"))?);
        let run_tag = format!(
            "{:x}{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        );
        let mut prepared = Prepared {
            sessions,
            plain,
            plain_status,
            mints,
            agent_get,
            replays: Vec::new(),
            run_tag,
        };
        if let Scenario::Replay { ops } = scenario {
            let mut link = Link::new(addr, timeout);
            let per_op = (prepared.sessions.pool() / (*ops).max(1)).max(1);
            for op in 0..(*ops).max(1) {
                let order = format!("rep{}x{op}", prepared.run_tag);
                let body = item_body(0);
                let (approved, approval) = prepared.pair(&mut link, &order, &body, None).await?;
                prepared.replays.push(approved);
                for _ in 1..per_op {
                    let session = prepared
                        .sessions
                        .for_request("POST", &exchange_path(&order))?;
                    prepared
                        .replays
                        .push(agent_request(&session, &order, &body, Some(&approval)));
                }
            }
        }
        Ok(prepared)
    }

    /// Mint the exchange of `order`, then approve it: the approved request (sent, `201`).
    /// `record` times each request.
    async fn pair(
        &self,
        link: &mut Link,
        order: &str,
        body: &[u8],
        mut record: Option<&mut (dyn FnMut(Instant, Instant) + Send)>,
    ) -> anyhow::Result<(Vec<u8>, String)> {
        let path = exchange_path(order);
        let mint = agent_request(
            &self.sessions.for_request("POST", &path)?,
            order,
            body,
            None,
        );
        let started = Instant::now();
        let held = link.expect(&mint, 403).await?;
        if let Some(record) = record.as_mut() {
            record(started, Instant::now());
        }
        let approval = approval_for(&held.body)?;
        let session = self.sessions.for_request("POST", &path)?;
        let approved = agent_request(&session, order, body, Some(&approval));
        let started = Instant::now();
        link.expect(&approved, 201)
            .await
            .context("performing an approval")?;
        if let Some(record) = record.as_mut() {
            record(started, Instant::now());
        }
        Ok((approved, approval))
    }
}

/// One connection's state.
pub struct Worker {
    index: usize,
    seq: u64,
    link: Link,
}

impl Worker {
    pub fn new(index: usize, addr: SocketAddr, timeout: Duration) -> Worker {
        Worker {
            index,
            seq: 0,
            link: Link::new(addr, timeout),
        }
    }

    /// One iteration; `record(start, end)` is called for each request that succeeded.
    pub async fn iterate(
        &mut self,
        scenario: &Scenario,
        prepared: &Prepared,
        record: &mut (impl FnMut(Instant, Instant) + Send),
    ) -> anyhow::Result<()> {
        self.seq += 1;
        match scenario {
            Scenario::Plain { .. } => {
                timed(
                    record,
                    self.link.expect(&prepared.plain, prepared.plain_status),
                )
                .await?;
            }
            Scenario::Mint | Scenario::MintPadded { .. } | Scenario::MintLarge => {
                let pick = (self.index + self.seq as usize) % prepared.mints.len().max(1);
                let Some(mint) = prepared.mints.get(pick) else {
                    bail!("mint row without a prepared mint");
                };
                timed(record, self.link.expect(mint, 403)).await?;
            }
            Scenario::AgentGet => {
                timed(record, self.link.expect(&prepared.agent_get, 200)).await?;
            }
            Scenario::Approve {
                order_prefix,
                pad_bytes,
            } => {
                let order = format!(
                    "{order_prefix}{}c{}n{}",
                    prepared.run_tag, self.index, self.seq
                );
                let body = item_body(*pad_bytes);
                let record: &mut (dyn FnMut(Instant, Instant) + Send) = record;
                prepared
                    .pair(&mut self.link, &order, &body, Some(record))
                    .await?;
            }
            Scenario::Replay { .. } => {
                let pick = (self.index + self.seq as usize) % prepared.replays.len().max(1);
                let Some(request) = prepared.replays.get(pick) else {
                    bail!("replay row without performed approvals");
                };
                timed(record, self.link.expect(request, 201)).await?;
            }
        }
        Ok(())
    }
}

async fn timed<T>(
    record: &mut impl FnMut(Instant, Instant),
    request: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let start = Instant::now();
    let result = request.await?;
    record(start, Instant::now());
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_bodies_are_json_with_a_note() {
        let body: serde_json::Value = serde_json::from_slice(&item_body(10)).unwrap();
        assert_eq!(body["note"], "xxxxxxxxxx");
        assert_eq!(body["item_id"], "itm_4Qa");
        assert_eq!(item_body(0), ITEM_BODY.as_bytes());
    }

    #[test]
    fn padding_gives_bodies_of_the_size_asked() {
        for bytes in [4096, 65536, 1 << 20] {
            let pad = Scenario::pad_for(bytes);
            assert_eq!(item_body(pad).len(), bytes);
            assert_eq!(Scenario::MintPadded { pad_bytes: pad }.body_bytes(), bytes);
        }
        assert_eq!(Scenario::pad_for(64), 0);
        assert_eq!(Scenario::AgentGet.body_bytes(), 0);
    }

    #[test]
    fn approvals_are_read_from_the_403_body() {
        let body = br#"{"error":"approval_required","operation":{"operation_id":"exc_a","revision":"1-b","summary":"s"}}"#;
        assert_eq!(
            approval_for(body).unwrap(),
            r#"operation_id="exc_a", revision="1-b""#
        );
        assert!(approval_for(b"{}").is_err());
    }

    #[test]
    fn the_session_is_a_three_part_jwt() {
        assert_eq!(session_jwt().split('.').count(), 3);
    }
}
