//! Waiting without a watch: a line of waiters in the lock's document, in order of arrival. Each
//! waiter's poll is the acquire script, which keeps its place (renews its entry's lease) and lets
//! it in when it fits beside the holders and every waiter ahead. Each waiter times how fast its
//! own place moves (`Pace`). The head of the line (those that would go in were the holders gone)
//! polls every `HEAD_POLL`, so that it sees a release within about that, and twice as often as
//! its place moved, down to `FAST_HEAD_POLL`, in a line that moves fast. The rest poll after half
//! the time their place should take to reach the head at that pace, no sooner than
//! `FAST_HEAD_POLL` for each place ahead, no later than `REST_POLL` (`NEXT_POLL` just behind the
//! head; a third of the ttl at most, which keeps their place alive). A line that stands still
//! costs the node little (50 waiters, about 20 + 4 + 48/2 requests a second); one that moves is
//! polled about as often as it moves, so that the next waiter learns it is the head soon after
//! the head went in.

use dlock_core::error;
use std::time::{Duration, Instant};

use serde_json::json;

use super::attempt::{attempt, millis, Me, Tried};
use super::lease::EsLease;
use super::recipe::{lock, Fault, Shared, LEAVE};
use dlock_core::backend::{Lease, Waiting, CANCEL_CHECK, LEAVE_WITHIN, RETRY_FIRST, RETRY_MOST};
use dlock_core::lock::{Holder, LockRequest};

/// How often the head of the line polls; twice as often as its line moves, down to
/// `FAST_HEAD_POLL`, while the line moves faster than one place every two `HEAD_POLL`s.
pub(super) const HEAD_POLL: Duration = Duration::from_millis(50);
const FAST_HEAD_POLL: Duration = Duration::from_millis(20);
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
) -> error::Result<Option<Box<dyn Lease>>> {
    let shown = lock(store).shown.clone();
    let mut joined = false;
    let mut answered = false;
    let mut backoff = RETRY_FIRST;
    let mut reported: Option<Vec<Holder>> = None;
    let mut place: Option<usize> = None;
    let mut pace = Pace::default();
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
            Some((at, head)) => pace.next_poll(at, head, Instant::now()),
            None => REST_POLL,
        };
        let poll = poll.min(request.ttl / 3).max(FAST_HEAD_POLL);
        pause_until(waiting, Instant::now() + poll);
    }
}

/// How fast a waiter's own place in line moves: from its first place seen to its latest.
#[derive(Debug, Default)]
struct Pace {
    /// When the waiter first saw its place, and that place.
    first: Option<(Instant, usize)>,
}

impl Pace {
    /// The wait until the next poll of a waiter `at` places from the head (`head`: it is the
    /// head), seen `now`: half the time its place should take to reach the head at the pace seen
    /// so far (a place that has not moved is taken to move once in the time waited), no sooner
    /// than `FAST_HEAD_POLL` for each place ahead and no later than `REST_POLL` (`NEXT_POLL` just
    /// behind the head); the head's, half the time a place took, within `FAST_HEAD_POLL` and
    /// `HEAD_POLL`.
    fn next_poll(&mut self, at: usize, head: bool, now: Instant) -> Duration {
        let (since, first_at) = *self.first.get_or_insert((now, at));
        let moved = first_at.saturating_sub(at).max(1);
        let per_place = now.saturating_duration_since(since) / moved as u32;
        if head {
            return (per_place / 2).clamp(FAST_HEAD_POLL, HEAD_POLL);
        }
        let (at, most) = (
            at.max(1) as u32,
            if at <= 1 { NEXT_POLL } else { REST_POLL },
        );
        (per_place * at / 2).max(FAST_HEAD_POLL * at).min(most)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The next poll of a waiter first seen at `first` (not the head), then at `(at, head)`
    /// `ms` later.
    fn after(first: usize, at: usize, head: bool, ms: u64) -> Duration {
        let start = Instant::now();
        let mut pace = Pace::default();
        pace.next_poll(first, false, start);
        pace.next_poll(at, head, start + Duration::from_millis(ms))
    }

    #[test]
    fn a_line_that_moves_fast_is_polled_often_and_one_that_stands_still_seldom() {
        // Seen at place 6: first polled again after 6 x 20 ms.
        assert_eq!(
            Pace::default().next_poll(6, false, Instant::now()),
            Duration::from_millis(120)
        );
        // From place 6 to the head in 300 ms: 50 ms a place, so every 25 ms; from place 10,
        // 30 ms a place: FAST_HEAD_POLL.
        assert_eq!(after(6, 0, true, 300), Duration::from_millis(25));
        assert_eq!(after(10, 0, true, 300), FAST_HEAD_POLL);
        // From place 6 to 1 in 300 ms: 60 ms a place, so 30 ms. To place 3: 100 ms a place,
        // 150 ms; from place 13 to 3, 30 ms a place would be 45 ms: 60 ms at least (3 x 20 ms).
        assert_eq!(after(6, 1, false, 300), Duration::from_millis(30));
        assert_eq!(after(6, 3, false, 300), Duration::from_millis(150));
        assert_eq!(after(13, 3, false, 300), Duration::from_millis(60));
        // From place 6 to 4 in 300 ms: 150 ms a place, 4 places: 300 ms.
        assert_eq!(after(6, 4, false, 300), Duration::from_millis(300));
        // Not moved for 10 s: the rest of the line polls every REST_POLL, the next every
        // NEXT_POLL, the head every HEAD_POLL.
        assert_eq!(after(7, 7, false, 10_000), REST_POLL);
        assert_eq!(after(1, 1, false, 10_000), NEXT_POLL);
        let start = Instant::now();
        let mut head = Pace::default();
        head.next_poll(0, true, start);
        assert_eq!(
            head.next_poll(0, true, start + Duration::from_secs(10)),
            HEAD_POLL
        );
    }
}
