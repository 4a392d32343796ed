//! The PostgreSQL backend: locks as rows in three tables of dlock's own, changed only by short
//! transactions that judge every lease by the server's clock.
//!
//! Why it looks the way it does:
//! - Not advisory locks: they belong to a session, so a pooler in transaction mode strands them,
//!   a holder whose connection hangs keeps them, and they carry no record of who holds them nor a
//!   fencing token. Here a lock is a row with a lease: `<prefix>locks` (name, owner, mode, token,
//!   since, expires_at, pid, host, message), renewed every ttl/3 with `clock_timestamp()`; a row
//!   whose lease passed counts as gone, and is deleted by the next change of that name. A live row
//!   of the acquisition's own owner id is its own grant, to an attempt whose answer it missed.
//! - Fencing tokens: `<prefix>tokens` (name -> last token), raised in the transaction that
//!   grants, so a token is exactly as durable as the grant (never a sequence, which is not
//!   transactional and may go back after a failover).
//! - Every change of a name (acquire, release, leave the line, break) is one transaction that
//!   first locks that name's counter row: the changes of one name are serialised, those of
//!   different names do not meet. Each is one round trip (`query_typed`, pipelined with its BEGIN
//!   and COMMIT), as a Lua script is on Redis; each is READ COMMITTED whatever the server's
//!   default, so that what follows the row lock reads what was committed before it. Most are
//!   PL/pgSQL functions (`schema.sql`); a run's first attempt on a free lock and the release of a
//!   lock taken so are plain SQL (`acquire_free.sql`, `release_free.sql`), because a run's session
//!   is new and there the first call of PL/pgSQL costs more than the whole attempt.
//! - Waiting, first come first served: a busy waiter takes a ticket in `<prefix>queue` (bigserial:
//!   it only orders the waiters alive at one time) and LISTENs on a channel of its own
//!   (`<prefix><owner id>`), pipelined with its second attempt (a free lock costs no LISTEN). A
//!   grant must fit beside the holders and every live waiter ahead (counted as if holding), so
//!   nobody passes a waiter who came first, while shared and limit waiters in a row go in
//!   together. A release, a waiter leaving or `release --force` NOTIFYs exactly the waiters at
//!   the head of the line that now fit (in the same transaction: the notification goes out at
//!   commit), and those re-attempt: a handoff costs the release plus one call per waiter let in,
//!   whatever the length of the line, and an idle waiter sends nothing. Nobody tells of a holder
//!   that died: a waiter re-checks when the first holder's lease would run out, and at least
//!   every third of its own ttl, which renews its place in line (a waiter that dies drops out
//!   within its ttl).
//! - Tables and functions are created on first use (`CREATE ... IF NOT EXISTS`, under an advisory
//!   lock), prefixed `dlock_` or the URL's `?prefix=`: the first call that finds them missing
//!   creates them and tries again, so nothing is checked on the hot path but who owns them.
//! - Owners: tables, functions and triggers' functions must belong to the connecting role or a
//!   role the URL names (`owner=`), else another role that can create in the schema could make
//!   them first and run code with dlock's rights. Checked once per connection by a statement sent
//!   first in its first transaction (`untrusted.sql`; only the tables' when the call uses no
//!   function, `untrusted_tables.sql`), which aborts it before anything else in it runs.
//!   Functions pin `search_path`; plain statements reach the system's functions, operators and
//!   types through `pg_catalog`, and dlock's tables and functions through the schema found when
//!   dlock first connected (`schema_owner.sql`, whose owner must be trusted too), so nothing
//!   another role adds to a schema of the path, or makes later, runs in them.
//! - One connection per dlock, shared by its calls and leases; a wait that starts while leases
//!   are held (the later names of `dlock run a b`) opens one of its own, since it holds its
//!   connection through each attempt and the leases' renewals must not queue behind it; so does a
//!   `--cancel-in-progress` holder, to LISTEN for changes of the group records (`group`).
//! - LISTEN does not work through a pooler in transaction mode (the notification goes to whichever
//!   server connection ran the LISTEN): see the README.
//!
//! Here: `PgBackend`, answering the `Backend` calls. Beside it: `address` (the URL), `tls`,
//! `connection` (one connection with timeouts and reconnection), `recipe` (the statements, in the
//! `.sql` files), `wait` (the line), `lease` (a held lock) and `group` (the concurrency groups).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use dlock_core::error;
use dlock_core::error::{Context, FailAs};

use crate::record::unreadable_name;
use crate::wait::connection_for_wait;
use address::PgUrl;
use connection::{lock, Conn, Fault, Shared};
use dlock_core::backend::{Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting};
use dlock_core::lock::{host_name, Holder, LastRuns, LockName, LockRequest};
use lease::PgLease;
use recipe::{Entry, Me, Recipe, Reply};

mod address;
mod connection;
mod group;
mod guard;
mod lease;
mod recipe;
mod rows;
mod tls;
mod wait;
mod wire;

const DEFAULT_URL: &str = "postgres://127.0.0.1:5432/postgres";

/// Locks in one PostgreSQL database, through one connection opened on first use.
pub struct PgBackend {
    /// The connection of every call, and of the leases taken on it (each holds a handle).
    conn: Shared,
    url: Arc<PgUrl>,
    connect_timeout: std::time::Duration,
    recipe: Arc<Recipe>,
    me: Me,
    location: String,
    /// When to give up a connection being made.
    stop: dlock_core::backend::stop::Stop,
}

impl PgBackend {
    pub fn open(config: &BackendConfig) -> error::Result<PgBackend> {
        let url = match config.urls.as_slice() {
            [] => DEFAULT_URL,
            [url] => url.as_str(),
            _ => {
                return Err(error!("the postgres backend takes one --url"))
                    .map_err(|e| Err::<(), _>(e).usage().unwrap_err())
            }
        };
        let url = Arc::new(PgUrl::parse(url)?);
        Ok(PgBackend {
            recipe: Arc::new(Recipe::new(&url.prefix, &url.trusted)),
            location: url.location(),
            conn: Arc::new(Mutex::new(
                Conn::new(url.clone(), config.connect_timeout)?.stopping(config.stop.clone()),
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

    fn entries(&self, name: &str, exact: bool) -> error::Result<Vec<Entry>> {
        let mut conn = lock(&self.conn);
        let budget = conn.connect_timeout();
        self.recipe
            .entries(&mut conn, budget, name, exact)
            .map_err(|f| conn.error(f))
    }

    /// The holders of `name` now, as a busy attempt reports them.
    fn holders(&self, name: &LockName) -> Vec<Holder> {
        self.entries(name.as_str(), true)
            .map(recipe::holders_of)
            .unwrap_or_default()
    }

    /// The status of `name` from its entries (holders, then waiters in line order).
    fn status_of(&self, name: LockName, entries: Vec<Entry>) -> LockStatus {
        let (waiters, holders): (Vec<Entry>, Vec<Entry>) =
            entries.into_iter().partition(|e| e.waiting);
        LockStatus {
            location: format!("{} row {:?}", self.location, name.as_str()),
            name,
            holders: holders.into_iter().map(|e| e.holder).collect(),
            waiters: Some(waiters.into_iter().map(|e| e.holder.into()).collect()),
        }
    }
}

impl Backend for PgBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    /// One attempt; a busy one leaves nothing behind (`acquire` takes its place in line with its
    /// own first attempt).
    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt> {
        let ctx = || format!("cannot acquire lock {:?}", request.name.as_str());
        let sent = std::time::Instant::now();
        let mut conn = lock(&self.conn);
        let budget = conn.connect_timeout();
        let recipe = &self.recipe;
        let reply = match recipe.acquire_free(&mut conn, budget, request, &self.me) {
            Ok(Some(granted)) => Ok(granted),
            Ok(None) => recipe.acquire(
                &mut conn, budget, request, &self.me, false, None, None, false,
            ),
            Err(f) => Err(f),
        }
        .map_err(|f| conn.error(f))
        .with_context(ctx)?;
        drop(conn);
        match reply {
            Reply::Granted {
                token,
                free,
                run,
                group,
            } => Ok(Attempt::Acquired(Box::new(PgLease::granted(
                self.conn.clone(),
                self.recipe.clone(),
                request,
                (token, free, run, group),
                sent,
            )))),
            Reply::Busy { .. } => Ok(Attempt::Busy(self.holders(&request.name))),
        }
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>> {
        // A wait holds its connection while it listens and while each attempt runs (up to the
        // connect timeout).
        let conn = connection_for_wait(&self.conn, || {
            Ok(Conn::new(self.url.clone(), self.connect_timeout)?.stopping(self.stop.clone()))
        })?;
        wait::wait(&conn, &self.recipe, &self.me, request, waiting)
    }

    fn status(&self, name: &LockName) -> error::Result<LockStatus> {
        let entries = self
            .entries(name.as_str(), true)
            .with_context(|| format!("cannot read lock {:?}", name.as_str()))?;
        Ok(self.status_of(name.clone(), entries))
    }

    fn list(&self, prefix: &str) -> error::Result<Listing> {
        {
            // Housekeeping: a refusal (no right to delete) leaves the rows, which nobody sees; a
            // server that cannot be reached is the listing's failure.
            let mut conn = lock(&self.conn);
            let budget = conn.connect_timeout();
            if let Err(f @ (Fault::Unreachable(_) | Fault::Full(_))) =
                self.recipe.expire_runs(&mut conn, budget)
            {
                return Err(conn.error(f)).context("cannot list locks");
            }
        }
        let rows = self.entries(prefix, false).context("cannot list locks")?;
        let mut by_name: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
        for entry in rows {
            by_name.entry(entry.name.clone()).or_default().push(entry);
        }
        let mut listing = Listing::default();
        // A name with waiters only (its holder just left) is not held.
        by_name.retain(|_, entries| entries.iter().any(|e| !e.waiting));
        for (name, entries) in by_name {
            match LockName::new(&name) {
                Ok(lock_name) => listing.held.push(self.status_of(lock_name, entries)),
                Err(e) => listing
                    .unreadable
                    .push(unreadable_name(&name, &self.location, e)),
            }
        }
        Ok(listing)
    }

    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        let mut conn = lock(&self.conn);
        let budget = conn.connect_timeout();
        self.recipe
            .last_runs(&mut conn, budget, name)
            .map_err(|f| conn.error(f))
            .with_context(|| format!("cannot read the last runs of lock {:?}", name.as_str()))
    }

    fn list_runs(&self, prefix: &str) -> error::Result<dlock_core::backend::RunsFound> {
        let names = {
            let mut conn = lock(&self.conn);
            let budget = conn.connect_timeout();
            self.recipe
                .run_names(&mut conn, budget, prefix)
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
        let budget = conn.connect_timeout();
        self.recipe
            .break_lock(&mut conn, budget, name)
            .map_err(|f| conn.error(f))
            .with_context(|| format!("cannot release lock {:?}", name.as_str()))
    }

    fn groups(&self) -> Option<&dyn dlock_core::backend::GroupRecords> {
        Some(self)
    }
}
