//! A private Redis Cluster: `redis-server --cluster-enabled yes` on free ports, joined by
//! `redis-cli --cluster create`, every node killed on drop.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis::RedisServer;

const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    replicas: usize,
}

impl RedisCluster {
    /// Start `primaries` nodes (at least 3, as `redis-cli --cluster create` requires), split
    /// the 16384 slots among them, and wait until every node reports `cluster_state:ok`.
    pub fn start(primaries: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(primaries, 0)
    }

    /// [`RedisCluster::start`] with `replicas` replicas of each primary, and wait until every
    /// primary counts its replicas as connected.
    pub fn start_with_replicas(primaries: usize, replicas: usize) -> RedisCluster {
        assert!(primaries >= 3, "a Redis Cluster needs at least 3 primaries");
        let nodes: Vec<RedisServer> = (0..primaries * (1 + replicas))
            .map(|_| RedisServer::start_cluster_node())
            .collect();
        let cluster = RedisCluster { nodes, replicas };
        cluster.create();
        cluster.wait_until_ok();
        cluster
    }

    /// The node (an index into [`RedisCluster::nodes`]) that serves `key` now: the primary
    /// of its slot.
    pub fn primary_of(&self, key: &str) -> usize {
        self.primary_of_slot(self.slot_of(key))
    }

    /// The node (an index into [`RedisCluster::nodes`]) that is the primary of `slot` now.
    pub fn primary_of_slot(&self, slot: u16) -> usize {
        let port = self
            .topology()
            .iter()
            .find(|node| node.primary_of.is_none() && node.slots.iter().any(|r| r.contains(&slot)))
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
            .port;
        self.index_of(port)
    }

    /// Start moving the slot of `keys` (one slot, one hash tag) from its primary to the primary
    /// `to`, as `redis-cli --cluster reshard` does: `to` IMPORTING, the owner MIGRATING, then
    /// `MIGRATE` of those of `keys` that exist. Until [`RedisCluster::finish_move`], the owner
    /// answers `ASK` for every key it no longer holds (a client must send `ASKING` to `to`).
    pub fn start_move(&self, keys: &[&str], to: usize) -> SlotMove {
        let slot = self.slot_of(keys[0]);
        let from = self.primary_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is served by node {to} already");
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let slot_text = slot.to_string();
        let setslot = |node: usize, state: &str, id: &str| {
            self.nodes[node]
                .command(&["CLUSTER", "SETSLOT", &slot_text, state, id])
                .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {state} on node {node}: {e}"));
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        let to_port = self.nodes[to].port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
        migrate.extend_from_slice(keys);
        match self.nodes[from].command(&migrate) {
            Ok(_) => {}
            Err(e) if e.contains("NOKEY") => {}
            Err(e) => panic!("MIGRATE of slot {slot}: {e}"),
        }
        SlotMove { slot, to, to_id }
    }

    /// Give the slot to its new primary on every node: clients that still send there get
    /// `MOVED`.
    pub fn finish_move(&self, moved: SlotMove) {
        let slot = moved.slot.to_string();
        for (i, node) in self.nodes.iter().enumerate() {
            node.command(&["CLUSTER", "SETSLOT", &slot, "NODE", &moved.to_id])
                .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} NODE on node {i}: {e}"));
        }
        assert_eq!(
            self.primary_of_slot(moved.slot),
            moved.to,
            "slot {slot} moved"
        );
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        self.nodes[0]
            .command(&["CLUSTER", "KEYSLOT", key])
            .expect("CLUSTER KEYSLOT")
            .parse()
            .expect("a slot number")
    }

    fn node_id(&self, node: usize) -> String {
        self.nodes[node]
            .command(&["CLUSTER", "MYID"])
            .expect("CLUSTER MYID")
    }

    /// The replicas (indexes into [`RedisCluster::nodes`]) of the primary at `primary`.
    pub fn replicas_of(&self, primary: usize) -> Vec<usize> {
        let topology = self.topology();
        let id = &topology
            .iter()
            .find(|node| node.port == self.nodes[primary].port())
            .expect("the primary is in CLUSTER NODES")
            .id;
        topology
            .iter()
            .filter(|node| node.primary_of.as_ref() == Some(id))
            .map(|node| self.index_of(node.port))
            .collect()
    }

    /// Kill one node (SIGKILL).
    pub fn stop_node(&mut self, index: usize) {
        self.nodes[index].stop();
    }

    /// Start a node killed by [`RedisCluster::stop_node`] again, on its port and with its
    /// cluster config (and no data), and wait until every node reports the cluster ok.
    pub fn start_node(&mut self, index: usize) {
        self.nodes[index].restart();
        self.wait_until_ok();
    }

    /// Kill every node, then start them again on their ports with their cluster config (and
    /// no data: they never save), and wait until the cluster is ok again.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Kill every node.
    pub fn stop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
    }

    /// Start every node again after [`RedisCluster::stop`], and wait until the cluster is ok.
    pub fn start_again(&mut self) {
        for node in &mut self.nodes {
            node.restart();
        }
        self.wait_until_ok();
    }

    fn index_of(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|node| node.port() == port)
            .unwrap_or_else(|| panic!("port {port} is not a node of this cluster"))
    }

    /// `CLUSTER NODES`, as seen by the first node that answers.
    fn topology(&self) -> Vec<NodeLine> {
        let text = self
            .nodes
            .iter()
            .find_map(|node| node.command(&["CLUSTER", "NODES"]).ok())
            .expect("some node answers CLUSTER NODES");
        text.lines().filter_map(NodeLine::parse).collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`: every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// How many keys each node holds (`DBSIZE`), in node order.
    pub fn keys_per_node(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .map(|node| {
                node.command(&["DBSIZE"])
                    .unwrap_or_else(|e| panic!("DBSIZE on port {}: {e}", node.port()))
                    .parse()
                    .expect("DBSIZE is a number")
            })
            .collect()
    }

    fn create(&self) {
        let addresses: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let log = self.nodes[0].log_file("cluster-create.log");
        let mut child = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args([
                "--cluster-replicas",
                &self.replicas.to_string(),
                "--cluster-yes",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn redis-cli (it comes with redis-server): {e}"));
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for redis-cli") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "redis-cli --cluster create did not finish within {CREATE_TIMEOUT:?}:\n{}",
                    self.nodes[0].read_log_file("cluster-create.log")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            status.success(),
            "redis-cli --cluster create failed ({status}):\n{}",
            self.nodes[0].read_log_file("cluster-create.log")
        );
    }

    fn wait_until_ok(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        for node in &self.nodes {
            // A replica must have its data link up too, or WAIT would count it out.
            while self.replicas > 0
                && node.info_field("replication", "role").as_deref() == Some("slave")
                && node
                    .info_field("replication", "master_link_status")
                    .as_deref()
                    != Some("up")
            {
                assert!(
                    Instant::now() < deadline,
                    "the replica on port {} did not connect to its primary within {READY_TIMEOUT:?}",
                    node.port()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            loop {
                let info = node.command(&["CLUSTER", "INFO"]).unwrap_or_default();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the node on port {} did not report cluster_state:ok within \
                     {READY_TIMEOUT:?}:\n{info}",
                    node.port()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A slot on its way to another primary (see [`RedisCluster::start_move`]).
#[derive(Debug)]
pub struct SlotMove {
    slot: u16,
    to: usize,
    to_id: String,
}

/// One line of `CLUSTER NODES`: `<id> <ip:port@bus> <flags> <primary id or -> … <slots…>`.
struct NodeLine {
    id: String,
    port: u16,
    /// The primary's id, for a replica.
    primary_of: Option<String>,
    slots: Vec<std::ops::RangeInclusive<u16>>,
}

impl NodeLine {
    fn parse(line: &str) -> Option<NodeLine> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let address = fields.get(1)?.split('@').next()?;
        let port = address.rsplit_once(':')?.1.parse().ok()?;
        let primary_of = match *fields.get(3)? {
            "-" => None,
            id => Some(id.to_owned()),
        };
        let slots = fields
            .iter()
            .skip(8)
            .filter_map(|range| match range.split_once('-') {
                Some((from, to)) => Some(from.parse().ok()?..=to.parse().ok()?),
                None => range.parse().ok().map(|slot| slot..=slot),
            })
            .collect();
        Some(NodeLine {
            id: fields.first()?.to_string(),
            port,
            primary_of,
            slots,
        })
    }
}
