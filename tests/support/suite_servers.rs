//! Servers shared by every contract scenario of one test process: one Redis, three Redis for
//! Redlock and one ZooKeeper, each started by the first scenario that needs it. Starting a server
//! per scenario (a JVM for ZooKeeper) would cost more than most scenarios take.
//!
//! Scenarios still share no state: each `Target` made here gets a namespace of its own on the
//! server, a Redis database or a ZooKeeper chroot, so its lock names, `list` and tokens start
//! afresh. Scenarios that stop, kill or tamper with a server start a private one instead
//! (`RedisServer::start`, `ZkServer::start`), which its test drops.
//!
//! A static is never dropped, so a reaper ends each of these servers instead: a `sh` that waits
//! on a pipe from this process, which the kernel closes when the process ends, however it ends
//! (tests done, a failed test, Ctrl-C, SIGKILL); it then kills the server and removes its
//! directory.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::redis_server::RedisServer;
use super::sentinel_set::SentinelSet;
use super::target::{Kind, Target};
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
    let _reaper = vec![reaper(server.pid(), server.dir())];
    Lasting { server, _reaper }
}

/// A `sh` that kills `pid` and removes `dir` once its stdin, a pipe from this process, closes.
fn reaper(pid: u32, dir: &Path) -> Child {
    // Ignores the signals a terminal or a supervisor sends the whole group, so that it outlives
    // this process and does its job; its loop waits (bounded) for the server to be gone before
    // removing what it may still write.
    let script = r#"trap '' INT HUP TERM QUIT
read -r _
kill -KILL "$1" 2>/dev/null
i=0
while kill -0 "$1" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
rm -rf -- "$2""#;
    Command::new("sh")
        .args(["-c", script, "reaper", &pid.to_string()])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the reaper of a suite server")
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
                    .map(|(pid, dir)| reaper(pid, dir))
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
                let _reaper = vec![reaper(server.pid(), server.dir())];
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
