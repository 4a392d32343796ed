//! Waiting for a busy lock: a ticket in the lock's queue, taken by the wait's first attempt,
//! listening on this dlock's channel for the grant a release sends, and a fallback look when none
//! comes. Why it works so: the design notes in mod.rs.

use dlock_core::error;
use std::time::{Duration, Instant};

use super::fault;
use super::lease::RedisLease;
use super::redlock::{jitter, Line, Round};
use super::scripts::{Ask, Place};
use super::RedisBackend;
use dlock_core::backend::{Attempt, Waiting, CANCEL_CHECK, LEAVE_WITHIN, RETRY_FIRST, RETRY_MOST};
use dlock_core::lock::LockRequest;
use dlock_sys::blocking::WakeBlocked;

impl RedisBackend {
    /// One attempt; a busy lock leaves nothing behind.
    pub(super) fn try_once(&self, request: &LockRequest) -> error::Result<Attempt> {
        match self.first_round(&Ask::new(request, self.sharded), false, &mut String::new())? {
            Round::Held(lease) => Ok(Attempt::Acquired(lease)),
            Round::Busy { holders, .. } => Ok(Attempt::Busy(holders)),
            Round::Unreachable(_) => Ok(Attempt::Busy(Vec::new())),
        }
    }

    /// The round that starts an acquisition. `queue`: a busy lock leaves this dlock in line (and
    /// subscribed), which a failed round undoes on the servers still connected. Too few servers
    /// answering is an error here, as when connecting: the backend cannot be used (a wait rides
    /// out only an outage that comes later).
    fn first_round(&self, ask: &Ask, queue: bool, ticket: &mut String) -> error::Result<Round> {
        let mut servers = self.servers();
        let faults = match self.round(&mut servers, ask, queue, ticket, Duration::MAX) {
            Ok(Round::Unreachable(faults)) => faults,
            Ok(round) => return Ok(round),
            Err(e) => {
                if queue {
                    self.undo_connected(&mut servers, ask);
                }
                return Err(e);
            }
        };
        if queue {
            self.undo_connected(&mut servers, ask);
        }
        // A server that answered "not now" (a replica named as the master, a slot being moved)
        // counts as reached: a wait rides that out from its start, and `-n` finds the lock busy.
        let down: Vec<_> = faults.iter().filter(|f| !f.is_not_now()).cloned().collect();
        self.check_quorum(servers.len() - down.len(), &down)?;
        Ok(Round::Unreachable(faults))
    }

    /// Waits for the lock: a first round at once, which takes the place in line if the lock is
    /// busy, then the wait in that place. `Ok(None)` when cancelled; a wait that ends without the
    /// lock leaves no place in line behind.
    pub(super) fn wait(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<RedisLease>>> {
        let ask = Ask::new(request, self.sharded);
        let mut ticket = String::new();
        let line = match self.first_round(&ask, true, &mut ticket)? {
            Round::Held(lease) => return Ok(Some(lease)),
            Round::Busy { line, holders } => {
                waiting.busy(&holders);
                Some(line)
            }
            // Fewer than a majority answered, yet enough may (a minority down): ask again.
            Round::Unreachable(_) => None,
        };
        match self.wait_for(&ask, waiting, ticket, line) {
            Ok(Some(lease)) => Ok(Some(lease)),
            other => {
                self.abandon(&ask);
                other
            }
        }
    }

    /// Waits for the lock: see the Redis backend's module documentation. `Ok(None)` when
    /// cancelled. `line`: the place the first round took, if it did (then `ticket` is its ticket).
    fn wait_for(
        &self,
        ask: &Ask,
        waiting: &Waiting,
        mut ticket: String,
        mut line: Option<Line>,
    ) -> error::Result<Option<Box<RedisLease>>> {
        let mut announced = line.is_some();
        let mut retry = RETRY_FIRST;
        // Rounds in a row that won too few servers and gave them back.
        let mut gave_back = 0;
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
            waiting.in_line(place.ahead);
            let until = place.sent + retry_after(&place, ask.ttl, &mut gave_back);
            // A grant heard is only a sign to look again now: any client of the server may
            // publish on the channel, so the lock and its token come from the next round, from
            // the store (which finds the lock already ours and extends it, with its token).
            self.listen(&ask.keys.base, place.server, until, waiting);
        }
    }

    /// Listens until `until` for a grant of the lock `base` to this dlock, on the connection to
    /// server `at` (a message read on any connection by anyone counts too). Holds that connection
    /// for at most `CANCEL_CHECK` at a time, so renewals of locks already held go on meanwhile.
    /// Returns when it is time to look again: a grant heard, `until`, a cancellation, or a
    /// broken connection.
    fn listen(&self, base: &str, at: usize, until: Instant, waiting: &Waiting) {
        loop {
            let now = Instant::now();
            if waiting.is_cancelled() || now >= until {
                return;
            }
            let mut servers = self.servers_after_others();
            // A grant, or the lock's slot moved (then listen where it is now): look again.
            if servers.iter().any(|server| server.heard(base).is_some()) {
                return;
            }
            let Some(server) = servers.get_mut(at) else {
                return;
            };
            server.at(base);
            let slice = waiting.slice((until - now).min(CANCEL_CHECK));
            if server.read_message(slice).is_err() {
                return;
            }
        }
    }

    /// A waiter gives up: remove its place in the queue (and a lease granted in the meantime),
    /// with the supervisor's wake-up signal blocked so these last commands are not interrupted,
    /// within `LEAVE_WITHIN`: a server that stopped answering must not hold up the exit at the
    /// deadline or at a signal by a whole connect timeout (what it keeps expires with the ttl).
    fn abandon(&self, ask: &Ask) {
        let _quiet = WakeBlocked::on_this_thread();
        let mut servers = self.servers();
        let timeout = self.op_timeout(servers.len(), ask.ttl).min(LEAVE_WITHIN);
        self.undo_within(&mut servers, ask, Place::Leave, timeout);
    }
}

/// The first pause after a round that gave servers back, doubled for each such round in a row
/// up to `GAVE_BACK_MOST`.
const GAVE_BACK_FIRST: Duration = Duration::from_millis(20);
const GAVE_BACK_MOST: Duration = Duration::from_millis(1280);

/// How long after `place`'s round to look again if no grant comes: what the servers said (at most
/// a third of the ttl); sooner after a round that won too few servers and gave them back, since
/// nobody will tell us for that (we may well be first in line): after a random pause, so that two
/// waiters that split the servers between them do not meet again in step, twice as long for each
/// such round in a row (`gave_back` counts them). A waiter that cannot win (a server restarted
/// empty grants it each time, while the others keep the lock for its holder) so asks a few times
/// a second at most, not every few milliseconds: each grant there raises that server's fencing
/// counter, hence the next token.
fn retry_after(place: &Line, ttl: Duration, gave_back: &mut u32) -> Duration {
    let retry = place.retry.min(ttl / 3);
    if !place.gave_back {
        *gave_back = 0;
        return retry;
    }
    let most = GAVE_BACK_FIRST
        .saturating_mul(1 << (*gave_back).min(6))
        .min(GAVE_BACK_MOST);
    *gave_back += 1;
    retry.min(jitter(most))
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
