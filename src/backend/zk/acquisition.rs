//! One acquisition: taking a place in a lock's queue (the node, created with its protected prefix
//! so that a connection loss during the create does not lose it, and the directories above it),
//! and leaving it when the acquisition ends without a lease.

use std::sync::Arc;

use anyhow::anyhow;
use zookeeper_client as zk;

use super::kept::EnsembleClock;
use super::lease::ZkLease;
use super::naming::uuid;
use super::recipe::kind_of;
use super::record::{holders, NodeData};
use super::session::{is_connection_loss, retrying, Session};
use super::MAX_RETRIES;
use crate::backend::Waiting;
use crate::exit::{FailWith, Failure};
use crate::lock::{Holder, LockRequest, Token};

/// How one acquisition ended.
pub(super) enum Outcome {
    Acquired(ZkLease),
    /// Held by others (an attempt that does not wait); our node is gone again.
    Busy(Vec<Holder>),
    Cancelled,
}

/// One acquisition: the node it creates and everything needed to wait for its turn.
pub(super) struct Acquisition {
    pub(super) session: Arc<Session>,
    pub(super) request: LockRequest,
    pub(super) dir: String,
    /// `_c_<uuid>-`: finds our node again after a connection loss during the create.
    protection: String,
    kind: &'static str,
    data: Vec<u8>,
    pub(super) limit: u32,
}

impl Acquisition {
    pub(super) fn new(session: Arc<Session>, request: LockRequest) -> anyhow::Result<Acquisition> {
        let (kind, limit) = kind_of(request.mode);
        let data = NodeData::of(&request)?;
        Ok(Acquisition {
            dir: session.dir(&request.name),
            session,
            request,
            protection: format!("_c_{}-", uuid()?),
            kind,
            data,
            limit,
        })
    }

    pub(super) fn client(&self) -> &zk::Client {
        self.session.client()
    }

    pub(super) fn fail(&self, e: zk::Error, doing: &str) -> anyhow::Error {
        self.session.fail(e, doing)
    }

    /// The path of `node` in the lock's directory.
    pub(super) fn path(&self, node: &str) -> String {
        format!("{}/{node}", self.dir)
    }

    /// Queue up, then wait for our turn (`waiting`) or give up at once (`None`). A node that ends
    /// without a lease is deleted.
    pub(super) async fn run(&self, waiting: Option<&Waiting>) -> anyhow::Result<Outcome> {
        if waiting.is_some_and(Waiting::is_cancelled) {
            return Ok(Outcome::Cancelled);
        }
        let (node, token, listing, clock) = self.enqueue().await?;
        let outcome = self.wait_turn(&node, token, listing, waiting, clock).await;
        if !matches!(outcome, Ok(Outcome::Acquired(_))) {
            self.delete_quietly(&node).await;
        }
        outcome
    }

    /// Creates our node; returns its name, its creation zxid (the token), the directory listing
    /// taken right after it, and the ensemble's time by its creation.
    async fn enqueue(&self) -> anyhow::Result<(String, Token, Vec<String>, EnsembleClock)> {
        let client = self.client();
        let prefix = format!("{}/{}{}", self.dir, self.protection, self.kind);
        let options =
            zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&self.session.acls.lock));
        for _ in 0..MAX_RETRIES {
            // Sent back to back, so the server lists the directory right after creating our node: the
            // usual uncontended acquisition is one round trip.
            let create = client.create(&prefix, &self.data, &options);
            let list = client.list_children(&self.dir);
            let (created, listed) = tokio::join!(create, list);
            match created {
                Ok((stat, sequence)) => {
                    let node = format!("{}{}{sequence}", self.protection, self.kind);
                    let (token, stat) = self.token_of(&node, stat).await?;
                    let listing = match listed {
                        Ok(listing) => listing,
                        Err(_) => self.list().await?,
                    };
                    return Ok((node, token, listing, EnsembleClock::from(&stat)));
                }
                Err(zk::Error::NoNode) => self.make_dirs().await?,
                Err(e) if is_connection_loss(&e) => {
                    // The create may have happened: find our node by its protected prefix.
                    let listing = self.list().await?;
                    if let Some(node) = listing.iter().find(|n| n.starts_with(&self.protection)) {
                        let node = node.clone();
                        let (token, stat) = self.read_token(&node).await?;
                        return Ok((node, token, listing, EnsembleClock::from(&stat)));
                    }
                }
                Err(e) => {
                    return Err(self.fail(e, &format!("cannot create a node in {}", self.dir)))
                }
            }
        }
        Err(anyhow!(
            "could not create a node in {} after {MAX_RETRIES} tries (connection losses, or the directory kept vanishing)",
            self.dir
        ))
        .fail_with(Failure::BackendUnavailable)
    }

    /// The creation zxid, and the node's stat; servers before 3.5 return no stat from create, so
    /// ask for it then.
    async fn token_of(&self, node: &str, stat: zk::Stat) -> anyhow::Result<(Token, zk::Stat)> {
        if !stat.is_invalid() && stat.czxid > 0 {
            return Ok((stat.czxid as Token, stat));
        }
        self.read_token(node).await
    }

    /// The creation zxid of our node, and its stat, read from the ensemble.
    async fn read_token(&self, node: &str) -> anyhow::Result<(Token, zk::Stat)> {
        let path = self.path(node);
        let (_, stat) = retrying(|| self.client().get_data(&path))
            .await
            .map_err(|e| self.fail(e, "cannot read our own lock node"))?;
        Ok((stat.czxid.max(0) as Token, stat))
    }

    pub(super) async fn list(&self) -> anyhow::Result<Vec<String>> {
        retrying(|| self.client().list_children(&self.dir))
            .await
            .map_err(|e| self.fail(e, &format!("cannot list {}", self.dir)))
    }

    /// Creates the chroot, `/dlock` and the lock's directory as needed, all requests in one go.
    async fn make_dirs(&self) -> anyhow::Result<()> {
        let client = self.client();
        let mut paths: Vec<String> = Vec::new();
        let mut at = String::new();
        for part in self.session.root[1..].split('/') {
            at.push('/');
            at.push_str(part);
            paths.push(at.clone());
        }
        let root_options =
            zk::CreateMode::Persistent.with_acls(zk::Acls::new(&self.session.acls.root));
        // A container: the server deletes it once it is empty, should every dlock using it die.
        let dir_options =
            zk::CreateMode::Container.with_acls(zk::Acls::new(&self.session.acls.lock));
        let mut pending: Vec<_> = paths
            .iter()
            .map(|p| client.create(p, &[], &root_options))
            .collect();
        pending.push(client.create(&self.dir, &[], &dir_options));
        for (fut, path) in pending.into_iter().zip(paths.iter().chain([&self.dir])) {
            match fut.await {
                Ok(_) | Err(zk::Error::NodeExists) | Err(zk::Error::ConnectionLoss) => {}
                // A parent gone between its create and ours: an empty container (Curator makes
                // `/dlock` one) that the server reaped meanwhile. The caller tries again, a bounded
                // number of times.
                Err(zk::Error::NoNode) if path == &self.dir => {}
                // Someone else's /dlock (or chroot) that we may not write to: fine if it exists.
                Err(zk::Error::NoAuth) if path != &self.dir => {}
                Err(e) => return Err(self.fail(e, &format!("cannot create {path}"))),
            }
        }
        Ok(())
    }

    /// Deletes our node on the way out; if that fails the session's end deletes it.
    async fn delete_quietly(&self, node: &str) {
        if self.client().state() != zk::SessionState::SyncConnected {
            // No one to ask now; the node goes with the session, which ends with dlock.
            return;
        }
        self.session.discard(&self.path(node)).await;
    }

    /// Who owns the lock by `listing`, as their nodes say.
    pub(super) async fn holders(&self, listing: &[String]) -> anyhow::Result<Vec<Holder>> {
        let owners = holders(&self.session, &self.dir, Some((listing, self.limit))).await?;
        // Our own node is first in line behind a kept node (which the queue's order does not
        // count): it is not who holds the lock.
        Ok(owners
            .into_iter()
            .filter(|(name, _)| !name.starts_with(&self.protection))
            .map(|(_, holder)| holder)
            .collect())
    }
}
