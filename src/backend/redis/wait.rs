//! Waiting for a busy lock: a ticket in the lock's queue, listening on this dlock's channel for the
//! grant a release sends, a fallback look when none comes, and the place in line a `try_acquire`
//! parks for the wait that follows it. Why it works so: the design notes in mod.rs.

use std::time::{Duration, Instant};

use super::fault;
use super::lease::RedisLease;
use super::redlock::Round;
use super::scripts::{Ask, Place};
use super::RedisBackend;
use crate::backend::{Attempt, Waiting, RETRY_FIRST, RETRY_MOST};
use crate::lock::{Holder, LockRequest, Token};
use crate::signal::mask::WakeBlocked;
use crate::sync::lock;

/// How often a waiter looks at its cancellation flag while nothing happens.
const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// A place in line taken by `try_acquire` for the wait dlock makes next for the same request: the
/// wait keeps it (and its subscription) instead of asking again. Any other request, or dropping
/// the backend, gives it up.
pub(super) struct Parked {
    request: LockRequest,
    ticket: String,
    line: Line,
    /// Who held the lock then: the wait reports them without asking again.
    holders: Vec<Holder>,
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
}

impl RedisBackend {
    /// One attempt. With `then_wait`, a busy lock leaves this dlock in line, parked for the wait
    /// that follows; otherwise nothing of it stays behind.
    pub(super) fn try_once(
        &self,
        request: &LockRequest,
        then_wait: bool,
    ) -> anyhow::Result<Attempt> {
        self.give_up_parked();
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

    /// Gives up the place in line a `try_acquire` parked, if it did.
    pub(super) fn give_up_parked(&self) {
        if let Some(parked) = self.take_parked() {
            self.abandon(&Ask::new(&parked.request));
        }
    }

    /// Waits for the lock, in the place a `try_acquire` parked for this request if it did (any
    /// other parked place is given up). `Ok(None)` when cancelled; a wait that ends without the
    /// lock leaves no place in line behind.
    pub(super) fn wait(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> anyhow::Result<Option<Box<RedisLease>>> {
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
            other => {
                self.abandon(&ask);
                other
            }
        }
    }

    /// Waits for the lock: see the Redis backend's module documentation. `Ok(None)` when cancelled.
    /// `parked` is the place a `try_acquire` took in line for this request, if it did.
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
        let _quiet = WakeBlocked::on_this_thread();
        self.undo(&mut self.servers(), ask, Place::Leave);
    }
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
