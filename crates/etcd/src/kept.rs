//! `--min-hold` on etcd: once a holder owns the lock, its key moves to a second lease of D granted
//! then (`keep`), which nobody keeps alive, so etcd alone judges when it ends. The key keeps its
//! create revision, its place in the queue: dlock's waiters and `etcdctl lock` wait for it as for
//! any holder, and one that dies leaves it there. A holder whose command still runs when that lease
//! is nearly over moves its key back to its own lease (`hand_back`, from `renew`, which comes soon
//! enough: see `Renewal` and the heartbeat's first renewal); when the command ends, the key goes
//! to (or stays on) the min-hold's lease while that lasts (`let_go`). The key's value then says so
//! in a second line, `kept LEASE UNTIL_MS HOLD_MS[ ended]`, for `status` (record.rs writes and reads
//! it): UNTIL_MS is when that lease ends, by the holder's clock when it was granted (etcd tells no
//! time of day), written once so that every reader shows the same end.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::connection::{bounded, Connection, Fault, CALL_TIMEOUT};
use super::place::Place;
use super::record::with_kept_line;
use super::rpc::{Compare, RequestOp, TxnRequest};
use super::runs::EndingOps;
use dlock_core::lock::LockRequest;

/// The lease a held key lives by while `--min-hold` keeps it, and the key's value then.
pub(super) struct KeptKey {
    pub(super) lease: i64,
    /// The holder's record, as on its own lease.
    record: String,
    /// When the lease ends, in milliseconds since the epoch by our clock.
    until_ms: u128,
    hold_ms: u128,
}

impl KeptKey {
    fn value(&self, ended: bool) -> String {
        with_kept_line(&self.record, self.lease, self.until_ms, self.hold_ms, ended)
    }
}

/// Puts `value` into our key with `lease`, only if the key is still ours; whether it was. With
/// `ending`, the run's ending goes into its record in the same transaction (runs.rs).
async fn put_ours(
    conn: &Connection,
    place: &Place,
    value: String,
    lease: i64,
    ending: Option<&EndingOps>,
) -> Result<bool, Fault> {
    let mut ops = vec![RequestOp::put(place.key.as_str(), value, lease)];
    ops.extend(ending.iter().flat_map(|e| e.ours.iter().cloned()));
    let txn = TxnRequest::new(
        vec![Compare::created_at(place.key.as_str(), place.revision)],
        ops,
    )
    .otherwise(ending.map(|e| e.lost.clone()).unwrap_or_default());
    Ok(bounded(CALL_TIMEOUT, conn.client().txn(txn))
        .await?
        .succeeded)
}

/// Moves our just-owned key to a fresh lease of `request.min_hold` (none without one).
pub(super) async fn keep(
    conn: &Connection,
    place: &Place,
    request: &LockRequest,
    record: String,
) -> Result<Option<KeptKey>, Fault> {
    let Some(hold) = request.min_hold else {
        return Ok(None);
    };
    let secs = hold.as_secs() + u64::from(hold.subsec_nanos() > 0);
    let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
    let client = conn.client();
    let granted = SystemTime::now();
    let lease = bounded(CALL_TIMEOUT, client.grant(secs)).await?.id;
    let until = granted + Duration::from_secs(secs.unsigned_abs());
    let kept = KeptKey {
        lease,
        record,
        until_ms: until
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
        hold_ms: hold.as_millis(),
    };
    match put_ours(conn, place, kept.value(false), lease, None).await {
        Ok(true) => Ok(Some(kept)),
        // Gone already: `renew` finds the lock lost.
        Ok(false) => Ok(None),
        Err(fault) => {
            let _ = bounded(CALL_TIMEOUT, client.revoke(lease)).await;
            Err(fault)
        }
    }
}

/// While the command runs and our key lives by the min-hold's lease: how long that lease has
/// left by etcd's count; when no more than `margin`, moves our key back to our own lease, which
/// `renew` keeps alive (`None`: moved, or the lease is gone).
pub(super) async fn hand_back(
    conn: &Connection,
    place: &Place,
    kept: &KeptKey,
    margin: Duration,
) -> Result<Option<Duration>, Fault> {
    let left = bounded(CALL_TIMEOUT, conn.client().time_to_live(kept.lease)).await?;
    let left = Duration::from_secs(
        u64::try_from(super::place::believed_ttl(
            left,
            super::place::LONGEST_TTL_SECS,
        ))
        .unwrap_or(0),
    );
    if left > margin {
        return Ok(Some(left));
    }
    put_ours(conn, place, kept.record.clone(), place.lease, None).await?;
    Ok(None)
}

/// The command ended: our key moves to (or stays on) the min-hold's lease, marked ended, until
/// that lease ends, and the run's `ending` goes into its record. `Ok(None)` when that lease has
/// ended already (then release as without a min-hold: nothing was written), else whether the key
/// was still ours.
pub(super) async fn let_go(
    conn: &Connection,
    place: &Place,
    kept: &KeptKey,
    ending: &EndingOps,
) -> Result<Option<bool>, Fault> {
    match put_ours(conn, place, kept.value(true), kept.lease, Some(ending)).await {
        Err(fault) if fault.is_lease_not_found() => Ok(None),
        other => other.map(Some),
    }
}
