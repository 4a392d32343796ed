//! A held ZooKeeper lock: the holder's node, alive as long as the session is. Two watcher tasks
//! learn when the session ends or the node is deleted; `renew` judges from them (and from how long
//! the client has been cut off, or dlock stopped) whether the lock may be someone else's now, and
//! `release` deletes the node, closing the session right behind it when nothing else uses it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_core::error;
use zookeeper_client as zk;

use super::recipe::kept_companion;
use super::record::kept_ran_out;
use super::runs::OurRun;
use super::session::{ended, is_terminal, Session};
use super::{CANCEL_POLL, CLEANUP_TIMEOUT};
use dlock_core::backend::{Lease, Released, Renewal};
use dlock_core::lock::{Ending, RunEnd, Token};
use dlock_sys::sync::lock;

/// Longest pause between the heartbeat's looks at the session.
const MAX_POLL: Duration = Duration::from_millis(200);

/// What the lease's watchers have learnt about the session and our node.
#[derive(Default)]
struct Health {
    /// Why the lock is certainly gone, once known.
    lost: Option<String>,
    /// When the client noticed it was cut off from the ensemble, while it is.
    disconnected_at: Option<Instant>,
}

/// A held lock: our node in the lock's directory, alive as long as the session is.
pub(super) struct ZkLease {
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
    /// `--min-hold`: the kept node (kept.rs) and when the min-hold ends on this machine's
    /// monotonic clock, after which the release deletes it.
    kept: Option<(String, Instant)>,
    /// Our node's companion (recipe.rs), watched and deleted with it: the pair is one holder.
    companion: Option<String>,
    /// This run's record (runs.rs), for the release to end (boxed: a lease is moved about).
    run: Option<Box<OurRun>>,
    /// The node that took our token at the grant, for a node that waited (acquisition.rs,
    /// `take_token`): it stays while we hold, for `status`, and goes at release.
    grant: Option<String>,
}

impl ZkLease {
    /// A lease whose lock a kept node keeps for `hold` from now (see kept.rs).
    pub(super) fn keeping(mut self, kept: Option<(String, Duration)>) -> ZkLease {
        self.kept = kept.map(|(path, hold)| (path, Instant::now() + hold));
        self
    }

    /// A lease held by a pair of nodes: the companion at `path` is watched through `watcher` (armed
    /// before the lease exists, as our node's is) and deleted with our node.
    pub(super) fn pairing(mut self, companion: Option<(String, zk::OneshotWatcher)>) -> ZkLease {
        if let Some((path, watcher)) = companion {
            let client = self.session.client().clone();
            let task = watch_node(client, path.clone(), watcher, self.health.clone());
            self.watchers.push(self.session.runtime.spawn(task));
            self.companion = Some(path);
        }
        self
    }

    /// A lease whose token the node at `grant` took (none: our node's creation did).
    pub(super) fn granted_beside(mut self, grant: Option<String>) -> ZkLease {
        self.grant = grant;
        self
    }

    /// A lease whose run the acquisition recorded as `run`.
    pub(super) fn recording(mut self, run: OurRun) -> ZkLease {
        self.run = Some(Box::new(run));
        self
    }

    /// Starts watching the session and, through `watcher` (armed on our node before the lease
    /// exists, so that its removal at release is certain to precede the delete), our node at
    /// `path`.
    pub(super) fn start(
        session: Arc<Session>,
        path: String,
        token: Token,
        ttl: Duration,
        watcher: zk::OneshotWatcher,
    ) -> ZkLease {
        let client = session.client().clone();
        let timeout = client.session_timeout();
        // The server expires the session `timeout` after it last heard from us. The client declares
        // the connection lost after hearing nothing for 2/5 of the timeout (it pings well within
        // that), looking every 1/20 of it, and its report reaches the lease's watcher a moment
        // later still: when the lease learns of a disconnection, we last heard from the server up
        // to 2/5 + 1/20 of the timeout before, and more on a loaded machine. The session is
        // counted safe for half the timeout after the report: 1/20 of it (100 ms at 2 s) is left
        // to stop the command before the server may expire the session.
        let grace = timeout / 2;
        let health = Arc::new(Mutex::new(Health::default()));
        let states = client.state_watcher();
        let state_watcher = session.runtime.spawn(watch_session(states, health.clone()));
        let node_watcher =
            session
                .runtime
                .spawn(watch_node(client, path.clone(), watcher, health.clone()));
        ZkLease {
            path,
            token,
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
            kept: None,
            companion: None,
            run: None,
            grant: None,
        }
    }
}

/// Keeps `health` up to date with the session's state. Ends with the session (a terminal state) or
/// when the lease aborts it.
async fn watch_session(mut states: zk::StateWatcher, health: Arc<Mutex<Health>>) {
    loop {
        let state = states.changed().await;
        let mut h = lock(&health);
        match state {
            zk::SessionState::Disconnected => {
                h.disconnected_at.get_or_insert_with(Instant::now);
            }
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                h.disconnected_at = None;
            }
            terminal => {
                h.lost.get_or_insert_with(|| session_ended(terminal));
                return;
            }
        }
    }
}

/// Tells `health` when our node at `path` goes, watching it through `watcher` first. Ends when the
/// node goes or the session ends, or when the lease aborts it.
async fn watch_node(
    client: zk::Client,
    path: String,
    watcher: zk::OneshotWatcher,
    health: Arc<Mutex<Health>>,
) {
    let gone = |why: String| {
        lock(&health).lost.get_or_insert(why);
    };
    let mut armed = Some(watcher);
    loop {
        let watcher = match armed.take() {
            Some(watcher) => watcher,
            None => match client.get_and_watch_data(&path).await {
                Ok((_, _, watcher)) => watcher,
                Err(zk::Error::NoNode) => return gone(node_deleted(&path)),
                Err(
                    e @ (zk::Error::SessionExpired
                    | zk::Error::ClientClosed
                    | zk::Error::AuthFailed),
                ) => return gone(session_ended(e)),
                // Connection loss: the request is retried once the client reconnects.
                Err(_) => {
                    tokio::time::sleep(CANCEL_POLL).await;
                    continue;
                }
            },
        };
        let event = watcher.changed().await;
        match event.event_type {
            zk::EventType::NodeDeleted => return gone(node_deleted(&path)),
            zk::EventType::Session if is_terminal(event.session_state) => {
                return gone(session_ended(event.session_state))
            }
            // A data change (nobody else writes our node): watch again.
            _ => {}
        }
    }
}

fn node_deleted(path: &str) -> String {
    format!("its node {path} was deleted (dlock release --force?)")
}

fn session_ended(why: impl std::fmt::Display) -> String {
    format!("the ZooKeeper session ended ({why})")
}

/// A duration for a message.
fn for_people(d: Duration) -> String {
    dlock_core::text::duration(d)
}

impl Lease for ZkLease {
    fn token(&self) -> Token {
        self.token
    }

    /// Within the grace from the start: the server may have made the session shorter than the
    /// ttl (its maxSessionTimeout), and a first renewal a third of the ttl later would judge
    /// dlock stopped.
    fn first_renewal(&self) -> Option<Duration> {
        Some(self.poll)
    }

    /// A grace after the heartbeat last looked (a longer gap: dlock was stopped), or after the
    /// client noticed it was cut off, whichever comes first.
    fn surely_held_until(&self) -> Option<Instant> {
        let stopped = self.last_renewal + self.grace;
        let cut_off = lock(&self.health).disconnected_at.map(|at| at + self.grace);
        Some(cut_off.map_or(stopped, |c| c.min(stopped)))
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
                for_people(gap)
            ));
        }
        let mut unconfirmed = None;
        if let Some(at) = h.disconnected_at {
            let cut_off = at.elapsed();
            let why = format!(
                "cut off from ZooKeeper at {} for {}",
                self.session.hosts,
                for_people(cut_off)
            );
            if cut_off >= self.grace && h.lost.is_none() {
                // Remembered, so that release does not wait on a server that has gone silent.
                h.lost = Some(format!("{why}: the session may have expired"));
            }
            // Never sleeping past the grace: the command is stopped as it ends, not a poll later.
            let holds_for = self.grace.saturating_sub(cut_off);
            unconfirmed = Some(Renewal::Unconfirmed {
                next: self.poll.min(holds_for),
                holds_for,
                why,
            });
        }
        match &h.lost {
            Some(why) => Renewal::Lost(why.clone()),
            None => unconfirmed.unwrap_or(Renewal::Held { next: self.poll }),
        }
    }

    /// Deletes our node and ends this run's record (runs.rs) with it. The requests go out
    /// together, in this order, so that the whole is one round trip: the last success, while our
    /// node stands (an ending that succeeded); the delete of our node and the ending, in one multi,
    /// over the record's version our acquisition wrote (so only into a record still ours and not
    /// ended); `lost` over that same version, which takes only when the multi did not because our
    /// node was gone; and the delete alone, for when the record was not ours.
    fn release(mut self: Box<Self>, end: &RunEnd) -> error::Result<Released> {
        let watchers: Vec<_> = self.watchers.drain(..).collect();
        // Read before the `if let`, whose scrutinee's guard would live through its body: the
        // session's watcher task, on the runtime's one worker, waits for `health` to note a
        // change, and `record_lost` waits on that worker (the session's requests, the timer).
        let lost = lock(&self.health).lost.clone();
        if let Some(why) = lost {
            // Already gone, or going with a session that is over: nothing to wait for.
            for w in watchers {
                w.abort();
            }
            self.record_lost();
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
        if let Some((kept, until)) = &self.kept {
            let session = &self.session;
            // The kept node and its companion (kept.rs) go together.
            let mut paths = vec![kept.clone()];
            paths.extend(kept_companion(kept));
            if !end.keep {
                // The min-hold does not keep the lock this time: it goes at once, as without one.
                session.runtime.block_on(session.discard_all(&paths));
            } else if Instant::now() >= *until {
                // A min-hold that has run out by now: its kept node goes first, with no one to
                // wait for it. This machine's clock only says when to ask: the ensemble's time
                // judges (record.rs).
                session.runtime.block_on(async {
                    let asked = tokio::time::timeout(CLEANUP_TIMEOUT, kept_ran_out(session, kept));
                    if asked.await == Ok(true) {
                        session.discard_all(&paths).await;
                    }
                });
            }
        }
        // The last user of the session closes it once the answers are in.
        let closing = Arc::get_mut(&mut self.session).and_then(|s| s.client.take());
        let session = &self.session;
        let (path, run, ending) = (&self.path, self.run.as_deref(), end.ending);
        let (companion, grant) = (self.companion.as_deref(), self.grant.as_deref());
        let result = session.runtime.block_on(async move {
            let states = closing.as_ref().map(zk::Client::state_watcher);
            let answer = {
                let client = closing.as_ref().unwrap_or_else(|| session.client());
                let release = delete_ending(client, path, companion, run, ending);
                // Sent right behind the release's requests: no round trip more.
                let grant = async {
                    if let Some(grant) = grant {
                        let _ = client.delete(grant, None).await;
                    }
                };
                let both = async { tokio::join!(release, grant).0 };
                tokio::time::timeout(CLEANUP_TIMEOUT, both).await
            };
            if let Some(mut states) = states {
                drop(closing);
                let _ = tokio::time::timeout(CLEANUP_TIMEOUT, ended(&mut states)).await;
            }
            answer
        });
        match result {
            Ok(Ok(())) => Ok(Released::Held),
            // Only the server deletes a holder's node but its owner: when its session expired, or
            // for `dlock release --force`.
            Ok(Err(zk::Error::NoNode)) => Ok(Released::Lost(format!(
                "its node {} was gone (deleted by `dlock release --force`, or its session expired)",
                self.path
            ))),
            // The session expired while this process was stopped, before the watchers could
            // tell: its nodes went with it, so the lock was lost. (Its run's record cannot be
            // ended through a session that is over: it reads "never ended", and no success.)
            Ok(Err(zk::Error::SessionExpired)) => Ok(Released::Lost(format!(
                "its ZooKeeper session expired, and its node {} with it",
                self.path
            ))),
            Ok(Err(e)) => Err(self
                .session
                .fail(e, &format!("cannot delete {}", self.path))),
            Err(_) => Err(error!(
                "ZooKeeper at {} did not answer within {}; {} goes when the session does",
                self.session.hosts,
                dlock_core::text::duration(CLEANUP_TIMEOUT),
                self.path
            )),
        }
    }
}

impl ZkLease {
    /// A lock found lost before its release: `lost` into this run's record, if it is still ours
    /// and the ensemble is there to ask (a lock lost by being cut off is not waited for).
    fn record_lost(&self) {
        let Some(run) = &self.run else {
            return;
        };
        let connected = self
            .session
            .client
            .as_ref()
            .is_some_and(|c| c.state() == zk::SessionState::SyncConnected);
        if connected {
            let session = &self.session;
            session.runtime.block_on(run.end_now(session, Ending::Lost));
        }
    }
}

/// The release's requests (see `release`), sent before any answer is awaited. `Ok`: our node was
/// deleted; `NoNode`: it was gone already.
async fn delete_ending(
    client: &zk::Client,
    own: &str,
    companion: Option<&str>,
    run: Option<&OurRun>,
    ending: Ending,
) -> Result<(), zk::Error> {
    // Our node and its companion (recipe.rs) go in one request: the pair is one holder.
    let ours: Vec<&str> = [own].into_iter().chain(companion).collect();
    // One record for both, so that the last success is the last run's very text.
    let ended = run.map(|run| run.ended(ending)).unwrap_or_default();
    let success = match run {
        Some(run) if ending.succeeded() => {
            let mut multi = client.new_multi_writer();
            multi.add_check_version(own, -1)?;
            multi.add_set_data(&run.nodes.last_success, &ended, None)?;
            Some(multi.commit())
        }
        _ => None,
    };
    let (with_ending, lost) = match run.and_then(|run| Some((run, run.version?))) {
        Some((run, version)) => {
            let mut multi = client.new_multi_writer();
            for path in &ours {
                multi.add_delete(path, None)?;
            }
            multi.add_set_data(&run.nodes.last_run, &ended, Some(version))?;
            let lost = run.ended(Ending::Lost);
            (
                Some(multi.commit()),
                Some(client.set_data(&run.nodes.last_run, &lost, Some(version))),
            )
        }
        None => (None, None),
    };
    let mut multi = client.new_multi_writer();
    for path in &ours {
        multi.add_delete(path, None)?;
    }
    let delete = multi.commit();
    if let Some(success) = success {
        let _ = success.await;
    }
    let deleted = match with_ending {
        Some(multi) => multi.await.is_ok(),
        None => false,
    };
    if let Some(lost) = lost {
        let _ = lost.await;
    }
    match delete.await.map_err(zk::Error::from) {
        Ok(_) => Ok(()),
        Err(zk::Error::NoNode) if deleted => Ok(()),
        Err(zk::Error::NoNode) => {
            // A pair found broken (one of them gone): what is left of it goes all the same.
            if ours.len() > 1 {
                for path in &ours {
                    let _ = client.delete(path, None).await;
                }
            }
            Err(zk::Error::NoNode)
        }
        Err(e) => Err(e),
    }
}

impl Drop for ZkLease {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}
