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
//!   other), with a `__WRIT__` companion made in the same request for Curator's read-write lock
//!   (recipe.rs: the pair is one holder), `__READ__` for shared ones (Curator's read lock; Curator's
//!   `__WRIT__` write nodes count as exclusive) and `__SEAT__` for `--limit N` (with a `__READ__`
//!   companion, so that Curator's write lock waits for seats too). A child with an unknown kind is
//!   taken to be exclusive, so a foreign recipe can only make dlock wait, never let two holders in.
//! - Node data: JSON describing the holder (host, pid, owner id, mode, since) for status and list.
//! - `/dlock/.last-run/NAME` and `/dlock/.last-success/NAME` (persistent): the record of the lock's
//!   last run and last success (runs.rs). No lock name maps to a `.`-child of `/dlock`.
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
//!
//! Here: `ZkBackend`, which opens sessions and answers the `Backend` calls. Beside it: `address`
//! (the zk:// URL), `naming` (znode names), `recipe` (who owns, whom a waiter watches), `record`
//! (what a node says), `semaphores` (other clients' semaphores, for status), `session` (the
//! connection and its failures), `ensemble_clock` (the ensemble's time), `acquisition` (a place in
//! the queue), `wait` (waiting for a turn), `lease` (a held lock), `kept` (`--min-hold`'s kept
//! nodes) and `runs` (the last run and last success).

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use dlock_core::error;
use dlock_core::error::{Context, FailAs};
use zookeeper_client as zk;

use acquisition::{Acquisition, Outcome};
use address::ZkUrl;
use dlock_core::backend::stop::Stop;
use dlock_core::backend::{Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting};
use dlock_core::lock::{Ending, Holder, LastRuns, LockName, LockRequest};
use dlock_sys::sync::lock;
use naming::lock_name_of;
use recipe::companion_in;
use record::{holders, holders_and_waiters};
use session::Session;
use wait::watched;

mod acquisition;
mod address;
mod ensemble_clock;
mod frames;
mod group;
mod kept;
mod lease;
mod naming;
mod nodes;
mod recipe;
mod record;
mod runs;
mod semaphores;
mod session;
/// The programs the tests run, from the list scripts/test installs (shared with tests/).
#[cfg(test)]
#[path = "../../../tests/support/programs.rs"]
mod test_programs;
mod wait;

/// Session timeout asked for by `status`, `list` and `release`, which hold nothing.
const QUERY_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a blocked call looks at `Waiting::is_cancelled` (within `backend::CANCEL_CHECK`).
const CANCEL_POLL: Duration = Duration::from_millis(50);
/// Bound on retries of one step that keeps meeting connection losses or a vanishing directory.
const MAX_RETRIES: u32 = 20;
/// How long cleanup on the way out (deleting a node, closing the session) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Locks on a ZooKeeper ensemble, through one session opened on first use.
pub struct ZkBackend {
    url: ZkUrl,
    connect_timeout: Duration,
    /// A stop signal caught while connecting or waiting (the caller's; see `BackendConfig`).
    stop: Stop,
    /// Connected on first use, with the session timeout of the first request (`--ttl`).
    session: Mutex<Option<Arc<Session>>>,
}

impl ZkBackend {
    pub fn open(config: &BackendConfig) -> error::Result<ZkBackend> {
        Ok(ZkBackend {
            url: ZkUrl::from_urls(&config.urls)?,
            connect_timeout: config.connect_timeout,
            stop: config.stop.clone(),
            session: Mutex::new(None),
        })
    }

    fn session(&self, timeout: Duration) -> error::Result<Arc<Session>> {
        self.session_within(timeout, self.connect_timeout)
    }

    /// `session`, connecting within `connect_timeout`.
    fn session_within(
        &self,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> error::Result<Arc<Session>> {
        let mut slot = lock(&self.session);
        if let Some(session) = slot.as_ref() {
            return Ok(session.clone());
        }
        let session = Arc::new(Session::open(
            &self.url,
            timeout,
            connect_timeout,
            &self.stop,
        )?);
        *slot = Some(session.clone());
        Ok(session)
    }

    /// The session of a waiter. A server at its cap of connections from one host (it ends each
    /// connection past it before answering) is busy, not unreachable: tried again, saying so,
    /// while the wait lasts, each try within what is left of it, and so is any failure after one
    /// such answer (a try cut short by the wait's end, a slot taken by another first). When the
    /// wait ends, the error names the cap.
    fn waiters_session(&self, timeout: Duration, waiting: &Waiting) -> error::Result<Arc<Session>> {
        let mut full: Option<error::Error> = None;
        // Each turn takes a connect timeout or what is left of the wait, whichever is shorter,
        // and the wait's end or a stop signal ends the loop.
        loop {
            let ended = frames::ended_unanswered();
            let failed = match self.session_within(timeout, waiting.slice(self.connect_timeout)) {
                Ok(session) => return Ok(session),
                Err(e) => e,
            };
            if frames::ended_unanswered() > ended {
                full = Some(failed);
            } else if full.is_none() {
                return Err(failed);
            }
            let Some(busy) = &full else {
                continue;
            };
            if session::stopped(&self.stop, Some(waiting)) {
                return Err(full.unwrap_or_else(|| error!("interrupted")));
            }
            waiting.unreachable(&format!("{busy:#}"));
            std::thread::sleep(waiting.slice(CANCEL_POLL));
        }
    }

    /// One acquisition; a waiter whose session expires while it waits (it holds nothing yet)
    /// opens a new session once the ensemble answers and queues again, at the back of the line:
    /// its node went with the old session. With a lease of another name on that session, the
    /// expiry has taken that lock too, and the acquisition fails.
    fn attempt(&self, request: &LockRequest, waiting: Option<&Waiting>) -> error::Result<Outcome> {
        let mut session = match waiting {
            Some(waiting) => self.waiters_session(request.ttl, waiting)?,
            None => self.session(request.ttl)?,
        };
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
            match Session::reopen(
                &self.url,
                request.ttl,
                self.connect_timeout,
                &self.stop,
                waiting,
            )? {
                Some(fresh) => {
                    let fresh = Arc::new(fresh);
                    *lock(&self.session) = Some(fresh.clone());
                    session = fresh;
                }
                None if self.stop.requested() => return Err(error!("interrupted")),
                None => return Ok(Outcome::Cancelled),
            }
        }
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
    ) -> error::Result<Outcome> {
        let ctx = || {
            format!(
                "lock {:?} on ZooKeeper at {}",
                request.name.as_str(),
                session.hosts
            )
        };
        let acquisition = Acquisition::new(session.clone(), request.clone())?;
        let waiting = waiting.cloned();
        // Run on the runtime's worker, beside the session's own task: a watch event then reaches
        // the waiting code, and its next request the connection, without hopping threads.
        let watch = waiting.clone();
        let task = session
            .runtime
            .spawn(async move { acquisition.run(waiting.as_ref()).await });
        match watched(session, task, &self.stop, watch.as_ref()) {
            Some(Ok(outcome)) => outcome.with_context(ctx),
            Some(Err(e)) => Err(error!("the acquisition task failed: {e}")).with_context(ctx),
            // The server lied in a reply (frames.rs): the wait ends, and says so.
            None if frames::lie().is_some() => {
                Err(error!("{}", frames::lie().unwrap_or_default())).unavailable()
            }
            None if self.stop.requested() => Err(error!("interrupted")),
            None => Ok(Outcome::Cancelled),
        }
    }

    fn status_of(&self, session: &Session, name: &LockName) -> error::Result<LockStatus> {
        let dir = session.dir(name);
        let (holders, waiters) = session
            .runtime
            .block_on(holders_and_waiters(session, &dir))
            .with_context(|| format!("cannot read lock {:?}", name.as_str()))?;
        Ok(LockStatus {
            name: name.clone(),
            holders,
            waiters: Some(waiters),
            // The node's full path (chroot included) on the ensemble, without credentials.
            location: format!("zk://{}{dir}", self.url.hosts()),
        })
    }
}

impl Backend for ZkBackend {
    fn location(&self) -> String {
        self.url.location()
    }

    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt> {
        match self.attempt(request, None)? {
            Outcome::Acquired(lease) => Ok(Attempt::Acquired(Box::new(lease))),
            Outcome::Busy(holders) => Ok(Attempt::Busy(holders)),
            Outcome::Cancelled => Ok(Attempt::Busy(vec![])),
        }
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>> {
        match self.attempt(request, Some(waiting))? {
            Outcome::Acquired(lease) => Ok(Some(Box::new(lease))),
            Outcome::Busy(_) | Outcome::Cancelled => Ok(None),
        }
    }

    fn status(&self, name: &LockName) -> error::Result<LockStatus> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        self.status_of(&session, name)
    }

    fn list(&self, prefix: &str) -> error::Result<Listing> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        let dirs = session.runtime.block_on(session.children(&session.root))?;
        let mut held = Vec::new();
        for dir in &dirs {
            let Some(name) = lock_name_of(dir) else {
                continue;
            };
            // Shown as the waiters of the semaphore's own lock (semaphores.rs).
            if semaphores::is_kazoo_inner_lock(dir, &dirs) {
                continue;
            }
            if !name.as_str().starts_with(prefix) {
                continue;
            }
            let status = self.status_of(&session, &name)?;
            if !status.holders.is_empty() {
                held.push(status);
            }
        }
        held.sort_by(|a, b| a.name.cmp(&b.name));
        // Records of runs nobody wrote for long enough go here (runs.rs).
        session.runtime.block_on(runs::expire(&session));
        Ok(held.into())
    }

    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        session.runtime.block_on(runs::read(&session, name))
    }

    fn list_runs(&self, prefix: &str) -> error::Result<dlock_core::backend::RunsFound> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        // Expired records go first, as in `list`, so that none is shown.
        session.runtime.block_on(runs::expire(&session));
        let names = session.runtime.block_on(runs::names(&session))?;
        dlock_core::backend::runs_of(prefix, names, |name| self.last_runs(name))
    }

    fn force_release(&self, name: &LockName) -> error::Result<Vec<Holder>> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        let dir = session.dir(name);
        let client = session.client();
        session.runtime.block_on(async {
            let owners = holders(&session, &dir, None).await?;
            // Listed after the owners were judged: a pair's companion (recipe.rs) is there if its
            // first node was (both go together).
            let listing = match owners.is_empty() {
                true => Vec::new(),
                false => session.children(&dir).await?,
            };
            // The run of the holder it removes ends `forced` (runs.rs), in the same multi.
            let mut last_run = runs::last_run(&session, name).await;
            let mut removed = Vec::new();
            for (node, holder) in owners {
                let path = format!("{dir}/{node}");
                let mut paths = vec![path.clone()];
                paths.extend(companion_in(&listing, &node).map(|c| format!("{dir}/{c}")));
                let ends = last_run.take_if(|(run, _)| {
                    run.ending.is_none()
                        && run.owner == holder.owner
                        && run.token.is_some()
                        && run.token == holder.token
                });
                let forced = match ends {
                    Some((run, version)) => {
                        let record = run.ended(Ending::Forced, SystemTime::now()).record();
                        let mut multi = client.new_multi_writer();
                        let nodes = runs::RunNodes::of(&session, name);
                        multi
                            .add_set_data(&nodes.last_run, record.as_bytes(), Some(version))
                            .and_then(|()| paths.iter().try_for_each(|p| multi.add_delete(p, None)))
                            .map_err(|e| session.fail(e, &format!("cannot delete {path}")))?;
                        match multi.commit().await {
                            Ok(_) => Some(Ok(())),
                            // The record could not be written: the holder goes all the same.
                            Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) => None,
                            Err(e) => Some(Err(zk::Error::from(e))),
                        }
                    }
                    None => None,
                };
                // Gone already (`Ok` too): released by its holder meanwhile, as we wanted.
                let deleted = match forced {
                    Some(Err(zk::Error::NoNode)) | None => session.delete_together(&paths).await,
                    Some(result) => result,
                };
                match deleted {
                    Ok(()) | Err(zk::Error::NoNode) => removed.push(holder),
                    Err(e) => {
                        return Err(session.fail(e, &format!("cannot delete {path}")))
                            .with_context(|| format!("cannot release lock {:?}", name.as_str()))
                    }
                }
            }
            // And what `--min-hold` keeps (kept.rs), expired or not.
            for node in session.children(&dir).await? {
                if recipe::is_kept(&node) {
                    session.discard(&format!("{dir}/{node}")).await;
                }
            }
            Ok(removed)
        })
    }

    fn groups(&self) -> Option<&dyn dlock_core::backend::GroupRecords> {
        Some(self)
    }
}
