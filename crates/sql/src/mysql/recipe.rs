//! The statements dlock sends (procedure calls in `schema.sql`, the queries in the `.sql` files
//! beside this one, with the table prefix filled in) and what their rows mean. Each is one round
//! trip: sent as text with its values written in as literals (text in hexadecimal, so any bytes
//! and no quoting), not prepared: a connection lives for one `dlock run`, and preparing each
//! statement first, then closing it, cost a server about a fifth more under contention. The
//! concurrency group statements are in `group`.

mod group;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mysql::prelude::Queryable;
use mysql::{Row, Value};
use sha2::{Digest, Sha256};

use super::connection::{Conn, Fault};
use crate::record::RowText;
use crate::runs::{self, Started};
use dlock_core::lock::{Holder, Kept, LastRuns, LockName, LockRequest, Mode, RunEnd, Token};

/// The condition on the names starting with a prefix (given twice).
const FROM: &str = "LEFT(name, LENGTH(?)) = ?";

/// The statements, with the prefix filled in.
pub struct Recipe {
    prefix: String,
    acquire: String,
    renew: String,
    release: String,
    leave: String,
    brk: String,
    last_runs: String,
    expire_runs: String,
    run_names: String,
    holders: String,
    holders_from: String,
    waiters: String,
    waiters_from: String,
    wait: String,
    /// `untrusted.sql`, and the accounts the URL names as trusted (`owner=`).
    untrusted: String,
    trusted: Vec<String>,
}

/// The procedures dlock calls (the versions it creates), whose definers `untrusted.sql` reads.
const ROUTINES: [&str; 9] = [
    "acquire_v6",
    "acquire_v5",
    "attempt_v2",
    "renew_v3",
    "release_v5",
    "leave_v2",
    "break_v2",
    "last_runs_v1",
    "expire_runs_v1",
];

/// The server error code dlock gives its own refusal of an untrusted object (none of MySQL's).
const UNTRUSTED: u16 = 0;

/// What an acquisition attempt found.
pub enum Reply {
    /// The token, and when the call that was granted it was sent (its lease counts from then: a
    /// first call that had to create the tables first may have taken long before it); the record
    /// of this run the grant wrote as the last run, as the server answered it.
    Granted(Token, Instant, Option<Started>),
    /// Busy: the place in line kept (when one was asked for), and the entry to wait for (none
    /// found: a row dlock cannot read). `waited_out`: the attempt waited the time it was given
    /// on that entry's key, still held; `found_free`: a key it found free (see `Recipe::acquire`).
    Busy {
        ticket: Option<i64>,
        blocker: Option<Blocker>,
        waited_out: bool,
        found_free: Option<String>,
    },
}

/// The entry a busy attempt waits for.
pub struct Blocker {
    /// The lock key its session holds while it holds or waits.
    pub key: String,
    /// How long its lease or place in line lasts, by the server's clock.
    pub lasts: Duration,
    /// Only a `--min-hold` keeps it: its holder let go, and its key is free.
    pub gone: bool,
}

/// This process, as written in holder rows.
pub struct Me {
    pub pid: i64,
    pub host: String,
}

/// What a wait on a lock key found.
pub enum Woken {
    /// The key was free, or freed: its holder released, left or its session ended.
    Freed,
    /// Still held when the slice ran out.
    Held,
}

impl Recipe {
    pub fn new(prefix: &str, trusted: &[String]) -> Recipe {
        let fill = |sql: &str| sql.replace("{p}", prefix);
        let quoted = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| format!("'{prefix}{n}'")).collect();
            names.join(", ")
        };
        Recipe {
            untrusted: with_values(include_str!("untrusted.sql"), &[])
                .replace("{routines}", &quoted(&ROUTINES))
                .replace(
                    "{tables}",
                    &quoted(&["tokens", "locks", "queue", "runs", "groups"]),
                ),
            trusted: trusted.to_vec(),
            prefix: prefix.to_owned(),
            acquire: fill("CALL {p}acquire_v6(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            renew: fill("CALL {p}renew_v3(?, ?, ?, ?)"),
            release: fill("CALL {p}release_v5(?, ?, ?, ?, ?, ?, ?, ?)"),
            leave: fill("CALL {p}leave_v2(?, ?, ?, ?)"),
            brk: fill("CALL {p}break_v2(?)"),
            last_runs: fill("CALL {p}last_runs_v1(?)"),
            expire_runs: fill("CALL {p}expire_runs_v1()"),
            run_names: runs::fill(&fill(include_str!("run_names.sql")))
                .replace("{where}", FROM)
                .replace(
                    "{most}",
                    &(dlock_core::backend::MAX_LISTED_RUNS + 1).to_string(),
                ),
            holders: fill(include_str!("holders.sql")).replace("{where}", "name = ?"),
            holders_from: fill(include_str!("holders.sql")).replace("{where}", FROM),
            waiters: fill(include_str!("waiters.sql")).replace("{where}", "name = ?"),
            waiters_from: fill(include_str!("waiters.sql")).replace("{where}", FROM),
            wait: include_str!("wait.sql").to_owned(),
        }
    }

    /// `conn.call` (`creating`: `call_creating`) of `op`, after reading, on a connection that has
    /// not yet, who defined the procedures dlock calls and the triggers on its tables: one defined
    /// by an account dlock does not trust is refused before `op` runs.
    /// Checked again with `op` when it is tried again after creating the schema (which keeps a
    /// procedure that exists).
    fn run<T>(
        &self,
        conn: &mut Conn,
        creating: bool,
        mut op: impl FnMut(&mut mysql::Conn) -> mysql::Result<T>,
    ) -> Result<T, Fault> {
        let check = !conn.trusted();
        let mut guarded = |c: &mut mysql::Conn| {
            if check {
                if let Some(refusal) = self.untrusted(c)? {
                    return Err(mysql::Error::MySqlError(mysql::MySqlError {
                        state: "HY000".into(),
                        code: UNTRUSTED,
                        message: refusal,
                    }));
                }
            }
            op(c)
        };
        let result = if creating {
            conn.call_creating(&mut guarded)
        } else {
            conn.call(&mut guarded)
        };
        if check && result.is_ok() {
            conn.mark_trusted();
        }
        result
    }

    /// The first object of `untrusted.sql`'s whose definer dlock does not trust: the connecting
    /// account, or one the URL names (`owner=USER` for any host, `USER@HOST` for one).
    fn untrusted(&self, c: &mut mysql::Conn) -> mysql::Result<Option<String>> {
        let rows = first_set(c, &self.untrusted, vec![])?
            .into_iter()
            .map(mysql::from_row_opt::<(String, String, String)>)
            .collect::<Result<Vec<_>, _>>()?;
        let trusted = |definer: &str, me: &str| {
            let user = definer.rsplit_once('@').map_or(definer, |(u, _)| u);
            definer == me || self.trusted.iter().any(|t| t == definer || t == user)
        };
        Ok(rows
            .into_iter()
            .find(|(_, definer, me)| !trusted(definer, me))
            .map(|(what, definer, _)| {
                let named = if self.trusted.is_empty() {
                    String::new()
                } else {
                    format!(", nor one the URL names ({})", self.trusted.join(", "))
                };
                format!(
                    "refusing {what} defined by {definer}: not the connecting account{named}; \
                     drop it, or name its definer in the URL's owner= if it is to be trusted"
                )
            }))
    }

    /// The lock key (`GET_LOCK`) the session of `owner` holds while it holds or waits for `name`:
    /// the prefix and 128 bits of a hash, within MySQL's 64 characters for any name. Named the
    /// same way in SQL by `acquire_v5`, which waits on a blocker's key.
    pub fn key(&self, owner: &str, name: &str) -> String {
        let mut hash = Sha256::new();
        hash.update(owner.as_bytes());
        hash.update([0]);
        hash.update(name.as_bytes());
        let digest = hash.finalize();
        format!("{}{}", self.prefix, dlock_core::text::hex(&digest[..16]))
    }

    /// One attempt. `queue`: keep (or take, without `ticket`) a place in line when busy, and
    /// then wait up to `wait` on the blocker's key, in the same call; when the key frees (or was
    /// free: then `found_free`, for the caller not to wait on it again), one more attempt.
    pub fn acquire(
        &self,
        conn: &mut Conn,
        request: &LockRequest,
        me: &Me,
        queue: bool,
        ticket: Option<i64>,
        wait: Duration,
    ) -> Result<Reply, Fault> {
        let limit = match request.mode {
            Mode::Limit(n) => i64::from(n),
            _ => 0,
        };
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let ttl_ms = ms(request.ttl);
        let hold_ms = request.min_hold.map_or(0, ms);
        let name = request.name.as_str();
        let params: Vec<Value> = vec![
            name.into(),
            request.owner.as_str().into(),
            request.mode.to_wire().into(),
            limit.into(),
            ttl_ms.into(),
            me.pid.into(),
            me.host.as_str().into(),
            request.message.as_deref().into(),
            self.key(&request.owner, name).into(),
            queue.into(),
            ticket.into(),
            hold_ms.into(),
            ms(wait).into(),
            runs::tail(request).into(),
        ];
        let mut sent = Instant::now();
        let rows = self.run(conn, true, |c| {
            sent = Instant::now();
            first_set(c, &self.acquire, params.clone())
        })?;
        let Some(row) = rows.first() else {
            return Err(odd("no answer from acquire"));
        };
        if let Some(token) = int(row, 0) {
            let run = text(row, 7).and_then(|raw| Started::of(&raw, &request.owner));
            return Token::try_from(token)
                .ok()
                .filter(|&t| t > 0)
                .map(|t| Reply::Granted(t, sent, run))
                .ok_or_else(|| odd("a token below 1"));
        }
        let blocker = text(row, 2).map(|owner| Blocker {
            key: self.key(&owner, name),
            lasts: Duration::from_micros(
                int(row, 3)
                    .and_then(|us| u64::try_from(us).ok())
                    .unwrap_or(0),
            ),
            gone: int(row, 4) == Some(1),
        });
        Ok(Reply::Busy {
            ticket: int(row, 1),
            blocker,
            waited_out: int(row, 5) == Some(1),
            found_free: text(row, 6).map(|owner| self.key(&owner, name)),
        })
    }

    /// Extends `owner`'s lease on `name` by `ttl`: whether it was still ours.
    pub fn renew(
        &self,
        conn: &mut Conn,
        name: &LockName,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, Fault> {
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let key = self.key(owner, name.as_str());
        let params: Vec<Value> = vec![
            name.as_str().into(),
            owner.into(),
            ttl_ms.into(),
            key.into(),
        ];
        let rows = self.run(conn, false, |c| first_set(c, &self.renew, params.clone()))?;
        Ok(rows.first().and_then(|r| int(r, 0)).unwrap_or(0) > 0)
    }

    /// Gives up `owner`'s hold: whether it was still ours. A `--min-hold` keeps the lock taken
    /// past this only when `end.keep` says so. Writes how the run ended (`started`: the record
    /// its grant wrote) into the last run while that record is still unchanged, and as the last
    /// success when it succeeded.
    pub fn release(
        &self,
        conn: &mut Conn,
        name: &LockName,
        owner: &str,
        (started, end): (Option<&Started>, &RunEnd),
    ) -> Result<bool, Fault> {
        let key = self.key(owner, name.as_str());
        let (word, success) = runs::ending(end);
        let params: Vec<Value> = vec![
            name.as_str().into(),
            owner.into(),
            key.into(),
            end.keep.into(),
            started.map(|s| s.head.as_str()).into(),
            started.map(|s| s.tail.as_str()).into(),
            word.into(),
            success.into(),
        ];
        let rows = self.run(conn, false, |c| first_set(c, &self.release, params.clone()))?;
        Ok(rows.first().and_then(|r| int(r, 0)).unwrap_or(0) > 0)
    }

    /// Leaves the line (a waiter that gave up).
    pub fn leave(
        &self,
        conn: &mut Conn,
        name: &LockName,
        owner: &str,
        ticket: Option<i64>,
    ) -> Result<(), Fault> {
        let key = self.key(owner, name.as_str());
        let params: Vec<Value> = vec![
            name.as_str().into(),
            owner.into(),
            ticket.into(),
            key.into(),
        ];
        self.run(conn, false, |c| first_set(c, &self.leave, params.clone()))?;
        Ok(())
    }

    /// Waits up to `most` for the lock key `key` to be free (and lets it go at once).
    pub fn wait_for_key(&self, conn: &mut Conn, key: &str, most: Duration) -> Result<Woken, Fault> {
        let seconds = most.as_secs_f64().max(0.001);
        let rows =
            conn.call(|c| first_set(c, &self.wait, vec![key.into(), seconds.into(), key.into()]))?;
        Ok(match rows.first().and_then(|r| int(r, 0)) {
            Some(1) => Woken::Freed,
            _ => Woken::Held,
        })
    }

    /// The live holders of `name` (`exact`) or of every name starting with it, by name; or
    /// (`waiting`) their waiters, each name's in line order.
    pub fn entries(
        &self,
        conn: &mut Conn,
        name: &str,
        exact: bool,
        waiting: bool,
    ) -> Result<Vec<(String, Holder)>, Fault> {
        let (sql, params): (&str, Vec<Value>) = match (waiting, exact) {
            (false, true) => (&self.holders, vec![name.into()]),
            (false, false) => (&self.holders_from, vec![name.into(), name.into()]),
            (true, true) => (&self.waiters, vec![name.into()]),
            (true, false) => (&self.waiters_from, vec![name.into(), name.into()]),
        };
        let rows = self.run(conn, true, |c| first_set(c, sql, params.clone()))?;
        Ok(rows.iter().map(|r| holder_of(r, waiting)).collect())
    }

    /// The last run and the last success of `name`, as stored (never trusted).
    pub fn last_runs(&self, conn: &mut Conn, name: &LockName) -> Result<LastRuns, Fault> {
        let params: Vec<Value> = vec![name.as_str().into()];
        let rows = self.run(conn, true, |c| {
            first_set(c, &self.last_runs, params.clone())
        })?;
        let Some(row) = rows.first() else {
            return Ok(LastRuns::default());
        };
        let bytes = |i: usize| match row.as_ref(i) {
            Some(Value::Bytes(b)) => Some(b.as_slice()),
            _ => None,
        };
        let runs = runs::last_runs(bytes(0), bytes(1));
        // The server's time after the read: the clock that dated the records.
        let now = self.run(conn, true, |c| {
            first_set(c, include_str!("server_now.sql"), vec![])
        })?;
        let now = now
            .first()
            .and_then(|row| row.get_opt::<u64, _>(0)?.ok())
            .ok_or_else(|| odd("last runs"))?;
        Ok(runs.judged_at(UNIX_EPOCH + Duration::from_millis(now), Duration::ZERO))
    }

    /// The names starting with `prefix` that have records (`list --runs`), as stored: any bytes
    /// (a name that is not UTF-8 is no lock's, and left out).
    pub fn run_names(&self, conn: &mut Conn, prefix: &str) -> Result<Vec<String>, Fault> {
        let params: Vec<Value> = vec![prefix.into(), prefix.into()];
        let rows = self.run(conn, true, |c| {
            first_set(c, &self.run_names, params.clone())
        })?;
        Ok(rows
            .iter()
            .filter_map(|row| match row.as_ref(0) {
                Some(Value::Bytes(b)) => String::from_utf8(b.clone()).ok(),
                _ => None,
            })
            .collect())
    }

    /// Deletes the records of names unwritten for `RUN_RECORD_KEPT_FOR` (up to 1000 at a time).
    pub fn expire_runs(&self, conn: &mut Conn) -> Result<(), Fault> {
        self.run(conn, true, |c| first_set(c, &self.expire_runs, vec![]))?;
        Ok(())
    }

    /// Removes every holder of `name`; returns them.
    pub fn break_lock(&self, conn: &mut Conn, name: &LockName) -> Result<Vec<Holder>, Fault> {
        let params: Vec<Value> = vec![name.as_str().into()];
        let rows = self.run(conn, true, |c| first_set(c, &self.brk, params.clone()))?;
        Ok(rows.iter().map(|r| holder_of(r, false).1).collect())
    }
}

/// The most rows dlock reads in one answer (in all its results): its statements return a few,
/// `list` one a holder or waiter.
pub(super) const MAX_ROWS: usize = 100_000;

/// The most bytes of values dlock reads in one answer.
pub(super) const MAX_ROW_BYTES: usize = 64 << 20;

/// The rows of the first result of `sql` (a procedure's later results, and its status, read and
/// dropped). An answer past `MAX_ROWS` rows or `MAX_ROW_BYTES` is refused, and the connection cut
/// first: the client would read the rest of it, however long, before letting go.
fn first_set(c: &mut mysql::Conn, sql: &str, params: Vec<Value>) -> mysql::Result<Vec<Row>> {
    let mut result = c.query_iter(with_values(sql, &params))?;
    let mut rows = Vec::new();
    let mut first = true;
    let (mut count, mut bytes) = (0, 0);
    while let Some(set) = result.iter() {
        for row in set {
            let row = row?;
            count += 1;
            bytes += (0..row.len())
                .filter_map(|i| match row.as_ref(i) {
                    Some(Value::Bytes(b)) => Some(b.len()),
                    _ => None,
                })
                .sum::<usize>();
            if count > MAX_ROWS || bytes > MAX_ROW_BYTES {
                dlock_core::backend::watch::cut_this_threads_call();
                return Err(mysql::Error::IoError(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "the server sent more than {MAX_ROWS} rows or {} MiB in one answer \
                         (dlock's answers never come near); is it MySQL?",
                        MAX_ROW_BYTES >> 20
                    ),
                )));
            }
            if first {
                rows.push(row);
            }
        }
        first = rows.is_empty();
    }
    Ok(rows)
}

/// `sql` without its comment lines, each `?` replaced by the next of `values` as a literal: text
/// as a hexadecimal literal (any bytes, whatever the session's SQL mode: nothing a name or a
/// message holds can end the literal), numbers in decimal, anything else (never sent) as NULL.
/// For dlock's own statements, whose comments are whole lines and which have no `?` but their
/// placeholders.
fn with_values(sql: &str, values: &[Value]) -> String {
    let mut out = String::with_capacity(sql.len() + 64 * values.len());
    let mut values = values.iter();
    for line in sql.lines().filter(|l| !l.trim_start().starts_with("--")) {
        for ch in line.chars() {
            if ch != '?' {
                out.push(ch);
                continue;
            }
            match values.next() {
                Some(Value::Bytes(b)) => {
                    out.push_str("X'");
                    out.push_str(&dlock_core::text::hex(b));
                    out.push('\'');
                }
                Some(Value::Int(n)) => out.push_str(&n.to_string()),
                Some(Value::UInt(n)) => out.push_str(&n.to_string()),
                Some(Value::Double(x)) => out.push_str(&format!("{x:.6}")),
                Some(Value::Float(x)) => out.push_str(&format!("{x:.6}")),
                _ => out.push_str("NULL"),
            }
        }
        out.push('\n');
    }
    out
}

fn odd(what: &str) -> Fault {
    Fault::Unreachable(format!("unexpected answer from the server ({what})"))
}

/// Column `i` as text, whatever the protocol sent (`None`: NULL, or not text).
fn text(row: &Row, i: usize) -> Option<String> {
    match row.as_ref(i)? {
        Value::Bytes(b) => String::from_utf8(b.clone()).ok(),
        Value::Int(n) => Some(n.to_string()),
        Value::UInt(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Column `i` as a number, whatever the protocol sent.
fn int(row: &Row, i: usize) -> Option<i64> {
    match row.as_ref(i)? {
        Value::Int(n) => Some(*n),
        Value::UInt(n) => i64::try_from(*n).ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A holder row (name, owner, mode, token, since, pid, host, message, expires_at, then kept_until
/// and kept_note where the statement reads them; any content: other clients may write these
/// tables), or a `waiting` one (no token), checked field by field. What does not read is an
/// unreadable holder, counted as the server counts it.
fn holder_of(row: &Row, waiting: bool) -> (String, Holder) {
    let raw = |i: usize| match row.as_ref(i) {
        Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => text(row, i).unwrap_or_default(),
    };
    let nullable = |i: usize| match row.as_ref(i) {
        Some(Value::NULL) | None => None,
        _ => Some(raw(i)),
    };
    let time = |i: usize| {
        int(row, i)
            .and_then(|us| u64::try_from(us).ok())
            .and_then(|us| UNIX_EPOCH.checked_add(Duration::from_micros(us)))
            .filter(|&t| t > SystemTime::UNIX_EPOCH)
    };
    let name = raw(0);
    let fields = RowText {
        owner: raw(1),
        mode: raw(2),
        token: nullable(3),
        since: raw(4),
        pid: raw(5),
        host: raw(6),
        message: nullable(7),
        expires_at: time(8),
        kept_until: time(9),
        kept: text(row, 10).and_then(|note| Kept::from_note(&note)),
    };
    let utf8 = |i: usize| !matches!(row.as_ref(i), Some(Value::Bytes(b)) if std::str::from_utf8(b).is_err());
    // A waiter whose row says only what it waits for (an older dlock's, or one that has not yet
    // written who it is): its mode and owner, the rest unknown rather than unreadable.
    let anonymous = waiting && (4..8).all(|i| matches!(row.as_ref(i), Some(Value::NULL)));
    let parsed = match Mode::from_wire(&fields.mode).filter(|_| (0..8).all(utf8)) {
        None => None,
        Some(m) if anonymous => Some(Holder {
            unreadable: None,
            ..Holder::unreadable(m, &fields.owner, "")
        }),
        Some(_) => fields.holder(waiting),
    };
    let holder = parsed.unwrap_or_else(|| fields.unreadable());
    (name, holder)
}

#[cfg(test)]
mod tests;
