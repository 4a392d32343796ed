//! Every target on Redis: the suite's shared ones, each in a namespace of its own (one server,
//! Redlock on three, a Sentinel set, a Redis Cluster), and the fault checker's private ones, whose
//! servers it pauses and crashes (one durable server, Redlock's three, a cluster).
//!
//! A Redis Cluster has one database only and dlock's keys no prefix, so its targets cannot share
//! one cluster at once: a cluster serves one target at a time instead, flushed before each, and
//! is then kept for the next (as many clusters as scenarios run at once, rather than one per
//! scenario). A target whose scenario failed takes its cluster down with it, so that nothing a
//! failed scenario left running reaches another.

use std::process::Child;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::cluster_server::RedisCluster;
use super::server::{Comeback, FaultyRedis, RedisServer};
use super::sentinel_set::SentinelSet;
use super::store::STORE;
use crate::support::reaper::reaper;
use crate::support::suite_servers::{next_namespace, Lasting};
use crate::support::target::{ServerControl, Target};
use crate::support::LockDir;

/// Databases of the suite's Redis servers: one per Redis and Redlock target of the run.
const REDIS_DATABASES: usize = 1000;

/// The suite's shared servers: one Redis, Redlock's three, a Sentinel set.
static REDIS: OnceLock<Lasting<RedisServer>> = OnceLock::new();
static REDLOCK: OnceLock<Vec<Lasting<RedisServer>>> = OnceLock::new();
static SENTINEL: OnceLock<Lasting<SentinelSet>> = OnceLock::new();

fn lasting_redis() -> Lasting<RedisServer> {
    let server = RedisServer::start_with(&["--databases", &REDIS_DATABASES.to_string()]);
    let reapers = vec![reaper(server.pid(), server.dir(), libc::SIGKILL)];
    Lasting { server, reapers }
}

/// A namespace for a Redis target: a database of the suite's servers.
fn redis_database() -> usize {
    let db = next_namespace();
    assert!(
        db < REDIS_DATABASES,
        "the suite's Redis servers have {REDIS_DATABASES} databases: raise REDIS_DATABASES"
    );
    db
}

impl Target {
    /// The Redis backend on the suite's server, in a database of its own.
    pub fn suite_redis() -> Target {
        let server = &REDIS.get_or_init(lasting_redis).server;
        Target::redis_namespace(&[server])
    }

    /// Redlock on the suite's three servers, in a database of its own on each.
    pub fn suite_redlock() -> Target {
        let servers = REDLOCK.get_or_init(|| (0..3).map(|_| lasting_redis()).collect());
        Target::redis_namespace(&servers.iter().map(|s| &s.server).collect::<Vec<_>>())
    }

    /// Redis behind Sentinel (a master, two replicas, three sentinels), in a database of its own.
    pub fn suite_sentinel() -> Target {
        let set = &SENTINEL
            .get_or_init(|| {
                let server =
                    SentinelSet::start_with(&["--databases", &REDIS_DATABASES.to_string()]);
                let reapers = server
                    .processes()
                    .into_iter()
                    .map(|(pid, dir)| reaper(pid, dir, libc::SIGKILL))
                    .collect();
                Lasting { server, reapers }
            })
            .server;
        let db = redis_database();
        Target {
            args: vec![
                "--backend".into(),
                "redis".into(),
                "--url".into(),
                format!("{}/{db}", set.url()),
            ],
            store: &STORE,
            ports: vec![set.nodes[0].port()],
            servers: vec![],
            scratch: LockDir::new(),
        }
    }

    fn redis_namespace(servers: &[&RedisServer]) -> Target {
        let db = redis_database();
        let mut args = vec!["--backend".to_owned(), "redis".to_owned()];
        for server in servers {
            args.extend(["--url".to_owned(), format!("{}/{db}", server.url())]);
        }
        Target {
            args,
            store: &STORE,
            ports: servers.iter().map(|s| s.port()).collect(),
            servers: vec![],
            scratch: LockDir::new(),
        }
    }
}

impl Target {
    /// Redis on one private server that writes every change to disk before it answers
    /// (`RedisServer::start_durable`) and comes back with its data after a crash.
    pub fn durable_redis() -> Target {
        Target::redis(vec![RedisServer::start_durable()], Comeback::KeepingData)
    }

    /// Redlock on three private servers without persistence, which come back empty `down` after
    /// a crash.
    pub fn redlock_back_empty_after(down: Duration) -> Target {
        let servers = (0..3).map(|_| RedisServer::start()).collect();
        Target::redis(servers, Comeback::EmptyAfter(down))
    }

    /// The Redis backend on the given servers, which the fault checker may pause and crash.
    pub fn redis(servers: Vec<RedisServer>, comeback: Comeback) -> Target {
        let mut args = vec!["--backend".to_owned(), "redis".to_owned()];
        for server in &servers {
            args.extend(["--url".to_owned(), server.url()]);
        }
        Target {
            args,
            store: &STORE,
            ports: servers.iter().map(RedisServer::port).collect(),
            servers: servers
                .into_iter()
                .map(|server| {
                    Box::new(FaultyRedis {
                        server: Mutex::new(server),
                        comeback,
                    }) as Box<dyn ServerControl>
                })
                .collect(),
            scratch: LockDir::new(),
        }
    }
}


/// The master that serves the fault checker's lock, which the checker pauses and restarts, with
/// the other masters, which live as long as it does.
struct LockMaster {
    master: FaultyRedis,
    _others: Vec<RedisServer>,
}

impl ServerControl for LockMaster {
    fn what(&self) -> &'static str {
        "master"
    }

    fn pause(&self, pause: Duration) {
        self.master.pause(pause);
    }

    fn restart(&self) {
        self.master.restart();
    }
}


impl Target {
    /// The Redis backend on a private three-master cluster for the fault checker, whose lock
    /// (`name`) is served by one master: that master is the one server the checker pauses,
    /// restarts (with its data: appendonly, fsync always; a cluster without replicas cannot fail
    /// over) and cuts clients off from (a relayed client's only seed is its relay, which the
    /// lock's master answers without a redirect). Unrelayed clients start from another master
    /// and are redirected, every run.
    pub fn redis_cluster_for_lock(name: &str) -> Target {
        let cluster = RedisCluster::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let at = cluster.node_of_lock(name);
        let seed = cluster.nodes[(at + 1) % 3].port();
        let mut nodes = cluster.nodes;
        let master = nodes.remove(at);
        Target {
            args: vec![
                "--backend".into(),
                "redis".into(),
                "--url".into(),
                format!("redis+cluster://127.0.0.1:{seed}"),
            ],
            store: &STORE,
            ports: vec![master.port()],
            servers: vec![Box::new(LockMaster {
                master: FaultyRedis {
                    server: Mutex::new(master),
                    comeback: Comeback::KeepingData,
                },
                _others: nodes,
            })],
            scratch: LockDir::new(),
        }
    }

    /// The Redis backend on a private three-master cluster, whose masters the fault checker may
    /// pause and crash: they write every change to disk before they answer and come back with
    /// their data (a cluster without replicas cannot fail over).
    pub fn redis_cluster() -> Target {
        let cluster = RedisCluster::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let url = cluster.url();
        Target {
            args: vec!["--backend".into(), "redis".into(), "--url".into(), url],
            store: &STORE,
            ports: cluster.nodes.iter().map(RedisServer::port).collect(),
            servers: cluster
                .nodes
                .into_iter()
                .map(|server| {
                    Box::new(FaultyRedis {
                        server: Mutex::new(server),
                        comeback: Comeback::KeepingData,
                    }) as Box<dyn ServerControl>
                })
                .collect(),
            scratch: LockDir::new(),
        }
    }
}


/// The suite's Redis Clusters not serving a target now.
static IDLE_CLUSTERS: Mutex<Vec<PooledCluster>> = Mutex::new(Vec::new());

/// A cluster of the suite with the reapers that end its nodes.
struct PooledCluster {
    cluster: RedisCluster,
    reapers: Vec<Child>,
}

impl PooledCluster {
    fn start() -> PooledCluster {
        let cluster = RedisCluster::start();
        let reapers = cluster
            .nodes
            .iter()
            .map(|node| reaper(node.pid(), node.dir(), libc::SIGKILL))
            .collect();
        PooledCluster { cluster, reapers }
    }

    /// Stops the nodes now (the reapers first, while the nodes' pids are still ours).
    fn end(mut self) {
        for reaper in &mut self.reapers {
            let _ = reaper.kill();
            let _ = reaper.wait();
        }
    }
}

/// A cluster serving one target, given back to the suite when the target is dropped.
struct LentCluster(Option<PooledCluster>);

impl Target {
    /// Redis Cluster (three masters) on a cluster of the suite that serves this target alone,
    /// emptied first.
    pub fn suite_cluster() -> Target {
        let idle = IDLE_CLUSTERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        let pooled = idle.unwrap_or_else(PooledCluster::start);
        for node in &pooled.cluster.nodes {
            redis::cmd("FLUSHALL")
                .query::<()>(&mut node.connection())
                .expect("FLUSHALL on a node of the suite's cluster");
        }
        Target {
            args: vec![
                "--backend".into(),
                "redis".into(),
                "--url".into(),
                pooled.cluster.url(),
            ],
            store: &STORE,
            ports: pooled.cluster.nodes.iter().map(RedisServer::port).collect(),
            servers: vec![Box::new(LentCluster(Some(pooled)))],
            scratch: LockDir::new(),
        }
    }
}

/// Owned by its target only to go back to the suite with it: the suite's clusters take no
/// faults (a scenario that stops a node starts a private cluster, `Target::redis_cluster`).
impl ServerControl for LentCluster {
    fn pause(&self, _pause: std::time::Duration) {
        panic!(
            "the suite's clusters are shared: faults need a private one (Target::redis_cluster)"
        );
    }

    fn restart(&self) {
        panic!(
            "the suite's clusters are shared: faults need a private one (Target::redis_cluster)"
        );
    }
}

impl Drop for LentCluster {
    fn drop(&mut self) {
        let Some(pooled) = self.0.take() else { return };
        if std::thread::panicking() {
            // Whatever the failed scenario left running may still write to it.
            pooled.end();
        } else {
            IDLE_CLUSTERS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(pooled);
        }
    }
}
