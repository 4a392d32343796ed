//! What dlock asks a Redis server, and how it reads the answers: its Lua scripts (`*.lua` here,
//! hashed by build.rs) called with EVALSHA and given to a server that lacks them, the arguments
//! one acquisition passes them (`Ask`), and the parsing of their replies, which hold records any
//! client of the server could have written.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Connection, FromRedisValue, RedisError, ToRedisArgs, Value};

use super::keys::Keys;
use super::link::{confirmation, Subscribed};
use super::reply::text_of;
use dlock_core::lock::{
    host_name, time_from_millis, Ending, Holder, Kept, LockRequest, Mode, RunEnd, Token, Waiter,
};

/// A dlock script: the shared prelude (`lib.lua`) and its own part, with the SHA-1 that EVALSHA
/// names it by, both made by build.rs.
struct LuaScript {
    body: &'static str,
    sha1: &'static str,
}

// ACQUIRE, RENEW, RELEASE, STATUS, BREAK, RAISE_TOKEN, KEY_TYPES and LAST_RUNS.
include!(concat!(env!("OUT_DIR"), "/redis_scripts.rs"));

impl LuaScript {
    /// Gives the script to a server that does not have it (NOSCRIPT).
    fn load(&self, conn: &mut Connection) -> redis::RedisResult<()> {
        let sha1: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(self.body)
            .query(conn)?;
        if sha1 != self.sha1 {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "the server names a dlock script by another hash",
                sha1,
            )));
        }
        Ok(())
    }
}

/// A script call being built: EVALSHA, the lock's keys, then the arguments.
struct Call {
    script: &'static LuaScript,
    cmd: redis::Cmd,
    keys: Keys,
}

impl Call {
    /// A call of `script` with the keys of a lock, ready for its arguments.
    fn new(script: &'static LuaScript, keys: &Keys) -> Call {
        let mut cmd = redis::cmd("EVALSHA");
        let all = keys.all();
        cmd.arg(script.sha1).arg(all.len()).arg(&all);
        Call {
            script,
            cmd,
            keys: keys.clone(),
        }
    }

    fn arg(mut self, arg: impl ToRedisArgs) -> Call {
        self.cmd.arg(arg);
        self
    }

    /// Runs the script, giving it to the server first if the server does not have it.
    fn invoke<T: FromRedisValue>(&self, conn: &mut Connection) -> redis::RedisResult<T> {
        let result = match self.cmd.query(conn) {
            Err(e) if is_noscript(&e) => {
                self.script.load(conn)?;
                self.cmd.query(conn)
            }
            result => result,
        };
        result.map_err(|e| self.naming_the_key(conn, e))
    }

    /// `e`, or when it is Redis's WRONGTYPE (which names no key), the error of key_types.lua,
    /// which names the key of this lock that has the wrong type.
    fn naming_the_key(&self, conn: &mut Connection, e: RedisError) -> RedisError {
        if !e.to_string().contains("WRONGTYPE") || std::ptr::eq(self.script, &KEY_TYPES) {
            return e;
        }
        match Call::new(&KEY_TYPES, &self.keys).invoke::<Value>(conn) {
            Err(named) if named.code() == Some("DLOCK") => named,
            _ => e,
        }
    }
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// The scripts that report a lock's holders (`status` and `list` read them with `status`, which
/// also tells the waiters).
#[derive(Clone, Copy)]
pub(super) enum HoldersScript {
    /// Removes them all and hands the lock to the waiters (`release --force`).
    Break,
}

/// Runs `script` on the lock `keys` and returns the holders it reports.
pub(super) fn holders(
    conn: &mut Connection,
    keys: &Keys,
    script: HoldersScript,
) -> redis::RedisResult<Vec<Holder>> {
    match script {
        HoldersScript::Break => {
            let value: Value = Call::new(&BREAK, keys).invoke(conn)?;
            Ok(parse_holders(&value))
        }
    }
}

/// The run records of the lock `keys` as this server keeps them (last_runs.lua): the last run and
/// the last success, each as stored (any client may have written it), `None` for none; and the
/// server's time, which dated them.
pub(super) fn last_runs(conn: &mut Connection, keys: &Keys) -> redis::RedisResult<ServerRuns> {
    let value: Value = Call::new(&LAST_RUNS, keys).invoke(conn)?;
    let Value::Array(records) = &value else {
        return Err(unexpected(&value));
    };
    let record = |i: usize| match records.get(i) {
        Some(Value::Nil) | None => None,
        Some(v) => Some(lossy(v)),
    };
    let now = records
        .get(2)
        .and_then(int_of)
        .and_then(|ms| u64::try_from(ms).ok())
        .ok_or_else(|| unexpected(&value))?;
    Ok(ServerRuns {
        last_run: record(0),
        last_success: record(1),
        now: UNIX_EPOCH + Duration::from_millis(now),
    })
}

/// What one server keeps of a lock's runs (see `last_runs`).
pub(super) struct ServerRuns {
    pub(super) last_run: Option<String>,
    pub(super) last_success: Option<String>,
    /// The server's time when it answered.
    pub(super) now: SystemTime,
}

/// What one server says of a lock for `status` and `list`.
pub(super) struct ServerStatus {
    /// The live holders, each with its lease's expiry by this server's clock.
    pub(super) holders: Vec<Holder>,
    /// The live waiters, first in line first, each since it joined the line.
    pub(super) waiters: Vec<Waiter>,
}

/// Reads the holders and waiters of the lock `keys` (status.lua).
pub(super) fn status(conn: &mut Connection, keys: &Keys) -> redis::RedisResult<ServerStatus> {
    let value: Value = Call::new(&STATUS, keys).invoke(conn)?;
    parse_status(&value).ok_or_else(|| unexpected(&value))
}

/// `[[owner, record, expiry ms, kept, ...], [waiter, ticket, ...]]`, as status.lua answers.
fn parse_status(value: &Value) -> Option<ServerStatus> {
    let Value::Array(parts) = value else {
        return None;
    };
    let (Value::Array(holders), Value::Array(waiters)) = (parts.first()?, parts.get(1)?) else {
        return None;
    };
    let holders = holders
        .chunks_exact(4)
        .map(|h| {
            let mut holder = Holder::from_record(&lossy(&h[0]), &lossy(&h[1]));
            holder.expires_at = whole(&h[2]).and_then(time_from_millis);
            if let Some((until, kept)) = read_kept(&lossy(&h[3])) {
                holder.kept_until = Some(until);
                holder.kept = Some(kept);
            }
            holder
        })
        .collect();
    let waiters = waiters
        .chunks_exact(2)
        .map(|w| waiter(&lossy(&w[0]), whole(&w[1])))
        .collect();
    Some(ServerStatus { holders, waiters })
}

/// A holder's entry in the kept hash, `UNTIL HOLD[ ended]` (lib.lua), if dlock could have
/// written it: when --min-hold keeps the lock until (server ms), and why.
fn read_kept(entry: &str) -> Option<(SystemTime, Kept)> {
    let (until, note) = entry.split_once(' ')?;
    Some((
        time_from_millis(until.parse().ok()?)?,
        Kept::from_note(note)?,
    ))
}

/// A queue entry, `OWNER MODE TTL[:HOLD] PID HOST[\tMESSAGE]` (lib.lua's `waiter`), with its ticket
/// (server microseconds when it joined the line). Any client can write the queue: an entry dlock
/// could not have written is shown as unreadable.
fn waiter(entry: &str, ticket: Option<u64>) -> Waiter {
    let read = || {
        let mut fields = entry.splitn(5, ' ');
        let owner = fields.next()?;
        let mode = Mode::from_wire(fields.next()?)?;
        let _ttl = fields.next()?;
        let pid = fields.next()?.parse().ok()?;
        let rest = fields.next()?;
        let (host, message) = match rest.split_once('\t') {
            Some((host, message)) => (host, Some(message)),
            None => (rest, None),
        };
        Holder::checked(mode, owner, host, pid, ticket? / 1_000_000, None)?.with_message(message)
    };
    let mode = entry
        .split(' ')
        .nth(1)
        .and_then(Mode::from_wire)
        .unwrap_or(Mode::Exclusive);
    let owner = entry.split(' ').next().unwrap_or_default();
    Waiter::from(read().unwrap_or_else(|| Holder::unreadable(mode, owner, entry)))
}

/// A score as Redis writes a whole number, or `None`.
fn whole(value: &Value) -> Option<u64> {
    text_of(value)?.parse().ok()
}

fn lossy(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => text_of(other).unwrap_or_default(),
    }
}

/// One acquisition's identity and its scripts' arguments; a lease keeps it for renewals and the
/// release.
#[derive(Clone)]
pub(super) struct Ask {
    pub(super) keys: Keys,
    owner: String,
    mode: String,
    pub(super) ttl: Duration,
    /// `--min-hold` in milliseconds, 0 for none.
    hold_ms: u64,
    pid: String,
    /// The record's tail: the host, then a tab and the message if there is one. The scripts keep
    /// it as they get it, in the waiter's entry and the holder's record (`Holder::record`).
    host: String,
}

impl Ask {
    /// `sharded`: on Redis Cluster (see `Keys::sharded`).
    pub(super) fn new(request: &LockRequest, sharded: bool) -> Ask {
        Ask {
            keys: Keys::on(&request.name, sharded),
            owner: request.owner.clone(),
            mode: request.mode.to_wire(),
            ttl: request.ttl,
            hold_ms: request.min_hold.map_or(0, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
            }),
            pid: dlock_core::lock::acting_for::record_pid().to_string(),
            // The record is space-separated with the host last; a host name has no spaces.
            host: match &request.message {
                Some(message) => format!("{}\t{message}", host_name().replace(' ', "_")),
                None => host_name().replace(' ', "_"),
            },
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().max(1) as u64
    }

    /// The channel this dlock hears its grants of this lock on: with `sharded` (Redis Cluster)
    /// the lock's own, in its slot; else one for all its locks.
    pub(super) fn wake_channel(&self, sharded: bool) -> String {
        match sharded {
            true => format!("{}:wake:{}", self.keys.base, self.owner),
            false => format!("dlock:wake:{}", self.owner),
        }
    }

    fn acquire_call(&self, wait: bool, ticket: &str) -> Call {
        Call::new(&ACQUIRE, &self.keys)
            .arg(&self.owner)
            .arg(&self.mode)
            .arg(self.ttl_ms())
            .arg(if wait { "1" } else { "0" })
            .arg(ticket)
            .arg(&self.pid)
            .arg(&self.host)
            .arg(self.hold_ms)
    }

    pub(super) fn acquire(
        &self,
        conn: &mut Connection,
        wait: bool,
        ticket: &str,
    ) -> redis::RedisResult<Reply> {
        let value: Value = self.acquire_call(wait, ticket).invoke(conn)?;
        parse_acquire(&value).ok_or_else(|| unexpected(&value))
    }

    /// A waiter's first attempt on a connection (for this lock, with `sharded`): it switches the
    /// connection to RESP3 (HELLO 3, unless `hello` is false: done already), so the connection can
    /// carry messages beside replies, and subscribes to this lock's grant channel, before the
    /// attempt and in the same write, so no grant can come before it listens and neither costs a
    /// round trip of its own. With `sharded`, SSUBSCRIBE, whose answer is read on its own: a node
    /// that does not know it (before Redis 7) says so, and its waiters listen as elsewhere.
    pub(super) fn acquire_listening(
        &self,
        conn: &mut Connection,
        ticket: &str,
        hello: bool,
        sharded: bool,
    ) -> redis::RedisResult<(Reply, Subscribed)> {
        let call = self.acquire_call(true, ticket);
        let channel = self.wake_channel(sharded);
        let mut write = Vec::new();
        if hello {
            write.extend(redis::cmd("HELLO").arg(3).get_packed_command());
        }
        let subscribe = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
        write.extend(redis::cmd(subscribe).arg(&channel).get_packed_command());
        write.extend(call.cmd.get_packed_command());
        conn.send_packed_command(&write)?;
        if hello {
            match next_reply(conn)?.extract_error() {
                Err(e) if e.to_string().contains("unknown command") => {
                    return Err(RedisError::from((
                        redis::ErrorKind::RESP3NotSupported,
                        "dlock needs Redis 6 or newer to wait (RESP3)",
                        e.to_string(),
                    )))
                }
                Err(e) => return Err(e),
                Ok(_) => {}
            }
        }
        // SUBSCRIBE names no key: it cannot fail where the attempt succeeds, and its
        // confirmation is a message like any other.
        let subscribed = match sharded {
            true => confirmation(conn, &channel)?,
            false => Subscribed::Yes,
        };
        let value = match next_reply(conn)?.extract_error() {
            Err(e) if is_noscript(&e) => {
                ACQUIRE.load(conn)?;
                call.invoke(conn)?
            }
            reply => reply.map_err(|e| call.naming_the_key(conn, e))?,
        };
        let reply = parse_acquire(&value).ok_or_else(|| unexpected(&value))?;
        Ok((reply, subscribed))
    }

    /// Subscribes to this dlock's classic grant channel, on its own (a cluster node without
    /// sharded pub/sub).
    pub(super) fn subscribe_classic(&self, conn: &mut Connection) -> redis::RedisResult<()> {
        let write = redis::cmd("SUBSCRIBE")
            .arg(self.wake_channel(false))
            .get_packed_command();
        conn.send_packed_command(&write)?;
        match confirmation(conn, &self.wake_channel(false))? {
            Subscribed::Yes => Ok(()),
            _ => Err(RedisError::from((
                redis::ErrorKind::Client,
                "the server did not confirm SUBSCRIBE",
            ))),
        }
    }

    /// 1 when renewed, 0 when the lock is no longer ours.
    pub(super) fn renew(&self, conn: &mut Connection) -> redis::RedisResult<i64> {
        Call::new(&RENEW, &self.keys)
            .arg(&self.owner)
            .arg(self.ttl_ms())
            .invoke(conn)
    }

    /// The holder's run (with `token`) ended as `end` says: writes its ending, and gives the lock
    /// up, but for what its `--min-hold` keeps on this server until its end by this server's clock
    /// when `end.keep`. 1 when it was still this holder's, else 0.
    pub(super) fn let_go(
        &self,
        conn: &mut Connection,
        token: Token,
        end: &RunEnd,
    ) -> redis::RedisResult<i64> {
        let ending = end.ending.to_wire();
        self.release_call(Place::Leave, end.keep, &token.to_string(), &ending)
            .arg(if end.ending.succeeded() { "1" } else { "0" })
            .invoke(conn)
    }

    /// Undoes an acquisition (nothing kept, whatever its min-hold): 1 when a lease was released,
    /// else 0 (a waiter gives up its place either way). A run record it wrote and that has not
    /// ended ends "not-run" on a server `alone`; with Redlock it goes, as the acquisition never
    /// counted (a server that granted it alone must not show a run that did not happen).
    pub(super) fn release(
        &self,
        conn: &mut Connection,
        place: Place,
        alone: bool,
    ) -> redis::RedisResult<i64> {
        let ending = if alone {
            Ending::NotRun.to_wire()
        } else {
            String::new()
        };
        self.release_call(place, false, "", &ending)
            .arg("0")
            .invoke(conn)
    }

    fn release_call(&self, place: Place, let_go: bool, token: &str, ending: &str) -> Call {
        let (keep, ticket) = match place {
            Place::Keep(ticket) => ("1", ticket),
            Place::Leave => ("0", ""),
        };
        Call::new(&RELEASE, &self.keys)
            .arg(&self.owner)
            .arg(&self.mode)
            .arg(keep)
            .arg(ticket)
            .arg(self.ttl_ms())
            .arg(&self.pid)
            .arg(&self.host)
            .arg(self.hold_ms)
            .arg(if let_go { "1" } else { "0" })
            .arg(token)
            .arg(ending)
    }

    /// Redlock: lifts the server's fencing counter to `token`, the token just handed out (and
    /// the token of this owner's run record on it).
    pub(super) fn raise_token(
        &self,
        conn: &mut Connection,
        token: Token,
    ) -> redis::RedisResult<()> {
        Call::new(&RAISE_TOKEN, &self.keys)
            .arg(token)
            .arg(&self.owner)
            .invoke::<Value>(conn)
            .map(drop)
    }
}

/// Whether undoing an acquisition keeps the waiter's place in the queue (under its ticket).
#[derive(Clone, Copy)]
pub(super) enum Place<'a> {
    Keep(&'a str),
    Leave,
}

/// The next reply on `conn`, past any messages (which go to the link's `messages`).
fn next_reply(conn: &mut Connection) -> redis::RedisResult<Value> {
    loop {
        match conn.recv_response()? {
            Value::Push { .. } => continue,
            reply => return Ok(reply),
        }
    }
}

fn unexpected(value: &Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected answer from a dlock script",
        format!("{value:?}"),
    ))
}

/// What one server answered an acquisition.
pub(super) enum Reply {
    Granted(Token),
    Busy {
        ticket: String,
        retry: Duration,
        /// The last token this server handed out.
        counter: Token,
        /// Waiters in this server's line before this one.
        ahead: usize,
        holders: Vec<Holder>,
    },
}

fn parse_acquire(value: &Value) -> Option<Reply> {
    let Value::Array(items) = value else {
        return None;
    };
    match (int_of(items.first()?)?, items.get(1)) {
        (1, Some(token)) => Some(Reply::Granted(u64::try_from(int_of(token)?).ok()?)),
        (0, Some(ticket)) => Some(Reply::Busy {
            ticket: text_of(ticket)?,
            retry: Duration::from_millis(u64::try_from(int_of(items.get(2)?)?).ok()?.max(1)),
            counter: u64::try_from(int_of(items.get(3)?)?).ok()?,
            ahead: usize::try_from(int_of(items.get(4)?)?).ok()?,
            holders: parse_holders(&Value::Array(items[5..].to_vec())),
        }),
        _ => None,
    }
}

fn int_of(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// `[owner, record, kept, owner, record, kept, ...]` into holders. Any client of the server can write the
/// records: one that does not parse is still a holder (the scripts count it as one), shown as
/// unreadable.
fn parse_holders(value: &Value) -> Vec<Holder> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .chunks_exact(3)
        .map(|h| {
            let mut holder = Holder::from_record(&lossy(&h[0]), &lossy(&h[1]));
            if let Some((until, kept)) = read_kept(&lossy(&h[2])) {
                holder.kept_until = Some(until);
                holder.kept = Some(kept);
            }
            holder
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlock_core::lock::last_run::{MAX_RUN_RECORD_BYTES, RUN_RECORD_KEPT_FOR};

    #[test]
    fn the_scripts_keep_run_records_as_long_and_as_short_as_every_store() {
        let kept = format!("RUN_KEPT_MS = {}\n", RUN_RECORD_KEPT_FOR.as_millis());
        let most = format!("MAX_RUN_RECORD = {MAX_RUN_RECORD_BYTES}\n");
        for script in [&ACQUIRE, &RELEASE, &BREAK, &RAISE_TOKEN, &RENEW] {
            assert!(script.body.contains(&kept) && script.body.contains(&most));
        }
    }
}
