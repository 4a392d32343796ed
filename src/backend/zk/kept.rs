//! `--min-hold` on ZooKeeper. A holder's node is ephemeral and goes with its session, so a lock
//! that must stay taken after its holder ended gets a second node: a *kept node*, persistent,
//! created once the lock is held, named `_k_<uuid>-<kind>0000000000` so that dlock and Curator
//! both sort it ahead of every queued node (Curator watches it like any node ahead of it), with the
//! holder's record and the min-hold in its data. An exclusive holder's kept `lock-` node has a kept
//! `__WRIT__` companion made with it in one request (recipe.rs), a seat's a `__READ__` one, for
//! Curator's read-write lock; the two are judged once and deleted together. It keeps the lock taken until its creation time
//! plus the min-hold, both by ZooKeeper's clock (the node's `ctime`, stamped by the ensemble).
//!
//! Nobody is there to delete it at that moment, so whoever finds it expired deletes it: a waiter
//! or an acquirer, or its holder at release if the min-hold has run out by then. This machine's
//! clocks only say when to look (an acquirer learns the ensemble's time from its own node's
//! `ctime` and counts on from there on its monotonic clock); before deleting, the end is judged by
//! the ensemble's time asked afresh (a short-lived node's `ctime`), so a caller whose clock runs
//! fast, monotonic clock included, cannot shorten the hold. A Curator client waiting behind an expired kept node gets in once a dlock
//! client next looks at the lock. `status` asks the ensemble for its time with a short-lived
//! ephemeral node under the root; `release --force` deletes kept nodes with the holders.

use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::acquisition::Acquisition;
use super::ensemble_clock::{ask_ensemble, EnsembleClock};
use super::naming::uuid;
use super::recipe::{kept_companion, kept_name, kept_to_judge, kept_with_companion, kind_of};
use super::record::NodeData;
use super::session::{retrying, Session};
use crate::lock::{time_from_millis, Holder, Kept, Token};

/// Whether the kept node at `path` has run out by the ensemble's time, asked now. Anything that
/// cannot be read counts as "not yet": the node then stays for a waiter to judge.
pub(super) async fn ran_out(session: &Session, path: &str) -> bool {
    let Some((dir, name)) = path.rsplit_once('/') else {
        return false;
    };
    let Some(kept) = KeptNode::read(session, dir, name).await else {
        return false;
    };
    match ask_ensemble(session).await {
        Ok(now) => kept.until_ms <= now.asked_ms(),
        Err(_) => false,
    }
}

/// How long a waiter that could not ask the ensemble for its time waits before looking again.
const ASK_AGAIN: Duration = Duration::from_secs(1);

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

/// The kept nodes among `names` that still keep the lock, and when the first of them ends on this
/// machine's monotonic clock (when to look again). `clock` only says which ones may have run out:
/// those are judged by the ensemble's time, asked afresh (`clock` becomes that), and deleted if
/// they have (a node someone else deleted first is fine).
pub(super) async fn live(
    acquisition: &Acquisition,
    names: &[String],
    clock: &mut EnsembleClock,
) -> (Vec<String>, Option<Instant>) {
    let mut live = Vec::new();
    let mut first_end: Option<Instant> = None;
    // Whether `clock` was asked afresh in this call; `None`: asking failed.
    let mut fresh = Some(false);
    for name in kept_to_judge(names) {
        let Some(kept) = KeptNode::read(&acquisition.session, &acquisition.dir, name).await else {
            continue;
        };
        if kept.until_ms <= clock.now_ms() && fresh == Some(false) {
            fresh = match ask_ensemble(&acquisition.session).await {
                Ok(now) => {
                    *clock = now;
                    Some(true)
                }
                Err(_) => None,
            };
        }
        if kept.until_ms <= clock.now_ms() && fresh.is_none() {
            // Not judged: it keeps the lock until the ensemble can tell.
            let end = Instant::now() + ASK_AGAIN;
            first_end = Some(first_end.map_or(end, |f| f.min(end)));
            live.push(kept.name);
            continue;
        }
        // Judged by the ensemble's time as asked (in this call), never by this machine's clock.
        if fresh == Some(true) && kept.until_ms <= clock.asked_ms() {
            let paths = kept_with_companion(&acquisition.dir, name, names);
            let _ = acquisition.session.delete_together(&paths).await;
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
    let kind = kind_of(acquisition.request.mode).0;
    let path = acquisition.path(&kept_name(&uuid()?, kind));
    let data = NodeData::kept(&acquisition.request, hold, token)?;
    let options =
        zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acquisition.session.acls.lock));
    let client = acquisition.client();
    // Made again after a connection loss: one that got there before is ours (NodeExists).
    let created = match kept_companion(&path) {
        None => retrying(|| client.create(&path, &data, &options))
            .await
            .map(|_| ()),
        Some(companion) => {
            retrying(|| {
                let mut writer = client.new_multi_writer();
                let added = writer
                    .add_create(&path, &data, &options)
                    .and_then(|()| writer.add_create(&companion, &data, &options));
                let commit = added.map(|()| writer.commit());
                async move { Ok(commit?.await.map(|_| ())?) }
            })
            .await
        }
    };
    match created {
        Ok(()) | Err(zk::Error::NodeExists) => Ok(path),
        Err(e) => Err(acquisition.fail(e, &format!("cannot create {path} for --min-hold"))),
    }
}
