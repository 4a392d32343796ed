//! One Redis server as dlock talks to it: the URL parsed and checked (no password ever shown),
//! the connection opened within the connect timeout (and an ACL user's permissions checked), and
//! every call bounded by socket timeouts and an alarm, a broken connection dropped and reopened.
//! A master found through Sentinel and a Redis Cluster build on it (`sentinel`, `cluster`); what a
//! `--url` names, and which of those it is, is `topology`'s.

use std::cell::RefCell;
use std::collections::HashSet;
use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dlock_core::error;
use dlock_core::error::FailAs;
use redis::{Client, ConnectionAddr, IntoConnectionInfo, ProtocolVersion, RedisError};

use super::fault::{self, Fault, FaultKind};
use super::link::{Heard, Link};
use super::replication;
use dlock_core::backend::stop::{Stop, INTERRUPTED as STOPPED_CALL};
use dlock_core::backend::watch::{Cut, Socket, Watched, MAX_GROWTH};
use dlock_sys::blocking::Alarm;

/// What an ACL user's permissions are checked for, in one script (Redis 7's
/// `redis.acl_check_cmd`; before that, PUBLISH is tried, the one command a script needs after its
/// writes): the first command it may not run on dlock's keys and channels, or "".
const PERMISSIONS_CHECK: &str = include_str!("permissions.lua");

/// How long after a call's budget its alarm interrupts it: a silent server is noticed by the socket
/// timeout (which ends the call), a slow drip of bytes by the alarm. (A library that retries a read
/// after EINTR, as rustls does, would start its full socket timeout again.)
const ALARM_SLACK: Duration = Duration::from_millis(20);

/// One server: where it is, and the connection to it (reopened when it breaks).
pub(super) struct Server {
    /// `redis://host:port[/db]` without the credentials: for messages and `location`.
    pub(super) location: String,
    /// `host:port`, what messages name.
    pub(super) addr: String,
    /// The port, to find the connection's socket by (`watch`).
    port: u16,
    pub(super) client: Client,
    pub(super) link: Option<Link>,
    /// The socket timeouts last set on the connection, to skip needless system calls.
    pub(super) timeout: Option<Duration>,
    /// A new connection's budget: connecting (TCP, TLS, AUTH) and its first reply share one.
    pub(super) first_reply_by: Option<Instant>,
    /// The ACL user the URL names (not `default`): its permissions are checked on connecting.
    pub(super) acl_user: Option<String>,
    /// The URL gives no password (nor did a password file): a refusal says one is needed.
    without_password: bool,
    /// A master the sentinels name (`sentinel`): a reply that says it no longer is one
    /// (`Fault::failover`) is a failover, worth looking the master up again.
    pub(super) behind_sentinel: bool,
    /// A node of a Redis Cluster (`cluster`): it takes keys of its own slots only.
    pub(super) cluster_node: bool,
    /// How many replicas must acknowledge each grant and renewal here: the URL's `?replicas=`,
    /// else `--replicas` (see `replication`).
    pub(super) replicas: u32,
    /// Whether a stop signal was caught (the caller's, see `BackendConfig`): a call it interrupted
    /// is told from one its alarm did.
    pub(super) stop: Stop,
}

impl Server {
    /// A `redis://` or `rediss://` URL (`shown`: how messages show it); `replicas` unless it says
    /// `?replicas=` (its other query parameters are the library's).
    pub(super) fn parse_plain(url: &str, shown: &str, replicas: u32) -> error::Result<Server> {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(error!(
                "{shown:?} is not a redis URL: use redis://[user:password@]host:port[/db] or rediss://..."
            ))
            .usage();
        }
        // The password ends where the URL parser ends the address (at `/`, `?` or `#`), but
        // `redact` hides up to the last `@`: a URL where the two differ would show a password.
        let after_scheme = url.split_once("://").map_or("", |(_, rest)| rest);
        let address_end = after_scheme
            .find(['/', '?', '#'])
            .unwrap_or(after_scheme.len());
        if after_scheme[address_end..].contains('@') {
            return Err(error!(
                "malformed redis URL {shown:?}: write `/`, `?`, `#` and `@` in a user name or \
                 password as %2F, %3F, %23 and %40"
            ))
            .usage();
        }
        let tail = &after_scheme[address_end..];
        let query = tail.split('#').next().unwrap_or_default().split_once('?');
        let replicas = match query {
            Some((_, pairs)) => replication::in_query(pairs, shown)?.unwrap_or(replicas),
            None => replicas,
        };
        let info = url
            .into_connection_info()
            .map_err(|e| {
                error!(
                    "malformed redis URL {shown:?}: {}",
                    e.detail().unwrap_or("cannot parse it")
                )
            })
            .usage()?;
        let (scheme, host, port) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => ("redis", host.clone(), *port),
            ConnectionAddr::TcpTls { host, port, .. } => ("rediss", host.clone(), *port),
            _ => return Err(error!("{shown:?} is not a redis:// or rediss:// address")).usage(),
        };
        if host.is_empty() {
            return Err(error!("redis URL {shown:?} names no host")).usage();
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
        let without_password = info.redis_settings().password().is_none();
        let info = info.set_redis_settings(settings).set_tcp_settings(tcp);
        let client = Client::open(info)
            .map_err(|e| error!("malformed redis URL {shown:?}: {e}"))
            .usage()?;
        Ok(Server {
            location,
            addr,
            port,
            client,
            link: None,
            timeout: None,
            first_reply_by: None,
            acl_user,
            without_password,
            behind_sentinel: false,
            cluster_node: false,
            replicas,
            stop: Stop::default(),
        })
    }

    /// Whether a connection is open (it may still have broken unnoticed).
    pub(super) fn is_connected(&self) -> bool {
        self.link.is_some()
    }

    /// What was heard of the lock `base` among the messages read so far on this server's
    /// connection; see `Link::heard`.
    pub(super) fn heard(&self, base: &str) -> Option<Heard> {
        self.link.as_ref().and_then(|l| l.heard(base))
    }

    pub(super) fn fault(&self, kind: FaultKind, detail: String) -> Fault {
        Fault::new(&self.addr, kind, detail)
    }

    /// Connects within `timeout`, which also bounds the first reply on the new connection (and the
    /// permission check of an ACL user), however slowly the server answers.
    pub(super) fn connect(&mut self, timeout: Duration) -> Result<(), Fault> {
        self.open(Instant::now() + timeout, timeout)?;
        let Some(user) = self.acl_user.clone() else {
            return Ok(());
        };
        let missing = self
            .call_once(timeout, &mut self.permissions_check())
            .map_err(|(f, _)| f)?;
        self.permitted(&user, missing)
    }

    /// Opens the connection within `timeout`; its first reply is due by `until`. No permission
    /// check: see `connect`.
    pub(super) fn open(&mut self, until: Instant, timeout: Duration) -> Result<(), Fault> {
        let alarm = Alarm::at(until + ALARM_SLACK);
        let before = Socket::open_now();
        match self.client.get_connection_with_timeout(timeout) {
            Ok(mut conn) => {
                let (sender, messages) = mpsc::channel();
                conn.set_push_sender(sender);
                self.link = Some(Link {
                    conn,
                    messages,
                    listening: RefCell::new(HashSet::new()),
                    resp3: false,
                    classic: false,
                    socket: Socket::opened_since(&before, self.port),
                });
                self.timeout = None;
                self.first_reply_by = Some(until);
                drop(alarm);
                Ok(())
            }
            Err(e) => Err(self.classify(&e, timeout)),
        }
    }

    /// The call that checks an ACL user's permissions (one round trip, only for such users): the
    /// first command it may not run, or "". Without it, a missing permission shows only half-way
    /// through a script, for instance a release that freed the lock and then could not tell the
    /// next waiter. See `permitted`.
    pub(super) fn permissions_check(&self) -> impl FnMut(&mut Link) -> redis::RedisResult<String> {
        // In a cluster the key goes as an argument: a key would have to be in this node's slots.
        let keys = if self.cluster_node { 0 } else { 1 };
        move |l: &mut Link| {
            redis::cmd("EVAL")
                .arg(PERMISSIONS_CHECK)
                .arg(keys)
                .arg("dlock:{check}:holders")
                .query(&mut l.conn)
        }
    }

    /// Refuses the ACL user `user` when the permissions check found a command it may not run
    /// (`missing`), dropping the connection.
    pub(super) fn permitted(&mut self, user: &str, missing: String) -> Result<(), Fault> {
        if missing.is_empty() {
            return Ok(());
        }
        self.link = None;
        Err(self.fault(
            FaultKind::NoPermission,
            format!("redis user {user:?} may not run {missing}"),
        ))
    }

    /// `call_once`, and once more within what is left of `timeout` when a connection that was
    /// there broke (the server restarted since the last call, or failed over behind Sentinel):
    /// every call dlock makes may be repeated (each script finds its own earlier effect, and a
    /// WAIT is sent on the connection that carried the write it waits for). Without it, a holder
    /// whose server restarted could not release, and the next waiter waited out the lease.
    pub(super) fn call<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, Fault> {
        let had_link = self.is_connected();
        once_more_if_dropped(timeout, had_link, |left| self.call_once(left, &mut f))
    }

    /// Runs `f` on the connection (connecting first if it broke) with `timeout` on each socket
    /// operation. A connection that failed is dropped, so no late answer can be mistaken for the
    /// next one. A failure says whether it looks like a failover (worth one more try: see
    /// `SentinelMaster::call`).
    pub(super) fn call_once<T>(
        &mut self,
        timeout: Duration,
        f: &mut impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, (Fault, bool)> {
        let budget = timeout.max(Duration::from_millis(1));
        let mut timeout = budget;
        if self.link.is_none() {
            self.connect(timeout).map_err(|fault| (fault, false))?;
        }
        if let Some(by) = self.first_reply_by.take() {
            let left = by.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                timeout = timeout.min(left);
            }
        }
        self.set_timeout(timeout).map_err(|fault| (fault, false))?;
        // Socket timeouts bound each system call; this bounds the whole exchange, and the watch
        // a reply that keeps coming.
        let until = Instant::now() + timeout + ALARM_SLACK;
        let _alarm = Alarm::at(until);
        let Some(link) = self.link.as_mut() else {
            return Err((self.fault(FaultKind::Down, "not connected".into()), false));
        };
        let watched = link
            .socket
            .as_ref()
            .and_then(|s| Watched::start(s, until, &self.stop));
        match f(link) {
            Ok(value) => Ok(value),
            Err(e) => {
                if let Some(cut) = watched.as_ref().and_then(Watched::cut) {
                    self.link = None;
                    return Err((self.cut_fault(cut, budget), false));
                }
                let failover = match self.behind_sentinel {
                    true => Fault::failover(&self.addr, &e),
                    false => None,
                };
                let again = failover.is_some() || e.is_connection_dropped();
                let fault = failover.unwrap_or_else(|| self.classify(&e, budget));
                // A server error leaves the connection as it was, but one without RESP3 is now
                // half in pub/sub mode.
                if !matches!(
                    fault.kind,
                    FaultKind::Refused | FaultKind::Moved | FaultKind::Ask | FaultKind::TryAgain
                ) || e.kind() == redis::ErrorKind::RESP3NotSupported
                {
                    self.link = None;
                }
                Err((fault, again))
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

    /// Reads one message (into the link's `messages`), waiting at most `timeout`. `Err` when the
    /// connection broke (it is then dropped); a timeout or an interruption is `Ok`.
    pub(super) fn read_message(&mut self, timeout: Duration) -> Result<(), ()> {
        self.set_timeout(timeout.max(Duration::from_millis(1)))
            .map_err(|_| ())?;
        let Some(link) = self.link.as_mut() else {
            return Err(());
        };
        let until = Instant::now() + timeout + ALARM_SLACK;
        let watched = link
            .socket
            .as_ref()
            .and_then(|s| Watched::start(s, until, &self.stop));
        // The pub/sub view is never dropped: dropping it would unsubscribe and wait for the answer.
        // It only borrows the connection and holds an empty queue, so nothing leaks.
        let mut view = ManuallyDrop::new(link.conn.as_pubsub());
        match view.get_message() {
            Ok(_) => Ok(()),
            Err(_) if watched.as_ref().and_then(Watched::cut).is_some() => {
                self.link = None;
                Err(())
            }
            Err(e) if e.is_timeout() || fault::is_interrupted(&e) => Ok(()),
            Err(_) => {
                self.link = None;
                Err(())
            }
        }
    }

    /// The fault of a call the watch cut short.
    fn cut_fault(&self, cut: Cut, timeout: Duration) -> Fault {
        match cut {
            Cut::Late => self.fault(
                FaultKind::Down,
                dlock_core::report::connection_failure(
                    &std::io::ErrorKind::TimedOut.into(),
                    Some(timeout),
                ),
            ),
            Cut::Stopped => self.fault(FaultKind::Down, STOPPED_CALL.into()),
            Cut::Memory => self.fault(
                FaultKind::Protocol,
                format!(
                    "sent an answer that grew dlock by more than {} MiB (dlock's answers are \
                     small); is it Redis?",
                    MAX_GROWTH >> 20
                ),
            ),
        }
    }

    pub(super) fn classify(&self, e: &RedisError, timeout: Duration) -> Fault {
        let fault = Fault::classify(&self.addr, e, timeout, self.stop.requested());
        if self.without_password {
            fault.without_password()
        } else {
            fault
        }
    }
}

/// Runs `once` with `timeout`, and again with what is left of it when it failed on a connection
/// that was there and broke (`once` says so with `true`): see `Server::call`.
pub(super) fn once_more_if_dropped<T>(
    timeout: Duration,
    had_link: bool,
    mut once: impl FnMut(Duration) -> Result<T, (Fault, bool)>,
) -> Result<T, Fault> {
    let started = Instant::now();
    match once(timeout) {
        Err((fault, true)) if had_link => {
            let left = timeout.saturating_sub(started.elapsed());
            if left < Duration::from_millis(1) {
                return Err(fault);
            }
            once(left).map_err(|(fault, _)| fault)
        }
        result => result.map_err(|(fault, _)| fault),
    }
}
