//! One acquisition round over every server: a single server, or several with Redlock, where the
//! lock is held only when a majority granted it within the lease less the time taken and the drift
//! margin, the fencing token is raised above every counter seen, and a minority grant is undone;
//! a round that finds the lock busy tells the waiter its place in line (`Line`).

use std::time::{Duration, Instant};

use dlock_core::error;
use dlock_core::error::FailAs;

use super::fault::{first_fatal, Fault, FaultKind};
use super::lease::RedisLease;
use super::quorum::{on_all, on_each, quorum};
use super::scripts::{Ask, Place, Reply};
use super::topology::Topology;
use super::RedisBackend;
use dlock_core::lock::{random_bytes, Holder, Token};

/// The largest fencing token: the scripts count in Lua numbers (doubles), exact up to 2^53 - 1.
const MAX_TOKEN: Token = (1 << 53) - 1;

impl RedisBackend {
    /// How long one command to one server may take. With several servers it is short, so one
    /// stopped server costs little of the lease (Redlock's advice); alone, the connect timeout.
    pub(super) fn op_timeout(&self, servers: usize, ttl: Duration) -> Duration {
        if servers == 1 {
            self.connect_timeout
        } else {
            (ttl / 10)
                .max(Duration::from_millis(50))
                .min(self.connect_timeout)
        }
    }

    /// One acquisition round on every server.
    pub(super) fn round(
        &self,
        servers: &mut [Topology],
        ask: &Ask,
        wait: bool,
        ticket: &mut String,
        most: Duration,
    ) -> error::Result<Round> {
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
                    ahead,
                    holders,
                }) => {
                    seen = seen.max(counter);
                    // Every server queues us under the same ticket, so all agree on the order.
                    if ticket.is_empty() {
                        *ticket = t;
                    }
                    busy.get_or_insert((retry, holders, i, ahead));
                }
                Err(fault) => faults.push(fault),
            }
        }
        if let Some(fatal) = first_fatal(&faults) {
            let err = fatal.to_error();
            // A grant too few replicas acknowledged is given back like any other.
            let unreplicated = matches!(fatal.kind, FaultKind::Unreplicated);
            if !granted.is_empty() || unreplicated {
                self.undo(servers, ask, Place::Leave);
            }
            return Err(err).unavailable();
        }
        if granted.len() >= quorum {
            // Above every token a server that answered has handed out, granting or not: a
            // server that missed acquisitions or lost its data cannot pull the token back.
            let granted_max = granted.iter().map(|&(_, t)| t).max().unwrap_or(0);
            let token = granted_max.max(seen.saturating_add(1));
            if token > MAX_TOKEN {
                self.undo(servers, ask, Place::Leave);
                return Err(error!(
                    "a redis server's fencing counter {} is at {seen}, the last token dlock \
                     can hand out exactly; no token is handed out from it",
                    ask.keys.all()[2]
                ))
                .unavailable();
            }
            let lease = self.lease(ask, token, started);
            if Instant::now() < lease.clock.deadline()
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
        let (retry, holders, server, ahead) = busy.unwrap_or((ask.ttl / 3, Vec::new(), 0, 0));
        let line = Line {
            sent: started,
            retry,
            server,
            ahead,
            gave_back: !granted.is_empty(),
        };
        Ok(Round::Busy { line, holders })
    }

    /// Redlock: lift the granting servers' counters to the token handed out. Needs a majority.
    fn raise_tokens(
        &self,
        servers: &mut [Topology],
        ask: &Ask,
        granted: &[(usize, Token)],
        token: Token,
        timeout: Duration,
    ) -> bool {
        if servers.len() == 1 {
            return true;
        }
        let raised = on_each(servers, |i, s| {
            s.at(&ask.keys.base);
            granted.iter().any(|&(g, _)| g == i)
                && s.call_acked(timeout, |l| ask.raise_token(&mut l.conn, token), |_| true)
                    .is_ok()
        });
        raised.into_iter().filter(|&ok| ok).count() >= quorum(servers.len())
    }

    /// Removes what `ask` has in the lock on every server (its lease, and its place in the queue
    /// unless kept), best effort: whatever is left expires within the ttl.
    pub(super) fn undo(&self, servers: &mut [Topology], ask: &Ask, place: Place) {
        let timeout = self.op_timeout(servers.len(), ask.ttl);
        self.undo_within(servers, ask, place, timeout);
    }

    /// `undo`, each server's call bounded by `timeout`.
    pub(super) fn undo_within(
        &self,
        servers: &mut [Topology],
        ask: &Ask,
        place: Place,
        timeout: Duration,
    ) {
        let alone = servers.len() == 1;
        on_all(servers, |s| {
            s.at(&ask.keys.base);
            s.call(timeout, |l| ask.release(&mut l.conn, place, alone))
                .ok()
        });
    }

    /// `undo` on the servers still connected only: the place a failed attempt may have taken on a
    /// server that stopped answering expires within the ttl, and reconnecting to remove it would
    /// spend a second connect timeout.
    pub(super) fn undo_connected(&self, servers: &mut [Topology], ask: &Ask) {
        let timeout = self.op_timeout(servers.len(), ask.ttl);
        let alone = servers.len() == 1;
        on_all(servers, |s| {
            s.at(&ask.keys.base);
            if s.is_connected() {
                let _ = s.call(timeout, |l| ask.release(&mut l.conn, Place::Leave, alone));
            }
        });
    }
}

/// The outcome of one acquisition round over all servers.
pub(super) enum Round {
    Held(Box<RedisLease>),
    /// Held by others: our place in line (when waiting), and who holds it.
    Busy {
        line: Line,
        holders: Vec<Holder>,
    },
    /// Fewer than a majority answered.
    Unreachable(Vec<Fault>),
}

/// A waiter's place after a round that found the lock busy.
#[derive(Clone, Copy)]
pub(super) struct Line {
    /// When that round was sent: a grant heard after its replies was made later than this.
    pub(super) sent: Instant,
    /// Look again after this long if no grant comes.
    pub(super) retry: Duration,
    /// A server that answered, whose connection to listen on.
    pub(super) server: usize,
    /// Waiters in line before this one, by that server.
    pub(super) ahead: usize,
    /// The round won some servers, too few, and gave them back (see `wait::retry_after`).
    pub(super) gave_back: bool,
}

/// Drops the grants of `base` heard so far: a round's replies, which came after them, tell the
/// truth.
fn forget_grants(servers: &[Topology], base: &str) {
    for server in servers {
        let _ = server.heard(base);
    }
}

/// A queue ticket from this machine's clock, in the scripts' format (microseconds since the epoch).
fn client_ticket() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_micros().to_string()
}

/// A random duration between 1ms and `most`.
pub(super) fn jitter(most: Duration) -> Duration {
    let mut bytes = [0u8; 4];
    let random = random_bytes(&mut bytes).map_or(0, |()| u32::from_le_bytes(bytes));
    let most_ms = most.as_millis().max(1) as u32;
    Duration::from_millis(u64::from(1 + random % most_ms))
}
