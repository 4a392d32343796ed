//! The etcd backend: etcd's own lock recipe (client/v3/concurrency's Mutex, which `etcdctl lock`
//! uses), so that dlock and etcdctl exclude each other, extended to shared holders and seats.
//!
//! Layout: a lock NAME is the key prefix `/dlock/NAME/` (NAME percent-escaped where it has `/`,
//! `%`, spaces or control characters), so `etcdctl lock /dlock/NAME` takes the same lock. Each
//! holder or waiter is one key under it, named by its lease in hex and attached to that lease; the
//! keys queue by create revision (first come, first served). The key's value is the holder record
//! (`OWNER MODE TOKEN SINCE PID HOST`, record.rs); etcdctl's keys are empty, exclusive holders. Beside the prefix,
//! `/dlock/NAME:last-run` and `/dlock/NAME:last-success` keep the record of the lock's last run and
//! last success (runs.rs).
//!
//! Who owns: the first key; a shared key behind no exclusive key; a seat (`--limit N`) behind no
//! exclusive key and fewer than N seats. Every earlier key counts for etcdctl, so it waits for
//! dlock's shared holders and seats too. A waiter watches only the key it waits for (one wake-up
//! per release); a seat watches the prefix for deletions.
//!
//! The fencing token is the key's create revision, or for a key granted after it waited the
//! revision of a write made at its grant (`Acquisition::take_token`): etcd orders every write, so a
//! later grant has a larger one, under any name. `status` shows the same (record.rs).
//!
//! The lease is one etcd lease per acquisition, of `--ttl` rounded up to whole seconds, kept alive
//! by `renew` (and while waiting); the server deletes the key when it expires.
//!
//! Here: `EtcdBackend`, which answers the `Backend` calls. Beside it: `address` (the etcd:// URL),
//! `connection` (the client, its runtime and its failures), `client` (the gRPC calls), `rpc`
//! (etcd's messages), `naming` (keys), `record` (what a key says), `recipe` (who owns), `place`
//! (our key and its lease), `acquisition` (taking a place in the queue), `wait` (the wait for a
//! turn), `lease` (a held lock), `kept` (`--min-hold`) and `runs` (the last run and last success).

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_core::error;
use dlock_core::error::Context;

use acquisition::{interrupted, owners_of, Acquisition, Ahead, First};
use address::EtcdUrl;
use connection::{all_under, bounded, Connection, CALL_TIMEOUT};
use dlock_core::backend::{Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting};
use dlock_core::lock::{escaped, Holder, LastRuns, LockName, LockRequest};
use naming::{lock_of, prefix, ROOT};
use record::Entry;
use rpc::{Compare, RangeRequest, RequestOp, TxnRequest};

mod acquisition;
mod address;
mod client;
mod connection;
mod group;
mod kept;
mod lease;
mod naming;
mod place;
mod recipe;
mod record;
mod rpc;
mod runs;
/// The programs the tests run, from the list scripts/test installs (shared with tests/).
#[cfg(test)]
#[path = "../../../tests/support/programs.rs"]
mod test_programs;
mod wait;

/// How often a wait looks at `Waiting::is_cancelled` (the supervisor asks for 100ms at most).
const CANCEL_POLL: Duration = Duration::from_millis(50);
/// How long cleanup on the way out (revoking a lease, deleting a key) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

/// Locks on an etcd cluster, through one client opened on first use.
pub struct EtcdBackend {
    url: EtcdUrl,
    connect_timeout: Duration,
    /// When to give up a connection being made, and whether a wait that ended was stopped.
    stop: dlock_core::backend::stop::Stop,
    connection: Mutex<Option<Arc<Connection>>>,
}

impl EtcdBackend {
    pub fn open(config: &BackendConfig) -> error::Result<EtcdBackend> {
        Ok(EtcdBackend {
            url: EtcdUrl::from_urls(&config.urls)?,
            connect_timeout: config.connect_timeout,
            stop: config.stop.clone(),
            connection: Mutex::new(None),
        })
    }

    fn connection(&self) -> error::Result<Arc<Connection>> {
        // A panic elsewhere cannot leave this plain value half-updated.
        let mut slot = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let conn = Arc::new(Connection::open(
            &self.url,
            self.connect_timeout,
            &self.stop,
        )?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// The lock's keys in create-revision order.
    fn entries(&self, conn: &Connection, name: &LockName) -> error::Result<Vec<Entry>> {
        let client = conn.client();
        let listed = conn
            .run(
                CALL_TIMEOUT,
                client.range(RangeRequest::prefix(&prefix(name))),
            )
            .map_err(|f| conn.fail(f, &format!("cannot read lock {:?}", name.as_str())))?;
        Ok(listed.kvs.iter().map(Entry::of).collect())
    }

    fn location_of(&self, name: &LockName) -> String {
        format!("{}{}", self.url.location(), prefix(name))
    }

    /// The status of `name` from its keys in create-revision order: the holders, each with its
    /// lease's end from `ends`, and the rest, in line.
    fn status_of(&self, name: LockName, entries: Vec<Entry>, ends: &LeaseEnds) -> LockStatus {
        let owners = owners_of(&entries);
        let mut holders = Vec::with_capacity(owners.len());
        let mut waiters = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            if owners.contains(&i) {
                let mut holder = entry.holder;
                // A key kept by --min-hold ends with the min-hold's lease, as written.
                holder.expires_at = holder
                    .kept_until
                    .or_else(|| ends.get(&entry.lease).copied());
                holders.push(holder);
            } else {
                waiters.push(entry.holder.into());
            }
        }
        LockStatus {
            location: self.location_of(&name),
            name,
            holders,
            waiters: Some(waiters),
        }
    }
}

/// When each lease runs out unless kept alive.
type LeaseEnds = std::collections::HashMap<i64, std::time::SystemTime>;

/// How many LeaseTimeToLive calls `lease_ends` has in flight at once.
const LEASE_CALLS_AT_ONCE: usize = 256;

/// When the leases of the holders among `entries` run out, by the seconds the server says each
/// has left (LeaseTimeToLive), asked for together. A key without a lease, a lease already gone or
/// a call without an answer in time has no end to show.
fn lease_ends<'a>(conn: &Connection, entries: impl Iterator<Item = &'a [Entry]>) -> LeaseEnds {
    let mut leases: Vec<i64> = entries
        .flat_map(|entries| owners_of(entries).into_iter().map(|i| entries[i].lease))
        .filter(|&lease| lease != 0)
        .collect();
    leases.sort_unstable();
    leases.dedup();
    let mut ends = LeaseEnds::new();
    for chunk in leases.chunks(LEASE_CALLS_AT_ONCE) {
        conn.runtime().block_on(async {
            let mut calls = tokio::task::JoinSet::new();
            for &lease in chunk {
                let client = conn.client();
                calls.spawn(async move {
                    (
                        lease,
                        bounded(CALL_TIMEOUT, client.time_to_live(lease)).await,
                    )
                });
            }
            while let Some(done) = calls.join_next().await {
                let Ok((lease, Ok(ttl))) = done else {
                    continue;
                };
                let left = u64::try_from(ttl).ok().map(Duration::from_secs);
                if let Some(end) = left.and_then(|l| std::time::SystemTime::now().checked_add(l)) {
                    ends.insert(lease, end);
                }
            }
        });
    }
    ends
}

impl Backend for EtcdBackend {
    fn location(&self) -> String {
        self.url.location()
    }

    /// A busy attempt leaves nothing behind: its lease is revoked,
    /// which deletes its key. The wait that may follow queues anew.
    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt> {
        let conn = self.connection()?;
        let acquisition = Acquisition::new(conn.clone(), request);
        let doing = || format!("cannot take lock {:?}", request.name.as_str());
        let outcome = conn.runtime().block_on(async {
            if let Some(holders) = acquisition.busy_already().await? {
                return Ok(Attempt::Busy(holders));
            }
            match acquisition.enqueue().await? {
                First::Owns(place) => Ok(Attempt::Acquired(Box::new(
                    acquisition.lease(place, None).await?,
                ))),
                First::Queued(
                    place,
                    Ahead {
                        holders: Some(holders),
                        ..
                    },
                ) => {
                    acquisition.leave(&place).await;
                    Ok(Attempt::Busy(holders))
                }
                First::Queued(place, _) => {
                    let (holders, ()) =
                        tokio::join!(acquisition.holders(), acquisition.leave(&place));
                    Ok(Attempt::Busy(holders.unwrap_or_default()))
                }
            }
        });
        outcome.map_err(|f| conn.fail(f, &doing()))
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>> {
        // A stop signal is an error (the supervisor turns it into its exit), the caller's
        // cancellation not.
        if waiting.is_cancelled() {
            return if self.stop.requested() {
                Err(interrupted())
            } else {
                Ok(None)
            };
        }
        let conn = self.connection()?;
        let acquisition = Acquisition::new(conn.clone(), request);
        let doing = || format!("cannot take lock {:?}", request.name.as_str());
        let lease = conn.runtime().block_on(async {
            let (place, ahead) = match acquisition.enqueue().await {
                Ok(First::Owns(place)) => {
                    return match acquisition.lease(place, None).await {
                        Ok(lease) => Ok(Some(lease)),
                        Err(f) => Err(conn.fail(f, &doing())),
                    }
                }
                Ok(First::Queued(place, ahead)) => (place, ahead),
                Err(f) => return Err(conn.fail(f, &doing())),
            };
            let holders = match ahead.holders {
                Some(holders) => holders,
                // A request for nothing where nobody sees them (`-q`).
                None if !waiting.wants_holders() => Vec::new(),
                None => acquisition.holders().await.unwrap_or_default(),
            };
            waiting.busy(&holders);
            acquisition.wait(place, ahead.key, waiting).await
        })?;
        match lease {
            Some(lease) => Ok(Some(Box::new(lease))),
            None if self.stop.requested() => Err(interrupted()),
            None => Ok(None),
        }
    }

    fn status(&self, name: &LockName) -> error::Result<LockStatus> {
        let conn = self.connection()?;
        let entries = self.entries(&conn, name)?;
        let ends = lease_ends(&conn, std::iter::once(entries.as_slice()));
        Ok(self.status_of(name.clone(), entries, &ends))
    }

    fn list(&self, prefix: &str) -> error::Result<Listing> {
        let conn = self.connection()?;
        let client = conn.client();
        let listed = conn
            .runtime()
            .block_on(all_under(&client, ROOT))
            .map_err(|f| conn.fail(f, &format!("cannot list the locks under {ROOT}")))?;
        let mut locks: std::collections::BTreeMap<LockName, Vec<Entry>> = Default::default();
        let mut unreadable = Vec::new();
        for kv in &listed {
            if runs::is_record(&kv.key) {
                continue;
            }
            match lock_of(&kv.key) {
                Some((name, _)) => {
                    if name.as_str().starts_with(prefix) {
                        locks.entry(name).or_default().push(Entry::of(kv));
                    }
                }
                None => unreadable.push(format!(
                    "key \"{}\" is under {ROOT} but belongs to no lock",
                    escaped(&String::from_utf8_lossy(&kv.key), 120)
                )),
            }
        }
        // Records of runs that ended long enough ago go here (runs.rs).
        conn.runtime().block_on(runs::expire(&conn, &listed));
        let ends = lease_ends(&conn, locks.values().map(Vec::as_slice));
        let held = locks
            .into_iter()
            .map(|(name, entries)| self.status_of(name, entries, &ends))
            .filter(|status| !status.holders.is_empty())
            .collect();
        Ok(Listing { held, unreadable })
    }

    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        let conn = self.connection()?;
        conn.runtime()
            .block_on(runs::read(&conn, name))
            .map_err(|f| {
                conn.fail(
                    f,
                    &format!("cannot read the last runs of lock {:?}", name.as_str()),
                )
            })
    }

    fn list_runs(&self, prefix: &str) -> error::Result<dlock_core::backend::RunsFound> {
        let conn = self.connection()?;
        let listed = conn
            .runtime()
            .block_on(all_under(&conn.client(), ROOT))
            .map_err(|f| conn.fail(f, &format!("cannot list the runs under {ROOT}")))?;
        // Expired records go first, as in `list`, so that none is shown.
        conn.runtime().block_on(runs::expire(&conn, &listed));
        let names = listed
            .iter()
            .filter_map(|kv| runs::record_name(&kv.key))
            .collect();
        dlock_core::backend::runs_of(prefix, names, |name| self.last_runs(name))
    }

    fn force_release(&self, name: &LockName) -> error::Result<Vec<Holder>> {
        let conn = self.connection()?;
        let entries = self.entries(&conn, name)?;
        // The run of the holder it removes ends `forced`, in the same transaction (runs.rs); a
        // record that cannot be read is no reason not to break the lock.
        let last_run = conn
            .runtime()
            .block_on(runs::last_run_kv(&conn, name))
            .unwrap_or_default();
        let mut removed = Vec::new();
        for i in owners_of(&entries) {
            let entry = &entries[i];
            // Only the key we read: one created since under the same name is another holder's.
            let mut ops = vec![RequestOp::delete(entry.key.clone())];
            ops.extend(runs::forced(
                name,
                last_run.as_ref(),
                &entry.holder.owner,
                entry.create_revision,
            ));
            let delete = TxnRequest::new(
                vec![Compare::created_at(
                    entry.key.clone(),
                    entry.create_revision,
                )],
                ops,
            );
            let client = conn.client();
            conn.runtime()
                .block_on(bounded(CALL_TIMEOUT, client.txn(delete)))
                .map_err(|f| conn.fail(f, "cannot delete a holder's key"))
                .with_context(|| format!("cannot release lock {:?}", name.as_str()))?;
            // Deleted now, or gone already (released meanwhile): either way, no longer held.
            removed.push(entry.holder.clone());
        }
        Ok(removed)
    }

    fn groups(&self) -> Option<&dyn dlock_core::backend::GroupRecords> {
        Some(self)
    }
}
