//! The concurrency group record of a lock (lock/group.rs) in the persistent node
//! `/dlock/.group/NAME`, beside the run records' directories (a directory starting with a dot is
//! no lock's, see `runs`), with the lock's ACL. Changed only at the version read (a
//! compare-and-set, tried again when another changed it in between); an empty node is no record
//! (nodes are emptied, not deleted). A holder reads it every `POLL_EVERY`.

use std::time::Duration;

use anyhow::anyhow;
use zookeeper_client as zk;

use super::naming::node_name;
use super::session::Session;
use super::{ZkBackend, QUERY_SESSION_TIMEOUT};
use dlock_core::backend::GroupRecords;
use dlock_core::exit::{FailWith, Failure};
use dlock_core::lock::LockName;

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
async fn read(session: &Session, path: &str) -> anyhow::Result<Option<(Option<String>, i32)>> {
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
) -> anyhow::Result<bool> {
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
    fn read(&self, name: &LockName) -> anyhow::Result<Option<String>> {
        let session = self.session(QUERY_SESSION_TIMEOUT)?;
        let path = path_of(&session, name);
        let read = session.runtime.block_on(read(&session, &path))?;
        Ok(read.and_then(|(text, _)| text))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> anyhow::Result<()> {
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
        Err(anyhow!(
            "the group record {path} kept changing under this dlock"
        ))
        .fail_with(Failure::BackendUnavailable)
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }
}
