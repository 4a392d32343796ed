//! A private Redis Cluster for one test: three masters (`redis-server --cluster-enabled yes`) on
//! free loopback ports, each with a third of the slots as `redis-cli --cluster create` would give
//! them (set with CLUSTER ADDSLOTSRANGE and MEET, which needs no fixed waits), ready when every
//! node says `cluster_state:ok` and knows the three. Its nodes are killed when it is dropped.

use std::time::{Duration, Instant};

use super::server::RedisServer;
use crate::support::tls::TlsFiles;

/// The slots of each master, as `redis-cli --cluster create` splits them for three.
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// What makes a server a cluster node.
const CLUSTER: [&str; 4] = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
];

/// How long the nodes may take to agree they form a cluster.
const READY_WITHIN: Duration = Duration::from_secs(30);

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[])
    }

    /// A cluster whose nodes get extra configuration too.
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        let args = [&CLUSTER[..], extra].concat();
        RedisCluster::form((0..3).map(|_| RedisServer::start_with(&args)).collect())
    }

    /// A cluster that speaks only TLS, to its clients and between its nodes.
    pub fn start_tls(files: &TlsFiles) -> RedisCluster {
        let args = [&CLUSTER[..], &["--tls-cluster", "yes"]].concat();
        RedisCluster::form(
            (0..3)
                .map(|_| RedisServer::start_tls_with(files, &args))
                .collect(),
        )
    }

    /// Gives each of `nodes` its third of the slots and introduces them to each other.
    fn form(nodes: Vec<RedisServer>) -> RedisCluster {
        for (node, (first, last)) in nodes.iter().zip(RANGES) {
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query::<()>(&mut node.connection())
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        for node in &nodes[1..] {
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .query::<()>(&mut nodes[0].connection())
                .expect("CLUSTER MEET");
        }
        let cluster = RedisCluster { nodes };
        cluster.wait_until_agreed();
        cluster
    }

    /// Waits (bounded) until every node says the cluster is ok and maps every slot range to the
    /// node that owns it.
    pub fn wait_until_agreed(&self) {
        let until = Instant::now() + READY_WITHIN;
        let want: Vec<(u16, u16, u16)> = self.ranges();
        loop {
            let agreed = self.nodes.iter().all(|node| {
                let Ok(mut conn) = node
                    .client()
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                else {
                    return false;
                };
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut conn)
                    .unwrap_or_default();
                info.contains("cluster_state:ok") && slot_map(&mut conn) == want
            });
            if agreed {
                return;
            }
            assert!(
                Instant::now() < until,
                "the test cluster did not agree on its slots within {READY_WITHIN:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `(first, last, port)` of each slot range, as the test meant them, sorted.
    fn ranges(&self) -> Vec<(u16, u16, u16)> {
        let mut ranges: Vec<_> = self
            .nodes
            .iter()
            .zip(RANGES)
            .map(|(node, (a, b))| (a, b, node.port()))
            .collect();
        ranges.sort();
        ranges
    }

    /// `redis+cluster://` (`rediss+cluster://` over TLS) with every node as a seed.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let tls = self.nodes.iter().any(|n| n.url().starts_with("rediss://"));
        let scheme = if tls {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        format!("{scheme}://{}", nodes.join(","))
    }

    /// The slot of a key, as the cluster computes it.
    pub fn slot_of(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].connection())
            .expect("CLUSTER KEYSLOT")
    }

    /// Which node (index in `nodes`) serves the lock `name` now.
    pub fn node_of_lock(&self, name: &str) -> usize {
        let slot = self.slot_of(&format!("dlock:{{{name}}}:holders"));
        let mut conn = self.nodes[0].connection();
        let map = slot_map(&mut conn);
        let port = map
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|r| r.2)
            .expect("every slot is served");
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// A lock name (`PREFIX` and a number) that lives on node `node`.
    pub fn name_on(&self, prefix: &str, node: usize) -> String {
        (0..1000)
            .map(|i| format!("{prefix}{i}"))
            .find(|name| self.node_of_lock(name) == node)
            .expect("a name on every node within 1000 tries")
    }

    /// Moves `slot` with its keys from node `from` to node `to`, as `redis-cli --cluster reshard`
    /// does: IMPORTING and MIGRATING, MIGRATE of its keys, then SETSLOT NODE on every node.
    pub fn move_slot(&self, slot: u16, from: usize, to: usize) {
        self.begin_move(slot, from, to);
        self.finish_move(slot, from, to);
    }

    fn id(&self, node: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[node].connection())
            .expect("CLUSTER MYID")
    }

    fn set_slot(&self, node: usize, slot: u16, how: &str, id: &str) {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query::<()>(&mut self.nodes[node].connection())
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {how}: {e}"));
    }

    /// The first half of a move: the slot is IMPORTING on `to` and MIGRATING on `from`, its keys
    /// all still on `from`.
    pub fn begin_move(&self, slot: u16, from: usize, to: usize) {
        self.set_slot(to, slot, "IMPORTING", &self.id(from));
        self.set_slot(from, slot, "MIGRATING", &self.id(to));
    }

    /// The second half: the keys go over (MIGRATE), and every node learns the slot's new master.
    pub fn finish_move(&self, slot: u16, from: usize, to: usize) {
        let mut source = self.nodes[from].connection();
        for _ in 0..100 {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut source)
                .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query::<()>(&mut source)
                .expect("MIGRATE");
        }
        let to_id = self.id(to);
        for node in [to, from, 3 - from - to] {
            self.set_slot(node, slot, "NODE", &to_id);
        }
    }

    /// How many TRYAGAIN errors node `node` has answered.
    pub fn try_agains(&self, node: usize) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut self.nodes[node].connection())
            .expect("INFO errorstats");
        info.lines()
            .find_map(|l| l.strip_prefix("errorstat_TRYAGAIN:count="))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// `(first, last, port)` of each slot range a node's CLUSTER SLOTS shows, sorted.
fn slot_map(conn: &mut redis::Connection) -> Vec<(u16, u16, u16)> {
    let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(conn)
        .unwrap_or_default();
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let mut map: Vec<_> = slots
        .iter()
        .filter_map(|range| {
            let redis::Value::Array(master) = range.get(2)? else {
                return None;
            };
            Some((
                int(range.first()?)?,
                int(range.get(1)?)?,
                int(master.get(1)?)?,
            ))
        })
        .collect();
    map.sort();
    map
}

