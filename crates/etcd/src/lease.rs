//! A held etcd lock: our key, alive as long as its lease. `renew` sends one keep-alive for the
//! lease and reads our key, both bounded; the lock is lost when the lease is gone (expired or
//! revoked), when our key is gone or is another's (`dlock release --force`), or when no renewal got
//! through for as long as the lease lasts. `release` deletes our key only if it is still ours, then
//! revokes the lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::error;

use super::client::{Error, KeepAlive};
use super::connection::{bounded, Connection, Fault};
use super::kept::{hand_back, let_go, KeptKey};
use super::place::Place;
use super::rpc::{Compare, LeaseKeepAliveRequest, RangeRequest, RequestOp, TxnRequest};
use super::CLEANUP_TIMEOUT;
use dlock_core::backend::{Lease, Released, Renewal};
use dlock_core::lock::{RunEnd, Token};

/// Longest a renewal waits for an answer (less when the lease has less left).
const RENEW_TIMEOUT: Duration = Duration::from_secs(1);
/// Shortest pause between renewals that did not get through.
const RETRY_SOON: Duration = Duration::from_millis(50);

/// An open keep-alive stream for one lease.
pub(super) type Keeper = KeepAlive;

/// Sends one keep-alive for `lease` over `keeper` (opened when there is none; dropped when it
/// fails, so that a late answer is never taken for the next one). Returns the TTL the server gave
/// the lease, in seconds (`granted` when the stream was just opened: the client checks that first
/// answer itself).
pub(super) async fn keep_alive(
    conn: &Connection,
    lease: i64,
    granted: i64,
    keeper: &mut Option<Keeper>,
    timeout: Duration,
) -> Result<i64, Fault> {
    let result = bounded(timeout, async {
        if let Some((sender, stream)) = keeper.as_mut() {
            sender
                .send(LeaseKeepAliveRequest { id: lease })
                .await
                .map_err(|_| Error::StreamEnded("the lease keep-alive stream ended"))?;
            return match stream.message().await.map_err(Error::Status)? {
                Some(answer) if answer.ttl > 0 => Ok(answer.ttl),
                Some(_) => Err(Error::LeaseNotFound),
                None => Err(Error::StreamEnded("the lease keep-alive stream ended")),
            };
        }
        let opened = conn.client().keep_alive(lease).await?;
        *keeper = Some(opened);
        Ok(granted)
    })
    .await;
    if result.is_err() {
        *keeper = None;
    }
    result
}

/// A held lock: our key under the lock's prefix, attached to a lease of its own.
pub(super) struct EtcdLease {
    conn: Arc<Connection>,
    place: Place,
    every: Duration,
    keeper: Option<Keeper>,
    /// `--min-hold`'s lease (see `kept`), and whether our key lives by it now.
    kept: Option<KeptKey>,
    on_kept: bool,
}

impl EtcdLease {
    pub(super) fn new(
        conn: Arc<Connection>,
        place: Place,
        ttl: Duration,
        keeper: Option<Keeper>,
        kept: Option<KeptKey>,
    ) -> EtcdLease {
        EtcdLease {
            conn,
            place,
            every: ttl / 3,
            keeper,
            on_kept: kept.is_some(),
            kept,
        }
    }

    fn lost_lease(&self) -> String {
        format!(
            "its lease {:x} expired or was revoked (key {})",
            self.place.lease, self.place.key
        )
    }
}

impl Lease for EtcdLease {
    fn token(&self) -> Token {
        u64::try_from(self.place.token).unwrap_or(0)
    }

    fn surely_held_until(&self) -> Option<Instant> {
        Some(self.place.stands_until)
    }

    fn renew(&mut self) -> Renewal {
        let left = self
            .place
            .stands_until
            .saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Renewal::Lost(format!(
                "no renewal got through for the lease's {}s: it may have expired",
                self.place.ttl
            ));
        }
        let timeout = left.min(RENEW_TIMEOUT);
        let sent = Instant::now();
        let conn = self.conn.clone();
        let (lease, key, granted) = (self.place.lease, self.place.key.clone(), self.place.ttl);
        let keeper = &mut self.keeper;
        let (kept, read) = conn.runtime().block_on(async {
            let client = conn.client();
            tokio::join!(
                keep_alive(&conn, lease, granted, keeper, timeout),
                bounded(timeout, client.range(RangeRequest::key(&key)))
            )
        });
        let fault = match (kept, read) {
            (Err(fault), _) if fault.is_lease_not_found() => {
                return Renewal::Lost(self.lost_lease())
            }
            (_, Ok(read))
                if read
                    .kvs
                    .first()
                    .is_none_or(|kv| kv.create_revision != self.place.revision) =>
            {
                return Renewal::Lost(format!(
                    "its key {} was deleted (dlock release --force?)",
                    self.place.key
                ))
            }
            (Ok(ttl), Ok(_)) => {
                let ttl = super::place::believed_ttl(ttl, self.place.ttl);
                self.place.stands_until = super::place::stands_until(sent, ttl);
                let mut next = self.every;
                if let Some(kept) = self.kept.as_ref().filter(|_| self.on_kept) {
                    // Two more chances before the min-hold's lease ends (renewals come every
                    // third of what it has left); one that does not get through is tried again
                    // soon.
                    let margin = (self.every * 2).max(RENEW_TIMEOUT * 2);
                    match conn
                        .runtime()
                        .block_on(hand_back(&conn, &self.place, kept, margin))
                    {
                        Ok(Some(left)) => next = next.min((left - margin) / 2).max(RETRY_SOON),
                        Ok(None) => self.on_kept = false,
                        Err(_) => next = RETRY_SOON * 4,
                    }
                }
                return Renewal::Held { next };
            }
            (Err(fault), _) | (_, Err(fault)) => fault,
        };
        if fault.is_unreachable() {
            let conn = &self.conn;
            conn.runtime().block_on(conn.fail_over(timeout));
        }
        let holds_for = self
            .place
            .stands_until
            .saturating_duration_since(Instant::now());
        Renewal::Unconfirmed {
            next: (holds_for / 4).clamp(RETRY_SOON, self.every.max(RETRY_SOON)),
            holds_for,
            why: format!("cannot renew on etcd at {}: {fault}", self.conn.hosts),
        }
    }

    /// One read and one write (etcd's own mutex deletes the key, and its session revokes the
    /// lease later): whether the key is still ours, deleting it then, in the transaction that ends
    /// the run's record (runs.rs); then revoking the lease, which has no key left. A `release
    /// --force` that comes between the two finds the lock given up already. A min-hold that does
    /// not keep the lock this time (`end.keep` false) is as none: its lease goes too.
    fn release(self: Box<Self>, end: &RunEnd) -> error::Result<Released> {
        let conn = &self.conn;
        let place = &self.place;
        let kept = self.kept.as_ref();
        let ending = place.run.ending(end.ending);
        let result = conn.runtime().block_on(async {
            if let Some(kept) = kept.filter(|_| end.keep) {
                if let Some(ours) = let_go(conn, place, kept, &ending).await? {
                    // Our own lease has no key left; the kept one ends on its own.
                    let _ = bounded(CLEANUP_TIMEOUT, conn.client().revoke(place.lease)).await;
                    return Ok(ours);
                }
            }
            // Our key goes first, in the call that finds out whether it was still ours: its
            // deletion is what the next waiter watches for, one round trip after the command ended.
            let mut ops = vec![RequestOp::delete(place.key.as_str())];
            ops.extend(ending.ours);
            let delete_ours = TxnRequest::new(
                vec![Compare::created_at(place.key.as_str(), place.revision)],
                ops,
            )
            .otherwise(ending.lost);
            let client = conn.client();
            let ours = bounded(CLEANUP_TIMEOUT, client.txn(delete_ours))
                .await?
                .succeeded;
            // Then the leases, which have no key left: if this fails, they expire on their own.
            let revoke = |lease| bounded(CLEANUP_TIMEOUT, client.revoke(lease));
            match kept.filter(|_| !end.keep) {
                Some(kept) => {
                    let _ = tokio::join!(revoke(place.lease), revoke(kept.lease));
                }
                None => {
                    let _ = revoke(place.lease).await;
                }
            }
            Ok::<bool, Fault>(ours)
        });
        match result {
            Ok(true) => Ok(Released::Held),
            Ok(false) => Ok(Released::Lost(format!(
                "its key {} was gone (deleted by `dlock release --force`, or its lease expired)",
                place.key
            ))),
            Err(fault) => Err(error!(
                "cannot release on etcd at {}: {fault}; the key {} goes with its lease",
                conn.hosts, place.key
            )),
        }
    }
}
