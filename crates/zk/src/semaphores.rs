//! Other clients' semaphores on a lock's node, for `status` and `list`. Their leases are not in
//! dlock's queue (recipe.rs), so they keep no dlock holder out, but they hold something: they are
//! shown as holders labelled as not dlock's, one per lease.
//!
//! - Curator's `InterProcessSemaphoreV2` on `/dlock/NAME` keeps a node per lease under
//!   `NAME/leases` (`_c_<uuid>-lease-<sequence>`, the client's address as data), and the mutex
//!   its acquirers take under `NAME/locks`. It does not record its number of leases, and an
//!   acquirer waiting for room has its lease node already: that one shows as a holder too.
//! - kazoo's `Semaphore` keeps a child of NAME per lease, named by a bare `uuid4().hex`, and its
//!   number of leases as NAME's data (when it created NAME): its leases are `limit N` holders
//!   then. It counts every child of NAME as a lease, dlock's nodes included. Its acquirers take a
//!   kazoo `Lock` on the sibling node `NAME-__lock__`, and only one waiting for room creates no
//!   lease: those lock nodes are shown as waiters of NAME, and `list` shows no lock of their own.

use dlock_core::error;
use zookeeper_client as zk;

use super::nodes::{foreign_holder, read_children};
use super::recipe::is_kazoo_lease;
use super::session::{retrying, Session};
use dlock_core::lock::{Holder, Mode, Waiter};

/// The sibling node of a kazoo `Semaphore`'s node that its acquirers lock.
const KAZOO_LOCK_SUFFIX: &str = "-__lock__";
/// Where Curator's semaphore keeps its leases, under the lock's node.
const CURATOR_LEASES: &str = "leases";
const CURATOR_LABEL: &str = "(not dlock: curator semaphore)";
const KAZOO_LABEL: &str = "(not dlock: kazoo semaphore)";

/// Whether the node `node` under `/dlock` is the lock a kazoo `Semaphore` on one of `nodes` takes
/// while acquiring, rather than a lock of its own.
pub(super) fn is_kazoo_inner_lock(node: &str, nodes: &[String]) -> bool {
    node.strip_suffix(KAZOO_LOCK_SUFFIX)
        .is_some_and(|semaphore| nodes.iter().any(|n| n == semaphore))
}

/// The leases of Curator's and kazoo's semaphores on the lock at `dir` (whose children are
/// `listed`), and the kazoo acquirers waiting for one.
pub(super) async fn semaphores(
    session: &Session,
    dir: &str,
    listed: &[String],
) -> error::Result<(Vec<Holder>, Vec<Waiter>)> {
    let mut holders = Vec::new();
    if listed.iter().any(|n| n == CURATOR_LEASES) {
        let leases_dir = format!("{dir}/{CURATOR_LEASES}");
        let leases = session.children(&leases_dir).await?;
        let curator = Foreign {
            mode: Mode::Shared,
            label: CURATOR_LABEL,
            data_is_host: true,
        };
        holders.extend(curator.read(session, &leases_dir, &leases).await?);
    }
    let kazoo: Vec<String> = listed
        .iter()
        .filter(|n| is_kazoo_lease(n))
        .cloned()
        .collect();
    let inner_lock = format!("{dir}{KAZOO_LOCK_SUFFIX}");
    let acquirers = session.children(&inner_lock).await?;
    if kazoo.is_empty() && acquirers.is_empty() {
        return Ok((holders, vec![]));
    }
    // kazoo's nodes hold the client's identifier, not its host.
    let kazoo_client = Foreign {
        mode: kazoo_mode(session, dir).await,
        label: KAZOO_LABEL,
        data_is_host: false,
    };
    holders.extend(kazoo_client.read(session, dir, &kazoo).await?);
    let mut waiters = kazoo_client.read(session, &inner_lock, &acquirers).await?;
    waiters.sort_by_key(|w| w.token);
    Ok((holders, waiters.into_iter().map(Waiter::from).collect()))
}

/// The mode kazoo's leases are shown in: `limit N` where the lock's node holds the number of
/// leases, as kazoo writes it when it creates the node.
async fn kazoo_mode(session: &Session, dir: &str) -> Mode {
    let data = retrying(|| session.client().get_data(dir)).await.ok();
    let leases = data.and_then(|(data, _): (Vec<u8>, zk::Stat)| {
        std::str::from_utf8(&data).ok()?.parse::<u32>().ok()
    });
    leases.filter(|&n| n > 0).map_or(Mode::Shared, Mode::Limit)
}

/// How one client's nodes are shown.
struct Foreign {
    mode: Mode,
    label: &'static str,
    /// Whether a node's data is the client's address.
    data_is_host: bool,
}

impl Foreign {
    /// The nodes `names` in `dir` that are still there, as this client's holders.
    async fn read(
        &self,
        session: &Session,
        dir: &str,
        names: &[String],
    ) -> error::Result<Vec<Holder>> {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let read = read_children(session, dir, &names).await?;
        Ok(read
            .into_iter()
            .flatten()
            .map(|(data, stat)| {
                let data = if self.data_is_host { &data[..] } else { &[] };
                foreign_holder(self.mode, self.label.to_owned(), data, &stat)
            })
            .collect())
    }
}
