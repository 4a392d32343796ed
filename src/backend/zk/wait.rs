//! Waiting for a turn: watching only the node ahead (or, for a seat, the directory), reporting who
//! holds the lock, looking again when the watch fires, and giving up promptly when the caller
//! cancels or a stop signal arrives, also while the client waits to reconnect.

use std::future::Future;

use anyhow::anyhow;
use zookeeper_client as zk;

use super::acquisition::{Acquisition, Outcome, Parked};
use super::lease::ZkLease;
use super::recipe::{queue, verdict, Verdict};
use super::record::holders;
use super::session::{is_connection_loss, is_terminal, retrying, Session};
use super::{Waiting, CANCEL_POLL, CLEANUP_TIMEOUT};
use crate::exit::{FailWith, Failure};
use crate::interrupt;
use crate::lock::{Holder, Token};

/// Whether a wait must end now: a stop signal was caught, or `waiting` (if any) was cancelled.
pub(super) fn stopped(waiting: Option<&Waiting>) -> bool {
    interrupt::caught().is_some() || waiting.is_some_and(Waiting::is_cancelled)
}

/// Runs `work` to its end, asking `go_on` every `CANCEL_POLL` meanwhile (and once at the start):
/// `None` as soon as it says no.
pub(super) async fn cancellable<F: Future>(
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

/// Waits for an acquisition `task`, telling `waiting` meanwhile whether the ensemble can be
/// reached. When the wait is cancelled or a stop signal was caught, the task (which looks at both)
/// gets a moment to clean up if the ensemble is there; otherwise it is aborted (`None`): both must
/// end the wait promptly, also while the client waits to reconnect. An aborted task's node goes
/// with the session, which ends with dlock.
pub(super) fn watched<T: Send + 'static>(
    session: &Session,
    mut task: tokio::task::JoinHandle<T>,
    waiting: Option<&Waiting>,
) -> Option<Result<T, tokio::task::JoinError>> {
    let client = session.client().clone();
    let result = session.runtime.block_on(cancellable(&mut task, || {
        if stopped(waiting) {
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

impl Acquisition {
    /// Loops until our node owns the lock, we give up, or the session fails. Bounded by the
    /// caller's cancellation (checked every `CANCEL_POLL`) and by the session's life.
    pub(super) async fn wait_turn(
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
                    let session = self.session.clone();
                    let ttl = self.request.ttl;
                    let lease = ZkLease::start(session, own_path, token, ttl, watcher);
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
                if !fires(watcher, waiting).await? {
                    return Ok(Outcome::Cancelled);
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
}

/// Waits until `watcher` fires (`true`) or the wait is cancelled (`false`); a session that ends
/// meanwhile fails the wait.
async fn fires(watcher: zk::OneshotWatcher, waiting: &Waiting) -> anyhow::Result<bool> {
    let Some(event) = cancellable(watcher.changed(), || !waiting.is_cancelled()).await else {
        return Ok(false);
    };
    if event.event_type == zk::EventType::Session && is_terminal(event.session_state) {
        return Err(anyhow!(
            "ZooKeeper session ended ({}) while waiting",
            event.session_state
        ))
        .fail_with(Failure::BackendUnavailable);
    }
    Ok(true)
}
