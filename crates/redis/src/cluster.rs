//! Redis Cluster: `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://` for
//! TLS). A cluster is one `Server` whose connection follows the lock in hand: before each lock's
//! calls `at` points it at the master of the lock's slot (CRC16 of its hash tag), as far as the
//! redirects heard so far tell (else at a seed), and keeps the connections to the other masters
//! parked. A `MOVED` reply records the slot's new master and runs the call again there; an `ASK`
//! runs it once there after `ASKING`, the map unchanged; `TRYAGAIN` (a slot half moved) runs it
//! again after a short pause. All within the call's budget and a bounded count: the scripts may be
//! repeated (each finds its own earlier effect). Grants travel by sharded pub/sub on a channel in
//! the lock's slot (see `Keys::sharded`): a waiter listens on the lock's master, and listens again
//! where a redirect takes it once the old master drops the channel.

use std::collections::HashMap;
use std::mem;
use std::time::{Duration, Instant};

use dlock_core::error;
use dlock_core::error::FailAs;
use redis::{Client, ConnectionAddr, ConnectionInfo, Value};

use super::fault::{Fault, FaultKind};
use super::link::{Heard, Link};
use super::replication;
use super::reply::text_of;
use super::server::Server;
use dlock_core::lock::escaped;
use dlock_core::url::redact;

/// The schemes of a cluster URL, and the plain scheme each stands for.
const SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis"),
    ("rediss+cluster://", "rediss"),
];

/// How many redirects one call follows before it counts as failed.
const MAX_REDIRECTS: usize = 5;

/// How long a call waits before trying again a slot being moved (TRYAGAIN), and how often at most
/// (within the call's time): a lock's scripts name all its keys, some of which may not exist, so
/// they get TRYAGAIN for as long as the slot is half moved, which is usually milliseconds.
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(20);
const MAX_TRY_AGAIN: usize = 50;
/// How long a seed that answers nothing may hold up the start at least, before the next one is
/// tried (each gets a share of the connect timeout, but no less than this).
const LEAST_PER_SEED: Duration = Duration::from_millis(200);

/// A Redis Cluster: the node the connection goes to now, and what is known of the others.
pub(super) struct Cluster {
    /// The node in use: the master of the lock in hand, as far as known.
    pub(super) server: Server,
    /// `host:port` of each node the URL names.
    seeds: Vec<String>,
    /// The seed to start from for a slot no redirect has named yet.
    seed: usize,
    /// The settings (credentials, TLS) every node's connection is opened with.
    template: ConnectionInfo,
    /// Each slot's master, as the redirects told it.
    routes: HashMap<u16, String>,
    /// The slot of the lock in hand.
    slot: u16,
    /// The connections to the other nodes, by `host:port`.
    parked: HashMap<String, Node>,
}

/// A node's connection while another is in use.
struct Node {
    client: Client,
    link: Option<Link>,
    timeout: Option<Duration>,
}

/// Whether `url` names a cluster.
pub(super) fn is_cluster_url(url: &str) -> bool {
    SCHEMES.iter().any(|(scheme, _)| url.starts_with(scheme))
}

/// Parses a cluster URL (no connection yet); `replicas` unless it says `?replicas=`.
pub(super) fn parse(url: &str, replicas: u32) -> error::Result<Cluster> {
    let shown = redact(url);
    let usage = |why: &str| {
        Err(error!(
            "{shown:?} is not a cluster URL: {why}; use redis+cluster://[user:password@]host:port[,host:port…]"
        ))
        .usage()
    };
    let Some((rest, plain)) = SCHEMES
        .iter()
        .find_map(|(scheme, plain)| Some((url.strip_prefix(scheme)?, *plain)))
    else {
        return usage("it starts with another scheme");
    };
    let (credentials, nodes) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    // A cluster has one database: the URL names nodes, nothing after them but `?replicas=N`.
    let (nodes, replicas) = match nodes.split_once('?') {
        Some((nodes, pairs))
            if pairs
                .split('&')
                .all(|p| p.split('=').next() == Some("replicas")) =>
        {
            (
                nodes,
                replication::in_query(pairs, &shown)?.unwrap_or(replicas),
            )
        }
        Some(_) => return usage("its only query parameter is replicas"),
        None => (nodes, replicas),
    };
    let nodes = nodes.strip_suffix('/').unwrap_or(nodes);
    if nodes.contains(['/', '?', '#']) {
        return usage("a cluster has database 0 only");
    }
    let mut seeds = Vec::new();
    let mut first = None;
    for node in nodes.split(',') {
        if node.is_empty() {
            return usage("a node is missing between commas");
        }
        let mut server =
            Server::parse_plain(&format!("{plain}://{credentials}{node}"), &shown, replicas)?;
        server.cluster_node = true;
        if !seeds.contains(&server.addr) {
            seeds.push(server.addr.clone());
        }
        first.get_or_insert(server);
    }
    let Some(mut server) = first else {
        return usage("it names no node");
    };
    server.location = format!("{plain}+cluster://{}", seeds.join(","));
    Ok(Cluster {
        seeds,
        seed: 0,
        template: server.client.get_connection_info().clone(),
        routes: HashMap::new(),
        slot: 0,
        parked: HashMap::new(),
        server,
    })
}

impl Cluster {
    /// What was heard of `base` on the connection in use, else on a parked one.
    pub(super) fn heard(&self, base: &str) -> Option<Heard> {
        let parked = || {
            self.parked
                .values()
                .filter_map(|node| node.link.as_ref())
                .find_map(|link| link.heard(base))
        };
        self.server.heard(base).or_else(parked)
    }

    /// Connects to a seed within `timeout`: a seed that cannot be reached or does not answer
    /// passes the start on to the next, each tried once with a share of the time left (as the
    /// sentinels are asked); the first that answers is where calls start from.
    pub(super) fn connect(&mut self, timeout: Duration) -> Result<(), Fault> {
        let until = Instant::now() + timeout;
        let count = self.seeds.len();
        let mut last = None;
        for i in 0..count {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.server.stop.requested() {
                break;
            }
            let share = left
                .checked_div(u32::try_from(count - i).unwrap_or(u32::MAX))
                .unwrap_or(left)
                .max(LEAST_PER_SEED)
                .min(left);
            let addr = self.seeds[self.seed % count].clone();
            self.switch(&addr);
            match self.server.connect(share) {
                Ok(()) => return Ok(()),
                Err(fault) if fault.is_fatal() => return Err(fault),
                Err(fault) => {
                    last = Some(fault);
                    self.seed = self.seed.wrapping_add(1);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            let why = format!("no answer within {}", dlock_core::text::duration(timeout));
            self.server.fault(FaultKind::Down, why)
        }))
    }

    /// The node that serves `slot`, as far as known.
    fn route(&self, slot: u16) -> String {
        match self.routes.get(&slot) {
            Some(addr) => addr.clone(),
            None => self.seeds[self.seed % self.seeds.len()].clone(),
        }
    }

    /// Points the connection at the master of the lock `base` (`dlock:{NAME}`), as far as known.
    pub(super) fn at(&mut self, base: &str) {
        self.slot = key_slot(base.as_bytes());
        let addr = self.route(self.slot);
        self.switch(&addr);
    }

    /// Makes `addr` the node the connection goes to, parking the present one.
    fn switch(&mut self, addr: &str) {
        if self.server.addr == addr {
            return;
        }
        let node = match self.parked.remove(addr) {
            Some(node) => node,
            None => match node_client(&self.template, addr) {
                Some(client) => Node {
                    client,
                    link: None,
                    timeout: None,
                },
                // An address the cluster gave that cannot be connected to: stay, the call fails.
                None => return,
            },
        };
        let server = &mut self.server;
        let parked = Node {
            client: mem::replace(&mut server.client, node.client),
            link: mem::replace(&mut server.link, node.link),
            timeout: mem::replace(&mut server.timeout, node.timeout),
        };
        server.first_reply_by = None;
        let old = mem::replace(&mut server.addr, addr.to_owned());
        self.parked.insert(old, parked);
    }

    /// A call on the cluster: follows MOVED, ASK and TRYAGAIN within `timeout` (see the module
    /// documentation), and tries the next seed when a node no redirect named is down.
    pub(super) fn call<T>(
        &mut self,
        timeout: Duration,
        f: &mut impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, Fault> {
        let started = Instant::now();
        let mut asking = false;
        let mut last = None;
        let mut redirects = 0;
        for _ in 0..MAX_REDIRECTS + MAX_TRY_AGAIN {
            if redirects > MAX_REDIRECTS {
                break;
            }
            let left = timeout.saturating_sub(started.elapsed());
            if left < Duration::from_millis(1) {
                break;
            }
            let result = if asking {
                let mut asked = |link: &mut Link| {
                    redis::cmd("ASKING").query::<()>(&mut link.conn)?;
                    f(link)
                };
                self.server.call_once(left, &mut asked)
            } else {
                self.server.call_once(left, f)
            };
            asking = false;
            let fault = match result {
                Ok(value) => return Ok(value),
                Err((fault, _)) => fault,
            };
            match fault.kind {
                FaultKind::Moved | FaultKind::Ask => {
                    let Some((slot, addr)) = redirect(fault.detail()) else {
                        let detail = escaped(fault.detail(), 100);
                        let why = format!("answered with a malformed redirect {detail:?}");
                        return Err(self.server.fault(FaultKind::Protocol, why));
                    };
                    redirects += 1;
                    if matches!(fault.kind, FaultKind::Moved) {
                        self.routes.insert(slot, addr.clone());
                    } else {
                        asking = true;
                    }
                    self.switch(&addr);
                }
                FaultKind::TryAgain => std::thread::sleep(TRY_AGAIN_PAUSE.min(left / 2)),
                FaultKind::Down => {
                    // The slot's master may have failed over to a replica: forget it and ask a
                    // seed, which redirects to the new one. A seed that is down: the next seed.
                    if self.routes.remove(&self.slot).is_none() {
                        self.seed = self.seed.wrapping_add(1);
                    }
                    let addr = self.route(self.slot);
                    if addr == self.server.addr {
                        return Err(fault);
                    }
                    redirects += 1;
                    self.switch(&addr);
                }
                _ => return Err(fault),
            }
            last = Some(fault);
        }
        Err(match last {
            Some(fault) if matches!(fault.kind, FaultKind::Down) => fault,
            Some(fault) => {
                let why = format!("the cluster kept redirecting: {}", fault.detail());
                // A slot being moved (TRYAGAIN, ASK) is served again once the move ends; MOVED
                // for ever is a cluster that cannot serve the slot.
                let kind = match fault.kind {
                    FaultKind::TryAgain | FaultKind::Ask => FaultKind::NotNow,
                    _ => FaultKind::Down,
                };
                self.server.fault(kind, why)
            }
            None => self.server.fault(
                FaultKind::Down,
                format!(
                    "no answer within {}",
                    dlock_core::text::duration(timeout.max(Duration::from_millis(1)))
                ),
            ),
        })
    }

    /// `call` on every master of the cluster (from `CLUSTER SLOTS`).
    pub(super) fn call_everywhere<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Vec<Result<T, Fault>> {
        let masters = match self.call(timeout, &mut |link: &mut Link| {
            redis::cmd("CLUSTER").arg("SLOTS").query(&mut link.conn)
        }) {
            Ok(slots) => masters(&slots, &self.server.addr),
            Err(fault) => return vec![Err(fault)],
        };
        masters
            .iter()
            .map(|addr| {
                self.switch(addr);
                self.server
                    .call_once(timeout, &mut f)
                    .map_err(|(fault, _)| fault)
            })
            .collect()
    }
}

/// A client for the node `addr` (`host:port`, as the cluster names it) with `template`'s settings.
fn node_client(template: &ConnectionInfo, addr: &str) -> Option<Client> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port: u16 = port.parse().ok()?;
    if host.is_empty() {
        return None;
    }
    let node = match template.addr().clone() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            tls_params,
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    Client::open(template.clone().set_addr(node)).ok()
}

/// `SLOT HOST:PORT` of a MOVED or ASK reply, the address as dlock shows one.
fn redirect(detail: &str) -> Option<(u16, String)> {
    let mut words = detail.split_ascii_whitespace();
    let slot: u16 = words.next()?.parse().ok()?;
    let (host, port) = words.next()?.rsplit_once(':')?;
    (slot < SLOTS).then(|| (slot, show_addr(host, port)))
}

fn show_addr(host: &str, port: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The masters in a `CLUSTER SLOTS` reply, each once; a master without an address of its own is
/// the node that answered (`asked`).
fn masters(slots: &Value, asked: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let Value::Array(ranges) = slots else {
        return found;
    };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let Some(Value::Array(master)) = parts.get(2) else {
            continue;
        };
        let (Some(host), Some(port)) = (
            master.first().and_then(text_of),
            master.get(1).and_then(text_of),
        ) else {
            continue;
        };
        let addr = if host.is_empty() || host == "?" {
            asked.to_owned()
        } else {
            show_addr(&host, &port)
        };
        if !found.contains(&addr) {
            found.push(addr);
        }
    }
    found
}

/// How many slots a cluster has.
const SLOTS: u16 = 16384;

/// The slot of `key`: CRC16 (XMODEM) of its hash tag, the part between the first `{` and the next
/// `}` when that part is not empty, else of the whole key (the cluster specification).
pub(super) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_specification() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"dlock:{a}:holders"), key_slot(b"dlock:{a}"));
    }

    #[test]
    fn a_cluster_url_names_its_nodes_and_never_its_password() {
        let s = parse("redis+cluster://u:s3cret@127.0.0.1:7000,127.0.0.1:7001", 0).unwrap();
        assert_eq!(
            s.server.location,
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
        );
        assert_eq!(s.server.replicas, 0);
        let s = parse("redis+cluster://127.0.0.1:7000/?replicas=1", 2).unwrap();
        assert_eq!(
            (s.server.location.as_str(), s.server.replicas),
            ("redis+cluster://127.0.0.1:7000", 1)
        );
        for bad in [
            "redis+cluster://u:s3cret@127.0.0.1:7000?replicas=1&x=2",
            "redis+cluster://u:s3cret@127.0.0.1:7000?replicas=-1",
            "redis+cluster://u:s3cret@127.0.0.1:7000/1",
            "redis+cluster://u:s3cret@127.0.0.1:7000,,h:1",
            "redis+cluster://u:s3cret@",
        ] {
            let e = parse(bad, 0).err().unwrap();
            assert!(!format!("{e:#}").contains("s3cret"), "{e:#}");
        }
    }

    #[test]
    fn redirects_name_a_slot_and_a_node() {
        assert_eq!(
            redirect("3999 127.0.0.1:6381"),
            Some((3999, "127.0.0.1:6381".into()))
        );
        assert_eq!(redirect("3999 ::1:6381"), Some((3999, "[::1]:6381".into())));
        assert_eq!(redirect("16384 127.0.0.1:6381"), None);
        assert_eq!(redirect("x"), None);
    }
}
