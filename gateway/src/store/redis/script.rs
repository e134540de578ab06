//! Running the Lua scripts, each in one round trip: `EVALSHA`, followed in the same pipeline
//! by `WAIT` when replicas must acknowledge the write. `WAIT` cannot run inside a script, and
//! it must follow the write on the same connection (it counts the replicas that have every
//! write this connection made so far); a pipeline keeps both on the connection, and a cluster
//! connection sends a pipeline to the primary of its first key's slot, the one that wrote.

use std::time::Duration;

use redis::{Cmd, ToRedisArgs, Value};

use super::codec::corrupt;
use super::link::Links;
use crate::store::{ReplicaWait, StoreError};

/// A script, with its SHA1 for `EVALSHA`.
pub(super) struct Lua {
    code: &'static str,
    hash: String,
}

impl Lua {
    pub(super) fn new(code: &'static str) -> Lua {
        Lua {
            code,
            hash: redis::Script::new(code).get_hash().to_owned(),
        }
    }

    pub(super) fn call(&self) -> Call<'_> {
        Call {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A script with its keys and arguments.
pub(super) struct Call<'a> {
    lua: &'a Lua,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Call<'_> {
    /// The keys must share one hash tag (one cluster slot): a script may touch only its KEYS.
    pub(super) fn key(mut self, key: String) -> Self {
        self.keys.push(key);
        self
    }

    pub(super) fn arg<T: ToRedisArgs>(mut self, arg: T) -> Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    fn command(&self, by_hash: bool) -> Cmd {
        let mut cmd = if by_hash {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&self.lua.hash);
            cmd
        } else {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(self.lua.code);
            cmd
        };
        cmd.arg(self.keys.len()).arg(&self.keys).arg(&self.args);
        cmd
    }
}

/// A script's reply, and how many replicas acknowledged its write when asked to wait.
pub(super) struct Ran {
    pub(super) value: Value,
    pub(super) acknowledged: Option<u32>,
}

/// Run `call` in one round trip, with `WAIT` after it when `wait` is set. Only when Redis lost
/// its script cache (`NOSCRIPT`: nothing ran) a second round trip sends the script itself
/// with `EVAL`, which caches it again on the node that runs it.
///
/// On a cluster, the client follows a `MOVED`/`ASK` answer a few times itself, but during a
/// failover the slot map can take longer to settle, and while a resharding moves the slot a
/// script that needs a missing key is answered `TRYAGAIN` until the move ends: the answer came
/// back as a store failure (`503 store_unavailable`). Such an answer means the script did not
/// run; the call then pauses, reads the key with a plain command (which the client follows,
/// learning the new slot owner) and tries again, for at most [`REDIRECT_BUDGET`].
pub(super) async fn run(
    links: &Links,
    call: &Call<'_>,
    wait: Option<ReplicaWait>,
) -> Result<Ran, StoreError> {
    let ran = links
        .run(|mut link| async move {
            let started = tokio::time::Instant::now();
            let mut redirects = 0;
            loop {
                let attempt = match attempt(&mut link, call, true, wait).await {
                    Ok(Attempt::NoScript) => attempt(&mut link, call, false, wait).await,
                    other => other,
                };
                // The client's own retries may end on a redirection too (a failover whose
                // slot map settles slowly): treat it like one seen in the replies.
                let attempt = match attempt {
                    Err(error) if is_redirection(&error) => Attempt::Redirected(error),
                    other => other?,
                };
                match attempt {
                    Attempt::Redirected(error)
                        if started.elapsed() + redirect_pause(redirects + 1) < REDIRECT_BUDGET =>
                    {
                        redirects += 1;
                        tracing::debug!(error = %error, "slot moved; following it");
                        // Give a failover or a move a moment to settle, then learn the owner.
                        tokio::time::sleep(redirect_pause(redirects)).await;
                        follow_slot(&mut link, call).await?;
                    }
                    Attempt::Redirected(error) => return Err(error),
                    other => return Ok(other),
                }
            }
        })
        .await?;
    match ran {
        Attempt::Ran(ran) => Ok(ran),
        Attempt::NoScript => Err(corrupt("EVAL answered NOSCRIPT")),
        Attempt::Redirected(_) => Err(corrupt("still redirected")),
    }
}

/// How long one call keeps following `MOVED`/`ASK` (or waiting out `TRYAGAIN`/`CLUSTERDOWN`):
/// long enough for a failover's slot map to settle or a slot's keys to be migrated, well
/// within the call's bound ([`super::link::CALL_TIMEOUT`]).
const REDIRECT_BUDGET: Duration = Duration::from_millis(1500);

/// The pause before following the `n`th redirection: 50 ms, doubling, at most 400 ms.
fn redirect_pause(n: u32) -> Duration {
    Duration::from_millis(50 << n.saturating_sub(1).min(3))
}

/// A cluster answer that says another node serves the slot (or will soon): nothing ran.
fn is_redirection(error: &redis::RedisError) -> bool {
    matches!(
        error.code(),
        Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN")
    )
}

/// Make the cluster client learn where the call's slot lives now: a read of its first key
/// as a plain command, whose redirection the client follows (refreshing its slot map).
async fn follow_slot(link: &mut super::link::Link, call: &Call<'_>) -> redis::RedisResult<()> {
    let Some(key) = call.keys.first() else {
        return Ok(());
    };
    redis::cmd("PTTL")
        .arg(key)
        .query_async::<Value>(link)
        .await
        .map(drop)
}

enum Attempt {
    Ran(Ran),
    NoScript,
    /// `MOVED` or `ASK`: another node serves the slot; nothing ran.
    Redirected(redis::RedisError),
}

async fn attempt(
    link: &mut super::link::Link,
    call: &Call<'_>,
    by_hash: bool,
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<Attempt> {
    let mut pipeline = redis::pipe();
    // Errors come back as values, so a NOSCRIPT can be told from the WAIT's reply.
    pipeline.ignore_errors();
    pipeline.add_command(call.command(by_hash));
    if let Some(wait) = wait {
        let timeout_ms = u64::try_from(wait.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        pipeline.cmd("WAIT").arg(wait.replicas).arg(timeout_ms);
    }
    let mut replies: Vec<Value> = pipeline.query_async(link).await?;
    if let Some(Value::ServerError(error)) = replies.first() {
        let error: redis::RedisError = error.clone().into();
        if is_redirection(&error) {
            return Ok(Attempt::Redirected(error));
        }
    }
    let acknowledged = match (wait, replies.get(1)) {
        (None, _) => None,
        (Some(_), Some(Value::Int(n))) => Some(u32::try_from(*n).unwrap_or(0)),
        (Some(_), Some(Value::ServerError(error))) => return Err(error.clone().into()),
        (Some(_), _) => return Err(unexpected("WAIT")),
    };
    if replies.is_empty() {
        return Err(unexpected("the script"));
    }
    match replies.swap_remove(0) {
        Value::ServerError(error) if by_hash && error.code() == "NOSCRIPT" => Ok(Attempt::NoScript),
        Value::ServerError(error) => Err(error.into()),
        value => Ok(Attempt::Ran(Ran {
            value,
            acknowledged,
        })),
    }
}

fn unexpected(what: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("no reply to {what}"),
    ))
}
