//! What a holder's node says: the JSON record dlock writes into its nodes, and the reading of the
//! nodes in a lock's directory back into holders for `status`, `list`, `release --force` and a
//! waiter's report. The data of a node is written by whoever created it, so it is checked field by
//! field; the node's name, not its data, decides who owns the lock.
//!
//! A kept node's (`--min-hold`, kept.rs) record says when it ends: `KeptNode` reads it, and the
//! ensemble's time judges whether it still keeps the lock, for `status` (`read_kept`), a waiter
//! (`live_kept`) and its holder at release (`kept_ran_out`); one that has run out is deleted.

use dlock_core::error;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use zookeeper_client as zk;

use super::ensemble_clock::{ask_ensemble, ensemble_now_ms, EnsembleClock};
use super::nodes::{foreign_holder, read_children};
use super::recipe::{
    curator_mutex_first, grant_node, is_kept, kept_to_judge, kept_with_companion, owners, queue,
    Child, Kind,
};
use super::semaphores::semaphores;
use super::session::{retrying, Session};
use dlock_core::lock::{
    escaped, host_name, time_from_millis, Holder, Kept, LockRequest, Mode, Waiter,
};

/// What dlock writes into its nodes, for status and list.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct NodeData {
    dlock: u32,
    mode: String,
    host: String,
    pid: u32,
    owner: String,
    /// Seconds since the Unix epoch when the node was created.
    since: u64,
    /// `--message`; left out when none, so nodes without one read as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// `--min-hold` in milliseconds, in a kept node's data only (kept.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) kept_ms: Option<u64>,
    /// The holder's token (its node's creation zxid), in a kept node's data only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) token: Option<u64>,
}

impl NodeData {
    /// The record of a node queued for `request`, by this process, now.
    pub(super) fn of(request: &LockRequest) -> error::Result<Vec<u8>> {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        Ok(serde_json::to_vec(&NodeData {
            dlock: 1,
            mode: request.mode.to_wire(),
            host: host_name(),
            pid: dlock_core::lock::acting_for::record_pid(),
            owner: request.owner.clone(),
            since,
            message: request.message.clone(),
            kept_ms: None,
            token: None,
        })?)
    }

    /// The record of a kept node for `request`, which holds the lock now (kept.rs).
    pub(super) fn kept(
        request: &LockRequest,
        hold: Duration,
        token: u64,
    ) -> error::Result<Vec<u8>> {
        let mut data: NodeData = serde_json::from_slice(&NodeData::of(request)?)?;
        data.kept_ms = Some(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX));
        data.token = Some(token);
        Ok(serde_json::to_vec(&data)?)
    }

    /// The holder this record names, if every field is within bounds.
    pub(super) fn holder(&self) -> Option<Holder> {
        let mode = Mode::from_wire(&self.mode)?;
        Holder::checked(
            mode,
            &self.owner,
            &self.host,
            self.pid,
            self.since,
            self.token,
        )?
        .with_message(self.message.as_deref())
    }

    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    pub(super) fn parse(data: &[u8]) -> Option<NodeData> {
        serde_json::from_slice::<NodeData>(data)
            .ok()
            .filter(|d| d.dlock == 1)
    }
}

/// The holder a node stands for. Any client may write a node's data (under open ACLs), so dlock's
/// own JSON is checked field by field, and data that says it is dlock's but does not read is shown
/// as unreadable; a node not written by dlock (Curator's) says what it can. The node's name decides
/// who owns the lock, so data that names another mode than the name does is unreadable too.
pub(super) fn holder_of(child: &Child, data: &[u8], stat: &zk::Stat) -> Holder {
    let token = u64::try_from(stat.czxid).ok();
    let by_kind = match child.kind {
        Kind::Shared => Mode::Shared,
        Kind::Exclusive | Kind::Seat => Mode::Exclusive,
    };
    if written_by_dlock(data) {
        let readable = NodeData::parse(data).and_then(|d| {
            let mode = Mode::from_wire(&d.mode)?;
            let fits = match mode {
                Mode::Exclusive => child.kind == Kind::Exclusive,
                Mode::Shared => child.kind == Kind::Shared,
                Mode::Limit(_) => child.kind == Kind::Seat,
            };
            fits.then(|| Holder::checked(mode, &d.owner, &d.host, d.pid, d.since, token))??
                .with_message(d.message.as_deref())
        });
        return readable
            .unwrap_or_else(|| Holder::unreadable(by_kind, "", &String::from_utf8_lossy(data)));
    }
    foreign_holder(
        by_kind,
        format!("(not dlock: {})", escaped(&child.name, 100)),
        data,
        stat,
    )
}

/// Whether a node's data says it is dlock's (whether or not the rest of it reads).
fn written_by_dlock(data: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(data).is_ok_and(|j| j.get("dlock").is_some())
}

/// The current owners of the lock in `dir` with what their nodes say, in queue order.
///
/// `status` passes no `known`: every node is read, and each seat counts with its own limit. An
/// acquirer passes the listing it has just judged by and its own limit: only the nodes that
/// listing could show as owners are read, in one request.
pub(super) async fn holders(
    session: &Session,
    dir: &str,
    known: Option<(&[String], u32)>,
) -> error::Result<Vec<(String, Holder)>> {
    let queue = read_queue(session, dir, known).await?;
    let mut holders: Vec<(String, Holder)> = queue
        .owning
        .iter()
        .map(|&i| {
            let (child, data, stat) = &queue.present[i];
            (child.name.clone(), holder_of(child, data, stat))
        })
        .collect();
    for node in queue.kept {
        match holders
            .iter_mut()
            .find(|(_, h)| h.owner == node.data.owner())
        {
            Some((_, holder)) => node.mark(holder, false),
            None => holders.extend(node.holder().map(|h| (node.name.clone(), h))),
        }
    }
    Ok(holders)
}

/// The ensemble's time, asked only when there are kept nodes to judge.
async fn ensemble_now(session: &Session, kept: &[String]) -> error::Result<Option<i64>> {
    if kept.is_empty() {
        return Ok(None);
    }
    Ok(Some(ensemble_now_ms(session).await?))
}

/// The kept nodes among `names` that still keep the lock at `now` (ensemble milliseconds; `None`:
/// all of them). One found expired is deleted on the way, as a waiter would: a Curator client
/// waiting behind it gets in then, and `status` counts as a dlock client looking at the lock.
async fn read_kept(
    session: &Session,
    dir: &str,
    names: &[String],
    now: Option<i64>,
) -> Vec<KeptNode> {
    let mut kept = Vec::new();
    for name in kept_to_judge(names) {
        if let Some(node) = KeptNode::read(session, dir, name).await {
            match now {
                Some(now) if node.until_ms <= now => {
                    session
                        .discard_all(&kept_with_companion(dir, name, names))
                        .await;
                }
                _ => kept.push(node),
            }
        }
    }
    kept
}

/// For `status` and `list`: the owners of the lock in `dir` and, after them, the nodes still in
/// line, each in queue order; then other clients' semaphores on it (semaphores.rs).
pub(super) async fn holders_and_waiters(
    session: &Session,
    dir: &str,
) -> error::Result<(Vec<Holder>, Vec<Waiter>)> {
    let queue = read_queue(session, dir, None).await?;
    let mut holders = Vec::new();
    let mut waiters = Vec::new();
    for (i, (child, data, stat)) in queue.present.iter().enumerate() {
        let node = holder_of(child, data, stat);
        if queue.owning.contains(&i) {
            holders.push(node);
        } else {
            waiters.push(Waiter::from(node));
        }
    }
    for node in queue.kept {
        match holders.iter_mut().find(|h| h.owner == node.data.owner()) {
            Some(holder) => node.mark(holder, false),
            None => holders.extend(node.holder()),
        }
    }
    let (leases, acquirers) = semaphores(session, dir, &queue.listed).await?;
    holders.extend(leases);
    waiters.extend(acquirers);
    Ok((holders, waiters))
}

/// A lock's directory as read: its queue nodes still there, in queue order, with their data; which
/// of them own the lock; and the kept nodes (kept.rs) that still keep it.
struct ReadQueue {
    /// The directory's children as listed.
    listed: Vec<String>,
    present: Vec<(Child, Vec<u8>, zk::Stat)>,
    owning: Vec<usize>,
    kept: Vec<KeptNode>,
}

/// Reads the lock in `dir` (see `holders` for `known`). A kept node whose holder has ended stands
/// ahead of every queued node, as it does for an acquirer (wait.rs), so the first waiter behind
/// it is a waiter, not an owner; the kept node of a holder still there stands for nothing more
/// than that holder's own node.
async fn read_queue(
    session: &Session,
    dir: &str,
    known: Option<(&[String], u32)>,
) -> error::Result<ReadQueue> {
    let listed = match known {
        Some((names, _)) => names.to_vec(),
        None => session.children(dir).await?,
    };
    let (kept_names, names): (Vec<String>, Vec<String>) =
        listed.iter().cloned().partition(|n| is_kept(n));
    // An acquirer's listing holds only kept nodes it found still keeping the lock.
    let now = match known {
        Some(_) => None,
        None => ensemble_now(session, &kept_names).await?,
    };
    let kept = read_kept(session, dir, &kept_names, now).await;
    let (candidates, limit) = match known {
        Some((_, limit)) => {
            // Whoever could own the lock, whether or not a kept node turns out to stand ahead.
            let all = queue(&names);
            let with_kept = queue(&listed);
            let mut owning: Vec<Child> = owners(&all, |_| limit)
                .into_iter()
                .map(|i| all[i].clone())
                .collect();
            for i in owners(&with_kept, |_| limit) {
                if !is_kept(&with_kept[i].name) && !owning.contains(&with_kept[i]) {
                    owning.push(with_kept[i].clone());
                }
            }
            owning.sort_by_key(|c| c.sequence);
            (owning, Some(limit))
        }
        None => (queue(&names), None),
    };
    let present = read_nodes(session, dir, &candidates, &listed).await?;
    // The kept nodes whose holders have ended, ahead of the queue.
    let standing: Vec<&KeptNode> = kept
        .iter()
        .filter(|k| {
            !present.iter().any(|(_, data, _)| {
                NodeData::parse(data).is_some_and(|d| d.owner() == k.data.owner())
            })
        })
        .collect();
    let ahead: Vec<(Child, Option<u32>)> = standing
        .iter()
        .filter_map(|k| Some((Child::parse(&k.name)?, limit_in(&k.data))))
        .collect();
    let line: Vec<Child> = ahead
        .iter()
        .map(|(c, _)| c.clone())
        .chain(present.iter().map(|(c, _, _)| c.clone()))
        .collect();
    let limit_of = |i: usize| {
        let own = match i.checked_sub(ahead.len()) {
            None => ahead[i].1,
            Some(j) => NodeData::parse(&present[j].1).and_then(|d| limit_in(&d)),
        };
        own.or(limit).unwrap_or(1)
    };
    let mut owning: Vec<usize> = owners(&line, limit_of)
        .into_iter()
        .filter_map(|i| i.checked_sub(ahead.len()))
        .collect();
    // Curator's mutex waits only for `lock-` nodes: first among them, it holds beside shared
    // holders and seats, which dlock's judgement would make it wait for.
    if known.is_none() {
        let first = curator_mutex_first(&listed);
        let holding = present
            .iter()
            .position(|(child, data, _)| Some(&child.name) == first && !written_by_dlock(data));
        if let Some(i) = holding.filter(|i| !owning.contains(i)) {
            owning.push(i);
            owning.sort_unstable();
        }
    }
    Ok(ReadQueue {
        listed,
        present,
        owning,
        kept,
    })
}

/// The limit of a `--limit` holder's record.
fn limit_in(data: &NodeData) -> Option<u32> {
    match Mode::from_wire(&data.mode) {
        Some(Mode::Limit(n)) => Some(n),
        _ => None,
    }
}

/// The data of `queue`'s nodes in one multi-read (a consistent view); a node gone between the
/// listing and the read no longer holds anything and is left out. The stat of a node that took
/// its token at its grant (its grant node among `listed`: acquisition.rs, `take_token`) says that
/// token as its `czxid`, read in the same request, so that a holder is shown with the token it got.
async fn read_nodes(
    session: &Session,
    dir: &str,
    queue: &[Child],
    listed: &[String],
) -> error::Result<Vec<(Child, Vec<u8>, zk::Stat)>> {
    let grants: Vec<Option<String>> = queue
        .iter()
        .map(|child| Some(grant_node(&child.name)).filter(|g| listed.contains(g)))
        .collect();
    let names: Vec<&str> = queue
        .iter()
        .map(|c| c.name.as_str())
        .chain(grants.iter().flatten().map(String::as_str))
        .collect();
    let mut read = read_children(session, dir, &names).await?.into_iter();
    let nodes: Vec<_> = read.by_ref().take(queue.len()).collect();
    let mut present = Vec::new();
    for ((child, node), grant) in queue.iter().zip(nodes).zip(&grants) {
        let granted = grant.as_ref().and_then(|_| read.next()).flatten();
        if let Some((data, mut stat)) = node {
            if let Some((_, grant)) = granted {
                if grant.czxid > 0 {
                    stat.czxid = grant.czxid;
                }
            }
            present.push((child.clone(), data, stat));
        }
    }
    Ok(present)
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

/// For its holder at release: whether the kept node at `path` has run out by the ensemble's time,
/// asked now. Anything that cannot be read counts as "not yet": the node then stays for a waiter
/// to judge.
pub(super) async fn kept_ran_out(session: &Session, path: &str) -> bool {
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

/// For a waiter: the kept nodes among `names` (in `dir`) that still keep the lock, and when the
/// first of them ends on this machine's monotonic clock (when to look again). `clock` only says
/// which ones may have run out: those are judged by the ensemble's time, asked afresh (`clock`
/// becomes that), and deleted if they have (a node someone else deleted first is fine).
pub(super) async fn live_kept(
    session: &Session,
    dir: &str,
    names: &[String],
    clock: &mut EnsembleClock,
) -> (Vec<String>, Option<Instant>) {
    let mut live = Vec::new();
    let mut first_end: Option<Instant> = None;
    // Whether `clock` was asked afresh in this call; `None`: asking failed.
    let mut fresh = Some(false);
    for name in kept_to_judge(names) {
        let Some(kept) = KeptNode::read(session, dir, name).await else {
            continue;
        };
        if kept.until_ms <= clock.now_ms() && fresh == Some(false) {
            fresh = match ask_ensemble(session).await {
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
            let paths = kept_with_companion(dir, name, names);
            let _ = session.delete_together(&paths).await;
            continue;
        }
        let end = clock.instant_of(kept.until_ms);
        first_end = Some(first_end.map_or(end, |f| f.min(end)));
        live.push(kept.name);
    }
    (live, first_end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_data_round_trips_and_foreign_nodes_still_show() {
        let data = serde_json::to_vec(&NodeData {
            dlock: 1,
            mode: "limit:3".into(),
            host: "box".into(),
            pid: 7,
            owner: "ab".into(),
            since: 1_700_000_000,
            message: None,
            kept_ms: None,
            token: None,
        })
        .unwrap();
        let stat = zk::Stat {
            czxid: 42,
            mzxid: 42,
            pzxid: 42,
            ctime: 1_700_000_000_500,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 1,
            data_length: 0,
            num_children: 0,
        };
        let child = Child::parse("_c_x-__SEAT__0000000001").unwrap();
        let h = holder_of(&child, &data, &stat);
        assert_eq!(
            (h.mode, h.pid, h.token),
            (Mode::Limit(3), Some(7), Some(42))
        );
        let curator = Child::parse("_c_y-lock-0000000002").unwrap();
        let h = holder_of(&curator, b"10.1.2.3", &stat);
        assert_eq!(
            (h.mode, h.host.as_deref(), h.token, h.pid),
            (Mode::Exclusive, Some("10.1.2.3"), Some(42), None)
        );
        assert!(h.owner.contains("not dlock"));
        // Written by another client: out of range, or a mode the node's name contradicts.
        let exclusive = Child::parse("_c_z-lock-0000000003").unwrap();
        for forged in [
            r#"{"dlock":1,"mode":"exclusive","host":"h","pid":2,"owner":"ab","since":99999999999999}"#,
            r#"{"dlock":1,"mode":"exclusive","host":"h","pid":2,"owner":"ab","since":1e300}"#,
            r#"{"dlock":1,"mode":"exclusive","host":"h","pid":-2,"owner":"ab","since":1}"#,
            r#"{"dlock":1,"mode":"shared","host":"h","pid":2,"owner":"ab","since":1}"#,
            r#"{"dlock":1,"mode":"exclusive","host":"\u001b[2J","pid":2,"owner":"ab","since":1}"#,
            r#"{"dlock":"x"}"#,
        ] {
            let h = holder_of(&exclusive, forged.as_bytes(), &stat);
            assert_eq!(h.mode, Mode::Exclusive, "{forged}");
            assert!(h.describe().contains("unreadable record"), "{forged}");
            assert!(!h.describe().contains('\u{1b}'), "{forged}");
        }
        let stat = zk::Stat {
            ctime: i64::MAX,
            czxid: -1,
            ..stat
        };
        let h = holder_of(&curator, b"\x1b[2J", &stat);
        assert_eq!((h.host, h.since, h.token), (None, None, None));
    }
}
