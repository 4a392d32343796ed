//! The parts of a wait on a SQL server that do not depend on how the server wakes the waiter:
//! riding out an outage once the server has answered, telling who holds the lock (read only when
//! someone will see it), when to look again unwoken, and sleeping while looking at the
//! cancellation.

use dlock_core::error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Fault;
use dlock_core::backend::{Waiting, CANCEL_CHECK, RETRY_FIRST, RETRY_MOST};
use dlock_core::lock::{Holder, LockRequest};

/// The connection a wait uses: `shared`, unless leases taken earlier renew on it (a handle each)
/// from another thread meanwhile. A wait holds its connection while each attempt and each slice
/// of its wait runs, and those leases must not queue behind it for longer than their lease: then
/// the wait, and the lease it takes, get a connection of their own, made by `new`.
pub fn connection_for_wait<C>(
    shared: &Arc<Mutex<C>>,
    new: impl FnOnce() -> error::Result<C>,
) -> error::Result<Arc<Mutex<C>>> {
    if Arc::strong_count(shared) > 1 {
        return Ok(Arc::new(Mutex::new(new()?)));
    }
    Ok(shared.clone())
}

/// How one wait's attempts have gone.
pub struct Tries {
    /// `postgres`, `mysql`: for messages.
    backend: &'static str,
    /// A server unreachable at the very start is an error (69), as for `try_acquire`; once it has
    /// answered (or, see `reached`, been reached), an outage is ridden out for the wait's budget.
    answered: bool,
    /// How long to wait before the next try while the server is unreachable.
    backoff: Duration,
    /// The holders last told to `Waiting::busy`.
    reported: Option<Vec<Holder>>,
}

impl Tries {
    pub fn new(backend: &'static str) -> Tries {
        Tries {
            backend,
            answered: false,
            backoff: RETRY_FIRST,
            reported: None,
        }
    }

    /// Whether the server has answered this wait yet.
    pub fn has_answered(&self) -> bool {
        self.answered
    }

    /// A connection to the server was made: an outage after this is ridden out as after an
    /// answer (an attempt that waits on the server may lose its connection before it answers).
    pub fn reached(&mut self) {
        self.answered = true;
    }

    /// The server answered an attempt: the lock is busy.
    pub fn answered(&mut self) {
        self.answered = true;
        self.backoff = RETRY_FIRST;
    }

    /// After a busy answer: the server is reachable, and `holders` (`None`: unreadable) hold the
    /// lock, told to `waiting` when they changed.
    pub fn report(&mut self, waiting: &Waiting, holders: Option<Vec<Holder>>) {
        waiting.reachable();
        if let Some(holders) = holders {
            if self.reported.as_ref() != Some(&holders) {
                waiting.busy(&holders);
                self.reported = Some(holders);
            }
        }
    }

    /// An attempt that failed on the server at `shown` (the connection already let go): `Ok`
    /// after a pause for an outage to be ridden out (told to `waiting`), otherwise the error for
    /// the user, after `leave` gave up the place in line.
    pub fn failed<C>(
        &mut self,
        waiting: &Waiting,
        request: &LockRequest,
        shown: &str,
        fault: Fault<C>,
        leave: impl FnOnce(),
    ) -> error::Result<()> {
        let doing = || format!("cannot acquire lock {:?}", request.name.as_str());
        match fault {
            Fault::Unreachable(why) if self.answered => {
                waiting.unreachable(&format!("{} at {shown}: {why}", self.backend));
                pause_until(waiting, Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(RETRY_MOST);
                Ok(())
            }
            // The server answered, busy as a held lock is: a waiter waits for a slot as long as
            // for the lock, and says why it gave up when its wait ends before the next try.
            Fault::Full(why) if waiting.slice(self.backoff) >= self.backoff => {
                waiting.unreachable(&format!("{} at {shown}: {why}", self.backend));
                pause_until(waiting, Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(RETRY_MOST);
                Ok(())
            }
            f @ (Fault::Unreachable(_) | Fault::Full(_)) => {
                Err(f.into_error(self.backend, shown).context(doing()))
            }
            f => {
                leave();
                Err(f.into_error(self.backend, shown).context(doing()))
            }
        }
    }
}

/// Who holds the lock, for `Tries::report`: read by `read` only when someone will see them
/// (`Waiting::wants_holders`), an empty list otherwise, at no cost; `None` when unreadable.
pub fn holders<E>(
    waiting: &Waiting,
    read: impl FnOnce() -> Result<Vec<Holder>, E>,
) -> Option<Vec<Holder>> {
    if !waiting.wants_holders() {
        return Some(Vec::new());
    }
    read().ok()
}

/// When to try again if nothing wakes the waiter: just after the first holder's lease (or
/// `--min-hold`) would run out, `lasts` from now (a holder that died tells nobody), and at least
/// every third of the waiter's own ttl (its place in line must be renewed).
pub fn recheck(ttl: Duration, lasts: Option<Duration>) -> Instant {
    let after = lasts.map_or(ttl / 3, |l| (l + Duration::from_millis(1)).min(ttl / 3));
    Instant::now() + after
}

/// Sleeps until `until`, looking at the cancellation every `CANCEL_CHECK`.
pub fn pause_until(waiting: &Waiting, until: Instant) {
    while !waiting.is_cancelled() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(waiting.slice(CANCEL_CHECK).min(left));
    }
}
