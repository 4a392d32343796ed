//! `--min-hold` on ZooKeeper. A holder's node is ephemeral and goes with its session, so a lock
//! that must stay taken after its holder ended gets a second node: a *kept node*, persistent,
//! created once the lock is held, named `_k_<uuid>-<kind>0000000000` so that dlock and Curator
//! both sort it ahead of every queued node (Curator watches it like any node ahead of it), with the
//! holder's record and the min-hold in its data. It keeps the lock taken until its creation time
//! plus the min-hold, both by ZooKeeper's clock (the node's `ctime`, stamped by the ensemble).
//!
//! Nobody is there to delete it at that moment, so whoever finds it expired deletes it: a waiter
//! or an acquirer (which learns the ensemble's time from its own node's `ctime`, and then counts
//! on its own monotonic clock, never its wall clock), or its holder at release if the min-hold has
//! run out by then. A Curator client waiting behind an expired kept node gets in once a dlock
//! client next looks at the lock. `status` asks the ensemble for its time with a short-lived
//! ephemeral node under the root; `release --force` deletes kept nodes with the holders.

use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::acquisition::Acquisition;
use super::naming::uuid;
use super::record::NodeData;
use super::session::{retrying, Session};
use crate::lock::{time_from_millis, Holder, Kept, Token};

/// What marks a kept node's name (dlock's queue nodes start with Curator's `_c_`).
const KEPT_PREFIX: &str = "_k_";

/// Whether `name` is a kept node.
pub(super) fn is_kept(name: &str) -> bool {
    name.starts_with(KEPT_PREFIX)
}

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

    /// The ensemble's time now, in milliseconds since the epoch.
    pub(super) fn now_ms(&self) -> i64 {
        let since = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.ctime_ms.saturating_add(since)
    }

    /// When, on this machine's monotonic clock, the ensemble's time reaches `ms`.
    fn instant_of(&self, ms: i64) -> Instant {
        let ahead = u64::try_from(ms.saturating_sub(self.ctime_ms)).unwrap_or(0);
        self.at + Duration::from_millis(ahead)
    }
}

/// A kept node as read: its name, record and end (ensemble milliseconds).
pub(super) struct KeptNode {
    pub(super) name: String,
    pub(super) data: NodeData,
    pub(super) until_ms: i64,
}

impl KeptNode {
    /// Reads the kept node `name` in `dir`; `None` when it is gone or not dlock's (then it keeps
    /// nothing: a node only dlock writes, with a min-hold in its data, counts).
    pub(super) async fn read(session: &Session, dir: &str, name: &str) -> Option<KeptNode> {
        let path = format!("{dir}/{name}");
        let (data, stat) = retrying(|| session.client().get_data(&path)).await.ok()?;
        let data = NodeData::parse(&data)?;
        let hold = i64::try_from(data.kept_ms?).ok()?;
        Some(KeptNode {
            name: name.to_owned(),
            until_ms: stat.ctime.saturating_add(hold),
            data,
        })
    }

    /// The holder it stands for, once its own holder has ended.
    pub(super) fn holder(&self) -> Option<Holder> {
        let mut holder = self.data.holder()?;
        self.mark(&mut holder, true);
        Some(holder)
    }

    /// Marks `holder` as kept by this node (`ended`: only the min-hold keeps the lock now).
    pub(super) fn mark(&self, holder: &mut Holder, ended: bool) {
        holder.kept_until = u64::try_from(self.until_ms).ok().and_then(time_from_millis);
        holder.kept = Some(Kept {
            min_hold: self.data.kept_ms.map(Duration::from_millis),
            ended,
        });
    }
}

/// The kept nodes among `names` that still keep the lock by `clock`, and when the first of them
/// ends on this machine's monotonic clock. Expired ones are deleted on the way (a node someone else
/// deleted first is fine).
pub(super) async fn live(
    acquisition: &Acquisition,
    names: &[String],
    clock: &EnsembleClock,
) -> (Vec<String>, Option<Instant>) {
    let mut live = Vec::new();
    let mut first_end: Option<Instant> = None;
    for name in names.iter().filter(|n| is_kept(n)) {
        let Some(kept) = KeptNode::read(&acquisition.session, &acquisition.dir, name).await else {
            continue;
        };
        if kept.until_ms <= clock.now_ms() {
            let path = acquisition.path(name);
            let _ = retrying(|| acquisition.client().delete(&path, None)).await;
            continue;
        }
        let end = clock.instant_of(kept.until_ms);
        first_end = Some(first_end.map_or(end, |f| f.min(end)));
        live.push(kept.name);
    }
    (live, first_end)
}

/// Creates the kept node of an acquisition that now holds the lock; returns its path.
pub(super) async fn create(
    acquisition: &Acquisition,
    hold: Duration,
    token: Token,
) -> anyhow::Result<String> {
    let kind = super::recipe::kind_of(acquisition.request.mode).0;
    let path = acquisition.path(&format!("{KEPT_PREFIX}{}-{kind}0000000000", uuid()?));
    let data = NodeData::kept(&acquisition.request, hold, token)?;
    let options =
        zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acquisition.session.acls.lock));
    retrying(|| acquisition.client().create(&path, &data, &options))
        .await
        .map_err(|e| acquisition.fail(e, &format!("cannot create {path} for --min-hold")))?;
    Ok(path)
}

/// The ensemble's time, for `status`: the `ctime` of an ephemeral node made for the purpose under
/// the root (`.now-`: no lock name maps there, since names escape a leading dot) and deleted again
/// (or gone with the session).
pub(super) async fn ensemble_now_ms(session: &Session) -> anyhow::Result<i64> {
    let prefix = format!("{}/.now-", session.root);
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (stat, sequence) = retrying(|| session.client().create(&prefix, &[], &options))
        .await
        .map_err(|e| session.fail(e, "cannot ask ZooKeeper for its time"))?;
    let _ = session
        .client()
        .delete(&format!("{prefix}{sequence}"), None)
        .await;
    Ok(stat.ctime)
}
