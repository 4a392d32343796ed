//! Servers shared by every contract scenario of one test process: one Redis, three Redis for
//! Redlock, a Sentinel set, one ZooKeeper and one etcd, each started by the first scenario that
//! needs it. Starting a server per scenario (a JVM for ZooKeeper) would cost more than most
//! scenarios take.
//!
//! Scenarios still share no state: each `Target` made here gets a namespace of its own on the
//! server, a Redis database, a ZooKeeper chroot or an etcd key prefix, so its lock names, `list`
//! and tokens start afresh. dlock's etcd URL has no key prefix, so an etcd target reaches the
//! shared etcd through a gRPC proxy of its own that puts every key under the target's prefix
//! (`etcd grpc-proxy --namespace`), ended with the target.
//!
//! A Redis Cluster has one database only and dlock's keys no prefix, so its targets cannot share
//! one cluster at once: a cluster serves one target at a time instead, flushed before each, and
//! is then kept for the next (as many clusters as scenarios run at once, rather than one per
//! scenario). A target whose scenario failed takes its cluster down with it, so that nothing a
//! failed scenario left running reaches another. Scenarios that stop, kill or tamper with a server start a private one instead
//! (`RedisServer::start`, `ZkServer::start`), which its test drops.
//!
//! A static is never dropped, so a reaper ends each of these servers instead (see reaper.rs).

use super::programs::program;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::etcd_server::EtcdServer;
use super::reaper::reaper;
use super::redis_cluster::RedisCluster;
use super::redis_server::RedisServer;
use super::sentinel_set::SentinelSet;
use super::target::{Kind, ServerControl, Target};
use super::zk_server::ZkServer;
use super::LockDir;

/// Databases of the suite's Redis servers: one per Redis and Redlock target of the run.
const REDIS_DATABASES: usize = 1000;

/// A server of the suite with the reaper that ends it.
struct Lasting<S> {
    server: S,
    /// Holds the write end of each reaper's pipe open for as long as this process lives.
    _reaper: Vec<Child>,
}

static REDIS: OnceLock<Lasting<RedisServer>> = OnceLock::new();
static REDLOCK: OnceLock<Vec<Lasting<RedisServer>>> = OnceLock::new();
static ZK: OnceLock<Lasting<ZkServer>> = OnceLock::new();
static SENTINEL: OnceLock<Lasting<SentinelSet>> = OnceLock::new();

/// Namespaces handed out so far; 0 is never used (Redis's default database).
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

pub fn next_namespace() -> usize {
    NAMESPACES.fetch_add(1, Ordering::SeqCst) + 1
}

fn lasting_redis() -> Lasting<RedisServer> {
    let server = RedisServer::start_with(&["--databases", &REDIS_DATABASES.to_string()]);
    let _reaper = vec![reaper(server.pid(), server.dir(), libc::SIGKILL)];
    Lasting { server, _reaper }
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
                let _reaper = server
                    .processes()
                    .into_iter()
                    .map(|(pid, dir)| reaper(pid, dir, libc::SIGKILL))
                    .collect();
                Lasting { server, _reaper }
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
            kind: Kind::Redis,
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
            kind: Kind::Redis,
            ports: servers.iter().map(|s| s.port()).collect(),
            servers: vec![],
            scratch: LockDir::new(),
        }
    }

    /// The ZooKeeper backend on the suite's server, under a chroot of its own.
    pub fn suite_zk() -> Target {
        let server = &ZK
            .get_or_init(|| {
                let server = ZkServer::start();
                let _reaper = vec![reaper(server.pid(), server.dir(), libc::SIGKILL)];
                Lasting { server, _reaper }
            })
            .server;
        Target {
            args: vec![
                "--backend".into(),
                "zk".into(),
                "--url".into(),
                format!("{}/contract/{}", server.url(), next_namespace()),
            ],
            kind: Kind::Zk,
            ports: vec![server.port()],
            servers: vec![],
            scratch: LockDir::new(),
        }
    }
}

impl Target {
    /// The Elasticsearch backend on the suite's OpenSearch node, in an index of its own.
    pub fn suite_elasticsearch() -> Target {
        let node = super::opensearch_server::OpenSearchServer::shared();
        let index = format!("contract-{}", next_namespace());
        // Made here, as dlock makes it on first use: a scenario's first run then costs what any
        // run costs, not a change of the cluster's state on a loaded node.
        let settings = r#"{"settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1"},
            "mappings": {"dynamic": false, "properties": {"name": {"type": "keyword"}}}}"#;
        let (status, json) = node.json("PUT", &format!("/{index}"), Some(settings));
        assert_eq!(status, 200, "make index {index}: {json}");
        Target {
            args: vec![
                "--backend".into(),
                "elasticsearch".into(),
                "--url".into(),
                format!("elasticsearch://127.0.0.1:{}/{index}", node.port()),
            ],
            kind: Kind::Elasticsearch,
            ports: vec![node.port()],
            servers: vec![],
            scratch: LockDir::new(),
        }
    }
}

/// A gRPC proxy in front of the suite's etcd that keeps one target's keys under a prefix of its
/// own; ended (with its reaper) when its target is dropped.
struct EtcdNamespace {
    proxy: Child,
    /// Ends the proxy and removes `dir` if this process dies without dropping the target.
    reaper: Child,
    dir: tempfile::TempDir,
}

impl Target {
    /// The etcd backend on the suite's etcd, under a key prefix of its own.
    pub fn suite_etcd() -> Target {
        let server = EtcdServer::shared();
        super::on_a_free_port("the etcd proxy", |port| {
            Target::etcd_namespace(port, server)
        })
    }

    /// A proxy on `port` in front of `server` with a namespace of its own; `None` when it exited
    /// before it listened.
    fn etcd_namespace(port: u16, server: &EtcdServer) -> Option<Target> {
        let dir = tempfile::tempdir().expect("the etcd proxy's directory");
        let log = std::fs::File::create(dir.path().join("proxy.log")).expect("the proxy's log");
        let proxy = program("etcd")
            .args(["grpc-proxy", "start", "--endpoints"])
            .arg(format!("127.0.0.1:{}", server.port()))
            .arg(format!("--listen-addr=127.0.0.1:{port}"))
            .arg(format!("--advertise-client-url=127.0.0.1:{port}"))
            .arg(format!("--namespace=/contract/{}/", next_namespace()))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the proxy's log"))
            .stderr(log)
            .spawn()
            .expect("etcd is installed (Debian package etcd-server)");
        let reaper = reaper(proxy.id(), dir.path(), libc::SIGKILL);
        let mut namespace = EtcdNamespace { proxy, reaper, dir };
        let within = std::time::Duration::from_secs(60);
        if !super::until_listening(
            "the etcd proxy to listen",
            &mut namespace.proxy,
            port,
            within,
        ) {
            return None;
        }
        let ports = vec![port];
        Some(Target {
            args: Kind::Etcd.args(&ports),
            kind: Kind::Etcd,
            ports,
            servers: vec![Box::new(namespace)],
            scratch: LockDir::new(),
        })
    }
}

/// Owned by its target only to end with it: the suite's etcd takes no faults (a scenario that
/// stops or restarts a server starts a private one, `Target::etcd_backend`).
impl ServerControl for EtcdNamespace {
    fn pause(&self, _pause: std::time::Duration) {
        panic!("the suite's etcd is shared: faults need a private one (Target::etcd_backend)");
    }

    fn restart(&self) {
        panic!("the suite's etcd is shared: faults need a private one (Target::etcd_backend)");
    }
}

impl Drop for EtcdNamespace {
    fn drop(&mut self) {
        // The reaper first, while the proxy's pid is still ours: it must not kill a pid reused
        // after the proxy is reaped.
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
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
            kind: Kind::Redis,
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
