//! The MySQL/MariaDB backend: locks as rows in three tables of dlock's own, changed only by
//! stored procedures that run each change in one transaction on the server and judge every lease
//! by the server's clock, and waiters woken through the server's named locks.
//!
//! Why it looks the way it does:
//! - Not `GET_LOCK` alone: a named lock belongs to a session, so a holder whose connection hangs
//!   keeps it, it has no shared or limit mode, no record of who holds it and no fencing token.
//!   Here a lock is a row with a lease: `<prefix>locks` (name, owner, mode, token, since,
//!   expires_at, pid, host, message), renewed every ttl/3 with `UTC_TIMESTAMP(6)`; a row whose
//!   lease passed counts as gone, and is deleted by the next change of that name. `--min-hold`
//!   keeps the row until `since` + D (`kept_until`): its lease never ends sooner, and a release
//!   before then cuts the lease to that end instead of deleting the row.
//! - Fencing tokens: `<prefix>tokens` (name -> last token), raised in the transaction that
//!   grants, so a token is exactly as durable as the grant.
//! - Every change of a name is one procedure call (`schema.sql`), one round trip, whose
//!   transaction first locks that name's counter row (`SELECT ... FOR UPDATE`): the changes of one
//!   name are serialised, those of different names do not meet, and a client paused half-way
//!   through holds nothing (the transaction runs on the server).
//! - Waiting, first come first served: a busy waiter takes a ticket in `<prefix>queue` (with its
//!   pid, host and message, for `status`); a grant must fit beside the holders and every live
//!   waiter ahead. Each holder's and waiter's session
//!   holds a named lock of its own (`GET_LOCK(<prefix><hash of owner and name>)`), and a waiter
//!   blocks in `GET_LOCK` on the key of the entry ahead that keeps it out: the key frees the
//!   moment that entry releases, leaves or its session ends, without polling the tables (see
//!   `wait`).
//! - Tables and procedures are created on first use (`CREATE ... IF NOT EXISTS`, under a named
//!   lock), prefixed `dlock_` or the URL's `?prefix=`: the first call that finds them missing
//!   creates them and tries again, so nothing is checked on the hot path but who defined them.
//! - Definers: a procedure runs with its definer's rights, and a trigger does what its
//!   definer wrote; dlock keeps a procedure that exists. So the procedures of dlock's names and
//!   the triggers on its tables must be defined by the connecting account or one the URL names
//!   (`owner=`): read once per connection before its first call
//!   (`untrusted.sql`), else refused. Tables have no owner in MySQL: who may replace them is the
//!   database's grants.
//! - One connection per dlock, shared by its calls and leases; a wait that starts while leases
//!   are held (the later names of `dlock run a b`) opens one of its own, since it holds its
//!   connection through each slice of its wait and the leases' renewals must not queue behind it.
//!
//! Here: `MyBackend`, answering the `Backend` calls. Beside it: `address` (the URL), `connection`
//! (one connection with timeouts and reconnection), `recipe` (the statements), `wait` (the line)
//! and `lease` (a held lock).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dlock_core::error;
use dlock_core::error::{Context, FailAs};

use crate::record::unreadable_name;
use crate::wait::connection_for_wait;
use address::MyUrl;
use connection::{lock, Conn, Fault, Shared};
use dlock_core::backend::{Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting};
use dlock_core::lock::{host_name, Holder, LastRuns, LockName, LockRequest, Waiter};
use lease::MyLease;
use recipe::{Me, Recipe, Reply};

mod address;
mod connection;
mod dial;
mod group;
mod lease;
mod recipe;
mod wait;

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/dlock";

/// Locks in one MySQL or MariaDB database, through one connection opened on first use.
pub struct MyBackend {
    /// The connection of every call, and of the leases taken on it (each holds a handle).
    conn: Shared,
    url: Arc<MyUrl>,
    connect_timeout: std::time::Duration,
    recipe: Arc<Recipe>,
    me: Me,
    location: String,
    /// When to give up a connection being made.
    stop: dlock_core::backend::stop::Stop,
}

impl MyBackend {
    pub fn open(config: &BackendConfig) -> error::Result<MyBackend> {
        let url = match config.urls.as_slice() {
            [] => DEFAULT_URL,
            [url] => url.as_str(),
            _ => return Err(error!("the mysql backend takes one --url")).usage(),
        };
        let url = Arc::new(MyUrl::parse(url)?);
        Ok(MyBackend {
            recipe: Arc::new(Recipe::new(&url.prefix, &url.trusted)),
            location: url.location(),
            conn: Arc::new(Mutex::new(
                Conn::new(url.clone(), config.connect_timeout).stopping(config.stop.clone()),
            )),
            url,
            connect_timeout: config.connect_timeout,
            stop: config.stop.clone(),
            me: Me {
                pid: i64::from(dlock_core::lock::acting_for::record_pid()),
                host: host_name(),
            },
        })
    }

    /// The holders (or `waiting`, the waiters) of `name` or of the names starting with it.
    fn entries(
        &self,
        name: &str,
        exact: bool,
        waiting: bool,
    ) -> error::Result<Vec<(String, Holder)>> {
        let mut conn = lock(&self.conn);
        self.recipe
            .entries(&mut conn, name, exact, waiting)
            .map_err(|f| conn.error(f))
    }

    /// The waiters, as `entries` has them; none where this user may not read the line (granted
    /// only what an older dlock needed, or unable to add the waiters' columns to an older
    /// dlock's table): `status` and `list` still answer, without the line.
    fn waiters(&self, name: &str, exact: bool) -> error::Result<Option<Vec<(String, Holder)>>> {
        let mut conn = lock(&self.conn);
        match self.recipe.entries(&mut conn, name, exact, true) {
            Ok(waiters) => Ok(Some(waiters)),
            Err(Fault::Setup(_)) => Ok(None),
            Err(f) if f.is_denied() => Ok(None),
            Err(f) => Err(conn.error(f)),
        }
    }

    fn status_of(
        &self,
        name: LockName,
        holders: Vec<Holder>,
        waiters: Option<Vec<Holder>>,
    ) -> LockStatus {
        LockStatus {
            location: format!("{} row {:?}", self.location, name.as_str()),
            name,
            holders,
            waiters: waiters.map(|w| w.into_iter().map(Waiter::from).collect()),
        }
    }
}

impl Backend for MyBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    /// One attempt; a busy one leaves nothing behind (`acquire` takes its place in line with its
    /// own first attempt).
    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt> {
        let ctx = || format!("cannot acquire lock {:?}", request.name.as_str());
        let mut conn = lock(&self.conn);
        conn.fit_ttl(request.ttl);
        let reply = self
            .recipe
            .acquire(
                &mut conn,
                request,
                &self.me,
                false,
                None,
                std::time::Duration::ZERO,
            )
            .map_err(|f| conn.error(f))
            .with_context(ctx)?;
        drop(conn);
        match reply {
            Reply::Granted(token, sent, run) => Ok(Attempt::Acquired(Box::new(MyLease::new(
                self.conn.clone(),
                self.recipe.clone(),
                request,
                (token, run),
                sent,
            )))),
            Reply::Busy { .. } => Ok(Attempt::Busy(
                self.entries(request.name.as_str(), true, false)
                    .map(|h| h.into_iter().map(|(_, h)| h).collect())
                    .unwrap_or_default(),
            )),
        }
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>> {
        let conn = connection_for_wait(&self.conn, || {
            Ok(Conn::new(self.url.clone(), self.connect_timeout).stopping(self.stop.clone()))
        })?;
        wait::wait(&conn, &self.recipe, &self.me, request, waiting)
    }

    fn status(&self, name: &LockName) -> error::Result<LockStatus> {
        let ctx = || format!("cannot read lock {:?}", name.as_str());
        let holders = self.entries(name.as_str(), true, false).with_context(ctx)?;
        let waiters = self.waiters(name.as_str(), true).with_context(ctx)?;
        let only = |entries: Vec<(String, Holder)>| entries.into_iter().map(|(_, h)| h).collect();
        Ok(self.status_of(name.clone(), only(holders), waiters.map(only)))
    }

    fn list(&self, prefix: &str) -> error::Result<Listing> {
        {
            // Housekeeping: a refusal (no right) leaves the rows, which nobody sees; a server
            // that cannot be reached is the listing's failure.
            let mut conn = lock(&self.conn);
            if let Err(f @ (Fault::Unreachable(_) | Fault::Full(_))) =
                self.recipe.expire_runs(&mut conn)
            {
                return Err(conn.error(f)).context("cannot list locks");
            }
        }
        let rows = self
            .entries(prefix, false, false)
            .context("cannot list locks")?;
        let mut by_name: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
        for (name, holder) in rows {
            by_name.entry(name).or_default().push(holder);
        }
        // A name with waiters only (its holder just left) is not held.
        let lines = self.waiters(prefix, false).context("cannot list locks")?;
        let known = lines.is_some();
        let mut waiting: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
        for (name, waiter) in lines.into_iter().flatten() {
            if by_name.contains_key(&name) {
                waiting.entry(name).or_default().push(waiter);
            }
        }
        let mut listing = Listing::default();
        for (name, holders) in by_name {
            let waiters = known.then(|| waiting.remove(&name).unwrap_or_default());
            match LockName::new(&name) {
                Ok(lock_name) => listing
                    .held
                    .push(self.status_of(lock_name, holders, waiters)),
                Err(e) => listing
                    .unreadable
                    .push(unreadable_name(&name, &self.location, e)),
            }
        }
        Ok(listing)
    }

    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        let mut conn = lock(&self.conn);
        self.recipe
            .last_runs(&mut conn, name)
            .map_err(|f| conn.error(f))
            .with_context(|| format!("cannot read the last runs of lock {:?}", name.as_str()))
    }

    fn list_runs(&self, prefix: &str) -> error::Result<dlock_core::backend::RunsFound> {
        let names = {
            let mut conn = lock(&self.conn);
            self.recipe
                .run_names(&mut conn, prefix)
                .map_err(|f| conn.error(f))
                .context("cannot list the last runs")?
        };
        // A name no lock could have is left out, as `list` shows none.
        let names = names
            .iter()
            .filter_map(|name| LockName::new(name).ok())
            .collect();
        dlock_core::backend::runs_of(prefix, names, |name| self.last_runs(name))
    }

    fn force_release(&self, name: &LockName) -> error::Result<Vec<Holder>> {
        let mut conn = lock(&self.conn);
        self.recipe
            .break_lock(&mut conn, name)
            .map_err(|f| conn.error(f))
            .with_context(|| format!("cannot release lock {:?}", name.as_str()))
    }

    fn groups(&self) -> Option<&dyn dlock_core::backend::GroupRecords> {
        Some(self)
    }
}
