//! The Elasticsearch backend (OpenSearch alike): a lock is one document of dlock's index, changed
//! only by scripted updates that the node runs on the document's primary shard one at a time and
//! that judge every lease by the node's clock (`ctx._now`).
//!
//! Why it looks the way it does:
//! - One document per lock name, id the name: `{dlock, name, token, holders: [...], waiters:
//!   [...], last_run, last_success}`. Every change of a name (acquire, renew, release, leave the
//!   line, break) is one `_update` with a Painless script (recipe/), which the node runs against
//!   the document's latest version and writes back only if nobody wrote it meanwhile (retried on
//!   a conflict): a conditional write decides who holds, never a read followed by a write.
//! - Elasticsearch keeps no expiry: each entry carries its lease's end by the node's clock, and an
//!   entry whose end passed (by `GRACE` more: the node's clock is a cached one) counts as gone and
//!   is taken out by the next change of that name. A waiter takes a dead holder's place only when
//!   the node's time says its lease is over.
//! - Fencing tokens: the document's `token`, raised by the script that grants. dlock never
//!   deletes a lock's document (a release empties its holders), so the counter survives releases,
//!   `release --force`, holders killed and nodes restarted (the node acknowledges a write once its
//!   translog has it).
//! - Waiting: a line of entries in the document, first come first served (wait.rs).
//! - `_create` of the same id by another tool (the plain idiom) fails while dlock's document is
//!   there, and a document that is not dlock's reads as an unreadable holder: each keeps the other
//!   out, and the idiom can no longer take a name dlock has used.
//!
//! Here: `EsBackend`, answering the `Backend` calls. Beside it: `address` (the URL), `http` (the
//! client, bounded in time and size), `tls`, `recipe` (the calls and the scripts), `doc` (a
//! document as read), `attempt` (one acquisition), `wait` (the line), `lease` (a held lock),
//! `runs` (the last runs) and `group` (the concurrency group record, a field of the document).

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};

use dlock_core::error;
use dlock_core::error::{Context, FailAs};
use serde_json::json;

use address::EsUrl;
use attempt::{attempt, millis, Me, Tried};
use dlock_core::backend::{Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting};
use dlock_core::lock::{host_name, Holder, LastRuns, LockName, LockRequest};
use doc::Doc;
use lease::EsLease;
use recipe::{lock, Outcome, Shared, Store, BREAK, GRACE, LOOK};

mod address;
mod attempt;
mod doc;
mod group;
mod http;
mod lease;
mod recipe;
mod runs;
mod tls;
mod wait;

/// Locks in one index of an Elasticsearch or OpenSearch cluster.
pub struct EsBackend {
    url: EsUrl,
    /// The connection of every call, and of the leases taken on it (each holds a handle).
    store: Shared,
    connect_timeout: std::time::Duration,
    stop: dlock_core::backend::stop::Stop,
    tls: Option<Arc<rustls::ClientConfig>>,
    me: Me,
}

impl EsBackend {
    pub fn open(config: &BackendConfig) -> error::Result<EsBackend> {
        let url = EsUrl::from_urls(&config.urls)?;
        let tls = match url.tls {
            true => Some(
                tls::client_config()
                    .map_err(|why| error!("elasticsearch at {}: {why}", url.location()))
                    .unavailable()?,
            ),
            false => None,
        };
        let store = store_for(&url, tls.clone(), config);
        Ok(EsBackend {
            store: Arc::new(Mutex::new(store)),
            url,
            connect_timeout: config.connect_timeout,
            stop: config.stop.clone(),
            tls,
            me: Me {
                pid: dlock_core::lock::acting_for::record_pid(),
                host: host_name(),
            },
        })
    }

    fn new_store(&self) -> Store {
        let http = http::Http::new(
            self.url.hosts.clone(),
            self.tls.clone(),
            self.url.credentials.as_ref(),
            self.connect_timeout,
            self.stop.clone(),
        );
        Store::new(http, self.url.index.clone(), self.url.location())
    }

    fn fail(&self, f: recipe::Fault, doing: String) -> error::Error {
        f.into_error(&self.url.location()).context(doing)
    }

    /// `name`'s document with the entries whose lease passed taken out (by the node's clock);
    /// `None`: no such lock.
    fn look(&self, name: &LockName) -> Result<Option<Doc>, recipe::Fault> {
        let mut store = lock(&self.store);
        let budget = store.connect_timeout();
        let params = json!({"grace": millis(GRACE)});
        Ok(match store.update(name, LOOK, params, false, budget)? {
            Outcome::Written(doc) | Outcome::Unchanged(doc) => Some(doc),
            Outcome::Missing => None,
        })
    }

    fn status_of(&self, name: LockName, doc: Doc) -> LockStatus {
        LockStatus {
            location: format!("{} document {:?}", self.url.location(), name.as_str()),
            name,
            holders: doc.holders(),
            waiters: Some(doc.waiters.into_iter().map(|e| e.holder.into()).collect()),
        }
    }
}

/// A connection to the nodes of `url` (made at its first call).
fn store_for(url: &EsUrl, tls: Option<Arc<rustls::ClientConfig>>, config: &BackendConfig) -> Store {
    let http = http::Http::new(
        url.hosts.clone(),
        tls,
        url.credentials.as_ref(),
        config.connect_timeout,
        config.stop.clone(),
    );
    Store::new(http, url.index.clone(), url.location())
}

impl Backend for EsBackend {
    fn location(&self) -> String {
        self.url.location()
    }

    /// One attempt; a busy one writes nothing (but the entries of holders whose lease passed,
    /// which it takes out).
    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt> {
        let sent = std::time::Instant::now();
        let doing = || format!("cannot acquire lock {:?}", request.name.as_str());
        match attempt(&self.store, request, &self.me, false, None, &|| false) {
            Ok(Tried::Granted(token)) => Ok(Attempt::Acquired(Box::new(EsLease::granted(
                self.store.clone(),
                request,
                token,
                sent,
            )))),
            Ok(Tried::Busy(doc)) => Ok(Attempt::Busy(doc.holders())),
            Err(f) => Err(self.fail(f, doing())),
        }
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>> {
        // A wait holds its connection while each attempt runs; leases taken earlier renew on the
        // shared one from another thread meanwhile, and must not queue behind it.
        let store = if Arc::strong_count(&self.store) > 1 {
            Arc::new(Mutex::new(self.new_store()))
        } else {
            self.store.clone()
        };
        let got = wait::wait(&store, request, &self.me, waiting)?;
        if got.is_none() && self.stop.requested() {
            return Err(error::Error::internal(
                dlock_core::backend::stop::INTERRUPTED,
            ));
        }
        Ok(got)
    }

    fn status(&self, name: &LockName) -> error::Result<LockStatus> {
        let doc = self
            .look(name)
            .map_err(|f| self.fail(f, format!("cannot read lock {:?}", name.as_str())))?;
        Ok(self.status_of(name.clone(), doc.unwrap_or_default()))
    }

    fn list(&self, prefix: &str) -> error::Result<Listing> {
        let found = {
            let mut store = lock(&self.store);
            let budget = store.connect_timeout();
            store.all(budget)
        };
        let (docs, _) = found.map_err(|f| self.fail(f, "cannot list locks".into()))?;
        let mut listing = Listing::default();
        for (id, source) in docs {
            if !id.starts_with(prefix) {
                continue;
            }
            let name = match LockName::new(&id) {
                Ok(name) => name,
                Err(e) => {
                    listing.unreadable.push(format!(
                        "document {:?} of {} is no lock's: {e}",
                        dlock_core::lock::escaped(&id, 120),
                        self.url.location()
                    ));
                    continue;
                }
            };
            let doc = Doc::of(&source);
            if doc.holders.is_empty() {
                continue;
            }
            // Read again through the node's clock: a holder whose lease passed is gone.
            let doc = match self.look(&name) {
                Ok(Some(doc)) => doc,
                Ok(None) => continue,
                Err(f) => return Err(self.fail(f, "cannot list locks".into())),
            };
            if !doc.holders.is_empty() {
                listing.held.push(self.status_of(name, doc));
            }
        }
        listing.held.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listing)
    }

    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        runs::last_runs(&self.store, name).map_err(|f| {
            self.fail(
                f,
                format!("cannot read the last runs of lock {:?}", name.as_str()),
            )
        })
    }

    fn list_runs(&self, prefix: &str) -> error::Result<dlock_core::backend::RunsFound> {
        runs::list_runs(&self.store, prefix)
            .map_err(|f| self.fail(f, "cannot list the last runs".into()))
    }

    fn groups(&self) -> Option<&dyn dlock_core::backend::GroupRecords> {
        Some(self)
    }

    fn force_release(&self, name: &LockName) -> error::Result<Vec<Holder>> {
        let doing = || format!("cannot release lock {:?}", name.as_str());
        let Some(doc) = self.look(name).map_err(|f| self.fail(f, doing()))? else {
            return Ok(vec![]);
        };
        if doc.holders.is_empty() {
            return Ok(vec![]);
        }
        // Only the holders read: one that came since is another holder's.
        let owners: Vec<&str> = doc
            .holders
            .iter()
            .filter_map(|e| e.owner.as_deref())
            .collect();
        let params = json!({"owners": owners});
        let mut store = lock(&self.store);
        let budget = store.connect_timeout();
        store
            .update(name, BREAK, params, false, budget)
            .map_err(|f| self.fail(f, doing()))
            .context("cannot take the holders out")?;
        Ok(doc.holders())
    }
}
