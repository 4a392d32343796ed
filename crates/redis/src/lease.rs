//! A lock held on Redis: renewed on a majority of the servers before its lease runs out, lost when
//! a majority says it is no longer ours or no renewal gets through in time, released at the end.

use std::time::{Duration, Instant};

use dlock_core::error;

use super::fault::{self, Fault};
use super::link::Link;
use super::quorum::{on_all, quorum};
use super::scripts::Ask;
use super::topology::Topology;
use super::{RedisBackend, Shared};
use dlock_core::backend::lease_clock::{Due, LeaseClock};
use dlock_core::backend::{Lease, Released, Renewal};
use dlock_core::lock::{RunEnd, Token};

/// Longest one renewal attempt may wait for its answer.
const MAX_RENEW_ATTEMPT: Duration = Duration::from_secs(1);

/// A held lock. It renews and releases over the backend's shared connections.
pub(super) struct RedisLease {
    servers: Shared,
    /// How many servers there are (a majority of them must confirm).
    count: usize,
    ask: Ask,
    token: Token,
    /// When the lease may have run out on the servers, from the last renewal a majority
    /// confirmed; why the last one did not; why the lock was lost, once it was.
    pub(super) clock: LeaseClock,
    op_timeout: Duration,
}

impl RedisBackend {
    /// A held lock with `token`, confirmed by a request sent at `sent`.
    pub(super) fn lease(&self, ask: &Ask, token: Token, sent: Instant) -> RedisLease {
        let ttl = ask.ttl;
        RedisLease {
            servers: self.servers.clone(),
            count: self.count,
            ask: ask.clone(),
            token,
            clock: LeaseClock::new(ttl, sent),
            op_timeout: self.op_timeout(self.count, ttl),
        }
    }
}

impl RedisLease {
    /// Asks every server (at once) whether the lease is ours, by `f`: `None` for a server `f`
    /// skips, else whether the server found it ours (and renewed or released it).
    fn ask_every_server(
        &self,
        f: impl Fn(&mut Topology) -> Option<Result<bool, Fault>> + Sync,
    ) -> Tally {
        let mut servers = self.servers.lock();
        for server in servers.iter_mut() {
            server.at(&self.ask.keys.base);
        }
        let answers = on_all(&mut servers, f);
        let mut tally = Tally {
            total: answers.len(),
            ours: 0,
            not_ours: Vec::new(),
            faults: Vec::new(),
        };
        for (answer, server) in answers.into_iter().zip(servers.iter()) {
            match answer {
                Some(Ok(true)) => tally.ours += 1,
                Some(Ok(false)) => tally.not_ours.push(server.addr().to_owned()),
                Some(Err(fault)) => tally.faults.push(fault),
                None => {}
            }
        }
        tally
    }
}

impl Lease for RedisLease {
    fn token(&self) -> Token {
        self.token
    }

    fn surely_held_until(&self) -> Option<Instant> {
        Some(self.clock.deadline())
    }

    fn renew(&mut self) -> Renewal {
        let ttl = self.ask.ttl;
        let (sent, left) = match self.clock.due() {
            Due::Not(renewal) => return renewal,
            Due::TooLate(trouble) => return self.lose_to_the_deadline(trouble),
            Due::Now { sent, left } => (sent, left),
        };
        // The supervisor renews from the thread that also forwards signals and reaps the command:
        // one attempt may block it only briefly, and a failed one is retried until the deadline.
        let attempt = self
            .op_timeout
            .min(ttl / 5)
            .min(MAX_RENEW_ATTEMPT)
            .min(left);
        let ask = &self.ask;
        let tally = self.ask_every_server(|s| {
            // Behind Sentinel: renew where the master is now (asked at most once a second).
            s.master_moved(attempt / 2, false);
            let renew = |l: &mut Link| Ok(ask.renew(&mut l.conn)? == 1);
            Some(s.call_acked(attempt, renew, |&ours| ours))
        });
        if tally.confirmed() {
            return self.clock.confirm(sent);
        }
        if tally.disowned() {
            return self.clock.lose(format!(
                "it is no longer ours on redis at {} (expired, broken by `dlock release --force`, \
                 deleted, or the server lost its data)",
                tally.not_ours.join(", ")
            ));
        }
        let why = fault::describe(&tally.faults);
        match self.clock.unconfirmed(why.clone()) {
            Some(unconfirmed) => unconfirmed,
            None => self.lose_to_the_deadline(Some(why)),
        }
    }

    fn release(self: Box<Self>, end: &RunEnd) -> error::Result<Released> {
        // After a loss the servers may be gone: try only those still connected, and briefly.
        let lost = self.clock.lost().map(str::to_owned);
        let timeout = if lost.is_some() {
            self.op_timeout.min(Duration::from_millis(250))
        } else {
            self.op_timeout
        };
        let skip_unconnected = lost.is_some();
        let (ask, token) = (&self.ask, self.token);
        let tally = self.ask_every_server(|s| {
            if skip_unconnected && !s.is_connected() {
                return None;
            }
            Some(s.call(timeout, |l| Ok(ask.let_go(&mut l.conn, token, end)? == 1)))
        });
        if let Some(why) = lost {
            return Ok(Released::Lost(why));
        }
        if tally.confirmed() {
            return Ok(Released::Held);
        }
        // The release script prunes expired holders first: a server that did not find us had let
        // the lease pass or lost it to `release --force`. A majority of those: it was not ours.
        if tally.disowned() {
            return Ok(Released::Lost(format!(
                "it was no longer ours on redis at {} (its lease had passed, or it was broken or \
                 deleted)",
                tally.not_ours.join(", ")
            )));
        }
        Err(error!(
            "{}; the lease runs out by itself within {}",
            fault::describe(&tally.faults),
            dlock_core::text::duration(self.ask.ttl)
        ))
    }
}

impl RedisLease {
    fn lose_to_the_deadline(&mut self, trouble: Option<String>) -> Renewal {
        let whom = match self.count {
            1 => "the server".to_owned(),
            n => format!("a majority of the {n} servers"),
        };
        let why = trouble.unwrap_or_else(|| "no answer".into());
        self.clock.lose(format!(
            "could not renew it on {whom} before the lease ({}) ran out: {why}",
            dlock_core::text::duration(self.ask.ttl)
        ))
    }
}

/// How the servers answered a renewal or a release.
struct Tally {
    /// How many servers there are.
    total: usize,
    /// How many found the lease ours.
    ours: usize,
    /// The servers that found it not ours (`host:port`).
    not_ours: Vec<String>,
    /// Why the others did not answer.
    faults: Vec<Fault>,
}

impl Tally {
    /// A majority found the lease ours.
    fn confirmed(&self) -> bool {
        self.ours >= quorum(self.total)
    }

    /// A majority can no longer find the lease ours, even if every silent server came back.
    fn disowned(&self) -> bool {
        self.not_ours.len() > self.total - quorum(self.total)
    }
}
