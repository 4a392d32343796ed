//! `--min-hold` on ZooKeeper. A holder's node is ephemeral and goes with its session, so a lock
//! that must stay taken after its holder ended gets a second node: a *kept node*, persistent,
//! created once the lock is held (`create`, here), named `_k_<uuid>-<kind>0000000000` so that dlock
//! and Curator both sort it ahead of every queued node (Curator watches it like any node ahead of
//! it), with the holder's record and the min-hold in its data. An exclusive holder's kept `lock-`
//! node has a kept `__WRIT__` companion made with it in one request, a seat's a `__READ__` one, for
//! Curator's read-write lock; the two are judged once and deleted together (their names:
//! recipe.rs). It keeps the lock taken until its creation time plus the min-hold, both by
//! ZooKeeper's clock (the node's `ctime`, stamped by the ensemble).
//!
//! Nobody is there to delete it at that moment, so whoever finds it expired deletes it: a waiter
//! or an acquirer, or its holder at release if the min-hold has run out by then. This machine's
//! clocks only say when to look (an acquirer learns the ensemble's time from its own node's
//! `ctime` and counts on from there on its monotonic clock); before deleting, the end is judged by
//! the ensemble's time asked afresh (a short-lived node's `ctime`: ensemble_clock.rs), so a caller
//! whose clock runs fast, monotonic clock included, cannot shorten the hold. A Curator client
//! waiting behind an expired kept node gets in once a dlock client next looks at the lock.
//! `status` asks the ensemble for its time with a short-lived ephemeral node under the root;
//! `release --force` deletes kept nodes with the holders. Reading a kept node and judging its end
//! are record.rs's (`KeptNode`, `live_kept`, `kept_ran_out`).

use dlock_core::error;
use std::time::Duration;

use zookeeper_client as zk;

use super::acquisition::Acquisition;
use super::naming::uuid;
use super::recipe::{kept_companion, kept_name, kind_of};
use super::record::NodeData;
use super::session::retrying;
use dlock_core::lock::Token;

/// Creates the kept node of an acquisition that now holds the lock; returns its path.
pub(super) async fn create(
    acquisition: &Acquisition,
    hold: Duration,
    token: Token,
) -> error::Result<String> {
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
