//! The Redis backend: a lock with a lease in one Redis server, or in several with Redlock.
//!
//! Why it looks the way it does:
//! - Every change to a lock is one Lua script (`redis/*.lua`, with a shared prelude), run with
//!   EVALSHA and loaded on NOSCRIPT, so Redis applies it atomically and judges expiry by its own
//!   clock (`TIME`), never the client's. All keys of a lock share the hash tag `dlock:{NAME}`, so a
//!   script touches one slot and runs unchanged on Redis Cluster.
//! - Key layout, with NAME percent-encoded where it has `%`, `{`, `}`, a space or a glob character
//!   (so no name can end the hash tag early or reach outside `dlock:`; other UTF-8 stays readable):
//!   `dlock:{NAME}:holders` (sorted set, owner id -> lease expiry), `dlock:{NAME}:owners` (hash,
//!   owner id -> "MODE TOKEN SINCE PID HOST"), `dlock:{NAME}:token` (the fencing counter, never
//!   expires), `dlock:{NAME}:queue` and `dlock:{NAME}:alive` (waiters in arrival order and their
//!   own leases). Grants are told on the pub/sub channel `dlock:wake:OWNER`.
//! - Renew and release act only on the caller's own owner id: no client ever extends or deletes
//!   another's lease. An expired lease is never revived, so a renewal after expiry is "lost".
//!
//! Waiting: each waiter takes a ticket in the lock's queue (a sorted set scored by the server's
//! clock), on the first attempt already when dlock will wait, and subscribes to a channel of its
//! own on the same connection (RESP3, so one connection carries commands and messages; the
//! SUBSCRIBE goes out with that first attempt and costs no round trip). A release hands the lock
//! to the first waiter itself, in the same script, and only when it can take it (then to the next
//! ones too while they can join: shared and limit holders), and publishes the grant with its
//! token. So a handoff costs one script and one message whatever the number of waiters (no herd),
//! the next holder starts without a round trip of its own, and waiters acquire in arrival order
//! (nobody may pass a live waiter with an earlier ticket). Pub/sub rather than BLPOP because a
//! subscriber waits with a short socket timeout and looks at its cancellation flag without
//! sending a command each time, and its connection stays free for the renewals of locks already
//! held: an idle waiter costs the server nothing but its fallback re-check, which runs when the
//! holder's lease would run out and at least every ttl/3 (it also renews the waiter's place: a
//! waiter that dies drops out of the queue within its ttl). A lost message thus costs at most that
//! re-check, which finds the lock already granted. The grant's lease is judged from the send time
//! of the waiter's last attempt before the message (messages and replies come in the order the
//! server made them, so the grant came later and its lease ends later).
//!
//! Several `--url`s: Redlock. Acquire runs the script on every server at once; the lock is held
//! when a majority granted it within the validity time (ttl minus the time taken minus a drift
//! margin), else every server is told to release (the waiter keeps its place in every queue and
//! tries again after a short random pause); a grant from one server is only a sign to try again
//! everywhere. A waiter's ticket comes from its own clock, the same on every server, so that all
//! servers order the waiters alike. Renewals must reach a majority; when they cannot
//! until the lease runs out, or a majority says "not yours", the lock is lost. The fencing token is
//! above every counter of the servers that answered (granting or busy), and each granting server's
//! counter is then raised to it: any later majority shares a server with this one, so tokens keep
//! growing as long as the servers that missed an acquisition plus those that lost their data before
//! the next one are a minority.

use std::collections::BTreeMap;
use std::io;
use std::mem::ManuallyDrop;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use redis::{
    Client, Connection, ConnectionAddr, FromRedisValue, IntoConnectionInfo, ProtocolVersion,
    PushInfo, PushKind, RedisError, ToRedisArgs, Value,
};

use super::{
    Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Released, Renewal, Waiting,
    RETRY_FIRST, RETRY_MOST,
};
use crate::exit::{FailWith, Failure};
use crate::lock::{escaped, host_name, random_bytes, Holder, LockName, LockRequest, Token};
use crate::signal::interrupt;
use crate::url::redact;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// For `dlock --help` and the man page.
pub const HELP: &str = "\
Redis backend (--backend redis --url redis://[user:password@]host:port[/db]; rediss:// for TLS,
trusting the system CAs or SSL_CERT_FILE; default redis://127.0.0.1:6379):
  Keys of a lock share one hash tag, so each script touches one slot (fine on Redis Cluster).
  NAME is percent-encoded where it has % { } * ? [ ] \\ or a space.
    dlock:{NAME}:holders  sorted set: owner id -> lease expiry (by the server's clock)
    dlock:{NAME}:owners   hash: owner id -> \"MODE TOKEN SINCE PID HOST\"
    dlock:{NAME}:token    the fencing counter (INCR per acquisition; never expires)
    dlock:{NAME}:queue    sorted set: waiters in arrival order (first come, first served)
    dlock:{NAME}:alive    sorted set: waiter -> its own expiry (a dead waiter drops out)
    dlock:wake:ID         pub/sub channel: a release grants the lock to the first waiter and
                          tells it here (\"dlock:{NAME} TOKEN\"); one per dlock, on RESP3
  Needs Redis 6 or newer (RESP3).
  Acquire, renew and release are Lua scripts that act only on the caller's own owner id (and
  hand a freed lock to the waiters first in line, who asked for it).
  dlock renews the --ttl lease every ttl/3. The lock is lost when a renewal answers \"not yours\"
  (expired, release --force, key deleted, server restarted empty), or when no renewal got
  through for the ttl minus 1% and 2ms: the command then gets SIGTERM, SIGKILL after
  --kill-after, and dlock exits 79. A killed dlock's lease frees the lock within the ttl.
  Redlock (--url given 3, 5, ... times): the lock is held when a majority of the servers granted
  it within the lease (less the time taken and the drift margin), else it is released everywhere;
  renewals must reach a majority. DLOCK_TOKEN is above every counter of the servers that answered
  and the granting servers' counters are raised to it: tokens keep growing as long as the servers
  that missed an acquisition plus those that lose their data before the next one are a minority
  (a later majority then always includes a server that remembers). Redlock assumes clocks that
  run at about the same rate, pauses shorter than the lease, and a crashed server restarted empty
  only after a ttl; it cannot stop a holder that was paused past its lease from acting: pass
  DLOCK_TOKEN to the resource and have it refuse older tokens.";

/// The largest fencing token: the scripts count in Lua numbers (doubles), exact up to 2^53 - 1.
const MAX_TOKEN: Token = (1 << 53) - 1;

/// What an ACL user's permissions are checked for, in one script (Redis 7's
/// `redis.acl_check_cmd`; before that, PUBLISH is tried, the one command a script needs after its
/// writes): the first command it may not run on dlock's keys and channels, or "".
const PERMISSIONS_CHECK: &str = include_str!("redis/permissions.lua");

/// How long after a call's budget its alarm interrupts it: a silent server is noticed by the socket
/// timeout (which ends the call), a slow drip of bytes by the alarm. (A library that retries a read
/// after EINTR, as rustls does, would start its full socket timeout again.)
const ALARM_SLACK: Duration = Duration::from_millis(20);

/// How often a waiter looks at its cancellation flag while nothing happens.
const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// Longest one renewal attempt may wait for its answer.
const MAX_RENEW_ATTEMPT: Duration = Duration::from_secs(1);

/// Most keys `list` looks at, so a huge keyspace cannot keep it scanning forever.
const MAX_SCAN_STEPS: usize = 100_000;

/// A dlock script: the shared prelude (`redis/lib.lua`) and its own part, with the SHA-1 that
/// EVALSHA names it by, both made by build.rs.
struct LuaScript {
    body: &'static str,
    sha1: &'static str,
}

// ACQUIRE, RENEW, RELEASE, STATUS, BREAK and RAISE_TOKEN.
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
}

impl Call {
    fn arg(mut self, arg: impl ToRedisArgs) -> Call {
        self.cmd.arg(arg);
        self
    }

    /// Runs the script, giving it to the server first if the server does not have it.
    fn invoke<T: FromRedisValue>(&self, conn: &mut Connection) -> redis::RedisResult<T> {
        match self.cmd.query(conn) {
            Err(e) if is_noscript(&e) => {
                self.script.load(conn)?;
                self.cmd.query(conn)
            }
            result => result,
        }
    }
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// One connection per `--url`, shared by the backend and every lease it hands out: a dlock holding
/// 10,000 names renews them over one connection per server, not 10,000. Each use locks it for one
/// round of commands, or for one short read of a waiter listening for its grant.
type Shared = Arc<Mutex<Vec<Server>>>;

/// The locks in one Redis server, or in several (Redlock).
pub struct RedisBackend {
    servers: Shared,
    /// How many servers (more than one: Redlock).
    count: usize,
    connect_timeout: Duration,
    location: String,
    /// The place in line a `try_acquire` took for the `acquire` that follows it.
    parked: Mutex<Option<Parked>>,
}

/// A place in line taken by `try_acquire` for the wait dlock makes next for the same request: the
/// wait keeps it (and its subscription) instead of asking again. Any other request, or dropping
/// the backend, gives it up.
struct Parked {
    request: LockRequest,
    ticket: String,
    line: Line,
    /// Who held the lock then: the wait reports them without asking again.
    holders: Vec<Holder>,
}

/// A waiter's place after a round that found the lock busy.
#[derive(Clone, Copy)]
struct Line {
    /// When that round was sent: a grant heard after its replies was made later than this.
    sent: Instant,
    /// Look again after this long if no grant comes.
    retry: Duration,
    /// A server that answered, whose connection to listen on.
    server: usize,
}

impl RedisBackend {
    /// Parses the URLs and connects to every server (at once), so an unreachable server or a wrong
    /// password is reported before anything else happens.
    pub fn open(config: &BackendConfig) -> anyhow::Result<RedisBackend> {
        let urls: Vec<&str> = if config.urls.is_empty() {
            vec![DEFAULT_URL]
        } else {
            config.urls.iter().map(String::as_str).collect()
        };
        let mut servers = urls
            .iter()
            .map(|url| Server::parse(url))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for (i, s) in servers.iter().enumerate() {
            if servers[..i].iter().any(|t| t.location == s.location) {
                return Err(anyhow!(
                    "{} is given twice; Redlock needs distinct servers",
                    s.location
                ))
                .fail_with(Failure::Usage);
            }
        }
        let location = servers
            .iter()
            .map(|s| s.location.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let timeout = config.connect_timeout.max(Duration::from_millis(1));
        let faults: Vec<Fault> = on_all(&mut servers, |s| s.connect(timeout).err())
            .into_iter()
            .flatten()
            .collect();
        let backend = RedisBackend {
            count: servers.len(),
            servers: Arc::new(Mutex::new(servers)),
            connect_timeout: timeout,
            location,
            parked: Mutex::new(None),
        };
        if let Some(auth) = faults.iter().find(|f| !matches!(f.kind, FaultKind::Down)) {
            return Err(auth.to_error()).fail_with(Failure::BackendUnavailable);
        }
        backend.check_quorum(urls.len() - faults.len(), &faults)?;
        Ok(backend)
    }

    fn servers(&self) -> MutexGuard<'_, Vec<Server>> {
        lock_servers(&self.servers)
    }

    /// An error (exit 69) when fewer than a majority of servers answered.
    fn check_quorum(&self, answered: usize, faults: &[Fault]) -> anyhow::Result<()> {
        let total = answered + faults.len();
        if answered >= quorum(total) {
            return Ok(());
        }
        if let [only] = faults {
            if total == 1 {
                return Err(only.to_error()).fail_with(Failure::BackendUnavailable);
            }
        }
        if let Some(auth) = faults.iter().find(|f| !matches!(f.kind, FaultKind::Down)) {
            return Err(auth.to_error()).fail_with(Failure::BackendUnavailable);
        }
        let why: Vec<String> = faults.iter().map(|f| f.to_error().to_string()).collect();
        Err(anyhow!(
            "only {answered} of {total} redis servers answered, a majority is {}: {}",
            quorum(total),
            why.join("; ")
        ))
        .fail_with(Failure::BackendUnavailable)
    }

    /// How long one command to one server may take. With several servers it is short, so one
    /// stopped server costs little of the lease (Redlock's advice); alone, the connect timeout.
    fn op_timeout(&self, servers: usize, ttl: Duration) -> Duration {
        if servers == 1 {
            self.connect_timeout
        } else {
            (ttl / 10)
                .max(Duration::from_millis(50))
                .min(self.connect_timeout)
        }
    }

    /// One acquisition round on every server.
    fn round(
        &self,
        servers: &mut [Server],
        ask: &Ask,
        wait: bool,
        ticket: &mut String,
        most: Duration,
    ) -> anyhow::Result<Round> {
        let timeout = self.op_timeout(servers.len(), ask.ttl).min(most);
        if wait && ticket.is_empty() && servers.len() > 1 {
            // Redlock: one ticket for every server, from this machine's clock, so that all of
            // them order the waiters alike. Tickets from each server's own clock would order
            // waiters that arrive together differently on each, and each server would then hand
            // the lock to another waiter, none of them getting a majority.
            *ticket = client_ticket();
        }
        let started = Instant::now();
        let replies = on_all(servers, |s| s.acquire(timeout, ask, wait, ticket.as_str()));
        // The replies tell the truth: a grant heard before them is stale.
        forget_grants(servers, &ask.keys.base);
        let quorum = quorum(servers.len());
        let mut granted = Vec::new();
        let mut busy = None;
        let mut seen: Token = 0;
        let mut faults = Vec::new();
        for (i, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok(Reply::Granted(token)) => granted.push((i, token)),
                Ok(Reply::Busy {
                    ticket: t,
                    retry,
                    counter,
                    holders,
                }) => {
                    seen = seen.max(counter);
                    // Every server queues us under the same ticket, so all agree on the order.
                    if ticket.is_empty() {
                        *ticket = t;
                    }
                    busy.get_or_insert((retry, holders, i));
                }
                Err(fault) => faults.push(fault),
            }
        }
        if let Some(fatal) = faults.iter().find(|f| !matches!(f.kind, FaultKind::Down)) {
            let err = fatal.to_error();
            if !granted.is_empty() {
                self.undo(servers, ask, Place::Leave);
            }
            return Err(err).fail_with(Failure::BackendUnavailable);
        }
        if granted.len() >= quorum {
            // Above every token a server that answered has handed out, granting or not: a
            // server that missed acquisitions or lost its data cannot pull the token back.
            let granted_max = granted.iter().map(|&(_, t)| t).max().unwrap_or(0);
            let token = granted_max.max(seen.saturating_add(1));
            if token > MAX_TOKEN {
                self.undo(servers, ask, Place::Leave);
                return Err(anyhow!(
                    "a redis server's fencing counter {} is at {seen}, the last token dlock \
                     can hand out exactly; no token is handed out from it",
                    ask.keys.all()[2]
                ))
                .fail_with(Failure::BackendUnavailable);
            }
            let lease = self.lease(ask, token, started);
            if Instant::now() < lease.deadline
                && self.raise_tokens(servers, ask, &granted, token, timeout)
            {
                return Ok(Round::Held(Box::new(lease)));
            }
        }
        if !granted.is_empty() {
            // A minority (or too late): give back what we got, everywhere, so others can proceed,
            // but keep our place in line.
            let place = if wait {
                Place::Keep(ticket)
            } else {
                Place::Leave
            };
            self.undo(servers, ask, place);
        }
        let answered = servers.len() - faults.len();
        if answered < quorum {
            return Ok(Round::Unreachable(faults));
        }
        let (mut retry, holders, server) = busy.unwrap_or((ask.ttl / 3, Vec::new(), 0));
        if !granted.is_empty() {
            // We just gave servers back and nobody will tell us for that (we may well be first in
            // line): try again soon, after a random pause so two waiters that split the servers
            // between them do not meet again in step.
            retry = retry.min(jitter(Duration::from_millis(20)));
        }
        let line = Line {
            sent: started,
            retry,
            server,
        };
        Ok(Round::Busy { line, holders })
    }

    /// Redlock: lift the granting servers' counters to the token handed out. Needs a majority.
    fn raise_tokens(
        &self,
        servers: &mut [Server],
        ask: &Ask,
        granted: &[(usize, Token)],
        token: Token,
        timeout: Duration,
    ) -> bool {
        if servers.len() == 1 {
            return true;
        }
        let raised = on_each(servers, |i, s| {
            granted.iter().any(|&(g, _)| g == i)
                && s.call(timeout, |l| {
                    ask.keys
                        .invoke(&RAISE_TOKEN)
                        .arg(token)
                        .invoke::<Value>(&mut l.conn)
                })
                .is_ok()
        });
        raised.into_iter().filter(|&ok| ok).count() >= quorum(servers.len())
    }

    /// Removes what `ask` has in the lock on every server (its lease, and its place in the queue
    /// unless kept), best effort: whatever is left expires within the ttl.
    fn undo(&self, servers: &mut [Server], ask: &Ask, place: Place) {
        let timeout = self.op_timeout(servers.len(), ask.ttl);
        on_all(servers, |s| {
            s.call(timeout, |l| ask.release(&mut l.conn, place)).ok()
        });
    }

    /// `undo` on the servers still connected only: the place a failed attempt may have taken on a
    /// server that stopped answering expires within the ttl, and reconnecting to remove it would
    /// spend a second connect timeout.
    fn undo_connected(&self, servers: &mut [Server], ask: &Ask) {
        let timeout = self.op_timeout(servers.len(), ask.ttl);
        on_all(servers, |s| {
            if s.link.is_some() {
                let _ = s.call(timeout, |l| ask.release(&mut l.conn, Place::Leave));
            }
        });
    }

    /// Waits for the lock: see the module documentation. `Ok(None)` when cancelled. `parked` is the
    /// place a `try_acquire` took in line for this request, if it did.
    fn wait_for(
        &self,
        ask: &Ask,
        waiting: &Waiting,
        parked: Option<Parked>,
    ) -> anyhow::Result<Option<Box<RedisLease>>> {
        let mut ticket = String::new();
        let mut line = None;
        if let Some(parked) = parked {
            waiting.busy(&parked.holders);
            ticket = parked.ticket;
            line = Some(parked.line);
        }
        let mut announced = line.is_some();
        let mut retry = RETRY_FIRST;
        loop {
            if waiting.is_cancelled() {
                return Ok(None);
            }
            let place = match line.take() {
                Some(place) => place,
                None => {
                    // Cut short by the caller's deadline (or signal): an outage must not hold it up.
                    let most = waiting.slice(Duration::MAX);
                    let round = self.round(&mut self.servers(), ask, true, &mut ticket, most)?;
                    match round {
                        Round::Held(lease) => return Ok(Some(lease)),
                        Round::Busy { line, holders } => {
                            waiting.reachable();
                            retry = RETRY_FIRST;
                            if !announced {
                                waiting.busy(&holders);
                                announced = true;
                            }
                            line
                        }
                        Round::Unreachable(faults) => {
                            // A waiter rides an outage out until its --wait is spent: say so, and
                            // try again, less and less often.
                            if waiting.is_cancelled() {
                                return Ok(None);
                            }
                            let why: Vec<String> =
                                faults.iter().map(|f| f.to_error().to_string()).collect();
                            waiting.unreachable(&why.join("; "));
                            pause(retry, waiting);
                            retry = (retry * 2).min(RETRY_MOST);
                            continue;
                        }
                    }
                }
            };
            let ttl = ask.ttl;
            let until = place.sent + place.retry.min(ttl / 3);
            if let Some(token) = self.listen(&ask.keys.base, place.server, until, waiting) {
                // Alone, the grant is the lock, with a lease that ends after the last attempt's
                // send time plus the ttl; take it unless that time is old. With Redlock it only
                // says "try again now", everywhere.
                if self.count == 1 && place.sent.elapsed() < ttl / 6 {
                    return Ok(Some(Box::new(self.lease(ask, token, place.sent))));
                }
            }
        }
    }

    /// A held lock with `token`, confirmed by a request sent at `sent`.
    fn lease(&self, ask: &Ask, token: Token, sent: Instant) -> RedisLease {
        let ttl = ask.ttl;
        RedisLease {
            servers: self.servers.clone(),
            count: self.count,
            ask: ask.clone(),
            token,
            confirmed: sent,
            deadline: sent + ttl.saturating_sub(drift(ttl)),
            op_timeout: self.op_timeout(self.count, ttl),
            lost: None,
            trouble: None,
        }
    }

    /// Listens until `until` for a grant of the lock `base` to this dlock, on the connection to
    /// server `at` (a message read on any connection by anyone counts too). Holds that connection
    /// for at most `CANCEL_CHECK` at a time, so renewals of locks already held go on meanwhile.
    /// The grant's token, or `None`: time to look again (or cancelled, or the connection broke).
    fn listen(&self, base: &str, at: usize, until: Instant, waiting: &Waiting) -> Option<Token> {
        loop {
            let now = Instant::now();
            if waiting.is_cancelled() || now >= until {
                return None;
            }
            let mut servers = self.servers();
            for server in servers.iter() {
                if let Some(token) = server.link.as_ref().and_then(|l| l.grant(base)) {
                    return Some(token);
                }
            }
            let server = servers.get_mut(at)?;
            let slice = waiting.slice((until - now).min(CANCEL_CHECK));
            if server.read_message(slice).is_err() {
                return None;
            }
        }
    }

    /// A waiter gives up: remove its place in the queue (and a lease granted in the meantime),
    /// with the supervisor's wake-up signal blocked so these last commands are not interrupted.
    fn abandon(&self, ask: &Ask) {
        let _quiet = BlockedWakeSignal::new();
        self.undo(&mut self.servers(), ask, Place::Leave);
    }

    /// One attempt. With `then_wait`, a busy lock leaves this dlock in line, parked for the wait
    /// that follows; otherwise nothing of it stays behind.
    fn try_once(&self, request: &LockRequest, then_wait: bool) -> anyhow::Result<Attempt> {
        if let Some(earlier) = self.take_parked() {
            self.abandon(&Ask::new(&earlier.request));
        }
        let ask = Ask::new(request);
        let mut ticket = String::new();
        let mut servers = self.servers();
        let round = match self.round(&mut servers, &ask, then_wait, &mut ticket, Duration::MAX) {
            Ok(round) => round,
            Err(e) => {
                if then_wait {
                    self.undo_connected(&mut servers, &ask);
                }
                return Err(e);
            }
        };
        match round {
            Round::Held(lease) => Ok(Attempt::Acquired(lease)),
            Round::Busy { line, holders } => {
                if then_wait {
                    *lock(&self.parked) = Some(Parked {
                        request: request.clone(),
                        ticket,
                        line,
                        holders: holders.clone(),
                    });
                }
                Ok(Attempt::Busy(holders))
            }
            Round::Unreachable(faults) => {
                if then_wait {
                    self.undo_connected(&mut servers, &ask);
                }
                self.check_quorum(servers.len() - faults.len(), &faults)?;
                Ok(Attempt::Busy(Vec::new()))
            }
        }
    }

    fn take_parked(&self) -> Option<Parked> {
        lock(&self.parked).take()
    }

    /// Runs a read-or-break script on every server and merges the holders they report.
    fn holders_everywhere(
        &self,
        name: &LockName,
        script: &'static LuaScript,
    ) -> anyhow::Result<Vec<Holder>> {
        let mut servers = self.servers();
        let keys = Keys::of(name);
        let timeout = self.connect_timeout;
        let replies = on_all(&mut servers, |s| {
            s.call(timeout, |l| {
                keys.invoke(script).invoke::<Value>(&mut l.conn)
            })
        });
        let mut merged: BTreeMap<String, Holder> = BTreeMap::new();
        let mut faults = Vec::new();
        for reply in replies {
            match reply {
                Ok(value) => {
                    for holder in parse_holders(&value) {
                        merged.entry(holder.owner.clone()).or_insert(holder);
                    }
                }
                Err(fault) => faults.push(fault),
            }
        }
        if faults.len() == servers.len()
            || faults.iter().any(|f| !matches!(f.kind, FaultKind::Down))
        {
            if let Some(fault) = faults.first() {
                return Err(fault.to_error()).fail_with(Failure::BackendUnavailable);
            }
        }
        let mut holders: Vec<Holder> = merged.into_values().collect();
        holders.sort_by_key(|h| h.token);
        Ok(holders)
    }

    fn describe_location(&self, name: &LockName) -> String {
        format!("{} key {}:*", self.location, Keys::of(name).base)
    }
}

/// One `--url`: where it is, and the connection to it (reopened when it breaks).
struct Server {
    /// `redis://host:port[/db]` without the credentials: for messages and `location`.
    location: String,
    /// `host:port`, what messages name.
    addr: String,
    client: Client,
    link: Option<Link>,
    /// The socket timeouts last set on the connection, to skip needless system calls.
    timeout: Option<Duration>,
    /// A new connection's budget: connecting (TCP, TLS, AUTH) and its first reply share one.
    first_reply_by: Option<Instant>,
    /// The ACL user the URL names (not `default`): its permissions are checked on connecting.
    acl_user: Option<String>,
}

/// A connection to one server (RESP3), and the messages read on it.
struct Link {
    conn: Connection,
    /// Messages published to this dlock, as whoever reads the connection comes upon them.
    messages: Receiver<PushInfo>,
    /// Whether the connection listens on this dlock's channel.
    subscribed: bool,
}

impl Link {
    /// The token of a grant of the lock `base` among the messages read so far; other messages
    /// (stale grants of other locks, subscription confirmations) are dropped.
    fn grant(&self, base: &str) -> Option<Token> {
        self.messages.try_iter().find_map(|m| grant_of(&m, base))
    }
}

/// The token of `message` if it grants the lock `base` ("dlock:{NAME} TOKEN").
fn grant_of(message: &PushInfo, base: &str) -> Option<Token> {
    if message.kind != PushKind::Message {
        return None;
    }
    let payload = text_of(message.data.get(1)?)?;
    let (lock, token) = payload.rsplit_once(' ')?;
    (lock == base).then(|| token.parse().ok())?
}

/// Drops the grants of `base` heard so far: a round's replies, which came after them, tell the
/// truth.
fn forget_grants(servers: &[Server], base: &str) {
    for link in servers.iter().filter_map(|s| s.link.as_ref()) {
        let _ = link.grant(base);
    }
}

impl Server {
    fn parse(url: &str) -> anyhow::Result<Server> {
        let shown = redact(url);
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(anyhow!(
                "{shown:?} is not a redis URL: use redis://[user:password@]host:port[/db] or rediss://..."
            ))
            .fail_with(Failure::Usage);
        }
        // The password ends where the URL parser ends the address (at `/`, `?` or `#`), but
        // `redact` hides up to the last `@`: a URL where the two differ would show a password.
        let after_scheme = url.split_once("://").map_or("", |(_, rest)| rest);
        let address_end = after_scheme
            .find(['/', '?', '#'])
            .unwrap_or(after_scheme.len());
        if after_scheme[address_end..].contains('@') {
            return Err(anyhow!(
                "malformed redis URL {shown:?}: write `/`, `?`, `#` and `@` in a user name or \
                 password as %2F, %3F, %23 and %40"
            ))
            .fail_with(Failure::Usage);
        }
        let info = url
            .into_connection_info()
            .map_err(|e| {
                anyhow!(
                    "malformed redis URL {shown:?}: {}",
                    e.detail().unwrap_or("cannot parse it")
                )
            })
            .fail_with(Failure::Usage)?;
        let (scheme, host, port) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => ("redis", host.clone(), *port),
            ConnectionAddr::TcpTls { host, port, .. } => ("rediss", host.clone(), *port),
            _ => {
                return Err(anyhow!("{shown:?} is not a redis:// or rediss:// address"))
                    .fail_with(Failure::Usage)
            }
        };
        if host.is_empty() {
            return Err(anyhow!("redis URL {shown:?} names no host")).fail_with(Failure::Usage);
        }
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let db = info.redis_settings().db();
        let acl_user = info
            .redis_settings()
            .username()
            .filter(|u| !u.is_empty() && *u != "default")
            .map(str::to_owned);
        let location = if db == 0 {
            format!("{scheme}://{addr}")
        } else {
            format!("{scheme}://{addr}/{db}")
        };
        // dlock's connections send only its scripts: skip the library's CLIENT SETINFO commands.
        // They start in RESP2, which needs no command to set up; a waiter switches its connection
        // to RESP3 itself, with no round trip of its own (`Ask::acquire_listening`).
        let settings = info
            .redis_settings()
            .clone()
            .set_skip_set_lib_name()
            .set_protocol(ProtocolVersion::RESP2);
        // Small requests that wait for their answer: never let Nagle's algorithm hold one back.
        // Closed with a reset (SO_LINGER 0): dlock closes only after its last answer came, so
        // nothing is lost, and a run leaves no TIME_WAIT socket behind (at hundreds of runs per
        // second those would use up the local ports for a server) nor a FIN exchange to make.
        let tcp = info
            .tcp_settings()
            .clone()
            .set_nodelay(true)
            .set_linger_time(Duration::ZERO);
        let info = info.set_redis_settings(settings).set_tcp_settings(tcp);
        let client = Client::open(info)
            .map_err(|e| anyhow!("malformed redis URL {shown:?}: {e}"))
            .fail_with(Failure::Usage)?;
        Ok(Server {
            location,
            addr,
            client,
            link: None,
            timeout: None,
            first_reply_by: None,
            acl_user,
        })
    }

    fn fault(&self, kind: FaultKind, detail: String) -> Fault {
        Fault {
            addr: self.addr.clone(),
            kind,
            detail,
        }
    }

    /// Connects within `timeout`, which also bounds the first reply on the new connection (and the
    /// permission check of an ACL user), however slowly the server answers.
    fn connect(&mut self, timeout: Duration) -> Result<(), Fault> {
        let until = Instant::now() + timeout;
        let alarm = interrupt::Alarm::at(until + ALARM_SLACK);
        match self.client.get_connection_with_timeout(timeout) {
            Ok(mut conn) => {
                let (sender, messages) = mpsc::channel();
                conn.set_push_sender(sender);
                self.link = Some(Link {
                    conn,
                    messages,
                    subscribed: false,
                });
                self.timeout = None;
                self.first_reply_by = Some(until);
                drop(alarm);
                if let Some(user) = self.acl_user.clone() {
                    self.check_permissions(&user, timeout)?;
                }
                Ok(())
            }
            Err(e) => Err(self.classify(&e, timeout)),
        }
    }

    /// Refuses an ACL user that may not do all dlock does (one round trip, only for such users):
    /// without this, a missing permission shows only half-way through a script, for instance a
    /// release that freed the lock and then could not tell the next waiter.
    fn check_permissions(&mut self, user: &str, timeout: Duration) -> Result<(), Fault> {
        let missing: String = self.call(timeout, |l| {
            redis::cmd("EVAL")
                .arg(PERMISSIONS_CHECK)
                .arg(1)
                .arg("dlock:{check}:holders")
                .query(&mut l.conn)
        })?;
        if missing.is_empty() {
            return Ok(());
        }
        self.link = None;
        Err(self.fault(
            FaultKind::NoPermission,
            format!("redis user {user:?} may not run {missing}"),
        ))
    }

    /// Runs `f` on the connection (reconnecting first if it broke) with `timeout` on each socket
    /// operation. A connection that failed is dropped, so no late answer can be mistaken for the
    /// next one.
    fn call<T>(
        &mut self,
        timeout: Duration,
        f: impl FnOnce(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, Fault> {
        let budget = timeout.max(Duration::from_millis(1));
        let mut timeout = budget;
        if self.link.is_none() {
            self.connect(timeout)?;
        }
        if let Some(by) = self.first_reply_by.take() {
            let left = by.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                timeout = timeout.min(left);
            }
        }
        self.set_timeout(timeout)?;
        // Socket timeouts bound each system call; this bounds the whole exchange.
        let _alarm = interrupt::Alarm::at(Instant::now() + timeout + ALARM_SLACK);
        let Some(link) = self.link.as_mut() else {
            return Err(self.fault(FaultKind::Down, "not connected".into()));
        };
        match f(link) {
            Ok(value) => Ok(value),
            Err(e) => {
                let fault = self.classify(&e, budget);
                // A server error leaves the connection as it was, but one without RESP3 is now
                // half in pub/sub mode.
                if !matches!(fault.kind, FaultKind::Refused)
                    || e.kind() == redis::ErrorKind::RESP3NotSupported
                {
                    self.link = None;
                }
                Err(fault)
            }
        }
    }

    fn set_timeout(&mut self, timeout: Duration) -> Result<(), Fault> {
        let Some(link) = self.link.as_mut() else {
            return Err(self.fault(FaultKind::Down, "not connected".into()));
        };
        if self.timeout != Some(timeout) {
            let conn = &link.conn;
            let set = conn
                .set_read_timeout(Some(timeout))
                .and_then(|()| conn.set_write_timeout(Some(timeout)));
            if let Err(e) = set {
                self.link = None;
                return Err(self.classify(&e, timeout));
            }
            self.timeout = Some(timeout);
        }
        Ok(())
    }

    /// One acquisition attempt. A waiter's first one on a connection also makes it listen.
    fn acquire(
        &mut self,
        timeout: Duration,
        ask: &Ask,
        wait: bool,
        ticket: &str,
    ) -> Result<Reply, Fault> {
        self.call(timeout, |link| {
            if wait && !link.subscribed {
                let reply = ask.acquire_listening(&mut link.conn, ticket)?;
                link.subscribed = true;
                return Ok(reply);
            }
            ask.acquire(&mut link.conn, wait, ticket)
        })
    }

    /// Reads one message (into the link's `messages`), waiting at most `timeout`. `Err` when the
    /// connection broke (it is then dropped); a timeout or an interruption is `Ok`.
    fn read_message(&mut self, timeout: Duration) -> Result<(), ()> {
        self.set_timeout(timeout.max(Duration::from_millis(1)))
            .map_err(|_| ())?;
        let Some(link) = self.link.as_mut() else {
            return Err(());
        };
        // The pub/sub view is never dropped: dropping it would unsubscribe and wait for the answer.
        // It only borrows the connection and holds an empty queue, so nothing leaks.
        let mut view = ManuallyDrop::new(link.conn.as_pubsub());
        match view.get_message() {
            Ok(_) => Ok(()),
            Err(e) if e.is_timeout() || is_interrupted(&e) => Ok(()),
            Err(_) => {
                self.link = None;
                Err(())
            }
        }
    }

    fn classify(&self, e: &RedisError, timeout: Duration) -> Fault {
        // A server with a password answers a client without one with NOAUTH, or (for commands
        // with many arguments, like ours) with "Protocol error: unauthenticated ...".
        if e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
            || e.to_string().contains("unauthenticated")
        {
            return self.fault(FaultKind::Auth, String::new());
        }
        if matches!(e.code(), Some("NOPERM")) {
            return self.fault(FaultKind::NoPermission, e.to_string());
        }
        if e.kind() == redis::ErrorKind::Parse {
            return self.fault(
                FaultKind::Protocol,
                "does not speak the Redis protocol".into(),
            );
        }
        if let Some(io) = io_error_of(e) {
            return self.fault(FaultKind::Down, describe_io(io, timeout));
        }
        if e.to_string().contains("corrupt message") {
            return self.fault(
                FaultKind::Protocol,
                "did not answer the TLS handshake (a plain redis:// server?)".into(),
            );
        }
        if e.is_io_error() || e.is_connection_dropped() {
            return self.fault(FaultKind::Down, e.to_string());
        }
        // dlock's scripts refuse with a message of their own (a broken fencing counter).
        if let (Some("DLOCK"), Some(detail)) = (e.code(), e.detail()) {
            return self.fault(FaultKind::Refused, escaped(detail, 300));
        }
        self.fault(FaultKind::Refused, e.to_string())
    }
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

/// The I/O error under a redis error. The crate keeps it in an `Arc`, which is what `source`
/// shows, so look inside that.
fn io_error_of(e: &RedisError) -> Option<&io::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let source = std::error::Error::source(e)?;
    match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref::<io::Error>(),
        None => source.downcast_ref::<io::Error>(),
    }
}

fn is_interrupted(e: &RedisError) -> bool {
    io_error_of(e).is_some_and(|io| io.kind() == io::ErrorKind::Interrupted)
}

/// An I/O failure in a few words: `connection refused`, `no answer within 5s`.
fn describe_io(e: &io::Error, timeout: Duration) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".into(),
        io::ErrorKind::Interrupted if interrupt::caught().is_some() => "interrupted".into(),
        // Otherwise the call's alarm went off: its budget is spent.
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => {
            format!(
                "no answer within {}",
                humantime::format_duration(round_ms(timeout))
            )
        }
        io::ErrorKind::ConnectionReset => "connection reset".into(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof => "connection closed".into(),
        _ => {
            let text = e.to_string();
            if text.contains("certificate") {
                format!("{text} (rediss:// trusts the system CAs, or SSL_CERT_FILE when set)")
            } else {
                text
            }
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// Why one server did not answer as hoped.
#[derive(Debug, Clone)]
struct Fault {
    addr: String,
    kind: FaultKind,
    detail: String,
}

#[derive(Debug, Clone, Copy)]
enum FaultKind {
    /// Unreachable, timed out, connection broken: may come back.
    Down,
    /// The server refused our credentials (or wants some).
    Auth,
    /// The server answered with an error (a script error, out of memory, read-only replica...).
    Refused,
    /// Not a Redis server (or not one speaking TLS, for rediss://).
    Protocol,
    /// The ACL user may not run a command dlock needs.
    NoPermission,
}

impl Fault {
    fn to_error(&self) -> anyhow::Error {
        match self.kind {
            FaultKind::Down => anyhow!("cannot reach redis at {}: {}", self.addr, self.detail),
            FaultKind::Auth => anyhow!(
                "authentication failed at redis {}: check the user and password in the URL",
                self.addr
            ),
            FaultKind::Protocol => anyhow!("the server at {} {}", self.addr, self.detail),
            FaultKind::NoPermission => anyhow!(
                "{} at {}: dlock needs the permissions listed in its README (Redis ACL)",
                self.detail,
                self.addr
            ),
            FaultKind::Refused => {
                anyhow!(
                    "redis at {} answered with an error: {}",
                    self.addr,
                    self.detail
                )
            }
        }
    }
}

/// The keys of one lock.
#[derive(Clone)]
struct Keys {
    /// `dlock:{NAME}` with NAME encoded.
    base: String,
}

impl Keys {
    fn of(name: &LockName) -> Keys {
        Keys {
            base: format!("dlock:{{{}}}", encode_name(name.as_str())),
        }
    }

    /// In the order the scripts expect (see lib.lua).
    fn all(&self) -> [String; 5] {
        ["holders", "owners", "token", "queue", "alive"].map(|k| format!("{}:{k}", self.base))
    }

    /// A call of `script` with this lock's keys, ready for its arguments.
    fn invoke(&self, script: &'static LuaScript) -> Call {
        let mut cmd = redis::cmd("EVALSHA");
        let keys = self.all();
        cmd.arg(script.sha1).arg(keys.len()).arg(&keys);
        Call { script, cmd }
    }
}

/// Bytes that must not appear raw inside the hash tag: `%` (the escape itself), `{` and `}` (they
/// would end the tag early and change the slot), glob characters (so `list` can SCAN by prefix),
/// and the space and control characters (keys stay copy-pasteable in redis-cli).
fn must_encode(b: u8) -> bool {
    matches!(
        b,
        b'%' | b'{' | b'}' | b'*' | b'?' | b'[' | b']' | b'\\' | b' '
    ) || b < 0x20
        || b == 0x7f
}

/// A lock name as it appears inside `dlock:{...}`: readable, `%XX` for the bytes above.
pub fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.char_indices() {
        if c.is_ascii() && must_encode(c as u8) {
            out.push_str(&format!("%{:02X}", name.as_bytes()[i]));
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of `encode_name`; `None` for text it never produces.
fn decode_name(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One acquisition's identity and its scripts' arguments; a lease keeps it for renewals and the
/// release.
#[derive(Clone)]
struct Ask {
    keys: Keys,
    owner: String,
    mode: String,
    ttl: Duration,
    pid: String,
    host: String,
}

impl Ask {
    fn new(request: &LockRequest) -> Ask {
        Ask {
            keys: Keys::of(&request.name),
            owner: request.owner.clone(),
            mode: request.mode.to_wire(),
            ttl: request.ttl,
            pid: std::process::id().to_string(),
            // The record is space-separated with the host last; a host name has no spaces.
            host: host_name().replace(' ', "_"),
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().max(1) as u64
    }

    /// The channel this dlock hears its grants on: one for all its locks.
    fn wake_channel(&self) -> String {
        format!("dlock:wake:{}", self.owner)
    }

    fn acquire_call(&self, wait: bool, ticket: &str) -> Call {
        self.keys
            .invoke(&ACQUIRE)
            .arg(&self.owner)
            .arg(&self.mode)
            .arg(self.ttl_ms())
            .arg(if wait { "1" } else { "0" })
            .arg(ticket)
            .arg(&self.pid)
            .arg(&self.host)
    }

    fn acquire(
        &self,
        conn: &mut Connection,
        wait: bool,
        ticket: &str,
    ) -> redis::RedisResult<Reply> {
        let value: Value = self.acquire_call(wait, ticket).invoke(conn)?;
        parse_acquire(&value).ok_or_else(|| unexpected(&value))
    }

    /// A waiter's first attempt on a connection: it switches the connection to RESP3 (HELLO 3),
    /// so the connection can carry messages beside replies, and subscribes to this dlock's
    /// channel, before the attempt and in the same write, so no grant can come before it listens
    /// and neither costs a round trip of its own.
    fn acquire_listening(&self, conn: &mut Connection, ticket: &str) -> redis::RedisResult<Reply> {
        let call = self.acquire_call(true, ticket);
        let mut write = redis::cmd("HELLO").arg(3).get_packed_command();
        write.extend(
            redis::cmd("SUBSCRIBE")
                .arg(self.wake_channel())
                .get_packed_command(),
        );
        write.extend(call.cmd.get_packed_command());
        conn.send_packed_command(&write)?;
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
        let value = match next_reply(conn)?.extract_error() {
            Err(e) if is_noscript(&e) => {
                ACQUIRE.load(conn)?;
                call.invoke(conn)?
            }
            reply => reply?,
        };
        parse_acquire(&value).ok_or_else(|| unexpected(&value))
    }

    fn renew(&self, conn: &mut Connection) -> redis::RedisResult<i64> {
        self.keys
            .invoke(&RENEW)
            .arg(&self.owner)
            .arg(self.ttl_ms())
            .invoke(conn)
    }

    fn release(&self, conn: &mut Connection, place: Place) -> redis::RedisResult<i64> {
        let (keep, ticket) = match place {
            Place::Keep(ticket) => ("1", ticket),
            Place::Leave => ("0", ""),
        };
        self.keys
            .invoke(&RELEASE)
            .arg(&self.owner)
            .arg(&self.mode)
            .arg(keep)
            .arg(ticket)
            .arg(self.ttl_ms())
            .arg(&self.pid)
            .arg(&self.host)
            .invoke(conn)
    }
}

/// Whether undoing an acquisition keeps the waiter's place in the queue (under its ticket).
#[derive(Clone, Copy)]
enum Place<'a> {
    Keep(&'a str),
    Leave,
}

fn unexpected(value: &Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected answer from a dlock script",
        format!("{value:?}"),
    ))
}

enum Reply {
    Granted(Token),
    Busy {
        ticket: String,
        retry: Duration,
        /// The last token this server handed out.
        counter: Token,
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
            holders: parse_holders(&Value::Array(items[4..].to_vec())),
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

fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `[owner, record, owner, record, ...]` into holders. Any client of the server can write the
/// records: one that does not parse is still a holder (the scripts count it as one), shown as
/// unreadable.
fn parse_holders(value: &Value) -> Vec<Holder> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    let lossy = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => text_of(other).unwrap_or_default(),
    };
    items
        .chunks_exact(2)
        .map(|pair| Holder::from_record(&lossy(&pair[0]), &lossy(&pair[1])))
        .collect()
}

/// The outcome of one acquisition round over all servers.
enum Round {
    Held(Box<RedisLease>),
    /// Held by others: our place in line (when waiting), and who holds it.
    Busy {
        line: Line,
        holders: Vec<Holder>,
    },
    /// Fewer than a majority answered.
    Unreachable(Vec<Fault>),
}

/// A mutex's data, also after a panic elsewhere (what it guards is never left half-changed).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The shared connections, also after a panic elsewhere: a `Server` is never left half-changed (a
/// failed call just drops its connection), so a poisoned lock's data is still sound.
fn lock_servers(servers: &Shared) -> MutexGuard<'_, Vec<Server>> {
    lock(servers)
}

/// The majority of `n` servers.
fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The margin for clock drift between this machine and the servers: 1% of the ttl plus 2ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Runs `f` on every server, in parallel when there are several (so one slow server costs one
/// timeout, not one per server), and returns the results in server order.
fn on_all<T: Send>(servers: &mut [Server], f: impl Fn(&mut Server) -> T + Sync) -> Vec<T> {
    on_each(servers, |_, server| f(server))
}

/// `on_all`, telling `f` each server's index too.
fn on_each<T: Send>(servers: &mut [Server], f: impl Fn(usize, &mut Server) -> T + Sync) -> Vec<T> {
    if let [only] = servers {
        return vec![f(0, only)];
    }
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = servers
            .iter_mut()
            .enumerate()
            .map(|(i, server)| scope.spawn(move || f(i, server)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// A queue ticket from this machine's clock, in the scripts' format (microseconds since the epoch).
fn client_ticket() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_micros().to_string()
}

/// A random duration between 1ms and `most`.
fn jitter(most: Duration) -> Duration {
    let mut bytes = [0u8; 4];
    let random = random_bytes(&mut bytes).map_or(0, |()| u32::from_le_bytes(bytes));
    let most_ms = most.as_millis().max(1) as u32;
    Duration::from_millis(u64::from(1 + random % most_ms))
}

/// Sleeps up to `how_long`, in steps short enough to notice a cancellation soon.
fn pause(how_long: Duration, waiting: &Waiting) {
    let until = Instant::now() + how_long;
    while !waiting.is_cancelled() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(waiting.slice(left.min(CANCEL_CHECK)));
    }
}

/// Blocks the supervisor's wake-up signal in this thread while alive.
struct BlockedWakeSignal {
    old: libc::sigset_t,
}

impl BlockedWakeSignal {
    fn new() -> BlockedWakeSignal {
        // SAFETY: plain signal-mask manipulation on this thread with valid, initialised sets.
        unsafe {
            let mut block: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut block);
            libc::sigaddset(&mut block, super::WAKE_SIGNAL);
            libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
            BlockedWakeSignal { old }
        }
    }
}

impl Drop for BlockedWakeSignal {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

impl Backend for RedisBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn try_acquire(&self, request: &LockRequest, then_wait: bool) -> anyhow::Result<Attempt> {
        self.try_once(request, then_wait)
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> anyhow::Result<Option<Box<dyn Lease>>> {
        let parked = match self.take_parked() {
            Some(parked) if parked.request == *request => Some(parked),
            Some(other) => {
                self.abandon(&Ask::new(&other.request));
                None
            }
            None => None,
        };
        let ask = Ask::new(request);
        match self.wait_for(&ask, waiting, parked) {
            Ok(Some(lease)) => Ok(Some(lease)),
            Ok(None) => {
                self.abandon(&ask);
                Ok(None)
            }
            Err(e) => {
                self.abandon(&ask);
                Err(e)
            }
        }
    }

    /// Every blocking read while waiting lasts at most `CANCEL_CHECK`.
    fn polls_while_waiting(&self) -> bool {
        true
    }

    fn status(&self, name: &LockName) -> anyhow::Result<LockStatus> {
        Ok(LockStatus {
            name: name.clone(),
            holders: self.holders_everywhere(name, &STATUS)?,
            location: self.describe_location(name),
        })
    }

    fn list(&self, prefix: &str) -> anyhow::Result<Listing> {
        // Holders keys only: `dlock:{ENCODED_PREFIX*}:holders`. Encoding is byte by byte, so the
        // encoded prefix is a prefix of every matching encoded name, and it has no glob characters.
        let pattern = format!("dlock:{{{}*}}:holders", encode_name(prefix));
        let names = {
            let mut servers = self.servers();
            let timeout = self.connect_timeout;
            let found = on_all(&mut servers, |s| {
                s.call(timeout, |l| scan(&mut l.conn, &pattern))
            });
            let mut names = Vec::new();
            let mut faults = Vec::new();
            for result in found {
                match result {
                    Ok(keys) => names.extend(keys),
                    Err(fault) => faults.push(fault),
                }
            }
            if faults.len() == servers.len() {
                if let Some(fault) = faults.first() {
                    return Err(fault.to_error()).fail_with(Failure::BackendUnavailable);
                }
            }
            names
        };
        let mut names: Vec<LockName> = names
            .iter()
            .filter_map(|key| {
                let encoded = key.strip_prefix("dlock:{")?.strip_suffix("}:holders")?;
                let name = LockName::new(&decode_name(encoded)?).ok()?;
                (name.as_str().starts_with(prefix)
                    && Keys::of(&name).base == format!("dlock:{{{encoded}}}"))
                .then_some(name)
            })
            .collect();
        names.sort();
        names.dedup();
        let mut held = Vec::new();
        for name in names {
            let status = self.status(&name)?;
            if !status.holders.is_empty() {
                held.push(status);
            }
        }
        Ok(held.into())
    }

    fn force_release(&self, name: &LockName) -> anyhow::Result<Vec<Holder>> {
        self.holders_everywhere(name, &BREAK)
    }
}

impl Drop for RedisBackend {
    /// A place in line nobody waited in (the wait never started): give it up.
    fn drop(&mut self) {
        if let Some(parked) = self.take_parked() {
            self.abandon(&Ask::new(&parked.request));
        }
    }
}

/// SCAN for keys matching `pattern`, bounded by `MAX_SCAN_STEPS`.
fn scan(conn: &mut Connection, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    for _ in 0..MAX_SCAN_STEPS {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        keys.extend(batch.into_iter().filter_map(|k| String::from_utf8(k).ok()));
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    Ok(keys)
}

/// A held lock. It renews and releases over the backend's shared connections.
struct RedisLease {
    servers: Shared,
    /// How many servers there are (a majority of them must confirm).
    count: usize,
    ask: Ask,
    token: Token,
    /// After this (monotonic clock) the lease may have run out on the servers: the send time of
    /// the last renewal a majority confirmed, plus the ttl, minus the drift margin.
    deadline: Instant,
    /// When the request behind the last confirmation (acquisition or renewal) was sent.
    confirmed: Instant,
    op_timeout: Duration,
    /// Why the lock was lost, once it was: from then on, never renew again.
    lost: Option<String>,
    /// Why the last renewal did not reach a majority, for the message when the lease runs out.
    trouble: Option<String>,
}

enum RenewReply {
    Renewed,
    NotOwner,
}

impl RedisLease {
    fn lose(&mut self, why: String) -> Renewal {
        self.lost = Some(why.clone());
        Renewal::Lost(why)
    }

    fn renew_everywhere(&self, timeout: Duration) -> (Vec<Result<RenewReply, Fault>>, Vec<String>) {
        let ask = &self.ask;
        let mut servers = lock_servers(&self.servers);
        let addrs = servers.iter().map(|s| s.addr.clone()).collect();
        let replies = on_all(&mut servers, |s| {
            s.call(timeout, |l| {
                Ok(if ask.renew(&mut l.conn)? == 1 {
                    RenewReply::Renewed
                } else {
                    RenewReply::NotOwner
                })
            })
        });
        (replies, addrs)
    }
}

impl Lease for RedisLease {
    fn token(&self) -> Token {
        self.token
    }

    fn renew(&mut self) -> Renewal {
        if let Some(why) = &self.lost {
            return Renewal::Lost(why.clone());
        }
        let ttl = self.ask.ttl;
        let sent = Instant::now();
        // The heartbeat's first call comes right after the acquisition, which was as good as a
        // renewal: wait for the next one due instead of a round trip that extends nothing.
        let due = self.confirmed + ttl / 3;
        if sent < due && self.trouble.is_none() {
            return Renewal::Held { next: due - sent };
        }
        let left = self.deadline.saturating_duration_since(sent);
        if left.is_zero() {
            return self.lose_to_the_deadline();
        }
        // The supervisor renews from the thread that also forwards signals and reaps the command:
        // one attempt may block it only briefly, and a failed one is retried until the deadline.
        let attempt = self
            .op_timeout
            .min(ttl / 5)
            .min(MAX_RENEW_ATTEMPT)
            .min(left);
        let (replies, addrs) = self.renew_everywhere(attempt);
        let total = replies.len();
        let mut renewed = 0;
        let mut not_owner = Vec::new();
        let mut faults = Vec::new();
        for (reply, addr) in replies.into_iter().zip(addrs) {
            match reply {
                Ok(RenewReply::Renewed) => renewed += 1,
                Ok(RenewReply::NotOwner) => not_owner.push(addr),
                Err(fault) => faults.push(fault),
            }
        }
        if renewed >= quorum(total) {
            self.deadline = sent + ttl.saturating_sub(drift(ttl));
            self.confirmed = sent;
            self.trouble = None;
            return Renewal::Held { next: ttl / 3 };
        }
        // A majority can no longer confirm us even if every silent server came back.
        if not_owner.len() > total - quorum(total) {
            return self.lose(format!(
                "it is no longer ours on redis at {} (expired, broken by `dlock release --force`, \
                 deleted, or the server lost its data)",
                not_owner.join(", ")
            ));
        }
        let why: Vec<String> = faults.iter().map(|f| f.to_error().to_string()).collect();
        let why = why.join("; ");
        self.trouble = Some(why.clone());
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return self.lose_to_the_deadline();
        }
        // Try again soon, but never sleep past the deadline: the next call then reports the loss.
        let retry = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(500));
        Renewal::Unconfirmed {
            next: retry.min(left),
            holds_for: left,
            why,
        }
    }

    fn release(self: Box<Self>) -> anyhow::Result<Released> {
        // After a loss the servers may be gone: try only those still connected, and briefly.
        let timeout = if self.lost.is_some() {
            self.op_timeout.min(Duration::from_millis(250))
        } else {
            self.op_timeout
        };
        let skip_unconnected = self.lost.is_some();
        let ask = &self.ask;
        let mut servers = lock_servers(&self.servers);
        let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
        let results = on_all(&mut servers, |s| {
            if skip_unconnected && s.link.is_none() {
                return None;
            }
            Some(s.call(timeout, |l| ask.release(&mut l.conn, Place::Leave)))
        });
        drop(servers);
        if let Some(why) = &self.lost {
            return Ok(Released::Lost(why.clone()));
        }
        let total = results.len();
        let mut released = 0;
        let mut not_owner = Vec::new();
        let mut faults = Vec::new();
        for (result, addr) in results.into_iter().zip(addrs) {
            match result {
                Some(Ok(1)) => released += 1,
                Some(Ok(_)) => not_owner.push(addr),
                Some(Err(fault)) => faults.push(fault),
                None => {}
            }
        }
        if released >= quorum(total) {
            return Ok(Released::Held);
        }
        // The release script prunes expired holders first: a server that did not find us had let
        // the lease pass or lost it to `release --force`. A majority of those: it was not ours.
        if not_owner.len() > total - quorum(total) {
            return Ok(Released::Lost(format!(
                "it was no longer ours on redis at {} (its lease had passed, or it was broken or \
                 deleted)",
                not_owner.join(", ")
            )));
        }
        let why: Vec<String> = faults.iter().map(|f| f.to_error().to_string()).collect();
        Err(anyhow!(
            "{}; the lease runs out by itself within {}",
            why.join("; "),
            humantime::format_duration(self.ask.ttl)
        ))
    }
}

impl RedisLease {
    fn lose_to_the_deadline(&mut self) -> Renewal {
        let whom = match self.count {
            1 => "the server".to_owned(),
            n => format!("a majority of the {n} servers"),
        };
        let why = self.trouble.take().unwrap_or_else(|| "no answer".into());
        self.lose(format!(
            "could not renew it on {whom} before the lease ({}) ran out: {why}",
            humantime::format_duration(self.ask.ttl)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_their_hash_tag_and_round_trip() {
        for name in [
            "jobs/a",
            "a}b{c",
            "x}:holders",
            "50% off",
            "glob*?[x]\\",
            "ünï ✓",
            "{}",
        ] {
            let encoded = encode_name(name);
            assert!(
                !encoded.contains('{') && !encoded.contains('}'),
                "{encoded}"
            );
            assert!(
                !encoded.contains(['*', '?', '[', ']', '\\', ' ']),
                "{encoded}"
            );
            assert_eq!(decode_name(&encoded).as_deref(), Some(name));
        }
        assert_eq!(encode_name("jobs/nightly-backup"), "jobs/nightly-backup");
        let keys = Keys::of(&LockName::new("a}b").unwrap());
        assert_eq!(keys.all()[0], "dlock:{a%7Db}:holders");
    }

    #[test]
    fn a_majority_is_more_than_half() {
        assert_eq!([1, 2, 3, 4, 5].map(quorum), [1, 2, 2, 3, 3]);
    }

    #[test]
    fn location_and_messages_never_show_the_password() {
        let s = Server::parse("redis://alice:s3cret@127.0.0.1:6390/3").unwrap();
        assert_eq!(s.location, "redis://127.0.0.1:6390/3");
        let e = Server::parse("redis://alice:s3cret@127.0.0.1:notaport")
            .err()
            .unwrap();
        assert!(!format!("{e:#}").contains("s3cret"), "{e:#}");
    }

    proptest::proptest! {
        /// Hostile names: every key of any name stays inside `dlock:{...}` with the whole encoded
        /// name as its hash tag, and the encoding round-trips (so two names never share keys).
        #[test]
        fn any_name_keeps_its_keys_in_its_own_hash_tag(raw in "\\PC{1,120}") {
            let Ok(name) = LockName::new(&raw) else { return Ok(()) };
            let keys = Keys::of(&name);
            let tag_start = keys.base.find('{').map(|i| i + 1);
            let tag_end = keys.base.find('}');
            let in_namespace = keys.base.starts_with("dlock:\u{7b}");
            proptest::prop_assert!(in_namespace, "{} is outside dlock:{{...}}", keys.base);
            proptest::prop_assert_eq!(tag_end, Some(keys.base.len() - 1));
            let tag = &keys.base[tag_start.unwrap_or(0)..tag_end.unwrap_or(0)];
            let decoded = decode_name(tag);
            proptest::prop_assert_eq!(decoded.as_deref(), Some(name.as_str()));
        }

        /// URLs from the command line: parsed or refused, never a panic.
        #[test]
        fn any_url_text_parses_or_is_refused(text in "(rediss?://)?\\PC{0,60}") {
            let _ = Server::parse(&text);
        }

        /// A password in any place a password can take: neither the refusal nor the location
        /// (which every later message names) shows it.
        #[test]
        fn no_message_shows_a_password(url in crate::url::with_password()) {
            let shown = match Server::parse(&url) {
                Ok(server) => format!("{} {}", server.location, server.addr),
                Err(e) => format!("{e:#}"),
            };
            proptest::prop_assert!(!shown.contains("SECRET"), "{} gave {}", url, shown);
        }
    }
}
