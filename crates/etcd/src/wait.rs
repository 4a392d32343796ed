//! Waiting for a turn from a place in the queue (see `acquisition`): each round looks at the key
//! ahead of ours and watches it go (from the present: see `watch`), keeping our lease alive
//! meanwhile; a lease that expired while the cluster could not be reached queues again, at the
//! back of the line.

use dlock_core::error;
use std::future::Future;
use std::time::{Duration, Instant};

use super::acquisition::{Acquisition, First};
use super::client::Error;
use super::connection::{bounded, Fault, CALL_TIMEOUT};
use super::lease::{keep_alive, EtcdLease, Keeper};
use super::place::Place;
use super::recipe::{Kind, Verdict};
use super::record::Entry;
use super::rpc::{prefix_end, EventType, RangeRequest, RequestOp, TxnRequest};
use super::CANCEL_POLL;
use dlock_core::backend::{Waiting, LEAVE_WITHIN, RETRY_FIRST, RETRY_MOST};
use dlock_core::lock::Holder;

impl Acquisition {
    /// Waits for our turn from `place`, keeping the lease alive meanwhile. `Ok(None)`: cancelled
    /// or stopped, our place left. A lease that expired while the cluster could not be reached
    /// (its key went with it) queues again, at the back of the line.
    pub(super) async fn wait(
        &self,
        mut place: Place,
        ahead: Option<Vec<u8>>,
        waiting: &Waiting,
    ) -> error::Result<Option<EtcdLease>> {
        let mut keeper: Option<Keeper> = None;
        // The queuing transaction saw this key just ahead of ours: the first round watches it
        // from there without looking again (no key can come ahead of ours later).
        let mut ahead = ahead;
        let mut retry = RETRY_FIRST;
        // Each round ends with a watch event, a failure (then a pause that doubles up to
        // RETRY_MOST), or the cancellation, which ends the loop.
        loop {
            if waiting.is_cancelled() {
                self.leave_within(&place, LEAVE_WITHIN).await;
                return Ok(None);
            }
            // A call to a server that stopped answering ends at the deadline or a signal, not at
            // its own timeout.
            let round = unless_cancelled(waiting, async {
                match ahead.take() {
                    Some(key) => {
                        let seen_at = place.revision;
                        self.watch(Some(key), seen_at, &mut place, &mut keeper, waiting)
                            .await
                    }
                    None => self.round(&mut place, &mut keeper, waiting).await,
                }
            })
            .await
            .unwrap_or(Ok(Round::Cancelled));
            match round {
                Ok(Round::Owns) => {
                    waiting.reachable();
                    let granted = match self.take_token(&mut place).await {
                        Ok(()) => self.lease(place, keeper).await,
                        Err(fault) => {
                            self.leave(&place).await;
                            Err(fault)
                        }
                    };
                    return match granted {
                        Ok(lease) => Ok(Some(lease)),
                        Err(fault) => {
                            Err(self.conn.fail(fault, &format!("taking {}", self.doing())))
                        }
                    };
                }
                Ok(Round::Again) => {
                    waiting.reachable();
                    retry = RETRY_FIRST;
                }
                Ok(Round::Cancelled) => {
                    self.leave_within(&place, LEAVE_WITHIN).await;
                    return Ok(None);
                }
                Err(fault) if fault.is_unreachable() => {
                    keeper = None;
                    waiting.unreachable(&format!(
                        "cannot reach etcd at {} ({fault})",
                        self.conn.hosts
                    ));
                    unless_cancelled(waiting, self.conn.fail_over(CALL_TIMEOUT)).await;
                    if !pause(retry, waiting).await {
                        // Nobody to tell: the lease expires on its own.
                        return Ok(None);
                    }
                    retry = (retry * 2).min(RETRY_MOST);
                }
                Err(fault) => {
                    self.leave(&place).await;
                    return Err(self
                        .conn
                        .fail(fault, &format!("waiting for {}", self.doing())));
                }
            }
        }
    }

    /// One look at the queue and, unless our turn has come, one wait for the key we wait for to
    /// go (or any key ahead, for a seat), keeping our lease alive meanwhile.
    async fn round(
        &self,
        place: &mut Place,
        keeper: &mut Option<Keeper>,
        waiting: &Waiting,
    ) -> Result<Round, Fault> {
        let look = self.look(place).await?;
        // Answered: an outage is over now, not when the round ends (on a held lock, at its
        // release).
        waiting.reachable();
        match look {
            Look::Owns => Ok(Round::Owns),
            Look::Wait(target, seen_at) => {
                self.watch(target, seen_at, place, keeper, waiting).await
            }
            Look::NotOurs => {
                // Our lease expired (the cluster was out of reach for longer) or our key was
                // deleted: queue again, at the back.
                self.leave(place).await;
                *keeper = None;
                match self.enqueue().await? {
                    First::Owns(fresh) => {
                        *place = fresh;
                        Ok(Round::Owns)
                    }
                    First::Queued(fresh, _) => {
                        *place = fresh;
                        Ok(Round::Again)
                    }
                }
            }
        }
    }

    /// Where our key stands now: one read of it and of the keys ahead of it.
    async fn look(&self, place: &Place) -> Result<Look, Fault> {
        let mut ahead = RangeRequest {
            max_create_revision: place.revision - 1,
            ..RangeRequest::prefix(&self.prefix).newest_first()
        };
        if self.kind == Kind::Exclusive {
            ahead = ahead.limit(1);
        }
        let txn = TxnRequest::new(
            Vec::new(),
            vec![
                RequestOp::range(RangeRequest::key(&place.key)),
                RequestOp::range(ahead),
            ],
        );
        let response = bounded(CALL_TIMEOUT, self.conn.client().txn(txn)).await?;
        let seen_at = response.revision();
        let mut gets = response.ranges();
        let (own, ahead) = (gets.next(), gets.next());
        let ours = own.is_some_and(|own| {
            own.kvs
                .first()
                .is_some_and(|kv| kv.create_revision == place.revision)
        });
        if !ours {
            return Ok(Look::NotOurs);
        }
        let mut entries: Vec<Entry> = ahead
            .map(|get| get.kvs.iter().rev().map(Entry::of).collect())
            .unwrap_or_default();
        if self.kind == Kind::Exclusive {
            return Ok(match entries.last() {
                None => Look::Owns,
                Some(e) => Look::Wait(Some(e.key.clone()), seen_at),
            });
        }
        entries.push(Entry {
            key: place.key.clone().into_bytes(),
            create_revision: place.revision,
            lease: 0,
            kind: self.kind,
            limit: self.limit,
            holder: Holder::unreadable(self.request.mode, "", ""),
        });
        Ok(match self.judge(&entries, place.revision) {
            Some(Verdict::Owns) | None => Look::Owns,
            Some(Verdict::Watch(i)) => Look::Wait(Some(entries[i].key.clone()), seen_at),
            Some(Verdict::WatchAll) => Look::Wait(None, seen_at),
        })
    }

    /// Waits for the deletion of `target` (none: of any key under the prefix) after revision
    /// `seen_at`, renewing our lease every third of its TTL and looking at the cancellation every
    /// `CANCEL_POLL`.
    ///
    /// The watch starts from the present, not from `seen_at`: etcd serves a watch from a past
    /// revision late (it catches lagging watchers up every 100 ms), and on a busy lock every write
    /// by another client makes `seen_at` past. So when anything was written since `seen_at`, the
    /// queue is looked at once more when the watch stands (one round trip, not up to 100 ms a
    /// handoff), and the round ends if what we wait for changed meanwhile.
    async fn watch(
        &self,
        target: Option<Vec<u8>>,
        seen_at: i64,
        place: &mut Place,
        keeper: &mut Option<Keeper>,
        waiting: &Waiting,
    ) -> Result<Round, Fault> {
        let (key, range_end) = match &target {
            Some(key) => (key.clone(), Vec::new()),
            None => (
                self.prefix.clone().into_bytes(),
                prefix_end(self.prefix.as_bytes()),
            ),
        };
        let client = self.conn.client();
        let mut watch = bounded(CALL_TIMEOUT, client.watch_deletions(key, range_end)).await?;
        let mut poll = tokio::time::interval(CANCEL_POLL);
        let renew_every = Duration::from_secs(place.ttl as u64) / 3;
        let mut renew =
            tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
        // Ends with an event, the stream's end, the cancellation or a failed renewal.
        loop {
            tokio::select! {
                message = watch.answers.message() => match message {
                    Ok(Some(response)) => {
                        if response.canceled {
                            // Refused by the server: look again.
                            return Ok(Round::Again);
                        }
                        if response.events.iter().any(|e| e.r#type() == EventType::Delete) {
                            return Ok(Round::Again);
                        }
                        if response.created {
                            waiting.reachable();
                        }
                        let stands_at = response.header.as_ref().map_or(i64::MAX, |h| h.revision);
                        if response.created && stands_at > seen_at {
                            match self.look(place).await? {
                                Look::Wait(still, _) if still == target => {}
                                // Gone, or our turn, before the watch stood.
                                _ => return Ok(Round::Again),
                            }
                        }
                    }
                    Ok(None) => {
                        return Err(Fault::Failed(Error::StreamEnded("the watch stream ended")))
                    }
                    Err(status) => return Err(Fault::Failed(Error::Status(status))),
                },
                _ = poll.tick() => {
                    if waiting.is_cancelled() {
                        return Ok(Round::Cancelled);
                    }
                }
                _ = renew.tick() => {
                    let sent = Instant::now();
                    match keep_alive(&self.conn, place.lease, place.ttl, keeper, CALL_TIMEOUT).await {
                        Ok(ttl) => {
                            let ttl = super::place::believed_ttl(ttl, place.ttl);
                            place.stands_until = super::place::stands_until(sent, ttl);
                        }
                        // Gone: the next round finds our key gone and queues again.
                        Err(fault) if fault.is_lease_not_found() => return Ok(Round::Again),
                        Err(fault) => return Err(fault),
                    }
                }
            }
        }
    }
}

/// Where our key stands.
enum Look {
    Owns,
    /// Wait for this key to go (none: any key under the prefix), as seen at this revision.
    Wait(Option<Vec<u8>>, i64),
    /// Our key is gone or is another's.
    NotOurs,
}

/// How one round of waiting ended.
enum Round {
    Owns,
    /// Look again: the key waited for went, or our place changed.
    Again,
    Cancelled,
}

/// `work`, unless the wait is cancelled first (`None`), looked at every `CANCEL_POLL` (sooner at
/// the deadline).
async fn unless_cancelled<T>(waiting: &Waiting, work: impl Future<Output = T>) -> Option<T> {
    let cancelled = async {
        while !waiting.is_cancelled() {
            tokio::time::sleep(waiting.slice(CANCEL_POLL)).await;
        }
    };
    tokio::select! {
        value = work => Some(value),
        () = cancelled => None,
    }
}

/// Sleeps `pause`, looking at the cancellation every `CANCEL_POLL`; `false` when it ends the wait.
async fn pause(pause: Duration, waiting: &Waiting) -> bool {
    let end = Instant::now() + pause;
    loop {
        if waiting.is_cancelled() {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        tokio::time::sleep(left.min(CANCEL_POLL)).await;
    }
}
