//! A Redis master with two replicas and three sentinels (Debian's redis-sentinel) for one test, on
//! free loopback ports with their own temp dirs; ready when `start` returns (both replicas online,
//! every sentinel knows them), all killed when dropped. Only processes started here are signalled.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use crate::support::programs::program;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::server::{dlock_at, RedisServer};
use crate::support::free_port;
use crate::support::wait_until;

/// The master's name as the sentinels know it.
pub const MASTER: &str = "main";

/// How many sentinels must agree that the master is down (and, here, on which node is the
/// master): two of the three.
const QUORUM: usize = 2;

/// How long the set may take to be ready, or a failover to finish.
const WITHIN: Duration = Duration::from_secs(30);

pub struct SentinelSet {
    /// The first master, then the two replicas (roles change with a failover).
    pub nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

struct Sentinel {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SentinelSet {
    pub fn start() -> SentinelSet {
        SentinelSet::start_with(&[])
    }

    /// A set whose data nodes get `args` too (`["--databases", "1000"]`).
    pub fn start_with(args: &[&str]) -> SentinelSet {
        SentinelSet::start_watching(args, Duration::from_secs(2))
    }

    /// A set whose sentinels call the master down after `down_after` without an answer (and
    /// may fail over again soon after one failover), for the fault checker.
    pub fn start_watching(args: &[&str], down_after: Duration) -> SentinelSet {
        // A replica that must resync in full after the failover (it followed the old master
        // past the point where the new one was promoted) starts at once, not after Redis's
        // default 5 s of waiting for other replicas to share the transfer with.
        let quick = [args, &["--repl-diskless-sync-delay", "0"]].concat();
        let master = RedisServer::start_with(&quick);
        let of = master.port().to_string();
        let mut nodes = vec![master];
        for _ in 0..2 {
            nodes.push(RedisServer::start_with(
                &[&quick[..], &["--replicaof", "127.0.0.1", &of]].concat(),
            ));
        }
        wait_until("both replicas online", WITHIN, || {
            info(&nodes[0], "replication")
                .matches("state=online")
                .count()
                == 2
        });
        // Online is not yet streaming: wait until a write reaches both.
        let _: () = redis::cmd("SET")
            .arg("sentinel-set:ready")
            .arg(1)
            .query(&mut nodes[0].connection())
            .expect("SET on the master");
        for replica in &nodes[1..] {
            wait_until("a write to reach a replica", WITHIN, || {
                replica.keys().contains(&"sentinel-set:ready".to_owned())
            });
        }
        let sentinels = (0..3)
            .map(|_| Sentinel::start(nodes[0].port(), down_after))
            .collect();
        let set = SentinelSet { nodes, sentinels };
        for i in 0..set.sentinels.len() {
            wait_until("a sentinel that knows both replicas", WITHIN, || {
                set.sentinel_query(i, &["SENTINEL", "REPLICAS", MASTER])
                    .is_ok_and(|v| matches!(v, redis::Value::Array(r) if r.len() == 2))
            });
        }
        set
    }

    /// Every process of the set, with its directory: for a reaper that outlives a static set.
    pub fn processes(&self) -> Vec<(u32, &Path)> {
        let nodes = self.nodes.iter().map(|n| (n.pid(), n.dir()));
        let sentinels = self.sentinels.iter().map(|s| (s.child.id(), s.dir.path()));
        nodes.chain(sentinels).collect()
    }

    /// `redis+sentinel://` with every sentinel, naming `master`.
    pub fn url_for(&self, master: &str) -> String {
        let addrs: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{master}", addrs.join(","))
    }

    pub fn url(&self) -> String {
        self.url_for(MASTER)
    }

    /// `dlock --backend redis --url <the sentinels> ARGS`.
    pub fn dlock(&self, args: &[&str]) -> Command {
        dlock_at(&[self.url()], args)
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    fn sentinel_query(&self, i: usize, args: &[&str]) -> redis::RedisResult<redis::Value> {
        sentinel_query(self.sentinels[i].port, args)
    }

    /// The port of the master the sentinels name now (`master_named`).
    pub fn master_port(&self) -> u16 {
        master_named(&self.named()).expect("a sentinel names the master")
    }

    /// Each node's port, role and master's port, as it says itself (`?` when it does not answer).
    fn roles(&self) -> Vec<String> {
        let field = |info: &str, key: &str| {
            let value = info.lines().find_map(|l| l.strip_prefix(key));
            value.unwrap_or("?").to_owned()
        };
        self.nodes
            .iter()
            .map(|n| {
                let info = info(n, "replication");
                let (role, of) = (field(&info, "role:"), field(&info, "master_port:"));
                format!("{}: {role} of {of}", n.port())
            })
            .collect()
    }

    /// Each sentinel's answer to which node is the master.
    fn named(&self) -> Vec<redis::RedisResult<u16>> {
        self.sentinels
            .iter()
            .map(|s| master_port_at(s.port))
            .collect()
    }

    /// The node that is the master now.
    pub fn master(&self) -> &RedisServer {
        let port = self.master_port();
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("the master is one of the nodes")
    }

    /// The nodes that are replicas now.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let port = self.master_port();
        self.nodes.iter().filter(|n| n.port() != port).collect()
    }

    /// `SENTINEL FAILOVER` (retried while the sentinel finds no replica good enough yet), then
    /// waits until the sentinels name the new master, it answers as one, and a replica follows it.
    /// Returns the new master's port.
    pub fn fail_over(&self) -> u16 {
        let old = self.master_port();
        let end = Instant::now() + WITHIN;
        loop {
            match self.sentinel_query(0, &["SENTINEL", "FAILOVER", MASTER]) {
                Ok(_) => break,
                Err(e) if Instant::now() < end => {
                    eprintln!("SENTINEL FAILOVER: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("SENTINEL FAILOVER failed: {e}"),
            }
        }
        self.await_new_master(old)
    }

    /// Waits until a quorum of the sentinels names another master than the node on port `old`,
    /// it answers as one, and a replica follows it. Returns the new master's port.
    ///
    /// A quorum, not every sentinel: a sentinel whose promoted replica is killed before its
    /// failover ends keeps that failover open, naming the dead node, until the node answers again
    /// (Redis 7.0: the configuration of a newer failover names the master it already had, so it
    /// is not reset). The fault checker starts that node again only once this returns.
    pub fn await_new_master(&self, old: u16) -> u16 {
        // A failover the sentinels started and gave up (no replica good enough yet, on a loaded
        // machine) is tried again only after twice the failover timeout: allow three tries.
        let end = Instant::now() + 3 * WITHIN;
        let new = loop {
            let now = self.named();
            if let Some(new) = named_by_quorum(&now).filter(|new| *new != old) {
                break new;
            }
            if Instant::now() >= end {
                panic!(
                    "timed out after {:?} waiting for the sentinels to name another master than \
                     {old}: they name {now:?}; the nodes: {:?}",
                    3 * WITHIN,
                    self.roles()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        wait_until("the new master to have a replica online", WITHIN, || {
            let node = self.nodes.iter().find(|n| n.port() == new);
            node.is_some_and(|n| info(n, "replication").contains("state=online"))
        });
        new
    }
}

/// One question to the sentinel on `port`.
pub fn sentinel_query(port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let url = format!("redis://127.0.0.1:{port}");
    let mut conn = redis::Client::open(url)?.get_connection_with_timeout(WITHIN)?;
    conn.set_read_timeout(Some(WITHIN))?;
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd.query(&mut conn)
}

/// The port that at least `QUORUM` of the answers name.
/// The port a quorum of the answers names, or, while they disagree, the first answer's.
pub fn master_named(named: &[redis::RedisResult<u16>]) -> Option<u16> {
    let first = || named.iter().find_map(|p| p.as_ref().ok().copied());
    named_by_quorum(named).or_else(first)
}

fn named_by_quorum(named: &[redis::RedisResult<u16>]) -> Option<u16> {
    let ports = || named.iter().filter_map(|p| p.as_ref().ok().copied());
    ports().find(|p| ports().filter(|q| q == p).count() >= QUORUM)
}

/// The port of the master the sentinel on `port` names now.
pub fn master_port_at(port: u16) -> redis::RedisResult<u16> {
    let v = sentinel_query(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER])?;
    let addr: (String, u16) = redis::from_redis_value(v)?;
    Ok(addr.1)
}

/// `INFO section` of `node`, or "" when it does not answer.
pub fn info(node: &RedisServer, section: &str) -> String {
    node.client()
        .and_then(|c| c.get_connection_with_timeout(WITHIN))
        .and_then(|mut c| redis::cmd("INFO").arg(section).query(&mut c))
        .unwrap_or_default()
}

impl Sentinel {
    fn start(master_port: u16, down_after: Duration) -> Sentinel {
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir for redis-sentinel");
            let conf = dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir {dir}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} {QUORUM}\n\
                 sentinel down-after-milliseconds {MASTER} {down}\n\
                 sentinel failover-timeout {MASTER} {timeout}\n\
                 sentinel parallel-syncs {MASTER} 2\n",
                dir = dir.path().display(),
                down = down_after.as_millis(),
                // A sentinel tries the same master again only after twice this: five times the
                // down-after (10 s at the default 2 s), so that the fault checker's next crash of a
                // master fails over too.
                timeout = down_after.as_millis() * 5,
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            let mut child = match program("redis-sentinel")
                .arg(&conf)
                // Its own group, like every test server (see sql_server::as_server_user).
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(child) => child,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                    "redis-sentinel is not installed; scripts/test installs it \
                     (apt-get install redis-sentinel)"
                ),
                Err(e) => panic!("cannot start redis-sentinel: {e}"),
            };
            crate::support::reaper::end_with_this_process(&child, dir.path());
            let stdout = child.stdout.take().expect("piped stdout");
            let (tx, rx) = std::sync::mpsc::channel();
            // Drains the sentinel's output while it runs, and says when it monitors the master.
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.contains("+monitor master") {
                        let _ = tx.send(());
                    }
                }
            });
            if rx.recv_timeout(WITHIN).is_ok() {
                return Sentinel { child, port, dir };
            }
            // It exited (its port was taken) or never got ready: try another port.
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-sentinel did not start after 5 tries");
    }
}
