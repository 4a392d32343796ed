//! One acquisition: taking a place in a lock's queue (the node, created with its protected prefix
//! so that a connection loss during the create does not lose it, and the directories above it),
//! and leaving it when the acquisition ends without a lease.

use std::sync::Arc;

use dlock_core::error;
use dlock_core::error::FailAs;
use zookeeper_client as zk;

use super::ensemble_clock::EnsembleClock;
use super::lease::ZkLease;
use super::naming::uuid;
use super::recipe::{companion_kind, companion_name, grant_node, kind_of};
use super::record::{holders, NodeData};
use super::session::{is_connection_loss, retrying, Session};
use super::MAX_RETRIES;
use dlock_core::backend::Waiting;
use dlock_core::lock::{Holder, LockRequest, Token};

/// Our node's create, sent: its name and stat once made.
type Creating<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(String, zk::Stat), zk::Error>> + Send + 'a>,
>;

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
    /// The kind of the companion our node is made with (recipe.rs), if any.
    companion_kind: Option<&'static str>,
    /// The companion's name, once made.
    companion: std::sync::OnceLock<String>,
    data: Vec<u8>,
    pub(super) limit: u32,
}

impl Acquisition {
    pub(super) fn new(session: Arc<Session>, request: LockRequest) -> error::Result<Acquisition> {
        let (kind, limit) = kind_of(request.mode);
        let data = NodeData::of(&request)?;
        let companion_kind = companion_kind(request.mode);
        Ok(Acquisition {
            dir: session.dir(&request.name),
            session,
            request,
            protection: format!("_c_{}-", uuid()?),
            kind,
            companion_kind,
            companion: std::sync::OnceLock::new(),
            data,
            limit,
        })
    }

    pub(super) fn client(&self) -> &zk::Client {
        self.session.client()
    }

    pub(super) fn fail(&self, e: zk::Error, doing: &str) -> error::Error {
        self.session.fail(e, doing)
    }

    /// The path of `node` in the lock's directory.
    pub(super) fn path(&self, node: &str) -> String {
        format!("{}/{node}", self.dir)
    }

    /// The path of our node's companion, if it has one.
    pub(super) fn companion_path(&self) -> Option<String> {
        self.companion.get().map(|node| self.path(node))
    }

    /// Queue up, then wait for our turn (`waiting`) or give up at once (`None`). A node that ends
    /// without a lease is deleted.
    pub(super) async fn run(&self, waiting: Option<&Waiting>) -> error::Result<Outcome> {
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

    /// Creates our node (and its companion); returns its name, its creation zxid (the token), the
    /// directory listing taken right after it, and the ensemble's time by its creation.
    async fn enqueue(&self) -> error::Result<(String, Token, Vec<String>, EnsembleClock)> {
        let client = self.client();
        let prefix = format!("{}/{}{}", self.dir, self.protection, self.kind);
        for _ in 0..MAX_RETRIES {
            // Sent back to back, so the server lists the directory right after creating our node: the
            // usual uncontended acquisition is one round trip.
            let create = self.create(&prefix);
            let list = client.list_children(&self.dir);
            let (created, listed) = tokio::join!(create, list);
            match created {
                Ok((node, stat)) => {
                    let (token, stat) = self.token_of(&node, stat).await?;
                    let listing = match listed {
                        Ok(listing) => listing,
                        Err(_) => self.list().await?,
                    };
                    return Ok((node, token, listing, EnsembleClock::from(&stat)));
                }
                Err(zk::Error::NoNode) => self.make_dirs().await?,
                Err(e) if is_connection_loss(&e) => {
                    // The create may have happened: find our node by its protected prefix (and its
                    // companion, made in the same request: both are there or neither is).
                    let listing = self.list().await?;
                    let ours = format!("{}{}", self.protection, self.kind);
                    if let Some(node) = listing.iter().find(|n| n.starts_with(&ours)) {
                        let node = node.clone();
                        // Named as made (the next sequence number): if it has gone since, arming
                        // the lease's watch on it fails.
                        if let Some(companion) = self
                            .companion_kind
                            .and_then(|kind| companion_name(&node, self.kind, kind))
                        {
                            let _ = self.companion.set(companion);
                        }
                        let (token, stat) = self.read_token(&node).await?;
                        return Ok((node, token, listing, EnsembleClock::from(&stat)));
                    }
                }
                Err(e) => {
                    return Err(self.fail(e, &format!("cannot create a node in {}", self.dir)))
                }
            }
        }
        Err(error!(
            "could not create a node in {} after {MAX_RETRIES} tries (connection losses, or the directory kept vanishing)",
            self.dir
        ))
        .unavailable()
    }

    /// Sends the create of our node at `prefix`, with its companion in one multi request (so both
    /// get the same zxid and consecutive sequence numbers: nothing comes between them); returns
    /// our node's name and stat once made. The request is sent when this is called.
    fn create<'a>(&'a self, prefix: &'a str) -> Creating<'a> {
        let options =
            zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&self.session.acls.lock));
        let Some(kind) = self.companion_kind else {
            let single = self.client().create(prefix, &self.data, &options);
            return Box::pin(async move {
                let (stat, sequence) = single.await?;
                Ok((format!("{}{}{sequence}", self.protection, self.kind), stat))
            });
        };
        let mut writer = self.client().new_multi_writer();
        let companion = format!("{}/{}{kind}", self.dir, self.protection);
        let added = writer
            .add_create(prefix, &self.data, &options)
            .and_then(|()| writer.add_create(&companion, &self.data, &options));
        if let Err(e) = added {
            return Box::pin(async move { Err(e) });
        }
        let commit = writer.commit();
        Box::pin(async move {
            let mut created = commit.await?.into_iter().filter_map(|r| match r {
                zk::MultiWriteResult::Create { path, stat } => Some((path, stat)),
                _ => None,
            });
            let (Some((node, stat)), Some((companion, _))) = (created.next(), created.next())
            else {
                return Err(zk::Error::UnexpectedError(
                    "a multi request's creates without their results".into(),
                ));
            };
            let name = |path: &str| path.rsplit('/').next().unwrap_or_default().to_owned();
            let _ = self.companion.set(name(&companion));
            Ok((name(&node), stat))
        })
    }

    /// The creation zxid, and the node's stat; servers before 3.5 return no stat from create, so
    /// ask for it then.
    async fn token_of(&self, node: &str, stat: zk::Stat) -> error::Result<(Token, zk::Stat)> {
        if !stat.is_invalid() && stat.czxid > 0 {
            return Ok((stat.czxid as Token, stat));
        }
        self.read_token(node).await
    }

    /// The creation zxid of our node, and its stat, read from the ensemble.
    async fn read_token(&self, node: &str) -> error::Result<(Token, zk::Stat)> {
        let path = self.path(node);
        let (_, stat) = retrying(|| self.client().get_data(&path))
            .await
            .map_err(|e| self.fail(e, "cannot read our own lock node"))?;
        Ok((stat.czxid.max(0) as Token, stat))
    }

    /// The token of a node granted after it waited: the zxid of a write made now, and the path of
    /// the node that write made. A node's creation zxid orders the line, but a waiter can be
    /// passed (a `--shared` node that joined later gets in beside a seat holder while an earlier
    /// seat waits), and holders granted at one release start in any order: a token taken at the
    /// grant is above every one taken before. The write makes a node beside ours, which stays
    /// while we hold so that `status` shows this token (record.rs, `grant_node`); the lease
    /// deletes it at release, and it goes with the session at the latest. `grant.SEQUENCE.x` ends
    /// in no sequence number (dlock ignores it), names no recipe's pattern (kazoo ignores it) and
    /// sorts after every sequence number (Curator never waits for it). A write to our own node
    /// would wake the waiter that watches it.
    pub(super) async fn take_token(&self, node: &str) -> error::Result<(Token, String)> {
        let probe = format!("{}/{}", self.dir, grant_node(node));
        let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&self.session.acls.lock));
        let (stat, _) = retrying(|| self.client().create(&probe, &[], &options))
            .await
            .map_err(|e| self.fail(e, "cannot take the token of the grant"))?;
        match stat.czxid {
            zxid if !stat.is_invalid() && zxid > 0 => Ok((zxid as Token, probe)),
            // A server before 3.5 answers a create with no stat.
            _ => {
                self.session.discard(&probe).await;
                Err(error!(
                    "the ZooKeeper server gave no zxid for a node it made (3.5 or newer is needed)"
                ))
                .unavailable()
            }
        }
    }

    pub(super) async fn list(&self) -> error::Result<Vec<String>> {
        retrying(|| self.client().list_children(&self.dir))
            .await
            .map_err(|e| self.fail(e, &format!("cannot list {}", self.dir)))
    }

    /// Creates the chroot, `/dlock` and the lock's directory as needed, all requests in one go.
    async fn make_dirs(&self) -> error::Result<()> {
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

    /// Deletes our node (and its companion) on the way out; if that fails the session's end
    /// deletes them.
    async fn delete_quietly(&self, node: &str) {
        if self.client().state() != zk::SessionState::SyncConnected {
            // No one to ask now; the node goes with the session, which ends with dlock.
            return;
        }
        let mut paths = vec![self.path(node)];
        paths.extend(self.companion_path());
        self.session.discard_all(&paths).await;
    }

    /// Who owns the lock by `listing`, as their nodes say.
    pub(super) async fn holders(&self, listing: &[String]) -> error::Result<Vec<Holder>> {
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
