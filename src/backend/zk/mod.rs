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

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{anyhow, Context};
use zookeeper_client as zk;

use super::{
    Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Released, Renewal, Waiting,
};
use crate::exit::{FailWith, Failure};
use crate::interrupt;
use crate::lock::{Holder, LockName, LockRequest, Mode, Token};
use address::ZkUrl;
use lease::ZkLease;
use naming::{lock_name_of, uuid};
use recipe::{kind_of, queue, verdict, Verdict};
use record::{holders, NodeData};
use session::{is_connection_loss, is_terminal, remove, retrying, Session};

mod address;
mod lease;
mod naming;
mod recipe;
mod record;
mod session;

/// Session timeout asked for by `status`, `list` and `release`, which hold nothing.
const QUERY_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a blocked call looks at `Waiting::is_cancelled` (the supervisor asks for ~100ms).
const CANCEL_POLL: Duration = Duration::from_millis(50);
/// Bound on retries of one step that keeps meeting connection losses or a vanishing directory.
const MAX_RETRIES: u32 = 20;
/// How long cleanup on the way out (deleting a node, closing the session) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);
pub struct ZkBackend {
    url: ZkUrl,
    connect_timeout: Duration,
    /// Connected on first use, with the session timeout of the first request (`--ttl`).
    session: Mutex<Option<Arc<Session>>>,
    parked: Mutex<Option<Parked>>,
}

impl ZkBackend {
    pub fn open(config: &BackendConfig) -> anyhow::Result<ZkBackend> {
        Ok(ZkBackend {
            url: ZkUrl::from_urls(&config.urls)?,
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
        let (kind, limit) = kind_of(request.mode);
        let data = NodeData::of(&request)?;
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
