//! Waiting for a turn: watching only the node ahead (or, for a seat, the directory), reporting who
//! holds the lock, looking again when the watch fires, and giving up promptly when the caller
//! cancels or a stop signal arrives, also while the client waits to reconnect.

use std::future::Future;

use dlock_core::error;
use dlock_core::error::FailAs;
use zookeeper_client as zk;

use super::acquisition::{Acquisition, Outcome};
use super::ensemble_clock::EnsembleClock;
use super::frames;
use super::kept;
use super::lease::ZkLease;
use super::recipe::{is_kept, queue, verdict, Verdict};
use super::record::live_kept;
use super::runs;
use super::session::{cancellable, is_connection_loss, is_terminal, retrying, stopped, Session};
use super::CLEANUP_TIMEOUT;
use dlock_core::backend::stop::Stop;
use dlock_core::backend::{Waiting, LEAVE_WITHIN};
use dlock_core::lock::{Ending, Token};

/// What arming a data watch gives: the node's data, its stat and the watch.
type Watched = (Vec<u8>, zk::Stat, zk::OneshotWatcher);

/// Waits for an acquisition `task`, telling `waiting` meanwhile whether the ensemble can be
/// reached. When the wait is cancelled or a stop signal was caught, the task (which looks at both)
/// gets a moment to clean up if the ensemble is there; otherwise it is aborted (`None`): both must
/// end the wait promptly, also while the client waits to reconnect. An aborted task's node goes
/// with the session, which ends with dlock.
pub(super) fn watched<T: Send + 'static>(
    session: &Session,
    mut task: tokio::task::JoinHandle<T>,
    stop: &Stop,
    waiting: Option<&Waiting>,
) -> Option<Result<T, tokio::task::JoinError>> {
    let client = session.client().clone();
    let result = session.runtime.block_on(cancellable(&mut task, || {
        // A server that lied is not waited for (frames.rs).
        if stopped(stop, waiting) || frames::lie().is_some() {
            return false;
        }
        if let Some(waiting) = waiting {
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
        true
    }));
    if result.is_some() {
        return result;
    }
    if client.state() == zk::SessionState::SyncConnected {
        // Within `LEAVE_WITHIN`: a server frozen since the client last heard from it must not
        // hold up the exit at the deadline or at a signal.
        let finished = session
            .runtime
            .block_on(async { tokio::time::timeout(LEAVE_WITHIN, &mut task).await });
        if let Ok(result) = finished {
            return Some(result);
        }
    }
    session.hurry();
    task.abort();
    // Until the aborted task is dropped, on the runtime's worker: it holds a reference to the
    // session, and the session's last reference must not go there (dropping a runtime from its own
    // worker panics). An abort takes effect at the task's next await, so this is brief.
    let _ = session
        .runtime
        .block_on(async { tokio::time::timeout(CLEANUP_TIMEOUT, &mut task).await });
    None
}

/// The watch an armed data watch gives, or none when the node is gone.
fn armed(result: Result<Watched, zk::Error>) -> Result<Option<zk::OneshotWatcher>, zk::Error> {
    match result {
        Ok((_, _, watcher)) => Ok(Some(watcher)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Acquisition {
    /// Loops until our node owns the lock, we give up, or the session fails. Bounded by the
    /// caller's cancellation (checked every `CANCEL_POLL`) and by the session's life.
    pub(super) async fn wait_turn(
        &self,
        node: &str,
        token: Token,
        mut listing: Vec<String>,
        waiting: Option<&Waiting>,
        mut clock: EnsembleClock,
    ) -> error::Result<Outcome> {
        let own_path = self.path(node);
        // The watch on our own node that the lease needs, armed together with a listing when we can.
        let mut own: Option<zk::OneshotWatcher> = None;
        let mut reported = false;
        let mut told_place = None;
        // Whether our node waited behind others: then its token is taken at the grant.
        let mut waited = false;
        loop {
            // Kept nodes (`--min-hold`) that still keep the lock stand ahead of everyone; expired
            // ones are deleted on the way.
            let (kept, kept_end) = live_kept(&self.session, &self.dir, &listing, &mut clock).await;
            listing.retain(|n| !is_kept(n) || kept.contains(n));
            // The node whose end we wait for; none: any change among the children.
            let (verdict, in_line) = self.judge(&listing, node)?;
            let ahead = match verdict {
                Verdict::Owns => {
                    let (token, grant) = match waited {
                        true => {
                            let (token, grant) = self.take_token(node).await?;
                            (token, Some(grant))
                        }
                        false => (token, None),
                    };
                    // The run's record and the watch on our companion go out with the watch on
                    // our node (when that needs a request): one round trip for all.
                    let watch = self.watch_own(&own_path, own.take());
                    let record = runs::started(&self.session, &self.request, token, &clock);
                    let (watched, run, companion) =
                        tokio::join!(watch, record, self.watch_companion());
                    let Some(watcher) = watched? else {
                        // Deleted under us: the next look reports it.
                        run.end_now(&self.session, Ending::Lost).await;
                        if let Some(grant) = &grant {
                            self.session.discard(grant).await;
                        }
                        listing = self.list().await?;
                        continue;
                    };
                    let companion = companion?;
                    let kept = match self.request.min_hold {
                        Some(hold) => Some((kept::create(self, hold, token).await?, hold)),
                        None => None,
                    };
                    let ttl = self.request.ttl;
                    let lease = ZkLease::start(self.session.clone(), own_path, token, ttl, watcher)
                        .keeping(kept)
                        .recording(run)
                        .pairing(companion)
                        .granted_beside(grant);
                    return Ok(Outcome::Acquired(lease));
                }
                Verdict::Watch(other) => Some(self.path(&other)),
                Verdict::WatchChildren => None,
            };
            waited = true;
            let Some(waiting) = waiting else {
                return Ok(Outcome::Busy(self.holders(&listing).await?));
            };
            // Arm the watch first (the request goes out now), then report who holds the lock.
            let arming = ahead
                .as_ref()
                .map(|path| self.client().get_and_watch_data(path));
            if !reported {
                reported = true;
                // Reading them costs a request per holder: none where nobody sees them (`-q`).
                let holders = match waiting.wants_holders() {
                    true => self.holders(&listing).await.unwrap_or_default(),
                    false => Vec::new(),
                };
                waiting.busy(&holders);
            }
            if told_place != Some(in_line) {
                told_place = Some(in_line);
                waiting.in_line(in_line);
            }
            // A node already gone means look again at once.
            let watcher = match (arming, &ahead) {
                (Some(arming), Some(path)) => self.watch_ahead(arming, path).await?,
                _ => {
                    let (names, watcher) = self.watch_children().await?;
                    // This listing is newer than the one we judged by: judge again before waiting.
                    if names != listing {
                        listing = names;
                        continue;
                    }
                    Some(watcher)
                }
            };
            if let Some(watcher) = watcher {
                if !fires(watcher, waiting, kept_end).await? {
                    return Ok(Outcome::Cancelled);
                }
            }
            if waiting.is_cancelled() {
                return Ok(Outcome::Cancelled);
            }
            listing = self.look_again(&own_path, &mut own).await?;
        }
    }

    /// Where our node stands in `listing`: it owns the lock, or what it waits for.
    /// What our node waits for, and how many waiters are in line before it.
    fn judge(&self, listing: &[String], node: &str) -> error::Result<(Verdict, usize)> {
        let queue = queue(listing);
        let Some(me) = queue.iter().position(|c| c.name == node) else {
            return Err(error!(
                "our node {} vanished while waiting (dlock release --force, or the session expired)",
                self.path(node)
            ))
            .unavailable();
        };
        let ahead = (0..me)
            .filter(|&i| verdict(&queue, i, self.limit) != Verdict::Owns)
            .count();
        Ok((verdict(&queue, me, self.limit), ahead))
    }

    /// The watch on our own node that the lease needs: the one armed with the last look, or one
    /// armed now. `None`: our node is gone.
    async fn watch_own(
        &self,
        own_path: &str,
        armed_before: Option<zk::OneshotWatcher>,
    ) -> error::Result<Option<zk::OneshotWatcher>> {
        if armed_before.is_some() {
            return Ok(armed_before);
        }
        armed(retrying(|| self.client().get_and_watch_data(own_path)).await)
            .map_err(|e| self.fail(e, &format!("cannot watch {own_path}")))
    }

    /// The watch the lease needs on our node's companion, with its path, if it has one. Without
    /// its companion our node would hold the lock unseen by Curator's read-write lock: an error.
    async fn watch_companion(&self) -> error::Result<Option<(String, zk::OneshotWatcher)>> {
        let Some(path) = self.companion_path() else {
            return Ok(None);
        };
        match self.watch_own(&path, None).await? {
            Some(watcher) => Ok(Some((path, watcher))),
            None => Err(error!(
                "our node {path} vanished while waiting (dlock release --force, or the session expired)"
            ))
            .unavailable(),
        }
    }

    /// The watch on the node ahead of ours, whose request `arming` has sent, sent again after a
    /// connection loss. `None`: that node is gone already.
    async fn watch_ahead(
        &self,
        arming: impl Future<Output = Result<Watched, zk::Error>>,
        path: &str,
    ) -> error::Result<Option<zk::OneshotWatcher>> {
        let result = match arming.await {
            Err(e) if is_connection_loss(&e) => {
                retrying(|| self.client().get_and_watch_data(path)).await
            }
            result => result,
        };
        armed(result).map_err(|e| self.fail(e, "cannot watch the node ahead of ours"))
    }

    /// A watch on the directory's children (a seat waits for any of the holders), with the
    /// listing it was armed with.
    async fn watch_children(&self) -> error::Result<(Vec<String>, zk::OneshotWatcher)> {
        retrying(|| self.client().list_and_watch_children(&self.dir))
            .await
            .map_err(|e| self.fail(e, &format!("cannot watch {}", self.dir)))
    }

    /// Lists the directory again; if that shows our turn has come, the watch the lease needs is
    /// armed in the same round trip (into `own`, unless armed already).
    async fn look_again(
        &self,
        own_path: &str,
        own: &mut Option<zk::OneshotWatcher>,
    ) -> error::Result<Vec<String>> {
        let arming = own
            .is_none()
            .then(|| self.client().get_and_watch_data(own_path));
        let listing = self.list().await?;
        if let Some(arming) = arming {
            *own = arming.await.ok().map(|(_, _, watcher)| watcher);
        }
        Ok(listing)
    }
}

/// Waits until `watcher` fires (`true`) or the wait is cancelled (`false`); a session that ends
/// meanwhile fails the wait.
async fn fires(
    watcher: zk::OneshotWatcher,
    waiting: &Waiting,
    until: Option<std::time::Instant>,
) -> error::Result<bool> {
    let changed = async {
        match until {
            // A kept node ends without an event: look again then.
            Some(until) => tokio::time::timeout_at(until.into(), watcher.changed())
                .await
                .ok(),
            None => Some(watcher.changed().await),
        }
    };
    let Some(event) = cancellable(changed, || !waiting.is_cancelled()).await else {
        return Ok(false);
    };
    let Some(event) = event else {
        return Ok(true);
    };
    if event.event_type == zk::EventType::Session && is_terminal(event.session_state) {
        return Err(error!(
            "ZooKeeper session ended ({}) while waiting",
            event.session_state
        ))
        .unavailable();
    }
    Ok(true)
}
