//! Taking a place in a lock's queue, as etcd's mutex does: a fresh lease, then one transaction
//! that puts our key under the lock's prefix (if no such key exists) and reads the first key, so an
//! uncontended acquisition is two calls; for an exclusive key the same transaction also reads the
//! key just ahead and the holder, so a waiter starts watching without another call. Waiting for a
//! turn is `wait`'s: a waiter watches only the key
//! just ahead of its own (`waitDeletes`), or for a shared key the last exclusive key ahead, so one
//! release wakes one waiter; a seat watches the prefix for any deletion. The place is kept from the
//! first attempt on: the lease is kept alive while waiting. A busy `try_acquire` and a cancelled
//! wait revoke the lease, which deletes the key: nothing is left behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::Error;
use super::connection::{bounded, Connection, Fault, CALL_TIMEOUT};
use super::kept::keep;
use super::lease::{EtcdLease, Keeper};
use super::naming::{key, prefix};
use super::place::Place;
use super::recipe::{kind_of, owners, verdict, Kind, Verdict};
use super::record::{value_of, value_with_token, Entry};
use super::rpc::{Compare, KeyValue, RangeRequest, RangeResponse, RequestOp, TxnRequest};
use super::runs::OurRun;
use super::CLEANUP_TIMEOUT;
use dlock_core::error;
use dlock_core::lock::{Holder, LockRequest};

/// Most keys read to find who holds a lock for a waiter's report (the owners are the first keys).
const HOLDERS_READ: i64 = 100;

/// How the first attempt went.
pub(super) enum First {
    Owns(Place),
    /// Queued behind others.
    Queued(Place, Ahead),
}

/// What the transaction that queued an exclusive key saw ahead of it, so that the wait starts
/// without another look: the key just ahead (to watch), and the holder when the first key is an
/// exclusive one (the only owner). `None` where it did not tell.
#[derive(Default)]
pub(super) struct Ahead {
    pub(super) key: Option<Vec<u8>>,
    pub(super) holders: Option<Vec<Holder>>,
}

/// One acquisition of `request` on `conn`.
pub(super) struct Acquisition {
    pub(super) conn: Arc<Connection>,
    pub(super) request: LockRequest,
    pub(super) prefix: String,
    pub(super) kind: Kind,
    pub(super) limit: u32,
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

    pub(super) fn doing(&self) -> String {
        format!("lock {:?} ({})", self.request.name.as_str(), self.prefix)
    }

    /// A fresh lease and our key under it, and whether that key owns the lock now.
    pub(super) async fn enqueue(&self) -> Result<First, Fault> {
        let client = self.conn.client();
        let ttl = ttl_secs(self.request.ttl);
        let asked = Instant::now();
        let granted = bounded(CALL_TIMEOUT, client.grant(ttl)).await?;
        let lease = granted.id;
        if granted.ttl <= 0 {
            // etcd refuses a lease it cannot grant; one granted already ended is not etcd's answer.
            let _ = bounded(CLEANUP_TIMEOUT, client.revoke(lease)).await;
            return Err(Fault::Failed(Error::Unexpected(format!(
                "the server granted a lease of {}s, one that has already ended",
                granted.ttl
            ))));
        }
        let ttl = super::place::believed_ttl(granted.ttl, ttl).max(1);
        let key = key(&self.prefix, lease);
        let put = RequestOp::put(key.as_str(), value_of(&self.request), lease);
        // An exclusive key owns when it is the first; the others need every key ahead of them.
        let first = RangeRequest::prefix(&self.prefix);
        let mut ops = vec![put];
        let run = OurRun::new(&self.request);
        if self.kind == Kind::Exclusive {
            ops.push(RequestOp::range(first.limit(1)));
            // Ours, the newest key, and the one just ahead of it: the key to wait for.
            let last = RangeRequest::prefix(&self.prefix).newest_first().limit(2);
            ops.push(RequestOp::range(last));
            // The run's record, if this key owns at once: no key was there before.
            ops.push(run.if_first(&self.prefix));
        } else {
            ops.push(RequestOp::range(first));
        }
        let txn = TxnRequest::new(vec![Compare::created_at(key.as_str(), 0)], ops);
        let response = match bounded(CALL_TIMEOUT, client.txn(txn)).await {
            Ok(response) => response,
            Err(fault) => {
                let _ = bounded(CLEANUP_TIMEOUT, client.revoke(lease)).await;
                return Err(fault);
            }
        };
        let revision = response.revision();
        if !response.succeeded || revision <= 0 {
            // A key named by a lease the server just granted exists: someone forged it.
            let _ = bounded(CLEANUP_TIMEOUT, client.revoke(lease)).await;
            return Err(Fault::Failed(Error::Unexpected(format!(
                "the key {key} existed before dlock created it"
            ))));
        }
        let mut place = Place {
            key,
            lease,
            revision,
            token: revision,
            stands_until: super::place::stands_until(asked, ttl),
            ttl,
            run,
        };
        let mut listed = response.ranges();
        let entries: Vec<Entry> = listed
            .next()
            .map(|range| range.kvs.iter().map(Entry::of).collect())
            .unwrap_or_default();
        if self.kind != Kind::Exclusive {
            return Ok(match self.judge(&entries, revision) {
                Some(Verdict::Owns) => First::Owns(place),
                _ => First::Queued(place, Ahead::default()),
            });
        }
        let Some(first) = entries.first() else {
            return Ok(First::Queued(place, Ahead::default()));
        };
        if first.create_revision == revision {
            // Then the transaction inside wrote the run.
            place.run.written_with(revision);
            return Ok(First::Owns(place));
        }
        let last = listed.next();
        let newest: Vec<&KeyValue> = last.iter().flat_map(|range| &range.kvs).collect();
        let ahead = Ahead {
            // Only when the newest key is ours: then the next is the one just ahead of it.
            key: match newest[..] {
                [ours, before, ..] if ours.create_revision == revision => Some(before.key.clone()),
                _ => None,
            },
            holders: (first.kind == Kind::Exclusive).then(|| vec![first.holder.clone()]),
        };
        Ok(First::Queued(place, ahead))
    }

    /// Where our key (`revision`) stands among `entries` (every key up to and including ours, in
    /// create-revision order); `None` when ours is not among them.
    pub(super) fn judge(&self, entries: &[Entry], revision: i64) -> Option<Verdict> {
        let me = entries.iter().position(|e| e.create_revision == revision)?;
        let kinds: Vec<Kind> = entries.iter().map(|e| e.kind).collect();
        Some(verdict(&kinds, me, self.limit))
    }

    /// Without writing anything: the holders, when the keys already there show that a key queued
    /// now could not own the lock (`None`: it might, or the first `HOLDERS_READ` keys do not
    /// tell). Spares a busy try a lease, a key and their removal: three writes.
    pub(super) async fn busy_already(&self) -> Result<Option<Vec<Holder>>, Fault> {
        let read = RangeRequest::prefix(&self.prefix).limit(HOLDERS_READ);
        let listed = bounded(CALL_TIMEOUT, self.conn.client().range(read)).await?;
        if listed.kvs.is_empty() || (self.kind != Kind::Exclusive && listed.more) {
            return Ok(None);
        }
        let mut kinds: Vec<Kind> = listed.kvs.iter().map(|kv| Entry::of(kv).kind).collect();
        kinds.push(self.kind);
        let me = kinds.len() - 1;
        Ok((verdict(&kinds, me, self.limit) != Verdict::Owns).then(|| holders_in(&listed)))
    }

    /// Who holds the lock now, as far as the first `HOLDERS_READ` keys tell.
    pub(super) async fn holders(&self) -> Result<Vec<Holder>, Fault> {
        let read = RangeRequest::prefix(&self.prefix).limit(HOLDERS_READ);
        let listed = bounded(CALL_TIMEOUT, self.conn.client().range(read)).await?;
        Ok(holders_in(&listed))
    }

    /// Takes the token of a place granted after it waited: the revision of a write made now. A
    /// key's create revision orders the line, but shared and `--limit` keys pass each other in it
    /// (a seat that joined at 91 may be granted after a shared key that joined at 94, and holds
    /// with 94): a token taken at the grant is above every token taken before. The write puts our
    /// key again as it is (same value, same lease), which keeps its place in the line.
    pub(super) async fn take_token(&self, place: &mut Place) -> Result<(), Fault> {
        let txn = TxnRequest::new(
            vec![Compare::created_at(place.key.as_str(), place.revision)],
            vec![RequestOp::put(
                place.key.as_str(),
                value_of(&self.request),
                place.lease,
            )],
        );
        let done = bounded(CALL_TIMEOUT, self.conn.client().txn(txn)).await?;
        if !done.succeeded || done.revision() <= 0 {
            return Err(Fault::Failed(Error::Unexpected(format!(
                "its key {} was deleted as it was granted the lock",
                place.key
            ))));
        }
        place.token = done.revision();
        Ok(())
    }

    /// Gives up our place: revoking the lease deletes our key. Bounded; a lease the server does
    /// not hear about expires on its own.
    pub(super) async fn leave(&self, place: &Place) {
        self.leave_within(place, CLEANUP_TIMEOUT).await;
    }

    /// `leave`, bounded by `timeout`.
    pub(super) async fn leave_within(&self, place: &Place, timeout: Duration) {
        let _ = bounded(timeout, self.conn.client().revoke(place.lease)).await;
    }

    /// The lease of a place that owns the lock; with `--min-hold`, its key moved to the min-hold's
    /// lease first (our place is left if that fails).
    pub(super) async fn lease(
        &self,
        mut place: Place,
        keeper: Option<Keeper>,
    ) -> Result<EtcdLease, Fault> {
        if !place.run.written() {
            // Not written with the key: now that it owns the lock.
            let (key, revision) = (place.key.clone(), place.revision);
            place
                .run
                .write(&self.conn, &key, revision, place.token)
                .await;
        }
        let token = u64::try_from(place.token).ok();
        let record = value_with_token(&self.request, token);
        let kept = match keep(&self.conn, &place, &self.request, record).await {
            Ok(kept) => kept,
            Err(fault) => {
                self.leave(&place).await;
                return Err(fault);
            }
        };
        let ttl = self.request.ttl;
        Ok(EtcdLease::new(self.conn.clone(), place, ttl, keeper, kept))
    }
}

/// The owners among the keys a prefix listing (in create-revision order) returned.
pub(super) fn holders_in(listed: &RangeResponse) -> Vec<Holder> {
    let entries: Vec<Entry> = listed.kvs.iter().map(Entry::of).collect();
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

/// An error for a stop signal caught while acquiring (the supervisor turns it into its exit).
pub(super) fn interrupted() -> error::Error {
    error!("interrupted")
}
