//! Taking a place in a lock's queue and waiting for a turn, as etcd's mutex does: a fresh lease,
//! then one transaction that puts our key under the lock's prefix (if no such key exists) and reads
//! the first key, so an uncontended acquisition is two calls. A waiter then watches only the key
//! just ahead of its own (`waitDeletes`), or for a shared key the last exclusive key ahead, so one
//! release wakes one waiter; a seat watches the prefix for any deletion. The place is kept from the
//! first attempt on: the lease is kept alive while waiting. A busy `try_acquire` and a cancelled
//! wait revoke the lease, which deletes the key: nothing is left behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, WatchFilterType, WatchOptions,
};

use super::connection::{bounded, Connection, Fault, CALL_TIMEOUT};
use super::kept::keep;
use super::lease::{keep_alive, EtcdLease, Keeper};
use super::naming::{key, prefix};
use super::recipe::{kind_of, owners, verdict, Kind, Verdict};
use super::record::{value_of, Entry};
use super::{CANCEL_POLL, CLEANUP_TIMEOUT};
use crate::backend::{Waiting, RETRY_FIRST, RETRY_MOST};
use crate::lock::{Holder, LockRequest};
use crate::signal::interrupt;

/// Most keys read to find who holds a lock for a waiter's report (the owners are the first keys).
const HOLDERS_READ: i64 = 100;

/// Our key in the queue and the lease it lives by.
pub(super) struct Place {
    pub(super) key: String,
    pub(super) lease: i64,
    /// The key's create revision: its place in the queue and the fencing token.
    pub(super) revision: i64,
    /// By this side's clock, until when the lease surely stands.
    pub(super) stands_until: Instant,
    /// The TTL granted, in seconds.
    pub(super) ttl: i64,
}

/// How the first attempt went.
pub(super) enum First {
    Owns(Place),
    /// Queued behind others.
    Queued(Place),
}

/// One acquisition of `request` on `conn`.
pub(super) struct Acquisition {
    pub(super) conn: Arc<Connection>,
    pub(super) request: LockRequest,
    pub(super) prefix: String,
    kind: Kind,
    limit: u32,
}

impl Acquisition {
    pub(super) fn new(conn: Arc<Connection>, request: &LockRequest) -> Acquisition {
        let (kind, limit) = kind_of(request.mode);
        Acquisition {
            prefix: prefix(&request.name),
            conn,
            request: request.clone(),
            kind,
            limit,
        }
    }

    fn doing(&self) -> String {
        format!("lock {:?} ({})", self.request.name.as_str(), self.prefix)
    }

    /// A fresh lease and our key under it, and whether that key owns the lock now.
    pub(super) async fn enqueue(&self) -> Result<First, Fault> {
        let mut leases = self.conn.client().lease_client();
        let ttl = ttl_secs(self.request.ttl);
        let asked = Instant::now();
        let granted = bounded(CALL_TIMEOUT, leases.grant(ttl, None)).await?;
        let lease = granted.id();
        let ttl = granted.ttl().max(1);
        let key = key(&self.prefix, lease);
        let put = TxnOp::put(
            key.as_str(),
            value_of(&self.request),
            Some(PutOptions::new().with_lease(lease)),
        );
        // An exclusive key owns when it is the first; the others need every key ahead of them.
        let mut first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        if self.kind == Kind::Exclusive {
            first = first.with_limit(1);
        }
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([put, TxnOp::get(self.prefix.as_str(), Some(first))]);
        let mut kv = self.conn.client().kv_client();
        let response = match bounded(CALL_TIMEOUT, kv.txn(txn)).await {
            Ok(response) => response,
            Err(fault) => {
                let _ = bounded(CLEANUP_TIMEOUT, leases.revoke(lease)).await;
                return Err(fault);
            }
        };
        let revision = response.header().map_or(0, |h| h.revision());
        if !response.succeeded() || revision <= 0 {
            // A key named by a lease the server just granted exists: someone forged it.
            let _ = bounded(CLEANUP_TIMEOUT, leases.revoke(lease)).await;
            return Err(Fault::Failed(etcd_client::Error::InvalidArgs(format!(
                "the key {key} existed before dlock created it"
            ))));
        }
        let place = Place {
            key,
            lease,
            revision,
            stands_until: asked + Duration::from_secs(ttl as u64),
            ttl,
        };
        let listed = response.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let entries: Vec<Entry> = listed
            .map(|get| get.kvs().iter().map(Entry::of).collect())
            .unwrap_or_default();
        let owns = match self.kind {
            Kind::Exclusive => entries
                .first()
                .is_some_and(|e| e.create_revision == revision),
            _ => self.judge(&entries, revision) == Some(Verdict::Owns),
        };
        Ok(if owns {
            First::Owns(place)
        } else {
            First::Queued(place)
        })
    }

    /// Where our key (`revision`) stands among `entries` (every key up to and including ours, in
    /// create-revision order); `None` when ours is not among them.
    fn judge(&self, entries: &[Entry], revision: i64) -> Option<Verdict> {
        let me = entries.iter().position(|e| e.create_revision == revision)?;
        let kinds: Vec<Kind> = entries.iter().map(|e| e.kind).collect();
        Some(verdict(&kinds, me, self.limit))
    }

    /// Without writing anything: the holders, when the keys already there show that a key queued
    /// now could not own the lock (`None`: it might, or the first `HOLDERS_READ` keys do not
    /// tell). Spares a busy try a lease, a key and their removal: three writes.
    pub(super) async fn busy_already(&self) -> Result<Option<Vec<Holder>>, Fault> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(HOLDERS_READ);
        let mut kv = self.conn.client().kv_client();
        let listed = bounded(CALL_TIMEOUT, kv.get(self.prefix.as_str(), Some(options))).await?;
        if listed.kvs().is_empty() || (self.kind != Kind::Exclusive && listed.more()) {
            return Ok(None);
        }
        let mut kinds: Vec<Kind> = listed.kvs().iter().map(|kv| Entry::of(kv).kind).collect();
        kinds.push(self.kind);
        let me = kinds.len() - 1;
        Ok((verdict(&kinds, me, self.limit) != Verdict::Owns).then(|| holders_in(&listed)))
    }

    /// Who holds the lock now, as far as the first `HOLDERS_READ` keys tell.
    pub(super) async fn holders(&self) -> Result<Vec<Holder>, Fault> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(HOLDERS_READ);
        let mut kv = self.conn.client().kv_client();
        let listed = bounded(CALL_TIMEOUT, kv.get(self.prefix.as_str(), Some(options))).await?;
        Ok(holders_in(&listed))
    }

    /// Gives up our place: revoking the lease deletes our key. Bounded; a lease the server does
    /// not hear about expires on its own.
    pub(super) async fn leave(&self, place: &Place) {
        let mut leases = self.conn.client().lease_client();
        let _ = bounded(CLEANUP_TIMEOUT, leases.revoke(place.lease)).await;
    }

    /// The lease of a place that owns the lock; with `--min-hold`, its key moved to the min-hold's
    /// lease first (our place is left if that fails).
    pub(super) async fn lease(
        &self,
        place: Place,
        keeper: Option<Keeper>,
    ) -> Result<EtcdLease, Fault> {
        let kept = match keep(&self.conn, &place, &self.request, value_of(&self.request)).await {
            Ok(kept) => kept,
            Err(fault) => {
                self.leave(&place).await;
                return Err(fault);
            }
        };
        let ttl = self.request.ttl;
        Ok(EtcdLease::new(self.conn.clone(), place, ttl, keeper, kept))
    }

    /// Waits for our turn from `place`, keeping the lease alive meanwhile. `Ok(None)`: cancelled
    /// or stopped, our place left. A lease that expired while the cluster could not be reached
    /// (its key went with it) queues again, at the back of the line.
    pub(super) async fn wait(
        &self,
        mut place: Place,
        waiting: &Waiting,
    ) -> anyhow::Result<Option<EtcdLease>> {
        let mut keeper: Option<Keeper> = None;
        let mut retry = RETRY_FIRST;
        // Each round ends with a watch event, a failure (then a pause that doubles up to
        // RETRY_MOST), or the cancellation, which ends the loop.
        loop {
            if stopped(waiting) {
                self.leave(&place).await;
                return Ok(None);
            }
            match self.round(&mut place, &mut keeper, waiting).await {
                Ok(Round::Owns) => {
                    waiting.reachable();
                    return match self.lease(place, keeper).await {
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
                    self.leave(&place).await;
                    return Ok(None);
                }
                Err(fault) if fault.is_unreachable() => {
                    keeper = None;
                    waiting.unreachable(&format!(
                        "cannot reach etcd at {} ({fault})",
                        self.conn.hosts
                    ));
                    self.conn.fail_over(CALL_TIMEOUT).await;
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
        let mut ahead = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(place.revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend);
        if self.kind == Kind::Exclusive {
            ahead = ahead.with_limit(1);
        }
        let txn = Txn::new().and_then([
            TxnOp::get(place.key.as_str(), None),
            TxnOp::get(self.prefix.as_str(), Some(ahead)),
        ]);
        let mut kv = self.conn.client().kv_client();
        let response = bounded(CALL_TIMEOUT, kv.txn(txn)).await?;
        let seen_at = response.header().map_or(0, |h| h.revision());
        let mut gets = response.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
        let (own, ahead) = (gets.next(), gets.next());
        let ours = own.is_some_and(|own| {
            own.kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == place.revision)
        });
        if !ours {
            // Our lease expired (the cluster was out of reach for longer) or our key was deleted:
            // queue again, at the back.
            self.leave(place).await;
            *keeper = None;
            return match self.enqueue().await? {
                First::Owns(fresh) => {
                    *place = fresh;
                    Ok(Round::Owns)
                }
                First::Queued(fresh) => {
                    *place = fresh;
                    Ok(Round::Again)
                }
            };
        }
        let mut entries: Vec<Entry> = ahead
            .map(|get| get.kvs().iter().rev().map(Entry::of).collect())
            .unwrap_or_default();
        let target = if self.kind == Kind::Exclusive {
            match entries.last() {
                None => return Ok(Round::Owns),
                Some(e) => Some(e.key.clone()),
            }
        } else {
            entries.push(Entry {
                key: place.key.clone().into_bytes(),
                create_revision: place.revision,
                lease: 0,
                kind: self.kind,
                limit: self.limit,
                holder: Holder::unreadable(self.request.mode, "", ""),
                kept_lease: None,
            });
            match self.judge(&entries, place.revision) {
                Some(Verdict::Owns) | None => return Ok(Round::Owns),
                Some(Verdict::Watch(i)) => Some(entries[i].key.clone()),
                Some(Verdict::WatchAll) => None,
            }
        };
        self.watch(target, seen_at, place, keeper, waiting).await
    }

    /// Waits for the deletion of `target` (none: of any key under the prefix) after revision
    /// `seen_at`, renewing our lease every third of its TTL and looking at the cancellation every
    /// `CANCEL_POLL`.
    async fn watch(
        &self,
        target: Option<Vec<u8>>,
        seen_at: i64,
        place: &mut Place,
        keeper: &mut Option<Keeper>,
        waiting: &Waiting,
    ) -> Result<Round, Fault> {
        let mut options = WatchOptions::new()
            .with_start_revision(seen_at + 1)
            .with_filters([WatchFilterType::NoPut]);
        let key = match target {
            Some(key) => key,
            None => {
                options = options.with_prefix();
                self.prefix.clone().into_bytes()
            }
        };
        let mut watcher = self.conn.client().watch_client();
        let mut stream = bounded(CALL_TIMEOUT, watcher.watch(key, Some(options))).await?;
        let mut poll = tokio::time::interval(CANCEL_POLL);
        let renew_every = Duration::from_secs(place.ttl as u64) / 3;
        let mut renew =
            tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
        // Ends with an event, the stream's end, the cancellation or a failed renewal.
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(response)) => {
                        if response.canceled() {
                            // Compacted past `seen_at`, or refused: look again.
                            return Ok(Round::Again);
                        }
                        if response.events().iter().any(|e| e.event_type() == EventType::Delete) {
                            return Ok(Round::Again);
                        }
                    }
                    Ok(None) => {
                        return Err(Fault::Failed(etcd_client::Error::WatchError("ended".into())))
                    }
                    Err(e) => return Err(Fault::Failed(e)),
                },
                _ = poll.tick() => {
                    if stopped(waiting) {
                        return Ok(Round::Cancelled);
                    }
                }
                _ = renew.tick() => {
                    let sent = Instant::now();
                    match keep_alive(&self.conn, place.lease, place.ttl, keeper, CALL_TIMEOUT).await {
                        Ok(ttl) => place.stands_until = sent + Duration::from_secs(ttl as u64),
                        // Gone: the next round finds our key gone and queues again.
                        Err(fault) if fault.is_lease_not_found() => return Ok(Round::Again),
                        Err(fault) => return Err(fault),
                    }
                }
            }
        }
    }
}

/// How one round of waiting ended.
enum Round {
    Owns,
    /// Look again: the key waited for went, or our place changed.
    Again,
    Cancelled,
}

/// The owners among the keys a prefix listing (in create-revision order) returned.
pub(super) fn holders_in(listed: &GetResponse) -> Vec<Holder> {
    let entries: Vec<Entry> = listed.kvs().iter().map(Entry::of).collect();
    owners_of(&entries)
        .into_iter()
        .map(|i| entries[i].holder.clone())
        .collect()
}

/// Indexes of the entries (in create-revision order) that own the lock.
pub(super) fn owners_of(entries: &[Entry]) -> Vec<usize> {
    let kinds: Vec<Kind> = entries.iter().map(|e| e.kind).collect();
    owners(&kinds, |i| entries[i].limit)
}

/// etcd counts a lease in whole seconds: `ttl` rounded up, at least one. (The server may grant
/// more: its minimum, about 2s with default settings.)
fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// Whether a wait must end now: a stop signal was caught, or the caller cancelled.
pub(super) fn stopped(waiting: &Waiting) -> bool {
    interrupt::caught().is_some() || waiting.is_cancelled()
}

/// Sleeps `pause`, looking at the cancellation every `CANCEL_POLL`; `false` when it ends the wait.
async fn pause(pause: Duration, waiting: &Waiting) -> bool {
    let end = Instant::now() + pause;
    loop {
        if stopped(waiting) {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        tokio::time::sleep(left.min(CANCEL_POLL)).await;
    }
}

/// An error for a stop signal caught while acquiring (the supervisor turns it into its exit).
pub(super) fn interrupted() -> anyhow::Error {
    anyhow!("interrupted")
}
