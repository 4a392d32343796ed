//! What one `--url` names: a single server (`redis://`, `rediss://`), a master found through
//! Sentinel (`redis+sentinel://`, see `sentinel`) or a Redis Cluster (`redis+cluster://`, see
//! `cluster`); which of them a URL is, and each call sent the way its kind needs (to the master
//! the sentinels name, to the master of the lock's slot), a grant or renewal waiting for the
//! replicas `--replicas` asks for (`replication`).

use dlock_core::error;
use std::time::{Duration, Instant};

use super::cluster::{self, Cluster};
use super::fault::{Fault, FaultKind};
use super::link::{Heard, Link, Subscribed};
use super::replication;
use super::scripts::{Ask, Reply};
use super::sentinel::{self, SentinelMaster};
use super::server::Server;
use dlock_core::backend::stop::Stop;
use dlock_core::url::redact;

/// What one `--url` names, and the connection to it.
pub(super) enum Topology {
    /// One server.
    Single(Box<Server>),
    /// Whichever node the sentinels name as the master.
    Sentinel(Box<SentinelMaster>),
    /// A Redis Cluster: one connection that goes to the master of the lock in hand.
    Cluster(Box<Cluster>),
}

impl Topology {
    /// One `--url`; `replicas` (`--replicas`) unless it says `?replicas=` itself.
    pub(super) fn parse(url: &str, replicas: u32) -> error::Result<Topology> {
        if cluster::is_cluster_url(url) {
            return Ok(Topology::Cluster(Box::new(cluster::parse(url, replicas)?)));
        }
        if url.starts_with(sentinel::SCHEME) {
            return Ok(Topology::Sentinel(Box::new(SentinelMaster::parse(
                url, replicas,
            )?)));
        }
        let server = Server::parse_plain(url, &redact(url), replicas)?;
        Ok(Topology::Single(Box::new(server)))
    }

    /// The server the connection goes to now.
    fn server(&self) -> &Server {
        match self {
            Topology::Single(server) => server,
            Topology::Sentinel(master) => &master.server,
            Topology::Cluster(cluster) => &cluster.server,
        }
    }

    fn server_mut(&mut self) -> &mut Server {
        match self {
            Topology::Single(server) => server,
            Topology::Sentinel(master) => &mut master.server,
            Topology::Cluster(cluster) => &mut cluster.server,
        }
    }

    /// The URL without the credentials: for messages and `location`.
    pub(super) fn location(&self) -> &str {
        &self.server().location
    }

    /// `host:port` of the node the connection goes to now, what messages name.
    pub(super) fn addr(&self) -> &str {
        &self.server().addr
    }

    /// How many replicas must acknowledge each grant and renewal (see `replication`).
    pub(super) fn replicas(&self) -> u32 {
        self.server().replicas
    }

    /// Whether a stop signal was caught: see `Server::stop`.
    pub(super) fn set_stop(&mut self, stop: Stop) {
        self.server_mut().stop = stop;
    }

    /// Whether this is a Redis Cluster (`redis+cluster://`).
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Topology::Cluster(_))
    }

    /// Whether a connection is open (it may still have broken unnoticed).
    pub(super) fn is_connected(&self) -> bool {
        self.server().is_connected()
    }

    pub(super) fn fault(&self, kind: FaultKind, detail: String) -> Fault {
        self.server().fault(kind, detail)
    }

    /// Connects within `timeout`, which also bounds the first reply on the new connection (and the
    /// permission check of an ACL user), however slowly the server answers.
    pub(super) fn connect(&mut self, timeout: Duration) -> Result<(), Fault> {
        match self {
            Topology::Single(server) => server.connect(timeout),
            Topology::Sentinel(master) => master.connect(timeout),
            Topology::Cluster(cluster) => cluster.connect(timeout),
        }
    }

    /// Runs `f` on the connection (reconnecting first if it broke) with `timeout` on each socket
    /// operation: see `Server::call_once`, `SentinelMaster::call` and `Cluster::call`.
    pub(super) fn call<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, Fault> {
        match self {
            Topology::Single(server) => server.call(timeout, f),
            Topology::Sentinel(master) => master.call(timeout, f),
            Topology::Cluster(cluster) => cluster.call(timeout, &mut f),
        }
    }

    /// `call` on every master of a cluster (from `CLUSTER SLOTS`), or on the one server.
    pub(super) fn call_everywhere<T>(
        &mut self,
        timeout: Duration,
        f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Vec<Result<T, Fault>> {
        match self {
            Topology::Cluster(cluster) => cluster.call_everywhere(timeout, f),
            _ => vec![self.call(timeout, f)],
        }
    }

    /// Points a cluster's connection at the master of the lock `base` (`dlock:{NAME}`), as far as
    /// known; nothing for a single server.
    pub(super) fn at(&mut self, base: &str) {
        if let Topology::Cluster(cluster) = self {
            cluster.at(base);
        }
    }

    /// Behind Sentinel: whether the master moved (see `SentinelMaster::master_moved`); false
    /// otherwise.
    pub(super) fn master_moved(&mut self, timeout: Duration, now: bool) -> bool {
        match self {
            Topology::Sentinel(master) => master.master_moved(timeout, now),
            _ => false,
        }
    }

    /// What was heard of the lock `base` among the messages read so far on this URL's
    /// connections; see `Link::heard`.
    pub(super) fn heard(&self, base: &str) -> Option<Heard> {
        match self {
            Topology::Cluster(cluster) => cluster.heard(base),
            _ => self.server().heard(base),
        }
    }

    /// Whether a message came on one of `channels` on the connection in use: see `Link::told`.
    pub(super) fn told(&self, channels: &[String]) -> bool {
        self.server()
            .link
            .as_ref()
            .is_some_and(|l| l.told(channels))
    }

    /// Reads one message on the connection in use: see `Server::read_message`.
    pub(super) fn read_message(&mut self, timeout: Duration) -> Result<(), ()> {
        self.server_mut().read_message(timeout)
    }

    /// One acquisition attempt. A waiter's first one on a connection also makes it listen. A
    /// grant counts once this server's `replicas` acknowledged it (see `call_acked`).
    pub(super) fn acquire(
        &mut self,
        timeout: Duration,
        ask: &Ask,
        wait: bool,
        ticket: &str,
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
        self.call_acked(timeout, listen, |reply| matches!(reply, Reply::Granted(_)))
    }

    /// `call`, and then, when `wrote` says `f` changed the lock and this server's `replicas` is
    /// not 0, `WAIT` on the same connection (so it waits for that write) until that many replicas
    /// acknowledged it,
    /// for at most half of `timeout`. Too few acknowledgements: a fault, whatever `f` answered,
    /// unless the sentinels now name another master, where it is done once more (a former
    /// master, not yet told, still takes writes but has no replicas left).
    pub(super) fn call_acked<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
        wrote: impl Fn(&T) -> bool,
    ) -> Result<T, Fault> {
        // WAIT 0 would wait for ever: at least a millisecond.
        let wait = (timeout / 2).max(Duration::from_millis(1));
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let started = Instant::now();
        let replicas = self.replicas();
        let mut run = |link: &mut Link| {
            let value = f(link)?;
            if replicas == 0 || !wrote(&value) {
                return Ok((value, None));
            }
            let acks = replication::wait(&mut link.conn, replicas, wait_ms)?;
            Ok((value, Some(acks)))
        };
        let (mut value, mut acks) = self.call(timeout, &mut run)?;
        let short = |acks: Option<i64>| acks.is_some_and(|a| a < i64::from(replicas));
        if short(acks) {
            let left = timeout.saturating_sub(started.elapsed());
            if !left.is_zero() && self.master_moved(left / 2, true) {
                let left = timeout.saturating_sub(started.elapsed());
                (value, acks) = self.call(left.max(Duration::from_millis(1)), &mut run)?;
            }
        }
        match acks {
            Some(acks) if acks < i64::from(replicas) => Err(self.fault(
                FaultKind::Unreplicated,
                format!(
                    "only {} of {replicas} replicas acknowledged it within {}",
                    acks.max(0),
                    dlock_core::text::duration(wait)
                ),
            )),
            _ => Ok(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_and_messages_never_show_the_password() {
        let s = Topology::parse("redis://alice:s3cret@127.0.0.1:6390/3", 0).unwrap();
        assert_eq!(s.location(), "redis://127.0.0.1:6390/3");
        let e = Topology::parse("redis://alice:s3cret@127.0.0.1:notaport", 0)
            .err()
            .unwrap();
        assert!(!format!("{e:#}").contains("s3cret"), "{e:#}");
    }

    /// `?replicas=N` is the URL's own `--replicas`, on `redis://` and `rediss://` alike; the
    /// library's own parameters stay the library's.
    #[test]
    fn a_url_s_replicas_wins_over_the_option() {
        for (url, option, replicas) in [
            ("redis://127.0.0.1:6390", 2, 2),
            ("redis://127.0.0.1:6390/3?replicas=1", 2, 1),
            ("redis://127.0.0.1:6390/?protocol=resp3&replicas=0", 2, 0),
            ("rediss://127.0.0.1:6390?replicas=4", 0, 4),
        ] {
            let s = Topology::parse(url, option).unwrap();
            assert_eq!(s.replicas(), replicas, "{url}");
        }
        for bad in [
            "redis://127.0.0.1:6390/?replicas=",
            "redis://127.0.0.1:6390/?replicas=+1",
            "redis://127.0.0.1:6390/?replicas=1&replicas=1",
            "rediss://127.0.0.1:6390?replicas=99999999999",
        ] {
            let e = Topology::parse(bad, 0).err().expect(bad);
            assert!(format!("{e:#}").contains("replicas="), "{bad}: {e:#}");
        }
    }

    proptest::proptest! {
        /// URLs from the command line: parsed or refused, never a panic.
        #[test]
        fn any_url_text_parses_or_is_refused(text in "(rediss?://)?\\PC{0,60}") {
            let _ = Topology::parse(&text, 0);
        }

        /// A password in any place a password can take: neither the refusal nor the location
        /// (which every later message names) shows it.
        #[test]
        fn no_message_shows_a_password(url in dlock_core::url::with_password()) {
            let shown = match Topology::parse(&url, 0) {
                Ok(server) => format!("{} {}", server.location(), server.addr()),
                Err(e) => format!("{e:#}"),
            };
            proptest::prop_assert!(!shown.contains("SECRET"), "{} gave {}", url, shown);
        }
    }
}
