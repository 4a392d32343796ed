//! One Redis server as dlock talks to it: the URL parsed and checked (no password ever shown),
//! the connection opened within the connect timeout (and an ACL user's permissions checked), and
//! every call bounded by socket timeouts and an alarm, a broken connection dropped and reopened.

use std::cell::RefCell;
use std::collections::HashSet;
use std::mem::ManuallyDrop;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use redis::{
    Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisError,
};

use super::cluster::{self, Cluster};
use super::fault::{self, Fault, FaultKind};
use super::link::{Heard, Link, Subscribed};
use super::scripts::{Ask, Reply};
use super::sentinel::{self, Sentinels};
use crate::backend::blocking::Alarm;
use crate::backend::stop::Stop;
use crate::exit::{FailWith, Failure};
use crate::url::redact;

/// What an ACL user's permissions are checked for, in one script (Redis 7's
/// `redis.acl_check_cmd`; before that, PUBLISH is tried, the one command a script needs after its
/// writes): the first command it may not run on dlock's keys and channels, or "".
const PERMISSIONS_CHECK: &str = include_str!("permissions.lua");

/// How long after a call's budget its alarm interrupts it: a silent server is noticed by the socket
/// timeout (which ends the call), a slow drip of bytes by the alarm. (A library that retries a read
/// after EINTR, as rustls does, would start its full socket timeout again.)
const ALARM_SLACK: Duration = Duration::from_millis(20);

/// One `--url`: where it is, and the connection to it (reopened when it breaks).
pub(super) struct Server {
    /// `redis://host:port[/db]` without the credentials: for messages and `location`.
    pub(super) location: String,
    /// `host:port`, what messages name.
    pub(super) addr: String,
    pub(super) client: Client,
    pub(super) link: Option<Link>,
    /// The socket timeouts last set on the connection, to skip needless system calls.
    pub(super) timeout: Option<Duration>,
    /// A new connection's budget: connecting (TCP, TLS, AUTH) and its first reply share one.
    pub(super) first_reply_by: Option<Instant>,
    /// The ACL user the URL names (not `default`): its permissions are checked on connecting.
    acl_user: Option<String>,
    /// For `redis+sentinel://`: who names the master each new connection goes to, and the
    /// settings (credentials, db, TCP) that connection is opened with.
    pub(super) sentinel: Option<(Sentinels, ConnectionInfo)>,
    /// The node the sentinels named last, and when they were asked.
    pub(super) master: Option<((String, u16), Instant)>,
    /// For `redis+cluster://`: the slots' masters and the connections to them.
    pub(super) cluster: Option<Box<Cluster>>,
    /// Whether a stop signal was caught (the caller's, see `BackendConfig`): a call it interrupted
    /// is told from one its alarm did.
    pub(super) stop: Stop,
}

impl Server {
    pub(super) fn parse(url: &str) -> anyhow::Result<Server> {
        if cluster::is_cluster_url(url) {
            return cluster::parse(url);
        }
        if !url.starts_with(sentinel::SCHEME) {
            return Server::parse_plain(url, &redact(url));
        }
        let parsed = sentinel::parse(url)?;
        let mut server = Server::parse_plain(&parsed.data_url, &redact(url))?;
        server.addr = format!("master {:?}", parsed.sentinels.master);
        server.location = parsed.location;
        server.sentinel = Some((
            parsed.sentinels,
            server.client.get_connection_info().clone(),
        ));
        Ok(server)
    }

    /// A `redis://` or `rediss://` URL (`shown`: how messages show it).
    pub(super) fn parse_plain(url: &str, shown: &str) -> anyhow::Result<Server> {
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
            sentinel: None,
            master: None,
            cluster: None,
            stop: Stop::default(),
        })
    }

    /// Whether this is a Redis Cluster (`redis+cluster://`).
    pub(super) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// Whether a connection is open (it may still have broken unnoticed).
    pub(super) fn is_connected(&self) -> bool {
        self.link.is_some()
    }

    /// What was heard of the lock `base` among the messages read so far on this server's
    /// connections; see `Link::heard`.
    pub(super) fn heard(&self, base: &str) -> Option<Heard> {
        let parked = || self.cluster.as_ref()?.heard(base);
        self.link
            .as_ref()
            .and_then(|l| l.heard(base))
            .or_else(parked)
    }

    pub(super) fn fault(&self, kind: FaultKind, detail: String) -> Fault {
        Fault::new(&self.addr, kind, detail)
    }

    /// Connects within `timeout`, which also bounds the first reply on the new connection (and the
    /// permission check of an ACL user), however slowly the server answers.
    pub(super) fn connect(&mut self, timeout: Duration) -> Result<(), Fault> {
        let until = Instant::now() + timeout;
        let timeout = match self.find_master(timeout)? {
            true => until
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
            false => timeout,
        };
        let alarm = Alarm::at(until + ALARM_SLACK);
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
        // In a cluster the key goes as an argument: a key would have to be in this node's slots.
        let keys = if self.cluster.is_some() { 0 } else { 1 };
        let check = |l: &mut Link| {
            redis::cmd("EVAL")
                .arg(PERMISSIONS_CHECK)
                .arg(keys)
                .arg("dlock:{check}:holders")
                .query(&mut l.conn)
        };
        let missing: String = match self.cluster {
            // Not `call`: that would follow redirects, and this runs inside one.
            Some(_) => self
                .call_once(timeout, &mut { check })
                .map_err(|(f, _)| f)?,
            None => self.call(timeout, check)?,
        };
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
    /// next one. A sentinel-managed master that failed over (the connection broke, or the node
    /// is now a replica) is looked up again and `f` run once more there, within what is left of
    /// `timeout`: every call dlock makes may be repeated (each script finds its own earlier
    /// effect, and a WAIT is sent on the connection that carried the write it waits for).
    pub(super) fn call<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, Fault> {
        if self.cluster.is_some() {
            return self.call_routed(timeout, &mut f);
        }
        let started = Instant::now();
        let had_link = self.link.is_some();
        match self.call_once(timeout, &mut f) {
            Err((fault, true)) if had_link && self.sentinel.is_some() => {
                let left = timeout.saturating_sub(started.elapsed());
                if left < Duration::from_millis(1) {
                    return Err(fault);
                }
                self.call_once(left, &mut f).map_err(|(fault, _)| fault)
            }
            result => result.map_err(|(fault, _)| fault),
        }
    }

    /// One `call`; a failure says whether it looks like a failover (worth one more try).
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
        // Socket timeouts bound each system call; this bounds the whole exchange.
        let _alarm = Alarm::at(Instant::now() + timeout + ALARM_SLACK);
        let Some(link) = self.link.as_mut() else {
            return Err((self.fault(FaultKind::Down, "not connected".into()), false));
        };
        match f(link) {
            Ok(value) => Ok(value),
            Err(e) => {
                let failover = match self.sentinel {
                    Some(_) => Fault::failover(&self.addr, &e),
                    None => None,
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

    /// One acquisition attempt. A waiter's first one on a connection also makes it listen. A
    /// grant counts once `replicas` replicas acknowledged it (see `call_acked`).
    pub(super) fn acquire(
        &mut self,
        timeout: Duration,
        ask: &Ask,
        wait: bool,
        ticket: &str,
        replicas: u32,
    ) -> Result<Reply, Fault> {
        // Behind Sentinel, a waiter's connection may still go to a master the sentinels replaced,
        // where the lock looks free once its holder renews on the new one: ask where the master
        // is now (at most once a second).
        self.master_moved(timeout / 2, false);
        self.at(&ask.keys.base);
        let listen = |link: &mut Link| {
            let sharded = ask.keys.sharded && !link.classic;
            let channel = ask.wake_channel(sharded);
            if !wait || link.listening.borrow().contains(&channel) {
                return ask.acquire(&mut link.conn, wait, ticket);
            }
            let (reply, subscribed) =
                ask.acquire_listening(&mut link.conn, ticket, !link.resp3, sharded)?;
            link.resp3 = true;
            match subscribed {
                Subscribed::Yes => {
                    link.listening.borrow_mut().insert(channel);
                }
                // Listened for at the next attempt on this connection; meanwhile the wait's
                // re-check covers a grant.
                Subscribed::No => {}
                Subscribed::Unknown => {
                    link.classic = true;
                    ask.subscribe_classic(&mut link.conn)?;
                    link.listening.borrow_mut().insert(ask.wake_channel(false));
                }
            }
            Ok(reply)
        };
        self.call_acked(timeout, replicas, listen, |reply| {
            matches!(reply, Reply::Granted(_))
        })
    }

    /// Reads one message (into the link's `messages`), waiting at most `timeout`. `Err` when the
    /// connection broke (it is then dropped); a timeout or an interruption is `Ok`.
    pub(super) fn read_message(&mut self, timeout: Duration) -> Result<(), ()> {
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
            Err(e) if e.is_timeout() || fault::is_interrupted(&e) => Ok(()),
            Err(_) => {
                self.link = None;
                Err(())
            }
        }
    }

    pub(super) fn classify(&self, e: &RedisError, timeout: Duration) -> Fault {
        Fault::classify(&self.addr, e, timeout, self.stop.requested())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
