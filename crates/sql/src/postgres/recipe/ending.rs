//! How a run ends on the server: the release (in plain SQL when nobody waits, else by
//! release_v3), the let-go of a lock `--min-hold` keeps, each writing the run's ending into the
//! last runs; and the records read back, and those of names unwritten for long deleted.

use std::time::{Duration, UNIX_EPOCH};

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::{in_schema, odd, read_committed, Recipe};
use crate::postgres::connection::{Conn, Fault};
use crate::runs::{self, Started};
use dlock_core::lock::{LastRuns, LockName, RunEnd};

impl Recipe {
    /// For a holder with `--min-hold` whose command ended: keeps its row until the min-hold's end,
    /// and writes how the run ended (see `release`). False when that has passed (or the lock is no
    /// longer ours): then release it as usual.
    pub fn let_go(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
        owner: &str,
        ended: (Option<&Started>, &RunEnd),
    ) -> Result<bool, Fault> {
        let rows = self.ending(conn, budget, &self.let_go, name, owner, ended, Via::Plain)?;
        Ok(!rows.is_empty())
    }

    /// `sql` (`$1` name, `$2` owner, then the run's ending: `$3` the head of the record its grant
    /// wrote, `$4` its tail, `$5` the ending's word, `$6` whether it succeeded), sent `via` as it
    /// says.
    #[allow(clippy::too_many_arguments)]
    fn ending(
        &self,
        conn: &mut Conn,
        budget: Duration,
        sql: &str,
        name: &LockName,
        owner: &str,
        (started, end): (Option<&Started>, &RunEnd),
        via: Via,
    ) -> Result<Vec<Row>, Fault> {
        let (word, success) = runs::ending(end);
        let head = started.map(|s| s.head.clone());
        let tail = started.map(|s| s.tail.clone());
        self.guard.run(
            conn,
            budget,
            false,
            via == Via::Function,
            |client, guard, schema| {
                let (name, owner) = (name.as_str().to_owned(), owner.to_owned());
                let (sql, schema) = (in_schema(sql, schema), schema.to_owned());
                let (head, tail, word) = (head.clone(), tail.clone(), word.clone());
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 6] = [
                        (&name, Type::TEXT),
                        (&owner, Type::TEXT),
                        (&head, Type::TEXT),
                        (&tail, Type::TEXT),
                        (&word, Type::TEXT),
                        (&success, Type::BOOL),
                    ];
                    let guard = guard.as_ref();
                    if via == Via::AfterLockCount {
                        self.after_lock_count(&client, guard, &schema, &name, &sql, &params)
                            .await
                    } else {
                        read_committed(&client, guard, None, &sql, &params).await
                    }
                }
            },
        )
    }

    /// Gives up `owner`'s hold on `name`: whether it was still ours. `free`: it was granted free
    /// (see `acquire_free`), so most likely nobody waits, and the plain-SQL release is tried
    /// first; one granted after a wait is likely to have others in line behind it, and goes
    /// straight to release_v3, which wakes them. Either writes how the run ended (`ended`: the
    /// record its grant wrote, and how it ended) into the last run while that record is still
    /// unchanged, and as the last success when it succeeded.
    pub fn release(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
        owner: &str,
        free: bool,
        ended: (Option<&Started>, &RunEnd),
    ) -> Result<bool, Fault> {
        if free {
            if let Some(held) = self.release_free(conn, budget, name, owner, ended)? {
                return Ok(held);
            }
        }
        let rows = self.ending(
            conn,
            budget,
            &self.release,
            name,
            owner,
            ended,
            Via::Function,
        )?;
        Ok(rows
            .first()
            .and_then(|r| r.try_get::<_, bool>(0).ok())
            .unwrap_or(false))
    }

    /// `release_free.sql`: whether the lock was still ours, or `None` when someone is in line
    /// (then nothing was done).
    fn release_free(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
        owner: &str,
        ended: (Option<&Started>, &RunEnd),
    ) -> Result<Option<bool>, Fault> {
        let sql = &self.release_free;
        let rows = self.ending(conn, budget, sql, name, owner, ended, Via::AfterLockCount)?;
        let row = rows.first().ok_or_else(|| odd("release"))?;
        let waits: bool = row.try_get(0).map_err(|_| odd("release"))?;
        if waits {
            return Ok(None);
        }
        row.try_get(1).map(Some).map_err(|_| odd("release"))
    }

    /// The last run and the last success of `name`, as stored (never trusted).
    pub fn last_runs(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
    ) -> Result<LastRuns, Fault> {
        let rows = self
            .guard
            .run(conn, budget, true, false, |client, guard, schema| {
                let (name, sql) = (name.as_str().to_owned(), in_schema(&self.last_runs, schema));
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 1] = [(&name, Type::TEXT)];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            })?;
        let Some(row) = rows.first() else {
            return Ok(LastRuns::default());
        };
        let text = |i: usize| row.try_get::<_, Option<String>>(i).ok().flatten();
        let (last_run, last_success) = (text(0), text(1));
        let now = text(2)
            .and_then(|ms| ms.parse().ok())
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
            .ok_or_else(|| odd("last runs"))?;
        Ok(runs::last_runs(
            last_run.as_deref().map(str::as_bytes),
            last_success.as_deref().map(str::as_bytes),
        )
        .judged_at(now, Duration::ZERO))
    }

    /// The names starting with `prefix` that have records (`list --runs`), as stored: any text.
    pub fn run_names(
        &self,
        conn: &mut Conn,
        budget: Duration,
        prefix: &str,
    ) -> Result<Vec<String>, Fault> {
        let rows = self
            .guard
            .run(conn, budget, true, false, |client, guard, schema| {
                let (prefix, sql) = (prefix.to_owned(), in_schema(&self.run_names, schema));
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 1] = [(&prefix, Type::TEXT)];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            })?;
        Ok(rows
            .iter()
            .filter_map(|row| row.try_get::<_, String>(0).ok())
            .collect())
    }

    /// Deletes the records of names unwritten for `RUN_RECORD_KEPT_FOR` (up to 1000 at a time).
    pub fn expire_runs(&self, conn: &mut Conn, budget: Duration) -> Result<(), Fault> {
        self.guard
            .run(conn, budget, true, false, |client, guard, schema| {
                let sql = in_schema(&self.expire_runs, schema);
                async move { read_committed(&client, guard.as_ref(), None, &sql, &[]).await }
            })?;
        Ok(())
    }
}

/// How a statement goes: a call of dlock's functions, plain SQL, or plain SQL after the name's
/// counter row lock (`lock_count.sql`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Function,
    Plain,
    AfterLockCount,
}
