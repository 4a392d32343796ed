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

mod fault;
mod keys;
mod lease;
mod redlock;
mod scripts;
mod server;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use redis::Connection;

use super::{
    Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting, RETRY_FIRST, RETRY_MOST,
};
use crate::exit::{FailWith, Failure};
use crate::lock::{Holder, LockName, LockRequest, Token};
use fault::{first_fatal, Fault};
use keys::Keys;
use lease::RedisLease;
use redlock::{on_all, Round};
use scripts::{Ask, HoldersScript, Place};
use server::Server;

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

/// How often a waiter looks at its cancellation flag while nothing happens.
const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// Most keys `list` looks at, so a huge keyspace cannot keep it scanning forever.
const MAX_SCAN_STEPS: usize = 100_000;

/// One connection per `--url`, shared by the backend and every lease it hands out: a dlock holding
/// 10,000 names renews them over one connection per server, not 10,000. Each use locks it for one
/// round of commands, or for one short read of a waiter listening for its grant. A poisoned lock's
/// data is still sound: a `Server` is never left half-changed (a failed call just drops its
/// connection).
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
        if let Some(auth) = first_fatal(&faults) {
            return Err(auth.to_error()).fail_with(Failure::BackendUnavailable);
        }
        backend.check_quorum(urls.len() - faults.len(), &faults)?;
        Ok(backend)
    }

    fn servers(&self) -> MutexGuard<'_, Vec<Server>> {
        lock(&self.servers)
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
                            waiting.unreachable(&fault::describe(&faults));
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
                if let Some(token) = server.grant(base) {
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
        script: HoldersScript,
    ) -> anyhow::Result<Vec<Holder>> {
        let mut servers = self.servers();
        let keys = Keys::of(name);
        let timeout = self.connect_timeout;
        let replies = on_all(&mut servers, |s| {
            s.call(timeout, |l| scripts::holders(&mut l.conn, &keys, script))
        });
        let mut merged: BTreeMap<String, Holder> = BTreeMap::new();
        let mut faults = Vec::new();
        for reply in replies {
            match reply {
                Ok(holders) => {
                    for holder in holders {
                        merged.entry(holder.owner.clone()).or_insert(holder);
                    }
                }
                Err(fault) => faults.push(fault),
            }
        }
        if faults.len() == servers.len() || first_fatal(&faults).is_some() {
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

/// A mutex's data, also after a panic elsewhere (what it guards is never left half-changed).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
            holders: self.holders_everywhere(name, HoldersScript::Status)?,
            location: self.describe_location(name),
        })
    }

    fn list(&self, prefix: &str) -> anyhow::Result<Listing> {
        let pattern = keys::holders_pattern(prefix);
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
            .filter_map(|key| keys::name_of_holders_key(key, prefix))
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
        self.holders_everywhere(name, HoldersScript::Break)
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
