//! The ensemble's clock. Whether a kept node (`--min-hold`) has run out, and when a run record was
//! last written, are judged by ZooKeeper's time, never this machine's: a node's `ctime` is stamped
//! by the ensemble, so a node this client creates tells the ensemble's time at that moment, and
//! this machine's monotonic clock counts on from there only to say when to ask again.

use dlock_core::error;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::session::{retrying, Session};

/// The ensemble's time, as learnt from a node this client just created: its `ctime`, and when
/// the create's answer came on this machine's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub(super) struct EnsembleClock {
    ctime_ms: i64,
    at: Instant,
}

impl EnsembleClock {
    pub(super) fn from(stat: &zk::Stat) -> EnsembleClock {
        EnsembleClock {
            ctime_ms: stat.ctime,
            at: Instant::now(),
        }
    }

    /// The ensemble's time when it was asked, in milliseconds since the epoch: what judges a kept
    /// node's end. (Never `now_ms`, which adds this machine's clock to it: a caller whose clock runs
    /// fast would add too much, by the time the ask's cleanup took, say.)
    pub(super) fn asked_ms(&self) -> i64 {
        self.ctime_ms
    }

    /// The ensemble's time now by this machine's monotonic clock since it was asked, in
    /// milliseconds since the epoch: only to say when to ask again, and for people.
    pub(super) fn now_ms(&self) -> i64 {
        let since = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.ctime_ms.saturating_add(since)
    }

    /// When, on this machine's monotonic clock, the ensemble's time reaches `ms`.
    pub(super) fn instant_of(&self, ms: i64) -> Instant {
        let ahead = u64::try_from(ms.saturating_sub(self.ctime_ms)).unwrap_or(0);
        self.at + Duration::from_millis(ahead)
    }
}

/// The ensemble's time asked afresh, as a clock: the `ctime` of an ephemeral node made for the
/// purpose under the root (`.now-`: no lock name maps there, since names escape a leading dot)
/// and deleted again (or gone with the session).
pub(super) async fn ask_ensemble(session: &Session) -> error::Result<EnsembleClock> {
    let prefix = format!("{}/.now-", session.root);
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (stat, sequence) = retrying(|| session.client().create(&prefix, &[], &options))
        .await
        .map_err(|e| session.fail(e, "cannot ask ZooKeeper for its time"))?;
    let clock = EnsembleClock::from(&stat);
    let _ = session
        .client()
        .delete(&format!("{prefix}{sequence}"), None)
        .await;
    Ok(clock)
}

/// The ensemble's time, for `status` (see `ask_ensemble`).
pub(super) async fn ensemble_now_ms(session: &Session) -> error::Result<i64> {
    Ok(ask_ensemble(session).await?.ctime_ms)
}
