//! Waiting without a watch: a line of waiters in the lock's document, in order of arrival. Each
//! waiter's poll is the acquire script, which keeps its place (renews its entry's lease) and lets
//! it in when it fits beside the holders and every waiter ahead. The waiters at the head of the
//! line (those that would go in were the holders gone) poll every `HEAD_POLL`, so that one sees a
//! release within about that; the rest every `REST_POLL` (at least every third of the ttl, which
//! keeps their place alive), but the one just behind the head every `NEXT_POLL`, so that a long line
//! costs the node little: 50 waiters, about 20 + 4 + 48/2 requests a second.

use std::time::{Duration, Instant};

use serde_json::json;

use super::attempt::{attempt, millis, Me, Tried};
use super::lease::EsLease;
use super::recipe::{lock, Fault, Shared, LEAVE};
use dlock_core::backend::{Lease, Waiting, CANCEL_CHECK, LEAVE_WITHIN, RETRY_FIRST, RETRY_MOST};
use dlock_core::lock::{Holder, LockRequest};

/// How often the head of the line polls.
pub(super) const HEAD_POLL: Duration = Duration::from_millis(50);
/// How often the waiter just behind the head polls: it is the head once the head goes in, and
/// must learn so soon when the holders come and go quickly.
pub(super) const NEXT_POLL: Duration = Duration::from_millis(250);
/// How often the rest of the line polls (at most a third of the ttl).
pub(super) const REST_POLL: Duration = Duration::from_secs(2);

/// Waits for `request`: `Ok(None)` when `waiting` is cancelled, leaving nothing in line.
pub(super) fn wait(
    store: &Shared,
    request: &LockRequest,
    me: &Me,
    waiting: &Waiting,
) -> anyhow::Result<Option<Box<dyn Lease>>> {
    let shown = lock(store).shown.clone();
    let mut joined = false;
    let mut answered = false;
    let mut backoff = RETRY_FIRST;
    let mut reported: Option<Vec<Holder>> = None;
    let mut place: Option<usize> = None;
    let give_up = || waiting.is_cancelled();
    loop {
        if waiting.is_cancelled() {
            leave(store, request, joined);
            return Ok(None);
        }
        let sent = Instant::now();
        let timeout = lock(store).connect_timeout();
        // The first attempt has the whole connect timeout, as `try_acquire` has, whatever
        // `--wait` leaves (a stop signal still ends it): a wait shorter than one call still
        // learns who holds the lock. The later ones end with the wait.
        let (budget, give_up): (_, &dyn Fn() -> bool) = match answered {
            false => (timeout, &|| false),
            true => (waiting.slice(timeout), &give_up),
        };
        let doc = match attempt(store, request, me, true, Some(budget), give_up) {
            Ok(Tried::Granted(token)) => {
                waiting.reachable();
                return Ok(Some(Box::new(EsLease::granted(
                    store.clone(),
                    request,
                    token,
                    sent,
                ))));
            }
            Ok(Tried::Busy(doc)) => doc,
            Err(Fault::Stopped) => continue,
            Err(Fault::Unreachable(why)) if answered => {
                waiting.unreachable(&format!("elasticsearch at {shown}: {why}"));
                pause_until(waiting, Instant::now() + backoff);
                backoff = (backoff * 2).min(RETRY_MOST);
                continue;
            }
            Err(f) => {
                leave(store, request, joined);
                return Err(f
                    .into_error(&shown)
                    .context(format!("cannot acquire lock {:?}", request.name.as_str())));
            }
        };
        answered = true;
        joined = true;
        backoff = RETRY_FIRST;
        waiting.reachable();
        let holders = if waiting.wants_holders() {
            doc.holders()
        } else {
            Vec::new()
        };
        if reported.as_ref() != Some(&holders) {
            waiting.busy(&holders);
            reported = Some(holders);
        }
        let found = doc.place(&request.owner, request.mode);
        let ahead = found.map(|(at, _)| at);
        if ahead != place {
            if let Some(at) = ahead {
                waiting.in_line(at);
            }
            place = ahead;
        }
        let poll = match found {
            Some((_, true)) => HEAD_POLL,
            Some((1, false)) => NEXT_POLL,
            _ => REST_POLL,
        };
        let poll = poll.min(request.ttl / 3).max(HEAD_POLL);
        pause_until(waiting, Instant::now() + poll);
    }
}

/// Gives up a place in line (best effort: a place not renewed drops out within the ttl anyway).
fn leave(store: &Shared, request: &LockRequest, joined: bool) {
    if !joined {
        return;
    }
    let params = json!({"owner": request.owner, "grace": millis(super::recipe::GRACE)});
    let mut store = lock(store);
    let budget = store.connect_timeout().min(LEAVE_WITHIN);
    let _ = store.update(&request.name, LEAVE, params, false, budget);
}

/// Sleeps until `until`, looking at the cancellation every `CANCEL_CHECK`.
fn pause_until(waiting: &Waiting, until: Instant) {
    while !waiting.is_cancelled() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(waiting.slice(CANCEL_CHECK).min(left));
    }
}
