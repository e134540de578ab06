//! What the Redis server promises about keeping claims: persistence across a restart, no
//! eviction, and replicas. Read with `CONFIG GET` and `INFO replication` at startup and on
//! `/readyz/store`; a server that forbids `CONFIG` (many managed services) reads as unknown.

use redis::Value;

use super::codec::bytes_of;
use super::link::Links;
use crate::store::StoreError;

/// One primary's settings; `None` where the server would not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeDurability {
    /// The node's address on a cluster, empty on a single node.
    pub address: String,
    pub appendonly: Option<String>,
    pub save: Option<String>,
    pub maxmemory_policy: Option<String>,
    pub connected_replicas: Option<u64>,
}

/// What every primary of the store promises.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durability {
    pub nodes: Vec<NodeDurability>,
}

impl Durability {
    /// Why a restart or an eviction could forget a claim (or a performed operation, which
    /// could then run again), one line per finding; empty when the server is durable.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for node in &self.nodes {
            let at = if node.address.is_empty() {
                String::new()
            } else {
                format!(" on {}", node.address)
            };
            match (node.appendonly.as_deref(), node.save.as_deref()) {
                (Some("yes"), _) => {}
                (None, _) => problems.push(format!(
                    "cannot read the persistence settings{at} (CONFIG GET is not allowed): make sure the append-only file is on"
                )),
                (Some(_), Some("") | None) => problems.push(format!(
                    "no persistence{at} (appendonly no, no save points): a Redis restart forgets every claim and performed operation, which could then run twice; set appendonly yes"
                )),
                (Some(_), Some(save)) => problems.push(format!(
                    "only RDB snapshots{at} (appendonly no, save \"{save}\"): a Redis restart forgets the claims since the last snapshot, which could then run twice; set appendonly yes"
                )),
            }
            match node.maxmemory_policy.as_deref() {
                Some("noeviction") => {}
                None => problems.push(format!(
                    "cannot read maxmemory-policy{at} (CONFIG GET is not allowed): it must be noeviction"
                )),
                Some(policy) => problems.push(format!(
                    "maxmemory-policy {policy}{at}: Redis may evict records when full, and an evicted operation could run twice; set noeviction"
                )),
            }
        }
        problems
    }

    /// The fewest replicas connected to any primary (`None` when no primary would say).
    pub fn replicas(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|node| node.connected_replicas)
            .min()
    }
}

/// Read every primary's settings.
pub(super) async fn read(links: &Links) -> Result<Durability, StoreError> {
    let config = |name: &'static str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        cmd
    };
    let appendonly = each(links, config("appendonly")).await?;
    let save = each(links, config("save")).await?;
    let policy = each(links, config("maxmemory-policy")).await?;
    let mut info = redis::cmd("INFO");
    info.arg("replication");
    let replication = each(links, info).await?;
    let mut nodes: Vec<NodeDurability> = appendonly
        .into_iter()
        .map(|(address, value)| NodeDurability {
            appendonly: config_value(value),
            address,
            ..NodeDurability::default()
        })
        .collect();
    for node in &mut nodes {
        let find = |answers: &[(String, Value)]| {
            answers
                .iter()
                .find(|(address, _)| *address == node.address)
                .map(|(_, value)| value.clone())
        };
        node.save = find(&save).and_then(config_value);
        node.maxmemory_policy = find(&policy).and_then(config_value);
        node.connected_replicas = find(&replication).and_then(|value| {
            let text = String::from_utf8(bytes_of(value).ok()?).ok()?;
            text.lines()
                .find_map(|line| line.strip_prefix("connected_slaves:"))
                .and_then(|n| n.trim().parse().ok())
        });
    }
    Ok(Durability { nodes })
}

async fn each(links: &Links, cmd: redis::Cmd) -> Result<Vec<(String, Value)>, StoreError> {
    links
        .run(|link| {
            let cmd = cmd.clone();
            async move { link.on_each_primary(cmd).await }
        })
        .await
}

/// The value of a `CONFIG GET name` answer (a pair, or a map in RESP3); `None` when refused.
fn config_value(value: Value) -> Option<String> {
    let value = match value {
        Value::Array(mut items) if items.len() == 2 => items.pop()?,
        Value::Map(mut pairs) if pairs.len() == 1 => pairs.pop()?.1,
        _ => return None,
    };
    String::from_utf8(bytes_of(value).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(appendonly: &str, save: &str, policy: &str) -> NodeDurability {
        NodeDurability {
            address: String::new(),
            appendonly: Some(appendonly.into()),
            save: Some(save.into()),
            maxmemory_policy: Some(policy.into()),
            connected_replicas: Some(0),
        }
    }

    #[test]
    fn only_aof_without_eviction_is_durable() {
        let durable = |n: NodeDurability| Durability { nodes: vec![n] }.problems();
        assert!(durable(node("yes", "", "noeviction")).is_empty());
        assert_eq!(durable(node("no", "", "noeviction")).len(), 1);
        assert_eq!(durable(node("no", "3600 1", "noeviction")).len(), 1);
        assert_eq!(durable(node("yes", "", "allkeys-lru")).len(), 1);
        assert_eq!(durable(node("yes", "", "volatile-lru")).len(), 1);
        assert_eq!(durable(NodeDurability::default()).len(), 2);
    }

    #[test]
    fn config_answers_in_both_protocols() {
        let pair = Value::Array(vec![
            Value::BulkString(b"appendonly".to_vec()),
            Value::BulkString(b"yes".to_vec()),
        ]);
        assert_eq!(config_value(pair), Some("yes".into()));
        let map = Value::Map(vec![(
            Value::BulkString(b"appendonly".to_vec()),
            Value::BulkString(b"no".to_vec()),
        )]);
        assert_eq!(config_value(map), Some("no".into()));
        assert_eq!(config_value(Value::Array(vec![])), None);
    }
}
