//! The concurrency group record of a lock (lock/group.rs) in the persistent node
//! `/dlock/.group/NAME`, beside the run records' directories (a directory starting with a dot is
//! no lock's, see `runs`), with the lock's ACL. Changed only at the version read (a
//! compare-and-set, tried again when another changed it in between); an empty node is no record
//! (nodes are emptied, not deleted).
//!
//! A holder hears of a request to cancel it from ZooKeeper's watches: a thread of its own keeps
//! one on each of its records' nodes (an exists watch, which a node not there yet also takes),
//! on the backend's session, and sets it again after each event, which is a word to read the
//! records; so is the moment every watch first stands (a request made before would otherwise
//! wait for the next read). It reads them every second besides, and every `POLL_EVERY` where no
//! watch could be set.

use std::sync::Arc;
use std::time::Duration;

use dlock_core::error;
use dlock_core::error::FailAs;
use zookeeper_client as zk;

use super::address::ZkUrl;
use super::naming::node_name;
use super::session::{cancellable, retrying, Session};
use super::{ZkBackend, QUERY_SESSION_TIMEOUT};
use dlock_core::backend::stop::Stop;
use dlock_core::backend::{GroupRecords, Hearing, OnChange, Wanted, POLL_WHILE_HEARING};
use dlock_core::lock::LockName;
use dlock_sys::sync::lock;

/// The directory of the group records, under `/dlock`.
const GROUP: &str = ".group";

/// How often a holder reads its group records.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// Most tries of a change that others' changes keep beating: each lost try means another run
/// made progress, so this is never reached in practice.
const MAX_TRIES: usize = 100;

fn path_of(session: &Session, name: &LockName) -> String {
    format!("{}/{GROUP}/{}", session.root, node_name(name))
}

/// The record's text and the node's version; `None` when there is no node.
async fn read(session: &Session, path: &str) -> error::Result<Option<(Option<String>, i32)>> {
    match session.client().get_data(path).await {
        Ok((data, stat)) => {
            let text = String::from_utf8(data).ok().filter(|t| !t.is_empty());
            Ok(Some((text, stat.version)))
        }
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(session.fail(e, &format!("cannot read {path}"))),
    }
}

/// Writes `data` at `path` if the node is still at `version` (`None`: there is no node; then it is
/// made, with its directory if missing). False when another changed it first.
async fn swap(
    session: &Session,
    path: &str,
    version: Option<i32>,
    data: &[u8],
) -> error::Result<bool> {
    let client = session.client();
    let fail = |e| session.fail(e, &format!("cannot write {path}"));
    let Some(version) = version else {
        let node = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&session.acls.lock));
        let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&session.acls.root));
        match client.create(path, data, &node).await {
            Ok(_) => return Ok(true),
            Err(zk::Error::NodeExists) => return Ok(false),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(fail(e)),
        }
        // The chroot, `/dlock` and `.group`, as far as missing, in order (before any lock was
        // taken here, none may exist); one that exists, or is someone else's, is fine.
        let parent = path.rsplit_once('/').map_or(path, |(p, _)| p);
        let mut at = String::new();
        for part in parent.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            match client.create(&at, &[], &dir).await {
                Ok(_) | Err(zk::Error::NodeExists) | Err(zk::Error::NoAuth) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        return match client.create(path, data, &node).await {
            Ok(_) => Ok(true),
            Err(zk::Error::NodeExists) => Ok(false),
            Err(e) => Err(fail(e)),
        };
    };
    match client.set_data(path, data, Some(version)).await {
        Ok(_) => Ok(true),
        Err(zk::Error::BadVersion | zk::Error::NoNode) => Ok(false),
        Err(e) => Err(fail(e)),
    }
}

impl GroupRecords for ZkBackend {
    fn read(&self, name: &LockName) -> error::Result<Option<String>> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        let path = path_of(&session, name);
        let read = session.runtime.block_on(read(&session, &path))?;
        Ok(read.and_then(|(text, _)| text))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> error::Result<()> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        let path = path_of(&session, name);
        for _ in 0..MAX_TRIES {
            let read = session.runtime.block_on(read(&session, &path))?;
            let old = read.as_ref().and_then(|(text, _)| text.clone());
            let new = change(old.as_deref());
            if new == old {
                return Ok(());
            }
            let version = read.map(|(_, version)| version);
            let data = new.unwrap_or_default().into_bytes();
            if session
                .runtime
                .block_on(swap(&session, &path, version, &data))?
            {
                return Ok(());
            }
        }
        Err(error!(
            "the group record {path} kept changing under this dlock"
        ))
        .unavailable()
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }

    fn hear_changes(&self, names: &[LockName], changed: OnChange) -> Option<Hearing> {
        let names = names.to_vec();
        // The backend's session, which a holder has (it enlisted before it waited): no session
        // more for the ensemble to keep. Without one, the listener opens one on its own thread:
        // this must not wait on the ensemble.
        let opened = lock(&self.session).clone();
        let (url, connect_timeout) = (self.url.clone(), self.connect_timeout);
        Hearing::on_thread("zk group records", POLL_WHILE_HEARING, move |wanted| {
            let opened = opened.or_else(|| listeners_session(&url, connect_timeout, wanted));
            let Some(session) = opened else {
                return;
            };
            let paths: Vec<String> = names.iter().map(|name| path_of(&session, name)).collect();
            let listening = cancellable(listen(&session, &paths, &changed, wanted), || {
                wanted.still()
            });
            session.runtime.block_on(listening);
        })
    }
}

/// A session of a listener's own, given up once it is no longer wanted.
fn listeners_session(
    url: &ZkUrl,
    connect_timeout: Duration,
    wanted: &Wanted,
) -> Option<Arc<Session>> {
    let wanted = wanted.clone();
    let unwanted = Stop::when(move || !wanted.still());
    let session = Session::open(url, QUERY_SESSION_TIMEOUT, connect_timeout, &unwanted).ok()?;
    Some(Arc::new(session))
}

/// Calls `changed` for each event of a watch on `paths`, and once when every watch first stands,
/// until one cannot be set again or the session ends (quietly: the holder still reads every
/// second).
async fn listen(session: &Session, paths: &[String], changed: &dyn Fn(), wanted: &Wanted) {
    let mut watches = tokio::task::JoinSet::new();
    for (i, path) in paths.iter().enumerate() {
        let Ok(watch) = watch(session, path).await else {
            return;
        };
        watches.spawn(async move { (i, watch.changed().await) });
    }
    wanted.listening();
    changed();
    // Each turn takes one event, until the session ends or a watch cannot be set.
    while let Some(Ok((i, event))) = watches.join_next().await {
        if event.event_type == zk::EventType::Session {
            return;
        }
        // Set again before the word, so that no change after the read it sets off goes unseen.
        let Ok(watch) = watch(session, &paths[i]).await else {
            return;
        };
        watches.spawn(async move { (i, watch.changed().await) });
        changed();
    }
}

/// A one-shot watch on the node at `path`, there or not.
async fn watch(session: &Session, path: &str) -> Result<zk::OneshotWatcher, zk::Error> {
    let (_, watch) = retrying(|| session.client().check_and_watch_stat(path)).await?;
    Ok(watch)
}
