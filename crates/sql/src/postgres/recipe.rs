//! The statements dlock sends (the `.sql` files beside this one, with the table prefix filled
//! in, and as `{s}` the schema of dlock's objects, found on the first connection), each one round
//! trip (`query_typed`: no separate prepare; a transaction of several is sent at once), and what
//! their rows mean. Those that end a run are in `ending`; the checks sent before them, of the
//! schema's and the objects' owners, are in `guard`.

mod ending;
mod group;

use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use super::connection::{odd, Conn, Fault};
use super::guard::{in_schema, Check, Guard};
use super::rows::entry_of;
pub use super::rows::{holders_of, Entry};
use crate::runs::{self, Started};
use dlock_core::lock::group::MAX_GROUP_RECORD_BYTES;
use dlock_core::lock::{Holder, LockName, LockRequest, Mode, Token};

/// The statements, with the prefix filled in.
pub struct Recipe {
    /// A run's first attempt and its release when nobody waits, in plain SQL after the counter's
    /// row lock (`lock_count`); `acquire` and `release` (PL/pgSQL) do the rest.
    lock_count: String,
    acquire_free: String,
    release_free: String,
    acquire: String,
    renew: String,
    release: String,
    leave: String,
    brk: String,
    holders: String,
    /// `--min-hold`: keep the row past its holder (`keep`), renew without ending it sooner
    /// (`renew_kept`), and let it go at the min-hold's end (`let_go`).
    keep: String,
    renew_kept: String,
    let_go: String,
    /// The last run and the last success of a name; the deletion of those of names unwritten for
    /// long (`list`).
    last_runs: String,
    expire_runs: String,
    /// The names with last runs (`list --runs`).
    run_names: String,
    /// The prefix of each waiter's notification channel (`PREFIX` + owner id).
    channel: String,
    /// What every call goes through: the schema's and the objects' owners checked first.
    guard: Guard,
}

/// What an acquisition attempt found.
pub enum Reply {
    /// `free`: by a run's first attempt, to a lock nobody held or waited for. `run`: the record
    /// of this run the grant wrote as the last run, as the server answered it.
    Granted {
        token: Token,
        free: bool,
        run: Option<Started>,
        /// The lock's group record, read in the same round trip just after the grant, when asked
        /// for (`Some(None)`: none); `None`: not read.
        group: Option<Option<String>>,
    },
    /// Busy: the place in line kept (when one was asked for), and when the first lease would run
    /// out (none when the lock waits only for waiters ahead).
    Busy {
        ticket: Option<i64>,
        expires_in: Option<Duration>,
    },
}

/// This process, as written in holder rows.
pub struct Me {
    pub pid: i64,
    pub host: String,
}

impl Recipe {
    pub fn new(prefix: &str, trusted: &[String]) -> Recipe {
        let fill = |sql: &str| runs::fill(&sql.replace("{p}", prefix));
        Recipe {
            lock_count: fill(include_str!("lock_count.sql")),
            acquire_free: fill(include_str!("acquire_free.sql")),
            release_free: fill(include_str!("release_free.sql")),
            acquire: fill(include_str!("acquire.sql")),
            renew: fill(include_str!("renew.sql")),
            release: fill(include_str!("release.sql")),
            leave: fill(include_str!("leave.sql")),
            brk: fill(include_str!("break.sql")),
            holders: fill(include_str!("holders.sql")),
            keep: fill(include_str!("keep.sql")),
            renew_kept: fill(include_str!("renew_kept.sql")),
            let_go: fill(include_str!("let_go.sql")),
            last_runs: fill(include_str!("last_runs.sql")),
            expire_runs: fill(include_str!("expire_runs.sql")),
            run_names: fill(include_str!("run_names.sql")).replace(
                "{most}",
                &(dlock_core::backend::MAX_LISTED_RUNS + 1).to_string(),
            ),
            channel: prefix.to_owned(),
            guard: Guard::new(prefix, trusted),
        }
    }

    /// The channel a waiter with `owner` listens on (owner ids are hex: a plain name).
    pub fn channel(&self, owner: &str) -> String {
        format!("{}{owner}", self.channel)
    }

    /// One attempt. `queue`: keep (or take, without `ticket`) a place in line when busy.
    /// `listen`: a channel to LISTEN on first, in the same round trip.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        conn: &mut Conn,
        budget: Duration,
        request: &LockRequest,
        me: &Me,
        queue: bool,
        ticket: Option<i64>,
        listen: Option<&str>,
        read_group: bool,
    ) -> Result<Reply, Fault> {
        let (limit, mode) = match request.mode {
            Mode::Limit(n) => (i32::try_from(n).unwrap_or(i32::MAX), request.mode.to_wire()),
            m => (0, m.to_wire()),
        };
        let ttl_ms = i64::try_from(request.ttl.as_millis()).unwrap_or(i64::MAX);
        let listen = listen.map(|c| format!("LISTEN \"{c}\""));
        let tail = runs::tail(request);
        // After a wait, the function answers the group record with the grant.
        let group_most = read_group.then_some(MAX_GROUP_RECORD_BYTES as i32);
        let row = self
            .guard
            .run(conn, budget, true, true, |client, guard, schema| {
                let listen = listen.clone();
                let (name, owner, mode, host) = (
                    request.name.as_str().to_owned(),
                    request.owner.clone(),
                    mode.clone(),
                    me.host.clone(),
                );
                let (pid, sql, message) = (
                    me.pid,
                    in_schema(&self.acquire, schema),
                    request.message.clone(),
                );
                let tail = tail.clone();
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 12] = [
                        (&name, Type::TEXT),
                        (&owner, Type::TEXT),
                        (&mode, Type::TEXT),
                        (&limit, Type::INT4),
                        (&ttl_ms, Type::INT8),
                        (&pid, Type::INT8),
                        (&host, Type::TEXT),
                        (&queue, Type::BOOL),
                        (&ticket, Type::INT8),
                        (&message, Type::TEXT),
                        (&tail, Type::TEXT),
                        (&group_most, Type::INT4),
                    ];
                    let attempt = read_committed(&client, guard.as_ref(), None, &sql, &params);
                    let rows = match &listen {
                        // Pipelined: the LISTEN is in force before the attempt runs, so no wake-up
                        // sent after the attempt can be missed.
                        Some(listen) => {
                            let (listened, rows) =
                                tokio::join!(client.batch_execute(listen), attempt);
                            listened?;
                            rows?
                        }
                        None => attempt.await?,
                    };
                    Ok(rows)
                }
            })?;
        let Some(row) = row.first() else {
            return Err(odd("no answer from acquire"));
        };
        let granted: Option<i64> = row.try_get(0).map_err(|_| odd("acquire"))?;
        if let Some(token) = granted {
            let run: Option<String> = row.try_get(3).map_err(|_| odd("acquire"))?;
            let group = match read_group {
                true => Some(row.try_get(4).map_err(|_| odd("acquire"))?),
                false => None,
            };
            return self.granted(conn, budget, request, token, false, (run, group));
        }
        let ticket: Option<i64> = row.try_get(1).map_err(|_| odd("acquire"))?;
        let retry_ms: Option<i64> = row.try_get(2).map_err(|_| odd("acquire"))?;
        Ok(Reply::Busy {
            ticket,
            expires_in: retry_ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        })
    }

    /// A run's first attempt, which grants only a lock nobody holds or waits for
    /// (`acquire_free.sql`), and takes no place in line; `None`: not granted.
    pub fn acquire_free(
        &self,
        conn: &mut Conn,
        budget: Duration,
        request: &LockRequest,
        me: &Me,
    ) -> Result<Option<Reply>, Fault> {
        let ttl_ms = i64::try_from(request.ttl.as_millis()).unwrap_or(i64::MAX);
        let tail = runs::tail(request);
        let rows = self
            .guard
            .run(conn, budget, true, false, |client, guard, schema| {
                let schema = schema.to_owned();
                let (name, owner, mode, host) = (
                    request.name.as_str().to_owned(),
                    request.owner.clone(),
                    request.mode.to_wire(),
                    me.host.clone(),
                );
                let (pid, message, tail) = (me.pid, request.message.clone(), tail.clone());
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 8] = [
                        (&name, Type::TEXT),
                        (&owner, Type::TEXT),
                        (&mode, Type::TEXT),
                        (&ttl_ms, Type::INT8),
                        (&pid, Type::INT8),
                        (&host, Type::TEXT),
                        (&message, Type::TEXT),
                        (&tail, Type::TEXT),
                    ];
                    let sql = in_schema(&self.acquire_free, &schema);
                    self.after_lock_count(&client, guard.as_ref(), &schema, &name, &sql, &params)
                        .await
                }
            })?;
        match rows.first() {
            Some(row) => {
                let token = row.try_get(0).map_err(|_| odd("acquire"))?;
                let run: Option<String> = row.try_get(1).map_err(|_| odd("acquire"))?;
                self.granted(conn, budget, request, token, true, (run, None))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    /// The grant of `token`, checked, and made to outlast its holder by `--min-hold`; `run`: the
    /// record of this run the grant answered.
    fn granted(
        &self,
        conn: &mut Conn,
        budget: Duration,
        request: &LockRequest,
        token: i64,
        free: bool,
        (run, group): (Option<String>, Option<Option<String>>),
    ) -> Result<Reply, Fault> {
        let token = Token::try_from(token)
            .ok()
            .filter(|&t| t > 0)
            .ok_or_else(|| odd("a token below 1"))?;
        if let Some(hold) = request.min_hold {
            // Before the command runs: a dlock that dies between the grant and this has run
            // nothing, and its lock ends with its lease.
            let (name, owner) = (&request.name, &request.owner);
            if !self.own_row(conn, budget, &self.keep, name, owner, hold, true)? {
                return Err(odd("the lock just granted is gone"));
            }
        }
        let run = run.and_then(|raw| Started::of(&raw, &request.owner));
        Ok(Reply::Granted {
            token,
            free,
            run,
            group,
        })
    }

    /// `lock_count.sql` for `name` (in `schema`), then `sql`, in one transaction (see
    /// `read_committed`): `sql` reads what was committed before the lock was taken.
    async fn after_lock_count(
        &self,
        client: &Client,
        guard: Option<&Check>,
        schema: &str,
        name: &String,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let counter: [(&(dyn ToSql + Sync), Type); 1] = [(name, Type::TEXT)];
        let lock_count = in_schema(&self.lock_count, schema);
        read_committed(client, guard, Some((&lock_count, &counter)), sql, params).await
    }

    /// Extends `owner`'s lease on `name` by `ttl`: whether it was still ours.
    pub fn renew(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
        owner: &str,
        ttl: Duration,
        kept: bool,
    ) -> Result<bool, Fault> {
        let sql = if kept { &self.renew_kept } else { &self.renew };
        self.own_row(conn, budget, sql, name, owner, ttl, false)
    }

    /// Runs `sql`, an UPDATE of the caller's own live row (`$1` name, `$2` owner, `$3` a duration in
    /// ms) that returns a row when it applied; `creating`: makes dlock's schema first if it is
    /// missing (or older).
    #[allow(clippy::too_many_arguments)]
    fn own_row(
        &self,
        conn: &mut Conn,
        budget: Duration,
        sql: &str,
        name: &LockName,
        owner: &str,
        ms: Duration,
        creating: bool,
    ) -> Result<bool, Fault> {
        let ms = i64::try_from(ms.as_millis()).unwrap_or(i64::MAX);
        let rows = self
            .guard
            .run(conn, budget, creating, false, |client, guard, schema| {
                let (name, owner) = (name.as_str().to_owned(), owner.to_owned());
                let sql = in_schema(sql, schema);
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 3] =
                        [(&name, Type::TEXT), (&owner, Type::TEXT), (&ms, Type::INT8)];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            })?;
        Ok(!rows.is_empty())
    }

    /// Leaves the line (a waiter that gave up).
    pub fn leave(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
        ticket: i64,
    ) -> Result<(), Fault> {
        self.guard
            .run(conn, budget, false, true, |client, guard, schema| {
                let (name, sql) = (name.as_str().to_owned(), in_schema(&self.leave, schema));
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 2] =
                        [(&name, Type::TEXT), (&ticket, Type::INT8)];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            })?;
        Ok(())
    }

    /// The live holders and waiters of `name` (`exact`) or of every name starting with it, by
    /// name, holders first by token, then waiters in line order.
    pub fn entries(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &str,
        exact: bool,
    ) -> Result<Vec<Entry>, Fault> {
        let rows = self
            .guard
            .run(conn, budget, true, false, |client, guard, schema| {
                let (name, sql) = (name.to_owned(), in_schema(&self.holders, schema));
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 2] =
                        [(&name, Type::TEXT), (&exact, Type::BOOL)];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            })?;
        rows.iter()
            .map(|r| entry_of(r).ok_or_else(|| odd("a holder's row of another shape")))
            .collect()
    }

    /// Removes every holder of `name`; returns them.
    pub fn break_lock(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
    ) -> Result<Vec<Holder>, Fault> {
        let rows = self
            .guard
            .run(conn, budget, true, true, |client, guard, schema| {
                let (name, sql) = (name.as_str().to_owned(), in_schema(&self.brk, schema));
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 1] = [(&name, Type::TEXT)];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            })?;
        rows.iter()
            .map(|r| {
                entry_of(r)
                    .map(|e| e.holder)
                    .ok_or_else(|| odd("a holder's row of another shape"))
            })
            .collect()
    }
}

/// A statement's values, with their types.
type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// `sql` (after `first`, if any) in one READ COMMITTED transaction, all sent at once: one round
/// trip; the rows of `sql`. READ COMMITTED whatever the server's default: dlock's statements take
/// the name's counter row lock and then read what was committed before they got it, which
/// REPEATABLE READ and SERIALIZABLE do not allow (there a wait for the row ends in a serialization
/// failure).
///
/// `guard`: `untrusted.sql` goes first, and when it fails the transaction is aborted before
/// anything else in it ran (the statements after it are refused by the server).
async fn read_committed(
    client: &Client,
    guard: Option<&Check>,
    first: Option<(&str, &Params<'_>)>,
    sql: &str,
    params: &Params<'_>,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let (begun, guarded, first, rows, committed) = tokio::join!(
        client.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED"),
        async {
            match guard {
                Some(check) => check.send(client).await.map(Some),
                None => Ok(None),
            }
        },
        async {
            match first {
                Some((sql, params)) => client.query_typed(sql, params).await.map(Some),
                None => Ok(None),
            }
        },
        client.query_typed(sql, params),
        // A failed statement above leaves the transaction aborted: this ends it.
        client.batch_execute("COMMIT"),
    );
    begun?;
    guarded?;
    first?;
    let rows = rows?;
    committed?;
    Ok(rows)
}
