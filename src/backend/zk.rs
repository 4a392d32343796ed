//! The ZooKeeper backend: a lock is a directory of ephemeral sequential znodes, one per holder or
//! waiter, ordered by their sequence numbers (the recipe from the ZooKeeper documentation, as Apache
//! Curator implements it).
//!
//! Layout, under the URL's chroot:
//! - `/dlock` (persistent) holds one directory per lock name, the name percent-escaped so that any
//!   valid name is exactly one znode (`/`, `%`, a leading `.` and the characters ZooKeeper refuses
//!   are written `%XX`).
//! - `/dlock/NAME` (a container node: the server deletes it once it is empty, checking every
//!   `znode.container.checkIntervalMs`, a minute by default; an acquirer recreates it) holds
//!   `_c_<uuid>-<kind><sequence>` children: Curator's "protected" names, so that after a connection
//!   loss during the create a client finds its own node again by the UUID it chose. `<kind>` is
//!   `lock-` for exclusive holders (exactly Curator's `InterProcessMutex`, so the two exclude each
//!   other), `__READ__` for shared ones (Curator's read lock; Curator's `__WRIT__` write nodes count
//!   as exclusive) and `__SEAT__` for `--limit N`. A child with an unknown kind is taken to be
//!   exclusive, so a foreign recipe can only make dlock wait, never let two holders in.
//! - Node data: JSON describing the holder (host, pid, owner id, mode, since) for status and list.
//!
//! Who owns: an exclusive node when it is first; a shared node when no exclusive node precedes it; a
//! seat when no exclusive node and fewer than N seats precede it. A waiter watches only the node it
//! waits for (an exclusive one its predecessor, a shared one the last exclusive node before it), so
//! a release wakes one waiter, not the herd. Seat waiters watch the directory's children instead:
//! any of the N holders may leave first.
//!
//! The fencing token is the node's creation zxid: the ensemble orders every write, so a later node
//! has a larger one, under any name and across server restarts.
//!
//! The session is the lease: its timeout follows `--ttl`, and ZooKeeper deletes the holder's node
//! when the session expires. The client runs on a small tokio runtime owned by the session, so it
//! keeps pinging while dlock's threads wait for the command. A lease is lost when the session
//! expires, when its node is deleted (`dlock release --force`), or when the client has been cut off
//! long enough that the server may have expired the session without telling us.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use super::{
    Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Released, Renewal, Waiting,
};
use crate::exit::{FailWith, Failure};
use crate::lock::{
    escaped, host_name, is_plain, Holder, LockName, LockRequest, Mode, Token, MAX_HOST_BYTES,
    MAX_SINCE_SECS,
};
use crate::signal::interrupt;
use crate::url::redact;

const DEFAULT_URL: &str = "zk://127.0.0.1:2181";
/// The directory every lock lives in, under the chroot.
const ROOT: &str = "dlock";
/// Session timeout asked for by `status`, `list` and `release`, which hold nothing.
const QUERY_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a blocked call looks at `Waiting::is_cancelled` (the supervisor asks for ~100ms).
const CANCEL_POLL: Duration = Duration::from_millis(50);
/// Bound on retries of one step that keeps meeting connection losses or a vanishing directory.
const MAX_RETRIES: u32 = 20;
/// How long cleanup on the way out (deleting a node, closing the session) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest pause between the heartbeat's looks at the session.
const MAX_POLL: Duration = Duration::from_millis(200);

const EXCLUSIVE_KIND: &str = "lock-";
const SHARED_KIND: &str = "__READ__";
const SEAT_KIND: &str = "__SEAT__";

/// A parsed `zk://[user:password@]host:port[,host:port...][/chroot]`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ZkUrl {
    credentials: Option<(String, String)>,
    hosts: Vec<String>,
    /// Empty, or an absolute path without a trailing slash.
    chroot: String,
}

impl ZkUrl {
    fn parse(url: &str) -> anyhow::Result<ZkUrl> {
        let shown = redact(url);
        let rest = url.strip_prefix("zk://").ok_or_else(|| {
            anyhow!("{shown:?} is not a ZooKeeper URL; expected zk://[user:password@]host:port[,host:port...][/chroot]")
        })?;
        // `redact` hides everything after a `?` or `#`, and a query or fragment means nothing here.
        if rest.contains(['?', '#']) {
            return Err(anyhow!(
                "ZooKeeper URL {shown:?}: zk:// URLs take no ?query or #fragment (write ? and # \
                 in a password as %3F and %23)"
            ));
        }
        // The credentials end at the last `@`, as `redact` hides them: a password may hold `/`
        // (then a chroot may not hold `@`).
        let (userinfo, rest) = match rest.rfind('@') {
            Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
            None => (None, rest),
        };
        let (hosts, chroot) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let credentials = match userinfo {
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').ok_or_else(|| {
                    anyhow!("ZooKeeper URL {shown:?}: credentials must be user:password")
                })?;
                // Not a word of the credentials in messages, only what is wrong with them.
                let user = percent_decode(user).map_err(|_| {
                    anyhow!("ZooKeeper URL {shown:?}: bad percent escape in the user name")
                })?;
                let password = percent_decode(password).map_err(|_| {
                    anyhow!("ZooKeeper URL {shown:?}: bad percent escape in the password")
                })?;
                if user.is_empty() {
                    return Err(anyhow!("ZooKeeper URL {shown:?}: the user name is empty"));
                }
                Some((user, password))
            }
            None => None,
        };
        let hosts = hosts
            .split(',')
            .map(|h| parse_host(h).with_context(|| format!("ZooKeeper URL {shown:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let chroot = chroot.trim_end_matches('/');
        if !chroot.is_empty()
            && chroot[1..]
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".." || c.chars().any(|c| !allowed(c)))
        {
            return Err(anyhow!(
                "ZooKeeper URL {shown:?}: the chroot {chroot:?} is not a valid znode path"
            ));
        }
        Ok(ZkUrl {
            credentials,
            hosts,
            chroot: chroot.to_owned(),
        })
    }

    fn hosts(&self) -> String {
        self.hosts.join(",")
    }

    /// The URL without credentials.
    fn location(&self) -> String {
        format!("zk://{}{}", self.hosts(), self.chroot)
    }
}

/// `host:port` with the port defaulting to 2181; `[v6]:port` too.
fn parse_host(h: &str) -> anyhow::Result<String> {
    let (host, port) = if let Some(v6) = h.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| anyhow!("unclosed [ in host {h:?}"))?;
        (format!("[{addr}]"), after.strip_prefix(':'))
    } else {
        match h.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (h.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(anyhow!("empty host in {h:?}"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '@')
    {
        return Err(anyhow!("bad host {host:?}"));
    }
    let port: u16 = match port {
        None => 2181,
        Some(p) => p
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| anyhow!("bad port {p:?} in host {h:?}"))?,
    };
    Ok(format!("{host}:{port}"))
}

fn percent_decode(s: &str) -> anyhow::Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| anyhow!("bad percent escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| anyhow!("percent escapes in {s:?} are not UTF-8"))
}

/// Characters ZooKeeper accepts in a path (see its PathUtils.validatePath). It checks UTF-16 code
/// units, so it refuses every character outside the Basic Multilingual Plane too (a surrogate pair
/// in Java); surrogates themselves cannot occur in a str.
fn allowed(c: char) -> bool {
    !(c <= '\u{1f}'
        || ('\u{7f}'..='\u{9f}').contains(&c)
        || ('\u{e000}'..='\u{f8ff}').contains(&c)
        || c >= '\u{fff0}')
}

/// The one znode name for a lock name. `%` itself is escaped, so the mapping is reversible and two
/// names never share a node. `zookeeper` needs no escape: it is reserved only at the root.
fn node_name(name: &LockName) -> String {
    let mut out = String::with_capacity(name.as_str().len());
    for (i, c) in name.as_str().char_indices() {
        if c == '/' || c == '%' || (i == 0 && c == '.') || !allowed(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The lock name a directory stands for, if it is one of ours.
fn lock_name_of(node: &str) -> Option<LockName> {
    let name = LockName::new(&percent_decode(node).ok()?).ok()?;
    (node_name(&name) == node).then_some(name)
}

/// What a child node asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Exclusive,
    Shared,
    Seat,
}

/// A holder's or waiter's node, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Child {
    name: String,
    sequence: i64,
    kind: Kind,
}

impl Child {
    /// Any node ending in a sequence number takes part; one without is no lock node and is ignored.
    fn parse(name: &str) -> Option<Child> {
        let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
        if digits < 10 {
            return None;
        }
        let (stem, sequence) = name.split_at(name.len() - digits);
        let kind = if stem.ends_with(SHARED_KIND) {
            Kind::Shared
        } else if stem.ends_with(SEAT_KIND) {
            Kind::Seat
        } else {
            // `lock-` (Curator's mutex), `__WRIT__` (Curator's write lock) and anything unknown.
            Kind::Exclusive
        };
        Some(Child {
            name: name.to_owned(),
            sequence: sequence.parse().ok()?,
            kind,
        })
    }
}

/// The lock's nodes in queue order.
fn queue(names: &[String]) -> Vec<Child> {
    let mut children: Vec<Child> = names.iter().filter_map(|n| Child::parse(n)).collect();
    children.sort_by(|a, b| (a.sequence, &a.name).cmp(&(b.sequence, &b.name)));
    children
}

/// Whether the node at `me` owns the lock, and if not, what it waits for.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Owns,
    /// Wait for this node to go.
    Watch(String),
    /// Wait for any change among the children (a seat waits for any of N holders).
    WatchChildren,
}

fn verdict(queue: &[Child], me: usize, limit: u32) -> Verdict {
    let before = &queue[..me];
    match queue[me].kind {
        Kind::Exclusive => match before.last() {
            None => Verdict::Owns,
            Some(predecessor) => Verdict::Watch(predecessor.name.clone()),
        },
        kind => {
            if let Some(writer) = before.iter().rev().find(|c| c.kind == Kind::Exclusive) {
                return Verdict::Watch(writer.name.clone());
            }
            let seats = before.iter().filter(|c| c.kind == Kind::Seat).count();
            if kind == Kind::Seat && seats >= limit as usize {
                return Verdict::WatchChildren;
            }
            Verdict::Owns
        }
    }
}

/// Indexes of the nodes that own the lock; a seat's limit comes from `limit_of`.
fn owners(queue: &[Child], limit_of: impl Fn(usize) -> u32) -> Vec<usize> {
    (0..queue.len())
        .filter(|&i| verdict(queue, i, limit_of(i)) == Verdict::Owns)
        .collect()
}

/// What dlock writes into its nodes, for status and list.
#[derive(Debug, Serialize, Deserialize)]
struct NodeData {
    dlock: u32,
    mode: String,
    host: String,
    pid: u32,
    owner: String,
    /// Seconds since the Unix epoch when the node was created.
    since: u64,
}

impl NodeData {
    fn parse(data: &[u8]) -> Option<NodeData> {
        serde_json::from_slice::<NodeData>(data)
            .ok()
            .filter(|d| d.dlock == 1)
    }
}

/// The holder a node stands for. Any client may write a node's data (under open ACLs), so dlock's
/// own JSON is checked field by field, and data that says it is dlock's but does not read is shown
/// as unreadable; a node not written by dlock (Curator's) says what it can. The node's name decides
/// who owns the lock, so data that names another mode than the name does is unreadable too.
fn holder_of(child: &Child, data: &[u8], stat: &zk::Stat) -> Holder {
    let token = u64::try_from(stat.czxid).ok();
    let by_kind = match child.kind {
        Kind::Shared => Mode::Shared,
        Kind::Exclusive | Kind::Seat => Mode::Exclusive,
    };
    let json = serde_json::from_slice::<serde_json::Value>(data).ok();
    if json.as_ref().is_some_and(|j| j.get("dlock").is_some()) {
        let readable = NodeData::parse(data).and_then(|d| {
            let mode = Mode::from_wire(&d.mode)?;
            let fits = match mode {
                Mode::Exclusive => child.kind == Kind::Exclusive,
                Mode::Shared => child.kind == Kind::Shared,
                Mode::Limit(_) => child.kind == Kind::Seat,
            };
            fits.then(|| Holder::checked(mode, &d.owner, &d.host, d.pid, d.since, token))?
        });
        return readable
            .unwrap_or_else(|| Holder::unreadable(by_kind, "", &String::from_utf8_lossy(data)));
    }
    // Curator stores the client's IP address as the node's data.
    let text = String::from_utf8_lossy(data);
    let host = (!text.is_empty() && text.len() <= MAX_HOST_BYTES && is_plain(&text))
        .then(|| text.into_owned());
    let since = u64::try_from(stat.ctime)
        .ok()
        .filter(|ms| ms / 1000 <= MAX_SINCE_SECS)
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
    Holder {
        mode: by_kind,
        host,
        pid: None,
        owner: format!("(not dlock: {})", escaped(&child.name, 100)),
        since,
        token,
        unreadable: None,
    }
}

/// A request lost with its connection: the client fails those in flight with ConnectionLoss, or
/// with the I/O error that broke the connection (`Custom`). Either may be sent again once the
/// client has reconnected.
fn is_connection_loss(e: &zk::Error) -> bool {
    matches!(e, zk::Error::ConnectionLoss | zk::Error::Custom(_))
}

/// Is this error about reaching or using the ensemble (exit 69) rather than a bug (70)?
fn is_unavailable(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::SessionExpired
            | zk::Error::SessionMoved
            | zk::Error::AuthFailed
            | zk::Error::NoAuth
            | zk::Error::ClientClosed
            | zk::Error::NoHosts
            | zk::Error::Timeout
            | zk::Error::Throttled
    )
}

/// One failed ZooKeeper call as the user sees it: what dlock was doing, where, and why; tagged for
/// exit status 69 when the ensemble could not be reached or used.
fn failure(e: zk::Error, doing: &str, hosts: &str) -> anyhow::Error {
    let why = match e {
        zk::Error::NoAuth => "not authorised: the node belongs to another ZooKeeper identity \
             (give zk://user:password@... to act as its owner)"
            .to_owned(),
        ref e => e.to_string(),
    };
    let result: anyhow::Result<()> = Err(anyhow!("{doing} on ZooKeeper at {hosts}: {why}"));
    let result = if is_unavailable(&e) {
        result.fail_with(Failure::BackendUnavailable)
    } else {
        result
    };
    match result {
        Err(err) => err,
        Ok(()) => unreachable!("built as an error"),
    }
}

/// One ZooKeeper session and the runtime that keeps it alive: shared by the backend and every lease
/// taken through it, and closed when the last of them lets go.
struct Session {
    runtime: tokio::runtime::Runtime,
    /// `None` once closed: by the release of the last lease using it, or when dropped.
    client: Option<zk::Client>,
    hosts: String,
    root: String,
    /// ACLs for the nodes dlock creates; see `Acls`.
    acls: Acls,
    /// A request failed with "session expired" (see `fail`).
    expired: AtomicBool,
}

/// With credentials, what dlock creates belongs to that identity (full rights) and everyone may read
/// it, so another identity can see a lock but neither break nor join it; `/dlock` itself also lets
/// everyone create, so each identity can make its own locks. Without credentials everything is open,
/// as with Curator's default. ZooKeeper checks a delete against the parent's ACL, so the protection
/// holds for locks whose directory an authenticated dlock created; a directory made without
/// credentials stays open to all.
struct Acls {
    root: Vec<zk::Acl>,
    lock: Vec<zk::Acl>,
}

impl Acls {
    fn new(authenticated: bool) -> Acls {
        if !authenticated {
            let open = vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())];
            return Acls {
                root: open.clone(),
                lock: open,
            };
        }
        let creator = zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed());
        Acls {
            root: vec![
                creator.clone(),
                zk::Acl::new(
                    zk::Permission::READ | zk::Permission::CREATE,
                    zk::AuthId::anyone(),
                ),
            ],
            lock: vec![
                creator,
                zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
            ],
        }
    }
}

impl Session {
    fn open(
        url: &ZkUrl,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> anyhow::Result<Session> {
        let hosts = url.hosts();
        let runtime = Session::runtime()?;
        let client = runtime
            .block_on(connecting(url, session_timeout, connect_timeout, None))
            .map_err(|e| {
                anyhow!(
                    "cannot reach ZooKeeper at {hosts} within {}: {e}",
                    humantime::format_duration(connect_timeout)
                )
            })
            .fail_with(Failure::BackendUnavailable)?;
        Ok(Session::with(url, runtime, client))
    }

    /// A new session for a waiter whose session expired while it waited: tries until the ensemble
    /// answers, telling `waiting` meanwhile that it cannot be reached. `None` when the wait was
    /// cancelled or a stop signal caught first.
    fn reopen(
        url: &ZkUrl,
        session_timeout: Duration,
        connect_timeout: Duration,
        waiting: &Waiting,
    ) -> anyhow::Result<Option<Session>> {
        let runtime = Session::runtime()?;
        // Each round ends at `connect_timeout` or at the cancellation, which ends the loop.
        loop {
            if waiting.is_cancelled() || interrupt::caught().is_some() {
                return Ok(None);
            }
            let attempt = connecting(url, session_timeout, connect_timeout, Some(waiting));
            match runtime.block_on(attempt) {
                Ok(client) => return Ok(Some(Session::with(url, runtime, client))),
                Err(e @ (zk::Error::AuthFailed | zk::Error::BadArguments(_))) => {
                    return Err(anyhow!("cannot use ZooKeeper at {}: {e}", url.hosts()))
                        .fail_with(Failure::BackendUnavailable)
                }
                Err(_) => {}
            }
        }
    }

    fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
        // One worker: the session's own task must run while every dlock thread is blocked elsewhere
        // (a current-thread runtime would only run it inside block_on).
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .thread_name("dlock-zk")
            .enable_time()
            .build()
            .context("cannot start the ZooKeeper client's runtime")
    }

    fn with(url: &ZkUrl, runtime: tokio::runtime::Runtime, client: zk::Client) -> Session {
        Session {
            runtime,
            client: Some(client),
            hosts: url.hosts(),
            root: format!("{}/{ROOT}", url.chroot),
            acls: Acls::new(url.credentials.is_some()),
            expired: AtomicBool::new(false),
        }
    }

    /// Whether the session is over for good (expired, closed, refused).
    fn is_over(&self) -> bool {
        self.expired.load(Ordering::SeqCst)
            || self.client.as_ref().is_none_or(|c| is_terminal(c.state()))
    }

    fn client(&self) -> &zk::Client {
        self.client
            .as_ref()
            .expect("only the last user of a session closes it, so its users find it open")
    }

    fn dir(&self, name: &LockName) -> String {
        format!("{}/{}", self.root, node_name(name))
    }

    fn fail(&self, e: zk::Error, doing: &str) -> anyhow::Error {
        // A request can fail with "session expired" before the client's own state says so (the
        // ensemble unreachable, the client gave up on it): remember it for `is_over`.
        if matches!(e, zk::Error::SessionExpired) {
            self.expired.store(true, Ordering::SeqCst);
        }
        failure(e, doing, &self.hosts)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        // Dropping the last client makes the session task send closeSession; waiting for it lets the
        // server delete our ephemeral nodes now rather than after the session timeout.
        let mut states = client.state_watcher();
        let connected = client.state() == zk::SessionState::SyncConnected;
        drop(client);
        if !connected {
            // Nobody to say goodbye to; the server expires the session on its own.
            return;
        }
        self.runtime.block_on(async {
            let _ = tokio::time::timeout(CLEANUP_TIMEOUT, ended(&mut states)).await;
        });
    }
}

/// Waits for the session to reach its end (closed, expired, refused).
async fn ended(states: &mut zk::StateWatcher) {
    // Bounded: a session passes through a handful of states at most before its end.
    for _ in 0..8 {
        if is_terminal(states.changed().await) {
            return;
        }
    }
}

fn is_terminal(state: zk::SessionState) -> bool {
    matches!(
        state,
        zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
    )
}

/// `connect`, ended at once by a stop signal (`interrupt::caught`) or, given a `waiting`, by its
/// cancellation (both as `ClientClosed`), which it meanwhile tells that the ensemble is unreachable.
async fn connecting(
    url: &ZkUrl,
    session_timeout: Duration,
    connect_timeout: Duration,
    waiting: Option<&Waiting>,
) -> Result<zk::Client, zk::Error> {
    let connecting = connect(url, session_timeout, connect_timeout);
    tokio::pin!(connecting);
    let mut tick = tokio::time::interval(CANCEL_POLL);
    loop {
        tokio::select! {
            result = &mut connecting => return result,
            _ = tick.tick() => {
                if interrupt::caught().is_some() || waiting.is_some_and(Waiting::is_cancelled) {
                    return Err(zk::Error::ClientClosed);
                }
                if let Some(waiting) = waiting {
                    waiting.unreachable(&format!(
                        "cannot reach ZooKeeper at {} (the session expired: queueing again, \
                         at the back of the line, once it answers)",
                        url.hosts()
                    ));
                }
            }
        }
    }
}

/// Connects, retrying until `connect_timeout` (the client alone gives up after the session timeout,
/// which may be shorter).
async fn connect(
    url: &ZkUrl,
    session_timeout: Duration,
    connect_timeout: Duration,
) -> Result<zk::Client, zk::Error> {
    let deadline = Instant::now() + connect_timeout;
    let mut last = zk::Error::Timeout;
    for _ in 0..1000 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut connector = zk::Client::connector().with_session_timeout(session_timeout);
        if let Some((user, password)) = &url.credentials {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        match tokio::time::timeout(left, connector.connect(&url.hosts())).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(e @ (zk::Error::AuthFailed | zk::Error::BadArguments(_)))) => return Err(e),
            Ok(Err(e)) => {
                last = e;
                tokio::time::sleep(Duration::from_millis(100).min(left)).await;
            }
            Err(_) => break,
        }
    }
    Err(last)
}

pub struct ZkBackend {
    url: ZkUrl,
    connect_timeout: Duration,
    /// Connected on first use, with the session timeout of the first request (`--ttl`).
    session: Mutex<Option<Arc<Session>>>,
    parked: Mutex<Option<Parked>>,
}

impl ZkBackend {
    pub fn open(config: &BackendConfig) -> anyhow::Result<ZkBackend> {
        let url = match config.urls.as_slice() {
            [] => DEFAULT_URL,
            [url] => url.as_str(),
            _ => {
                return Err(anyhow!(
                    "the zk backend takes one --url (list the ensemble's hosts in it), not {}",
                    config.urls.len()
                ))
                .fail_with(Failure::Usage)
            }
        };
        Ok(ZkBackend {
            url: ZkUrl::parse(url).fail_with(Failure::Usage)?,
            connect_timeout: config.connect_timeout,
            session: Mutex::new(None),
            parked: Mutex::new(None),
        })
    }

    fn session(&self, timeout: Duration) -> anyhow::Result<Arc<Session>> {
        let mut slot = lock(&self.session);
        if let Some(session) = slot.as_ref() {
            return Ok(session.clone());
        }
        let session = Arc::new(Session::open(&self.url, timeout, self.connect_timeout)?);
        *slot = Some(session.clone());
        Ok(session)
    }

    /// One acquisition; a waiter whose session expires while it waits (it holds nothing yet)
    /// opens a new session once the ensemble answers and queues again, at the back of the line:
    /// its node went with the old session. With a lease of another name on that session, the
    /// expiry has taken that lock too, and the acquisition fails.
    fn attempt(&self, request: &LockRequest, waiting: Option<&Waiting>) -> anyhow::Result<Outcome> {
        let mut session = self.session(request.ttl)?;
        // Each round follows the end of a session, at least a session timeout after it began, and
        // the rounds end with the wait (its cancellation).
        loop {
            let result = self.attempt_in(&session, request, waiting);
            if result.is_ok() || !session.is_over() {
                return result;
            }
            if !self.only_user(&session) {
                return result.context(
                    "the ZooKeeper session expired, and with it the locks this dlock had \
                     already taken",
                );
            }
            let Some(waiting) = waiting else {
                return result;
            };
            *lock(&self.session) = None;
            drop(session);
            match Session::reopen(&self.url, request.ttl, self.connect_timeout, waiting)? {
                Some(fresh) => {
                    let fresh = Arc::new(fresh);
                    *lock(&self.session) = Some(fresh.clone());
                    session = fresh;
                }
                None if interrupt::caught().is_some() => return Err(anyhow!("interrupted")),
                None => return Ok(Outcome::Cancelled),
            }
        }
    }

    /// Whether the backend's session is over (see `Session::is_over`).
    fn session_is_over(&self) -> bool {
        lock(&self.session).as_ref().is_some_and(|s| s.is_over())
    }

    /// Whether `session` is the backend's and no lease holds it (only the backend and the caller).
    fn only_user(&self, session: &Arc<Session>) -> bool {
        lock(&self.session)
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, session))
            && Arc::strong_count(session) == 2
    }

    fn attempt_in(
        &self,
        session: &Arc<Session>,
        request: &LockRequest,
        waiting: Option<&Waiting>,
    ) -> anyhow::Result<Outcome> {
        let ctx = || {
            format!(
                "lock {:?} on ZooKeeper at {}",
                request.name.as_str(),
                session.hosts
            )
        };
        let acquisition = Acquisition::new(session.clone(), request.clone())?;
        let waiting = waiting.cloned();
        let parked = lock(&self.parked).take();
        let resumed = match parked {
            Some(p)
                if p.name == request.name && p.owner == request.owner && p.mode == request.mode =>
            {
                Some(Resumed {
                    node: p.node,
                    token: p.token,
                    holders: p.holders,
                })
            }
            Some(p) => {
                // Not the request it was kept for: it must not hold a place in that queue.
                let path = format!("{}/{}", session.dir(&p.name), p.node);
                let client = session.client().clone();
                session.runtime.block_on(async move {
                    let _ = tokio::time::timeout(CLEANUP_TIMEOUT, remove(&client, &path)).await;
                });
                None
            }
            None => None,
        };
        // Run on the runtime's worker, beside the session's own task: a watch event then reaches
        // the waiting code, and its next request the connection, without hopping threads.
        let watch = waiting.clone();
        let task = session
            .runtime
            .spawn(async move { acquisition.run(waiting.as_ref(), resumed).await });
        match watched(session, task, watch.as_ref()) {
            Some(Ok(outcome)) => outcome.with_context(ctx),
            Some(Err(e)) => Err(anyhow!("the acquisition task failed: {e}")).with_context(ctx),
            None if interrupt::caught().is_some() => Err(anyhow!("interrupted")),
            None => Ok(Outcome::Cancelled),
        }
    }

    fn status_of(&self, session: &Session, name: &LockName) -> anyhow::Result<LockStatus> {
        let dir = session.dir(name);
        let holders = session
            .runtime
            .block_on(holders(session, &dir, None))
            .with_context(|| format!("cannot read lock {:?}", name.as_str()))?
            .into_iter()
            .map(|(_, h)| h)
            .collect();
        Ok(LockStatus {
            name: name.clone(),
            holders,
            // The node's full path (chroot included) on the ensemble, without credentials.
            location: format!("zk://{}{dir}", self.url.hosts()),
        })
    }
}

/// Waits for an acquisition `task`, telling `waiting` meanwhile whether the ensemble can be
/// reached. When the wait is cancelled or a stop signal was caught, the task (which looks at both)
/// gets a moment to clean up if the ensemble is there; otherwise it is aborted (`None`): both must
/// end the wait promptly, also while the client waits to reconnect. An aborted task's node goes
/// with the session, which ends with dlock.
fn watched<T: Send + 'static>(
    session: &Session,
    mut task: tokio::task::JoinHandle<T>,
    waiting: Option<&Waiting>,
) -> Option<Result<T, tokio::task::JoinError>> {
    let client = session.client().clone();
    let result = session.runtime.block_on(async {
        let mut tick = tokio::time::interval(CANCEL_POLL);
        loop {
            tokio::select! {
                result = &mut task => return Some(result),
                _ = tick.tick() => {
                    if interrupt::caught().is_some() || waiting.is_some_and(Waiting::is_cancelled) {
                        return None;
                    }
                    let Some(waiting) = waiting else { continue };
                    match client.state() {
                        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                            waiting.reachable()
                        }
                        state => waiting.unreachable(&format!(
                            "cannot reach ZooKeeper at {} ({state})",
                            session.hosts
                        )),
                    }
                }
            }
        }
    });
    if result.is_some() {
        return result;
    }
    if client.state() == zk::SessionState::SyncConnected {
        let finished = session
            .runtime
            .block_on(async { tokio::time::timeout(CLEANUP_TIMEOUT, &mut task).await });
        if let Ok(result) = finished {
            return Some(result);
        }
    }
    task.abort();
    None
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave these plain values half-updated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

enum Outcome {
    Acquired(ZkLease),
    /// Held by others; our node stays queued (see `Parked`).
    Busy(Vec<Holder>, Parked),
    Cancelled,
}

/// A parked node taken up again by the `acquire` it was kept for.
struct Resumed {
    node: String,
    token: Token,
    holders: Vec<Holder>,
}

/// The node of a `try_acquire` that found the lock busy, left in the queue for the `acquire` that
/// dlock makes next for the same request (it tries before it waits): the wait then keeps its
/// place instead of leaving and queueing again. Any other request, or the end of the session
/// (the ephemeral node goes with it), removes it.
struct Parked {
    name: LockName,
    owner: String,
    mode: Mode,
    node: String,
    token: Token,
    /// Who held the lock then: the wait reports them without asking again.
    holders: Vec<Holder>,
}

/// Retries an operation that met a connection loss: the client queues requests until it has
/// reconnected (or the session ends, which fails them for good).
async fn retrying<T, F, Fut>(mut op: F) -> Result<T, zk::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, zk::Error>>,
{
    let mut tries = 0;
    loop {
        match op().await {
            Err(e) if is_connection_loss(&e) && tries < MAX_RETRIES => tries += 1,
            result => return result,
        }
    }
}

/// The current owners of the lock in `dir` with what their nodes say, in queue order.
///
/// `status` passes no `known`: every node is read, and each seat counts with its own limit. An
/// acquirer passes the listing it has just judged by and its own limit: only the owners that
/// listing shows are read, in one request.
async fn holders(
    session: &Session,
    dir: &str,
    known: Option<(&[String], u32)>,
) -> anyhow::Result<Vec<(String, Holder)>> {
    let client = session.client();
    let (queue, limit) = match known {
        Some((names, limit)) => {
            let all = queue(names);
            let owning = owners(&all, |_| limit).into_iter().map(|i| all[i].clone());
            (owning.collect::<Vec<_>>(), Some(limit))
        }
        None => match retrying(|| client.list_children(dir)).await {
            Ok(names) => (queue(&names), None),
            Err(zk::Error::NoNode) => return Ok(vec![]),
            Err(e) => return Err(session.fail(e, &format!("cannot list {dir}"))),
        },
    };
    if queue.is_empty() {
        return Ok(vec![]);
    }
    // One multi-read: a consistent view of every node's data.
    let mut tries = 0;
    let results = loop {
        let mut reader = client.new_multi_reader();
        for child in &queue {
            let path = format!("{dir}/{}", child.name);
            reader
                .add_get_data(&path)
                .map_err(|e| session.fail(e, &format!("cannot read {path}")))?;
        }
        match reader.commit().await {
            Err(e) if is_connection_loss(&e) && tries < MAX_RETRIES => tries += 1,
            result => {
                break result
                    .map_err(|e| session.fail(e, &format!("cannot read the nodes of {dir}")))?
            }
        }
    };
    // A node gone between the listing and the read no longer holds anything.
    let mut present = Vec::new();
    for (child, result) in queue.iter().zip(results) {
        if let zk::MultiReadResult::Data { data, stat } = result {
            present.push((child.clone(), data, stat));
        }
    }
    let queue: Vec<Child> = present.iter().map(|(c, _, _)| c.clone()).collect();
    let limit_of = |i: usize| {
        let own = NodeData::parse(&present[i].1).and_then(|d| match Mode::from_wire(&d.mode) {
            Some(Mode::Limit(n)) => Some(n),
            _ => None,
        });
        own.or(limit).unwrap_or(1)
    };
    Ok(owners(&queue, limit_of)
        .into_iter()
        .map(|i| {
            let (child, data, stat) = &present[i];
            (child.name.clone(), holder_of(child, data, stat))
        })
        .collect())
}

/// One acquisition: the node it creates and everything needed to wait for its turn.
struct Acquisition {
    session: Arc<Session>,
    request: LockRequest,
    dir: String,
    /// `_c_<uuid>-`: finds our node again after a connection loss during the create.
    protection: String,
    kind: &'static str,
    data: Vec<u8>,
    limit: u32,
}

impl Acquisition {
    fn new(session: Arc<Session>, request: LockRequest) -> anyhow::Result<Acquisition> {
        let (kind, limit) = match request.mode {
            Mode::Exclusive => (EXCLUSIVE_KIND, 1),
            Mode::Shared => (SHARED_KIND, 0),
            Mode::Limit(n) => (SEAT_KIND, n),
        };
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let data = serde_json::to_vec(&NodeData {
            dlock: 1,
            mode: request.mode.to_wire(),
            host: host_name(),
            pid: std::process::id(),
            owner: request.owner.clone(),
            since,
        })?;
        Ok(Acquisition {
            dir: session.dir(&request.name),
            session,
            request,
            protection: format!("_c_{}-", uuid()?),
            kind,
            data,
            limit,
        })
    }

    fn client(&self) -> &zk::Client {
        self.session.client()
    }

    fn fail(&self, e: zk::Error, doing: &str) -> anyhow::Error {
        self.session.fail(e, doing)
    }

    /// Queue up (or keep the place of a parked node), then wait for our turn (`waiting`) or give up
    /// at once (`None`, leaving the node parked). A node that ends in neither a lease nor a parked
    /// place is deleted.
    async fn run(
        &self,
        waiting: Option<&Waiting>,
        resumed: Option<Resumed>,
    ) -> anyhow::Result<Outcome> {
        if waiting.is_some_and(Waiting::is_cancelled) {
            if let Some(r) = &resumed {
                self.delete_quietly(&r.node).await;
            }
            return Ok(Outcome::Cancelled);
        }
        let (node, token, listing, known) = match resumed {
            Some(r) => {
                let listing = self.list().await?;
                (r.node, r.token, listing, Some(r.holders))
            }
            None => {
                let (node, token, listing) = self.enqueue().await?;
                (node, token, listing, None)
            }
        };
        let outcome = self.wait_turn(&node, token, listing, known, waiting).await;
        match outcome {
            Ok(Outcome::Acquired(_)) | Ok(Outcome::Busy(..)) => {}
            _ => self.delete_quietly(&node).await,
        }
        match outcome {
            Ok(Outcome::Acquired(mut lease)) => {
                lease.token = token;
                Ok(Outcome::Acquired(lease))
            }
            other => other,
        }
    }

    /// Creates our node; returns its name, its creation zxid (the token) and the directory listing
    /// taken right after it.
    async fn enqueue(&self) -> anyhow::Result<(String, Token, Vec<String>)> {
        let client = self.client();
        let prefix = format!("{}/{}{}", self.dir, self.protection, self.kind);
        let options =
            zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&self.session.acls.lock));
        for _ in 0..MAX_RETRIES {
            // Sent back to back, so the server lists the directory right after creating our node: the
            // usual uncontended acquisition is one round trip.
            let create = client.create(&prefix, &self.data, &options);
            let list = client.list_children(&self.dir);
            let (created, listed) = tokio::join!(create, list);
            match created {
                Ok((stat, sequence)) => {
                    let node = format!("{}{}{sequence}", self.protection, self.kind);
                    let token = self.token_of(&node, &stat).await?;
                    let listing = match listed {
                        Ok(listing) => listing,
                        Err(_) => self.list().await?,
                    };
                    return Ok((node, token, listing));
                }
                Err(zk::Error::NoNode) => self.make_dirs().await?,
                Err(e) if is_connection_loss(&e) => {
                    // The create may have happened: find our node by its protected prefix.
                    let listing = self.list().await?;
                    if let Some(node) = listing.iter().find(|n| n.starts_with(&self.protection)) {
                        let node = node.clone();
                        let stat = retrying(|| client.get_data(&format!("{}/{node}", self.dir)))
                            .await
                            .map_err(|e| self.fail(e, "cannot read our own lock node"))?
                            .1;
                        return Ok((node, stat.czxid.max(0) as Token, listing));
                    }
                }
                Err(e) => {
                    return Err(self.fail(e, &format!("cannot create a node in {}", self.dir)))
                }
            }
        }
        Err(anyhow!(
            "could not create a node in {} after {MAX_RETRIES} tries (connection losses, or the directory kept vanishing)",
            self.dir
        ))
        .fail_with(Failure::BackendUnavailable)
    }

    /// The creation zxid; servers before 3.5 return no stat from create, so ask for it then.
    async fn token_of(&self, node: &str, stat: &zk::Stat) -> anyhow::Result<Token> {
        if !stat.is_invalid() && stat.czxid > 0 {
            return Ok(stat.czxid as Token);
        }
        let path = format!("{}/{node}", self.dir);
        let (_, stat) = retrying(|| self.client().get_data(&path))
            .await
            .map_err(|e| self.fail(e, "cannot read our own lock node"))?;
        Ok(stat.czxid.max(0) as Token)
    }

    async fn list(&self) -> anyhow::Result<Vec<String>> {
        retrying(|| self.client().list_children(&self.dir))
            .await
            .map_err(|e| self.fail(e, &format!("cannot list {}", self.dir)))
    }

    /// Creates the chroot, `/dlock` and the lock's directory as needed, all requests in one go.
    async fn make_dirs(&self) -> anyhow::Result<()> {
        let client = self.client();
        let mut paths: Vec<String> = Vec::new();
        let mut at = String::new();
        for part in self.session.root[1..].split('/') {
            at.push('/');
            at.push_str(part);
            paths.push(at.clone());
        }
        let root_options =
            zk::CreateMode::Persistent.with_acls(zk::Acls::new(&self.session.acls.root));
        // A container: the server deletes it once it is empty, should every dlock using it die.
        let dir_options =
            zk::CreateMode::Container.with_acls(zk::Acls::new(&self.session.acls.lock));
        let mut pending: Vec<_> = paths
            .iter()
            .map(|p| client.create(p, &[], &root_options))
            .collect();
        pending.push(client.create(&self.dir, &[], &dir_options));
        for (fut, path) in pending.into_iter().zip(paths.iter().chain([&self.dir])) {
            match fut.await {
                Ok(_) | Err(zk::Error::NodeExists) | Err(zk::Error::ConnectionLoss) => {}
                // Someone else's /dlock (or chroot) that we may not write to: fine if it exists.
                Err(zk::Error::NoAuth) if path != &self.dir => {}
                Err(e) => return Err(self.fail(e, &format!("cannot create {path}"))),
            }
        }
        Ok(())
    }

    /// Loops until our node owns the lock, we give up, or the session fails. Bounded by the
    /// caller's cancellation (checked every `CANCEL_POLL`) and by the session's life.
    async fn wait_turn(
        &self,
        node: &str,
        token: Token,
        mut listing: Vec<String>,
        mut known: Option<Vec<Holder>>,
        waiting: Option<&Waiting>,
    ) -> anyhow::Result<Outcome> {
        let client = self.client();
        let own_path = format!("{}/{node}", self.dir);
        // The watch on our own node that the lease needs, armed together with a listing when we can.
        let mut own: Option<zk::OneshotWatcher> = None;
        let mut reported = false;
        loop {
            let queue = queue(&listing);
            let Some(me) = queue.iter().position(|c| c.name == node) else {
                return Err(anyhow!(
                    "our node {own_path} vanished while waiting (dlock release --force, or the session expired)"
                ))
                .fail_with(Failure::BackendUnavailable);
            };
            let watch = match verdict(&queue, me, self.limit) {
                Verdict::Owns => {
                    let watcher = match own.take() {
                        Some(watcher) => watcher,
                        None => match retrying(|| client.get_and_watch_data(&own_path)).await {
                            Ok((_, _, watcher)) => watcher,
                            // Deleted under us: the next look reports it.
                            Err(zk::Error::NoNode) => {
                                listing = self.list().await?;
                                continue;
                            }
                            Err(e) => return Err(self.fail(e, &format!("cannot watch {own_path}"))),
                        },
                    };
                    let lease = ZkLease::start(
                        self.session.clone(),
                        &self.dir,
                        node,
                        self.request.ttl,
                        watcher,
                    );
                    return Ok(Outcome::Acquired(lease));
                }
                watch => watch,
            };
            let Some(waiting) = waiting else {
                let holders: Vec<Holder> =
                    holders(&self.session, &self.dir, Some((&listing, self.limit)))
                        .await?
                        .into_iter()
                        .map(|(_, h)| h)
                        .collect();
                let parked = Parked {
                    name: self.request.name.clone(),
                    owner: self.request.owner.clone(),
                    mode: self.request.mode,
                    node: node.to_owned(),
                    token,
                    holders: holders.clone(),
                };
                return Ok(Outcome::Busy(holders, parked));
            };
            // Arm the watch first (the request goes out now), then report who holds the lock.
            let ahead = match &watch {
                Verdict::Watch(other) => Some(format!("{}/{other}", self.dir)),
                _ => None,
            };
            let armed = ahead.as_ref().map(|path| client.get_and_watch_data(path));
            if !reported {
                reported = true;
                let holders = match known.take() {
                    Some(holders) => holders,
                    None => holders(&self.session, &self.dir, Some((&listing, self.limit)))
                        .await
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(_, h)| h)
                        .collect(),
                };
                waiting.busy(&holders);
            }
            // A node already gone means look again at once.
            let watcher = match (armed, &ahead) {
                (Some(armed), Some(path)) => {
                    let result = match armed.await {
                        Err(e) if is_connection_loss(&e) => {
                            retrying(|| client.get_and_watch_data(path)).await
                        }
                        result => result,
                    };
                    match result {
                        Ok((_, _, watcher)) => Some(watcher),
                        Err(zk::Error::NoNode) => None,
                        Err(e) => return Err(self.fail(e, "cannot watch the node ahead of ours")),
                    }
                }
                _ => match retrying(|| client.list_and_watch_children(&self.dir)).await {
                    Ok((names, watcher)) => {
                        // This listing is newer than the one we judged by: judge again before waiting.
                        if names != listing {
                            listing = names;
                            continue;
                        }
                        Some(watcher)
                    }
                    Err(e) => return Err(self.fail(e, &format!("cannot watch {}", self.dir))),
                },
            };
            if let Some(watcher) = watcher {
                let changed = watcher.changed();
                tokio::pin!(changed);
                let mut tick = tokio::time::interval(CANCEL_POLL);
                loop {
                    tokio::select! {
                        event = &mut changed => {
                            if event.event_type == zk::EventType::Session && is_terminal(event.session_state) {
                                return Err(anyhow!("ZooKeeper session ended ({}) while waiting", event.session_state))
                                    .fail_with(Failure::BackendUnavailable);
                            }
                            break;
                        }
                        _ = tick.tick() => {
                            if waiting.is_cancelled() {
                                return Ok(Outcome::Cancelled);
                            }
                        }
                    }
                }
            }
            if waiting.is_cancelled() {
                return Ok(Outcome::Cancelled);
            }
            // Look again; if that shows our turn has come, the watch the lease needs is armed in the
            // same round trip.
            let arm_own = own.is_none().then(|| client.get_and_watch_data(&own_path));
            listing = self.list().await?;
            if let Some(arm_own) = arm_own {
                own = arm_own.await.ok().map(|(_, _, watcher)| watcher);
            }
        }
    }

    /// Deletes our node on the way out; if that fails the session's end deletes it.
    async fn delete_quietly(&self, node: &str) {
        if self.client().state() != zk::SessionState::SyncConnected {
            // No one to ask now; the node goes with the session, which ends with dlock.
            return;
        }
        let path = format!("{}/{node}", self.dir);
        let _ = tokio::time::timeout(CLEANUP_TIMEOUT, remove(self.client(), &path)).await;
    }
}

/// Deletes a lock node (gone already is fine). The lock's directory is a container node: the server
/// deletes it once it is empty, with a version check, so that never races a new acquirer, which
/// recreates the directory if it finds none.
async fn remove(client: &zk::Client, path: &str) -> Result<(), zk::Error> {
    match client.delete(path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A random UUID (version 4), as Curator puts in protected node names.
fn uuid() -> anyhow::Result<String> {
    let mut b = [0u8; 16];
    crate::lock::random_bytes(&mut b).map_err(|e| anyhow!("cannot get random bytes: {e}"))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// What the lease's watchers have learnt about the session and our node.
#[derive(Default)]
struct Health {
    /// Why the lock is certainly gone, once known.
    lost: Option<String>,
    /// When the client noticed it was cut off from the ensemble, while it is.
    disconnected_at: Option<Instant>,
}

/// A held lock: our node in the lock's directory, alive as long as the session is.
struct ZkLease {
    session: Arc<Session>,
    path: String,
    token: Token,
    health: Arc<Mutex<Health>>,
    /// How long after noticing a disconnection the session may have expired on the server.
    grace: Duration,
    poll: Duration,
    /// When `renew` last ran: a long gap means this process was stopped.
    last_renewal: Instant,
    watchers: Vec<tokio::task::JoinHandle<()>>,
}

impl ZkLease {
    /// Starts watching the session and, through `watcher` (armed on our node before the lease
    /// exists, so that its removal at release is certain to precede the delete), our node.
    fn start(
        session: Arc<Session>,
        dir: &str,
        node: &str,
        ttl: Duration,
        watcher: zk::OneshotWatcher,
    ) -> ZkLease {
        let client = session.client().clone();
        let timeout = client.session_timeout();
        // The server expires the session `timeout` after it last heard from us. The client declares
        // the connection lost after hearing nothing for 2/5 of the timeout (it pings well within
        // that), so when it reports a disconnection we last heard from the server at most 2/5 of
        // the timeout before: the session is safe for 3/5 of the timeout after the report.
        let grace = timeout * 3 / 5;
        let health = Arc::new(Mutex::new(Health::default()));
        let path = format!("{dir}/{node}");
        let mut states = client.state_watcher();
        let state_health = health.clone();
        let state_watcher = session.runtime.spawn(async move {
            // Ends with the session (a terminal state) or when the lease aborts it.
            loop {
                let state = states.changed().await;
                let mut h = lock(&state_health);
                match state {
                    zk::SessionState::Disconnected => {
                        h.disconnected_at.get_or_insert_with(Instant::now);
                    }
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        h.disconnected_at = None;
                    }
                    terminal => {
                        h.lost.get_or_insert_with(|| {
                            format!("the ZooKeeper session ended ({terminal})")
                        });
                        return;
                    }
                }
            }
        });
        let node_health = health.clone();
        let node_path = path.clone();
        let node_watcher = session.runtime.spawn(async move {
            let gone = |why: String| {
                lock(&node_health).lost.get_or_insert(why);
            };
            // Ends when the node goes or the session ends, or when the lease aborts it.
            let mut armed = Some(watcher);
            loop {
                let watcher = match armed.take() {
                    Some(watcher) => watcher,
                    None => match client.get_and_watch_data(&node_path).await {
                        Ok((_, _, watcher)) => watcher,
                        Err(zk::Error::NoNode) => {
                            return gone(format!(
                                "its node {node_path} was deleted (dlock release --force?)"
                            ))
                        }
                        Err(
                            e @ (zk::Error::SessionExpired
                            | zk::Error::ClientClosed
                            | zk::Error::AuthFailed),
                        ) => return gone(format!("the ZooKeeper session ended ({e})")),
                        // Connection loss: the request is retried once the client reconnects.
                        Err(_) => {
                            tokio::time::sleep(CANCEL_POLL).await;
                            continue;
                        }
                    },
                };
                let event = watcher.changed().await;
                match event.event_type {
                    zk::EventType::NodeDeleted => {
                        return gone(format!(
                            "its node {node_path} was deleted (dlock release --force?)"
                        ))
                    }
                    zk::EventType::Session if is_terminal(event.session_state) => {
                        return gone(format!(
                            "the ZooKeeper session ended ({})",
                            event.session_state
                        ))
                    }
                    // A data change (nobody else writes our node): watch again.
                    _ => {}
                }
            }
        });
        ZkLease {
            path,
            token: 0,
            health,
            grace,
            // Well inside the grace, so a renewal that comes late means a stopped process.
            poll: (ttl / 10)
                .min(grace / 4)
                .min(MAX_POLL)
                .max(Duration::from_millis(10)),
            last_renewal: Instant::now(),
            watchers: vec![state_watcher, node_watcher],
            session,
        }
    }
}

impl Lease for ZkLease {
    fn token(&self) -> Token {
        self.token
    }

    fn renew(&mut self) -> Renewal {
        let mut h = lock(&self.health);
        // A process stopped (SIGSTOP, a frozen VM) sends no pings and learns nothing while stopped:
        // the server may have expired the session meanwhile, and the client only finds out later.
        let now = Instant::now();
        let gap = now.saturating_duration_since(self.last_renewal);
        self.last_renewal = now;
        if gap >= self.grace && h.lost.is_none() {
            h.lost = Some(format!(
                "dlock did not run for {}: the ZooKeeper session may have expired meanwhile",
                humantime::format_duration(Duration::from_millis(gap.as_millis() as u64))
            ));
        }
        let mut unconfirmed = None;
        if let Some(at) = h.disconnected_at {
            let cut_off = at.elapsed();
            if cut_off >= self.grace && h.lost.is_none() {
                // Remembered, so that release does not wait on a server that has gone silent.
                h.lost = Some(format!(
                    "cut off from ZooKeeper at {} for {}: the session may have expired",
                    self.session.hosts,
                    humantime::format_duration(Duration::from_millis(cut_off.as_millis() as u64))
                ));
            }
            unconfirmed = Some(Renewal::Unconfirmed {
                next: self.poll,
                holds_for: self.grace.saturating_sub(cut_off),
                why: format!(
                    "cut off from ZooKeeper at {} for {}",
                    self.session.hosts,
                    humantime::format_duration(Duration::from_millis(cut_off.as_millis() as u64))
                ),
            });
        }
        match &h.lost {
            Some(why) => Renewal::Lost(why.clone()),
            None => unconfirmed.unwrap_or(Renewal::Held { next: self.poll }),
        }
    }

    fn release(mut self: Box<Self>) -> anyhow::Result<Released> {
        let watchers: Vec<_> = self.watchers.drain(..).collect();
        if let Some(why) = lock(&self.health).lost.clone() {
            // Already gone, or going with a session that is over: nothing to wait for.
            for w in watchers {
                w.abort();
            }
            return Ok(Released::Lost(why));
        }
        // Once a watcher task has ended, its dropped watch has queued its removal ahead of our
        // delete: the deletion then notifies only the next waiter, not ourselves.
        self.session.runtime.block_on(async {
            for w in watchers {
                w.abort();
                let _ = w.await;
            }
        });
        // The last user of the session closes it right behind the delete: one round trip, and one
        // write to the server's log, for both.
        let closing = Arc::get_mut(&mut self.session).and_then(|s| s.client.take());
        let session = &self.session;
        let result = session.runtime.block_on(async {
            let Some(client) = closing else {
                let delete = session.client().delete(&self.path, None);
                return tokio::time::timeout(CLEANUP_TIMEOUT, delete).await;
            };
            let mut states = client.state_watcher();
            // The client sends a request when the call is made, not when its future is polled:
            // dropping the last client right after queues the close behind the delete.
            let delete = client.delete(&self.path, None);
            drop(client);
            let result = tokio::time::timeout(CLEANUP_TIMEOUT, delete).await;
            let _ = tokio::time::timeout(CLEANUP_TIMEOUT, ended(&mut states)).await;
            result
        });
        match result {
            Ok(Ok(())) => Ok(Released::Held),
            // Only the server deletes a holder's node but its owner: when its session expired, or
            // for `dlock release --force`.
            Ok(Err(zk::Error::NoNode)) => Ok(Released::Lost(format!(
                "its node {} was gone (deleted by `dlock release --force`, or its session expired)",
                self.path
            ))),
            Ok(Err(e)) => Err(self
                .session
                .fail(e, &format!("cannot delete {}", self.path))),
            Err(_) => Err(anyhow!(
                "ZooKeeper at {} did not answer within {}; {} goes when the session does",
                self.session.hosts,
                humantime::format_duration(CLEANUP_TIMEOUT),
                self.path
            )),
        }
    }
}

impl Drop for ZkLease {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}

impl Backend for ZkBackend {
    fn location(&self) -> String {
        self.url.location()
    }

    /// A wait looks at the cancellation every `CANCEL_POLL`.
    fn polls_while_waiting(&self) -> bool {
        true
    }

    /// The node of a busy attempt stays queued (`Parked`) whatever `then_wait` says: without a
    /// wait, dlock ends and its session with it, which removes the node.
    fn try_acquire(&self, request: &LockRequest, then_wait: bool) -> anyhow::Result<Attempt> {
        let outcome = match self.attempt(request, None) {
            // The session ended under the first try of a wait (the ensemble went away while it
            // queued): the wait that follows opens a new session and queues again.
            Err(_) if then_wait && self.session_is_over() => return Ok(Attempt::Busy(vec![])),
            outcome => outcome?,
        };
        match outcome {
            Outcome::Acquired(lease) => Ok(Attempt::Acquired(Box::new(lease))),
            Outcome::Busy(holders, parked) => {
                *lock(&self.parked) = Some(parked);
                Ok(Attempt::Busy(holders))
            }
            Outcome::Cancelled => Ok(Attempt::Busy(vec![])),
        }
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> anyhow::Result<Option<Box<dyn Lease>>> {
        match self.attempt(request, Some(waiting))? {
            Outcome::Acquired(lease) => Ok(Some(Box::new(lease))),
            Outcome::Busy(..) | Outcome::Cancelled => Ok(None),
        }
    }

    fn status(&self, name: &LockName) -> anyhow::Result<LockStatus> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        self.status_of(&session, name)
    }

    fn list(&self, prefix: &str) -> anyhow::Result<Listing> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        let client = session.client();
        let dirs = match session
            .runtime
            .block_on(retrying(|| client.list_children(&session.root)))
        {
            Ok(dirs) => dirs,
            Err(zk::Error::NoNode) => vec![],
            Err(e) => return Err(session.fail(e, &format!("cannot list {}", session.root))),
        };
        let mut held = Vec::new();
        for dir in dirs {
            let Some(name) = lock_name_of(&dir) else {
                continue;
            };
            if !name.as_str().starts_with(prefix) {
                continue;
            }
            let status = self.status_of(&session, &name)?;
            if !status.holders.is_empty() {
                held.push(status);
            }
        }
        held.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(held.into())
    }

    fn force_release(&self, name: &LockName) -> anyhow::Result<Vec<Holder>> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        let dir = session.dir(name);
        let client = session.client();
        session.runtime.block_on(async {
            let owners = holders(&session, &dir, None).await?;
            let mut removed = Vec::new();
            for (node, holder) in owners {
                let path = format!("{dir}/{node}");
                match retrying(|| client.delete(&path, None)).await {
                    // Gone already: released by its holder meanwhile, which is what we wanted.
                    Ok(()) | Err(zk::Error::NoNode) => removed.push(holder),
                    Err(e) => {
                        return Err(session.fail(e, &format!("cannot delete {path}")))
                            .with_context(|| format!("cannot release lock {:?}", name.as_str()))
                    }
                }
            }
            Ok(removed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    #[test]
    fn urls_parse_hosts_credentials_and_chroot() {
        let url = ZkUrl::parse("zk://alice:s%40cret@h1:2181,h2,[::1]:2182/apps/x/").unwrap();
        assert_eq!(url.credentials, Some(("alice".into(), "s@cret".into())));
        assert_eq!(url.hosts, ["h1:2181", "h2:2181", "[::1]:2182"]);
        assert_eq!(url.chroot, "/apps/x");
        assert_eq!(url.location(), "zk://h1:2181,h2:2181,[::1]:2182/apps/x");
        assert_eq!(ZkUrl::parse("zk://h:1/").unwrap().chroot, "");
    }

    #[test]
    fn malformed_urls_are_refused_without_showing_the_password() {
        for bad in [
            "redis://h:1",
            "zk://",
            "zk://h:notaport",
            "zk://h:0",
            "zk://h1,,h2",
            "zk://h:1/a//b",
            "zk://h:1/a/../b",
            "zk://user@h:1",
            "zk://u:p%zz@h:1",
        ] {
            assert!(ZkUrl::parse(bad).is_err(), "{bad}");
        }
        let err = ZkUrl::parse("zk://bob:hunter2@h:x").unwrap_err();
        assert!(!format!("{err:#}").contains("hunter2"), "{err:#}");
    }

    #[test]
    fn every_name_is_one_znode_and_names_round_trip() {
        assert_eq!(node_name(&name("nightly-backup")), "nightly-backup");
        assert_eq!(node_name(&name("a/b")), "a%2Fb");
        assert_eq!(node_name(&name("..")), "%2E.");
        assert_eq!(node_name(&name(".")), "%2E");
        assert_eq!(node_name(&name("100%")), "100%25");
        assert_eq!(node_name(&name("zookeeper")), "zookeeper");
        assert_eq!(node_name(&name("\u{e000}x")), "%EE%80%80x");
        assert_eq!(node_name(&name("😀")), "%F0%9F%98%80");
        for n in [
            "a/b/../c",
            "../x",
            "über ✓",
            "%2F",
            ".hidden",
            "x\u{fff5}",
            "a😀\u{10ffff}",
        ] {
            let node = node_name(&name(n));
            assert!(!node.contains('/') && node != "." && node != "..", "{node}");
            assert_eq!(lock_name_of(&node), Some(name(n)));
        }
        assert_eq!(lock_name_of("a/b"), None);
        assert_eq!(lock_name_of("%2f"), None, "not the canonical spelling");
    }

    fn q(names: &[&str]) -> Vec<Child> {
        queue(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn children_sort_by_sequence_and_unknown_kinds_count_as_exclusive() {
        let children = q(&[
            "_c_b-__READ__0000000003",
            "_c_a-lock-0000000001",
            "not-a-lock-node",
            "x-12345-0000000002",
            "_c_c-__WRIT__0000000004",
            "_c_d-__SEAT__0000000005",
        ]);
        let kinds: Vec<(i64, Kind)> = children.iter().map(|c| (c.sequence, c.kind)).collect();
        assert_eq!(
            kinds,
            [
                (1, Kind::Exclusive),
                (2, Kind::Exclusive),
                (3, Kind::Shared),
                (4, Kind::Exclusive),
                (5, Kind::Seat)
            ]
        );
    }

    #[test]
    fn exclusive_waiters_watch_only_their_predecessor() {
        let children = q(&[
            "a-lock-0000000001",
            "b-lock-0000000002",
            "c-lock-0000000003",
        ]);
        assert_eq!(verdict(&children, 0, 1), Verdict::Owns);
        assert_eq!(
            verdict(&children, 1, 1),
            Verdict::Watch("a-lock-0000000001".into())
        );
        assert_eq!(
            verdict(&children, 2, 1),
            Verdict::Watch("b-lock-0000000002".into())
        );
    }

    #[test]
    fn readers_share_until_a_writer_queues_and_writers_wait_for_readers() {
        let children = q(&[
            "r1-__READ__0000000001",
            "r2-__READ__0000000002",
            "w-lock-0000000003",
            "r3-__READ__0000000004",
        ]);
        assert_eq!(owners(&children, |_| 1), [0, 1]);
        assert_eq!(
            verdict(&children, 2, 1),
            Verdict::Watch("r2-__READ__0000000002".into())
        );
        assert_eq!(
            verdict(&children, 3, 1),
            Verdict::Watch("w-lock-0000000003".into())
        );
    }

    #[test]
    fn seats_admit_the_first_n_alongside_readers() {
        let children = q(&[
            "s1-__SEAT__0000000001",
            "r-__READ__0000000002",
            "s2-__SEAT__0000000003",
            "s3-__SEAT__0000000004",
        ]);
        assert_eq!(owners(&children, |_| 2), [0, 1, 2]);
        assert_eq!(verdict(&children, 3, 2), Verdict::WatchChildren);
        let behind_writer = q(&["w-lock-0000000001", "s-__SEAT__0000000002"]);
        assert_eq!(
            verdict(&behind_writer, 1, 5),
            Verdict::Watch("w-lock-0000000001".into())
        );
    }

    #[test]
    fn holder_data_round_trips_and_foreign_nodes_still_show() {
        let data = serde_json::to_vec(&NodeData {
            dlock: 1,
            mode: "limit:3".into(),
            host: "box".into(),
            pid: 7,
            owner: "ab".into(),
            since: 1_700_000_000,
        })
        .unwrap();
        let stat = zk::Stat {
            czxid: 42,
            mzxid: 42,
            pzxid: 42,
            ctime: 1_700_000_000_500,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 1,
            data_length: 0,
            num_children: 0,
        };
        let child = Child::parse("_c_x-__SEAT__0000000001").unwrap();
        let h = holder_of(&child, &data, &stat);
        assert_eq!(
            (h.mode, h.pid, h.token),
            (Mode::Limit(3), Some(7), Some(42))
        );
        let curator = Child::parse("_c_y-lock-0000000002").unwrap();
        let h = holder_of(&curator, b"10.1.2.3", &stat);
        assert_eq!(
            (h.mode, h.host.as_deref(), h.token, h.pid),
            (Mode::Exclusive, Some("10.1.2.3"), Some(42), None)
        );
        assert!(h.owner.contains("not dlock"));
        // Written by another client: out of range, or a mode the node's name contradicts.
        let exclusive = Child::parse("_c_z-lock-0000000003").unwrap();
        for forged in [
            r#"{"dlock":1,"mode":"exclusive","host":"h","pid":2,"owner":"ab","since":99999999999999}"#,
            r#"{"dlock":1,"mode":"exclusive","host":"h","pid":2,"owner":"ab","since":1e300}"#,
            r#"{"dlock":1,"mode":"exclusive","host":"h","pid":-2,"owner":"ab","since":1}"#,
            r#"{"dlock":1,"mode":"shared","host":"h","pid":2,"owner":"ab","since":1}"#,
            r#"{"dlock":1,"mode":"exclusive","host":"\u001b[2J","pid":2,"owner":"ab","since":1}"#,
            r#"{"dlock":"x"}"#,
        ] {
            let h = holder_of(&exclusive, forged.as_bytes(), &stat);
            assert_eq!(h.mode, Mode::Exclusive, "{forged}");
            assert!(h.describe().contains("unreadable record"), "{forged}");
            assert!(!h.describe().contains('\u{1b}'), "{forged}");
        }
        let stat = zk::Stat {
            ctime: i64::MAX,
            czxid: -1,
            ..stat
        };
        let h = holder_of(&curator, b"\x1b[2J", &stat);
        assert_eq!((h.host, h.since, h.token), (None, None, None));
    }

    proptest::proptest! {
        /// Hostile names: any name is exactly one child of /dlock (no `/`, never `.` or `..`),
        /// and maps back to itself, so it can neither climb out of the subtree nor share a node.
        #[test]
        fn any_name_is_one_node_inside_the_dlock_subtree(
            raw in "\\PC{1,120}|[\\u{10000}-\\u{10ffff}a-z/.%\\u{e000}\\u{fff0}-\\u{ffff}]{1,60}"
        ) {
            let Ok(lock) = LockName::new(&raw) else { return Ok(()) };
            let node = node_name(&lock);
            proptest::prop_assert!(!node.is_empty() && !node.contains('/'));
            proptest::prop_assert!(node.chars().all(allowed), "ZooKeeper refuses {:?}", node);
            proptest::prop_assert!(node != "." && node != "..");
            proptest::prop_assert_eq!(lock_name_of(&node), Some(lock));
        }

        /// URLs from the command line: parsed or refused, never a panic.
        #[test]
        fn any_url_text_parses_or_is_refused(text in "(zk://)?\\PC{0,60}") {
            let _ = ZkUrl::parse(&text);
        }
    }
}
