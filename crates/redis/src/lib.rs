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
//!   own leases), `dlock:{NAME}:last-run` and `dlock:{NAME}:last-success` (run records, kept 400
//!   days after their last write; see `runs`). Grants are told on the pub/sub channel
//!   `dlock:wake:OWNER` (on Redis Cluster by sharded pub/sub, on `dlock:{NAME}:wake:OWNER` in the
//!   lock's slot).
//! - Renew and release act only on the caller's own owner id: no client ever extends or deletes
//!   another's lease. An expired lease is never revived, so a renewal after expiry is "lost".
//!
//! Waiting: each waiter takes a ticket in the lock's queue (a sorted set scored by the server's
//! clock) with the first attempt of its wait (`acquire`; `try_acquire` never queues), and
//! subscribes to a channel of its own on the same connection (RESP3, so one connection carries
//! commands and messages; the SUBSCRIBE goes out with that first attempt and costs no round trip). A release hands the lock
//! to the first waiter itself, in the same script, and only when it can take it (then to the next
//! ones too while they can join: shared and limit holders), and publishes the grant. The message
//! only wakes the waiter (any client may publish on its channel): its next attempt finds the lock
//! already its own and takes the token and lease from the store. So a handoff costs one script,
//! one message and the new holder's one call whatever the number of waiters (no herd), and
//! waiters acquire in arrival order
//! (nobody may pass a live waiter with an earlier ticket). Pub/sub rather than BLPOP because a
//! subscriber waits with a short socket timeout and looks at its cancellation flag without
//! sending a command each time, and its connection stays free for the renewals of locks already
//! held: an idle waiter costs the server nothing but its fallback re-check, which runs when the
//! holder's lease would run out and at least every ttl/3 (it also renews the waiter's place: a
//! waiter that dies drops out of the queue within its ttl). A lost message thus costs at most that
//! re-check, which finds the lock already granted.
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
//!
//! Behind Sentinel (`redis+sentinel://`), a server is whichever node the sentinels name as the
//! master when a connection opens (`sentinel`); with `--replicas N` every grant and renewal waits
//! for N replicas (`replication`), so a failover to one of them keeps the lease and the counter.
//!
//! On Redis Cluster (`redis+cluster://`), one connection that goes, before each lock's calls, to
//! the master of the lock's slot, following MOVED, ASK and TRYAGAIN (`cluster`).
//!
//! Where things are: `server` (one server: URL, connection, calls), `sentinel` (finding the master),
//! `cluster` (Redis Cluster: slots, routing, redirects), `topology` (what a `--url` names: one
//! server, a Sentinel master or a Cluster, and the calls on it, waiting for replicas),
//! `link` (a connection and the grants heard on it), `reply` (a reply's values as text),
//! `replication` (`?replicas=`, WAIT), `fault` (what went wrong, in words), `keys` (a name's keys), `scripts`
//! (the Lua scripts, their arguments and replies), `quorum` (majorities, a call on every server at
//! once), `redlock` (a round over every server, tokens, the place in line), `wait` (the queue and
//! grants), `lease` (renew, release), `holders` (status, list, release --force), `runs` (the last
//! run and success), `group` (the concurrency group record).

#![forbid(unsafe_code)]

mod cluster;
mod fault;
mod group;
mod holders;
mod keys;
mod lease;
mod link;
mod quorum;
mod redlock;
mod replication;
mod reply;
mod runs;
mod scripts;
mod sentinel;
mod server;
/// The programs the tests run, from the list scripts/test installs (shared with tests/).
#[cfg(test)]
#[path = "../../../tests/support/programs.rs"]
mod test_programs;
mod topology;
mod wait;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dlock_core::error;
use dlock_core::error::FailAs;

use dlock_core::backend::{Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting};
use dlock_core::lock::{Holder, LastRuns, LockName, LockRequest};
use dlock_sys::sync::lock;
use fault::{first_fatal, Fault};
use quorum::on_all;
use scripts::HoldersScript;
use topology::Topology;

const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// One connection per `--url`, shared by the backend and every lease it hands out: a dlock holding
/// 10,000 names renews them over one connection per server, not 10,000. Each use locks it for one
/// round of commands, or for one short read of a waiter listening for its grant. A poisoned lock's
/// data is still sound: a `Topology` is never left half-changed (a failed call just drops its
/// connection).
type Shared = Arc<Connections>;

/// The connections, and how many threads are waiting for them. A waiter listens in short reads
/// and locks the connections again right after each; a mutex is not fair, so on a busy machine
/// the listener, already running, would win them back every time from a renewal just woken, and
/// the names already held would run out while it waits for the rest. The listener lets a thread
/// waiting for them go first (`after_others`).
struct Connections {
    servers: Mutex<Vec<Topology>>,
    waiting: AtomicUsize,
}

/// Longest a listener steps aside for others before it takes the connections anyway (a renewal
/// holds them for one round of commands, at most a second).
const STEP_ASIDE_MOST: Duration = Duration::from_secs(2);

impl Connections {
    fn new(servers: Vec<Topology>) -> Connections {
        Connections {
            servers: Mutex::new(servers),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The connections, as soon as they are free.
    fn lock(&self) -> MutexGuard<'_, Vec<Topology>> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let servers = lock(&self.servers);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        servers
    }

    /// The connections, once the threads already waiting for them have had them.
    fn after_others(&self) -> MutexGuard<'_, Vec<Topology>> {
        let until = Instant::now() + STEP_ASIDE_MOST;
        while self.waiting.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        lock(&self.servers)
    }
}

/// The locks in one Redis server, or in several (Redlock).
pub struct RedisBackend {
    servers: Shared,
    /// How many servers (more than one: Redlock).
    count: usize,
    connect_timeout: Duration,
    location: String,
    /// Redis Cluster: grants go by sharded pub/sub (see `Keys::sharded`).
    sharded: bool,
    /// The one URL and `--replicas`, for a connection of a holder's own that hears of changes to
    /// its group records (group.rs); `None` with Redlock.
    one_url: Option<(String, u32)>,
}

/// Redlock counts each server once: a server named twice, under one spelling or two
/// (`127.0.0.1:6379` and `localhost:6379`, or two databases of one server), would let a minority
/// pass for a majority. Plain servers are told apart by the addresses their names resolve to.
fn refuse_one_server_twice(servers: &[Topology]) -> error::Result<()> {
    use std::net::ToSocketAddrs;
    let twice = |a: &str, b: &str, why: String| {
        Err(error!(
            "{a} and {b} are one server{why}; Redlock needs distinct servers"
        ))
        .usage()
    };
    let mut seen: Vec<(std::net::SocketAddr, String)> = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        if let Some(t) = servers[..i].iter().find(|t| t.location() == s.location()) {
            return twice(t.location(), s.location(), String::new());
        }
        let Topology::Single(server) = s else {
            continue;
        };
        // A name that does not resolve fails at connect, saying so.
        let addrs: Vec<_> = server
            .addr
            .to_socket_addrs()
            .into_iter()
            .flatten()
            .collect();
        for addr in &addrs {
            if let Some((_, other)) = seen.iter().find(|(seen, _)| seen == addr) {
                return twice(other, &server.location, format!(" (both reach {addr})"));
            }
        }
        seen.extend(addrs.into_iter().map(|a| (a, server.location.clone())));
    }
    Ok(())
}

impl RedisBackend {
    /// Parses the URLs and connects to every server (at once), so an unreachable server or a wrong
    /// password is reported before anything else happens.
    pub fn open(config: &BackendConfig) -> error::Result<RedisBackend> {
        let urls: Vec<&str> = if config.urls.is_empty() {
            vec![DEFAULT_URL]
        } else {
            config.urls.iter().map(String::as_str).collect()
        };
        let mut servers = urls
            .iter()
            .map(|url| Topology::parse(url, config.replicas))
            .collect::<error::Result<Vec<_>>>()?;
        for server in &mut servers {
            server.set_stop(config.stop.clone());
        }
        refuse_one_server_twice(&servers)?;
        // A majority of two is both: Redlock on two servers stops when either does, which is
        // worse than one server, and is almost always a mistake for three.
        if servers.len() == 2 {
            return Err(error!(
                "two Redis servers ({} and {}) cannot make a Redlock: a majority of 2 is 2, so \
                 either one down stops every lock; give one server, or 3 or more",
                servers[0].location(),
                servers[1].location()
            ))
            .usage();
        }
        let location = servers
            .iter()
            .map(Topology::location)
            .collect::<Vec<_>>()
            .join(",");
        let timeout = config.connect_timeout.max(Duration::from_millis(1));
        let faults: Vec<Fault> = on_all(&mut servers, |s| s.connect(timeout).err())
            .into_iter()
            .flatten()
            .collect();
        let backend = RedisBackend {
            one_url: (urls.len() == 1).then(|| (urls[0].to_owned(), config.replicas)),
            sharded: servers.iter().any(Topology::is_cluster),
            count: servers.len(),
            servers: Arc::new(Connections::new(servers)),
            connect_timeout: timeout,
            location,
        };
        if let Some(auth) = first_fatal(&faults) {
            return Err(auth.to_error()).unavailable();
        }
        backend.check_quorum(urls.len() - faults.len(), &faults)?;
        Ok(backend)
    }

    fn servers(&self) -> MutexGuard<'_, Vec<Topology>> {
        self.servers.lock()
    }

    /// The connections for a waiter's next short read: after a renewal waiting for them.
    fn servers_after_others(&self) -> MutexGuard<'_, Vec<Topology>> {
        self.servers.after_others()
    }
}

impl Backend for RedisBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt> {
        self.try_once(request)
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>> {
        Ok(self
            .wait(request, waiting)?
            .map(|lease| lease as Box<dyn Lease>))
    }

    fn status(&self, name: &LockName) -> error::Result<LockStatus> {
        self.read_status(name)
    }

    fn list(&self, prefix: &str) -> error::Result<Listing> {
        self.list_held(prefix)
    }

    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        self.read_last_runs(name)
    }

    fn groups(&self) -> Option<&dyn dlock_core::backend::GroupRecords> {
        self.keeps_groups()
            .then_some(self as &dyn dlock_core::backend::GroupRecords)
    }

    fn list_runs(&self, prefix: &str) -> error::Result<dlock_core::backend::RunsFound> {
        let names = self.names_with_runs(prefix)?;
        dlock_core::backend::runs_of(prefix, names, |name| self.last_runs(name))
    }

    fn force_release(&self, name: &LockName) -> error::Result<Vec<Holder>> {
        self.holders_everywhere(name, HoldersScript::Break)
    }
}

#[cfg(test)]
mod tests {
    use super::Connections;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    /// A listener that takes the connections back right after each short read lets a renewal
    /// waiting for them go first: ten renewals a tenth of a second apart each get them within a
    /// listener's read or two, where an unfair mutex would hand them back to the listener.
    #[test]
    fn a_listener_lets_a_waiting_renewal_go_first() {
        let connections = Arc::new(Connections::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let listener = {
            let (connections, stop) = (connections.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let _reading = connections.after_others();
                    thread::sleep(Duration::from_millis(20));
                }
            })
        };
        // A busy machine: a thread just woken waits for a core while the listener runs on.
        let spinners: Vec<_> = (0..8)
            .map(|_| {
                let stop = stop.clone();
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let mut longest = Duration::ZERO;
        for _ in 0..10 {
            thread::sleep(Duration::from_millis(100));
            let asked = Instant::now();
            drop(connections.lock());
            longest = longest.max(asked.elapsed());
        }
        stop.store(true, Ordering::SeqCst);
        listener.join().unwrap();
        for spinner in spinners {
            spinner.join().unwrap();
        }
        assert!(
            longest < Duration::from_millis(500),
            "a renewal waited {longest:?} for the connections"
        );
    }
}
