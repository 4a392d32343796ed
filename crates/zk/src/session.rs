//! The connection to the ensemble and how it fails: one ZooKeeper session on its own small runtime
//! (connect within `--connect-timeout`, reopen after an expiry while waiting, close on the way
//! out), the ACLs dlock's nodes get, and what a failed call means for the user (exit 69 when the
//! ensemble cannot be reached or used) and whether it may be sent again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dlock_core::error;
use dlock_core::error::{Context, FailAs};
use zookeeper_client as zk;

use super::address::ZkUrl;
use super::frames;
use super::naming::{node_name, ROOT};
use super::{CANCEL_POLL, CLEANUP_TIMEOUT, MAX_RETRIES};
use dlock_core::backend::stop::Stop;
use dlock_core::backend::Waiting;
use dlock_core::lock::LockName;
use dlock_sys::blocking;

/// A request lost with its connection: the client fails those in flight with ConnectionLoss, or
/// with the I/O error that broke the connection (`Custom`). Either may be sent again once the
/// client has reconnected.
pub(super) fn is_connection_loss(e: &zk::Error) -> bool {
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
fn failure(e: zk::Error, doing: &str, hosts: &str) -> error::Error {
    let why = match e {
        _ if frames::lie().is_some() => frames::lie().unwrap_or_default().to_owned(),
        zk::Error::NoAuth => "not authorised: the node belongs to another ZooKeeper identity \
             (give zk://user:password@... to act as its owner)"
            .to_owned(),
        ref e => e.to_string(),
    };
    let result: error::Result<()> = Err(error!("{doing} on ZooKeeper at {hosts}: {why}"));
    let result = if is_unavailable(&e) {
        result.unavailable()
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
pub(super) struct Session {
    pub(super) runtime: blocking::Runtime,
    /// `None` once closed: by the release of the last lease using it, or when dropped.
    pub(super) client: Option<zk::Client>,
    pub(super) hosts: String,
    pub(super) root: String,
    /// ACLs for the nodes dlock creates; see `Acls`.
    pub(super) acls: Acls,
    /// A request failed with "session expired" (see `fail`).
    expired: AtomicBool,
    /// A wait gave up on a server that did not answer in time (see `wait::watched`): closing the
    /// session on the way out waits at most `LEAVE_WITHIN`, not `CLEANUP_TIMEOUT`.
    hurried: AtomicBool,
}

/// With credentials, what dlock creates belongs to that identity (full rights) and everyone may read
/// it, so another identity can see a lock but neither break nor join it; `/dlock` itself also lets
/// everyone create, so each identity can make its own locks. Without credentials everything is open,
/// as with Curator's default. ZooKeeper checks a delete against the parent's ACL, so the protection
/// holds for locks whose directory an authenticated dlock created; a directory made without
/// credentials stays open to all.
pub(super) struct Acls {
    pub(super) root: Vec<zk::Acl>,
    pub(super) lock: Vec<zk::Acl>,
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
    pub(super) fn open(
        url: &ZkUrl,
        session_timeout: Duration,
        connect_timeout: Duration,
        stop: &Stop,
    ) -> error::Result<Session> {
        let hosts = url.hosts();
        let runtime = Session::runtime()?;
        let ended = frames::ended_unanswered();
        let client = runtime
            .block_on(connecting(
                url,
                session_timeout,
                connect_timeout,
                stop,
                None,
            ))
            .map_err(|e| {
                let within = dlock_core::text::duration(connect_timeout);
                if frames::ended_unanswered() > ended {
                    error!(
                        "ZooKeeper at {hosts} ended every connection before answering within \
                         {within}: it is at its cap of connections from one host \
                         (maxClientCnxns, 60 by default)"
                    )
                } else {
                    error!("cannot reach ZooKeeper at {hosts} within {within}: {e}")
                }
            })
            .unavailable()?;
        Ok(Session::with(url, runtime, client))
    }

    /// A new session for a waiter whose session expired while it waited: tries until the ensemble
    /// answers, telling `waiting` meanwhile that it cannot be reached. `None` when the wait was
    /// cancelled or a stop signal caught first (`stop`).
    pub(super) fn reopen(
        url: &ZkUrl,
        session_timeout: Duration,
        connect_timeout: Duration,
        stop: &Stop,
        waiting: &Waiting,
    ) -> error::Result<Option<Session>> {
        let runtime = Session::runtime()?;
        // Each round ends at `connect_timeout` or at the cancellation, which ends the loop.
        loop {
            if stopped(stop, Some(waiting)) {
                return Ok(None);
            }
            let attempt = connecting(url, session_timeout, connect_timeout, stop, Some(waiting));
            match runtime.block_on(attempt) {
                Ok(client) => return Ok(Some(Session::with(url, runtime, client))),
                Err(e @ (zk::Error::AuthFailed | zk::Error::BadArguments(_))) => {
                    return Err(error!("cannot use ZooKeeper at {}: {e}", url.hosts()))
                        .unavailable()
                }
                Err(_) => {}
            }
        }
    }

    /// The threads the client runs on: its tokio runtime and async-io's I/O thread, none of
    /// which takes a signal.
    fn runtime() -> error::Result<blocking::Runtime> {
        start_the_io_thread();
        // One worker: the session's own task must run while every dlock thread is blocked elsewhere
        // (a current-thread runtime would only run it inside block_on).
        // The reply check's relays (frames.rs) are tokio sockets: I/O and time both enabled.
        blocking::runtime(Some("dlock-zk")).context("cannot start the ZooKeeper client's runtime")
    }

    fn with(url: &ZkUrl, runtime: blocking::Runtime, client: zk::Client) -> Session {
        Session {
            runtime,
            client: Some(client),
            hosts: url.hosts(),
            root: format!("{}/{ROOT}", url.chroot),
            acls: Acls::new(url.credentials.is_some()),
            expired: AtomicBool::new(false),
            hurried: AtomicBool::new(false),
        }
    }

    /// Closes the session within `LEAVE_WITHIN` from now on (see `hurried`).
    pub(super) fn hurry(&self) {
        self.hurried.store(true, Ordering::SeqCst);
    }

    /// Whether the session is over for good (expired, closed, refused).
    pub(super) fn is_over(&self) -> bool {
        self.expired.load(Ordering::SeqCst)
            || self.client.as_ref().is_none_or(|c| is_terminal(c.state()))
    }

    pub(super) fn client(&self) -> &zk::Client {
        self.client
            .as_ref()
            .expect("only the last user of a session closes it, so its users find it open")
    }

    pub(super) fn dir(&self, name: &LockName) -> String {
        format!("{}/{}", self.root, node_name(name))
    }

    /// The children of `path`, none when it does not exist.
    pub(super) async fn children(&self, path: &str) -> error::Result<Vec<String>> {
        match retrying(|| self.client().list_children(path)).await {
            Ok(children) => Ok(children),
            Err(zk::Error::NoNode) => Ok(vec![]),
            Err(e) => Err(self.fail(e, &format!("cannot list {path}"))),
        }
    }

    /// Deletes a lock node on the way out, waiting at most `CLEANUP_TIMEOUT`: a node gone already
    /// is fine, and one this cannot delete goes with the session, which ends with dlock. The lock's
    /// directory is a container node: the server deletes it once it is empty, with a version
    /// check, so that never races a new acquirer, which recreates the directory if it finds none.
    pub(super) async fn discard(&self, path: &str) {
        let _ = tokio::time::timeout(CLEANUP_TIMEOUT, self.client().delete(path, None)).await;
    }

    /// `discard` for a holder's nodes (see `delete_together`).
    pub(super) async fn discard_all(&self, paths: &[String]) {
        let _ = tokio::time::timeout(CLEANUP_TIMEOUT, self.delete_together(paths)).await;
    }

    /// Deletes a holder's nodes, its node and its companion (recipe.rs), in one multi request: no
    /// client sees one without the other, and a waiter watching either wakes once. Where one is
    /// gone already (the whole request then fails), the others are deleted one by one. A node
    /// already gone counts as deleted; after a connection loss the request is sent again.
    pub(super) async fn delete_together(&self, paths: &[String]) -> Result<(), zk::Error> {
        let client = self.client();
        let one = |path: &str| {
            let delete = client.delete(path, None);
            async move {
                match delete.await {
                    Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        };
        if let [path] = paths {
            return retrying(|| one(path)).await;
        }
        let together = retrying(|| {
            let mut writer = client.new_multi_writer();
            let added = paths.iter().try_for_each(|p| writer.add_delete(p, None));
            let commit = added.map(|()| writer.commit());
            async move { Ok(commit?.await?) }
        })
        .await;
        match together {
            Err(zk::Error::NoNode) => {
                for path in paths {
                    retrying(|| one(path)).await?;
                }
                Ok(())
            }
            result => result.map(|_| ()),
        }
    }

    pub(super) fn fail(&self, e: zk::Error, doing: &str) -> error::Error {
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
        let within = match self.hurried.load(Ordering::SeqCst) {
            true => dlock_core::backend::LEAVE_WITHIN,
            false => CLEANUP_TIMEOUT,
        };
        self.runtime.block_on(async {
            let _ = tokio::time::timeout(within, ended(&mut states)).await;
        });
    }
}

/// Waits for the session to reach its end (closed, expired, refused).
pub(super) async fn ended(states: &mut zk::StateWatcher) {
    // Bounded: a session passes through a handful of states at most before its end.
    for _ in 0..8 {
        if is_terminal(states.changed().await) {
            return;
        }
    }
}

pub(super) fn is_terminal(state: zk::SessionState) -> bool {
    matches!(
        state,
        zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
    )
}

/// `connect`, ended at once by a stop signal (`stop`) or, given a `waiting`, by its
/// cancellation (both as `ClientClosed`), which it meanwhile tells that the ensemble is unreachable.
async fn connecting(
    url: &ZkUrl,
    session_timeout: Duration,
    connect_timeout: Duration,
    stop: &Stop,
    waiting: Option<&Waiting>,
) -> Result<zk::Client, zk::Error> {
    let connected = cancellable(connect(url, session_timeout, connect_timeout), || {
        if stopped(stop, waiting) {
            return false;
        }
        if let Some(waiting) = waiting {
            waiting.unreachable(&format!(
                "cannot reach ZooKeeper at {} (the session expired: queueing again, at the back \
                 of the line, once it answers)",
                url.hosts()
            ));
        }
        true
    });
    connected.await.unwrap_or(Err(zk::Error::ClientClosed))
}

/// Connects, retrying until `connect_timeout` (the client alone gives up after the session timeout,
/// which may be shorter).
async fn connect(
    url: &ZkUrl,
    session_timeout: Duration,
    connect_timeout: Duration,
) -> Result<zk::Client, zk::Error> {
    let deadline = Instant::now() + connect_timeout;
    // Every reply is checked on its way to the client (frames.rs). (Binding a loopback port fails
    // only when the host has no loopback at all: as good as a connection refused.)
    let relays = frames::relay(url.host_list())
        .await
        .map_err(|_| zk::Error::ConnectionLoss)?;
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
        if frames::lie().is_some() {
            break;
        }
        match tokio::time::timeout(left, connector.connect(&relays)).await {
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

/// Retries an operation that met a connection loss: the client queues requests until it has
/// reconnected (or the session ends, which fails them for good).
pub(super) async fn retrying<T, F, Fut>(mut op: F) -> Result<T, zk::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, zk::Error>>,
{
    let mut tries = 0;
    loop {
        match op().await {
            // A server that lied is not asked again (frames.rs).
            Err(e) if is_connection_loss(&e) && tries < MAX_RETRIES && frames::lie().is_none() => {
                tries += 1
            }
            result => return result,
        }
    }
}

/// Whether a wait must end now: a stop signal was caught (`stop`, the caller's), or `waiting` (if
/// any) was cancelled.
pub(super) fn stopped(stop: &Stop, waiting: Option<&Waiting>) -> bool {
    stop.requested() || waiting.is_some_and(Waiting::is_cancelled)
}

/// Runs `work` to its end, asking `go_on` every `CANCEL_POLL` meanwhile (and once at the start):
/// `None` as soon as it says no.
pub(super) async fn cancellable<F: std::future::Future>(
    work: F,
    mut go_on: impl FnMut() -> bool,
) -> Option<F::Output> {
    tokio::pin!(work);
    let mut tick = tokio::time::interval(CANCEL_POLL);
    loop {
        tokio::select! {
            output = &mut work => return Some(output),
            _ = tick.tick() => {
                if !go_on() {
                    return None;
                }
            }
        }
    }
}

/// zookeeper-client does its I/O on async-io's thread, which async-io starts on first use from
/// the thread that uses it first, with that thread's signal mask (dlock's main thread unblocks the
/// stop signals while it connects). Started here first, with every signal blocked, so that it
/// never takes a signal meant for the supervisor: a SIGTERM or SIGCHLD it took was lost to dlock,
/// which then waited for ever for the command it had already seen end.
fn start_the_io_thread() {
    blocking::with_all_signals_blocked(|| async_io::block_on(async {}));
}
