//! Waiting for a turn: a place in `<prefix>queue`, and a wait on the lock key of the entry ahead
//! that blocks this one (`GET_LOCK` on it, in slices of `CANCEL_CHECK`): its session holds that
//! key while it holds or waits, so the key frees the moment it releases, leaves the line or its
//! session ends, and the waiter tries again at once. A handoff costs the release, and a wake-up
//! and an attempt per waiter it lets in; waiters further back wait on keys still held. A blocker
//! whose key is free although its entry stands (a row dlock did not write, a holder whose session
//! was cut) is not waited on: the waiter tries again when its lease or place would run out, and
//! at least every third of its own ttl, which renews its place in line. Nor is a holder kept only
//! by `--min-hold` after its command ended (its key freed with its release): the server says so,
//! and how long it is kept, and the waiter sleeps until then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, Fault, Shared};
use super::lease::MyLease;
use super::recipe::{Blocker, Me, Recipe, Reply, Woken};
use crate::backend::{Lease, Waiting, CANCEL_CHECK, RETRY_FIRST, RETRY_MOST};
use crate::lock::{Holder, LockRequest};

/// Waits for `request`: `Ok(None)` when `waiting` is cancelled, leaving nothing in line.
pub fn wait(
    shared: &Shared,
    recipe: &Arc<Recipe>,
    me: &Me,
    request: &LockRequest,
    waiting: &Waiting,
) -> anyhow::Result<Option<Box<dyn Lease>>> {
    let mut ticket: Option<i64> = None;
    let mut backoff = RETRY_FIRST;
    let mut reported: Option<Vec<Holder>> = None;
    // A server unreachable at the very start is an error (69), as for `try_acquire`; once it has
    // answered, an outage is ridden out for the wait's budget.
    let mut answered = false;
    // The key the last wait found free: named again by the next attempt, it is not held by its
    // entry, and waiting on it would spin.
    let mut freed: Option<String> = None;
    lock(shared).fit_ttl(request.ttl);
    loop {
        if waiting.is_cancelled() {
            leave(shared, recipe, request, ticket);
            return Ok(None);
        }
        let mut conn = lock(shared);
        let shown = conn.url().shown.clone();
        let (blocker, holders) = match recipe.acquire(&mut conn, request, me, true, ticket) {
            Ok(Reply::Granted(token, sent)) => {
                drop(conn);
                waiting.reachable();
                return Ok(Some(Box::new(MyLease::new(
                    shared.clone(),
                    recipe.clone(),
                    request,
                    token,
                    sent,
                ))));
            }
            Ok(Reply::Busy {
                ticket: kept,
                blocker,
            }) => {
                answered = true;
                if let Some(new) = kept.filter(|&k| Some(k) != ticket) {
                    // A new place. Best effort: status shows one whose writing failed with
                    // its mode only.
                    let _ = recipe.joined(&mut conn, request, me, new);
                }
                ticket = kept;
                backoff = RETRY_FIRST;
                let holders = recipe
                    .entries(&mut conn, request.name.as_str(), true, false)
                    .map(|h| h.into_iter().map(|(_, h)| h).collect::<Vec<_>>());
                (blocker, holders)
            }
            Err(Fault::Unreachable(why)) if !answered => {
                let e = conn.error(Fault::Unreachable(why));
                drop(conn);
                return Err(e.context(format!("cannot acquire lock {:?}", request.name.as_str())));
            }
            Err(Fault::Unreachable(why)) => {
                drop(conn);
                waiting.unreachable(&format!("mysql at {shown}: {why}"));
                pause(waiting, backoff);
                backoff = (backoff * 2).min(RETRY_MOST);
                continue;
            }
            Err(f) => {
                let e = conn.error(f);
                drop(conn);
                leave(shared, recipe, request, ticket);
                return Err(e.context(format!("cannot acquire lock {:?}", request.name.as_str())));
            }
        };
        drop(conn);
        waiting.reachable();
        if let Ok(holders) = holders {
            if reported.as_ref() != Some(&holders) {
                waiting.busy(&holders);
                reported = Some(holders);
            }
        }
        let recheck = blocker.as_ref().map_or(request.ttl / 3, |b| {
            (b.lasts + Duration::from_millis(1)).min(request.ttl / 3)
        });
        let until = Instant::now() + recheck;
        match blocker {
            Some(Blocker { key, gone, .. }) if !gone && freed.as_ref() != Some(&key) => {
                freed = wait_for_key(shared, recipe, waiting, &key, until);
            }
            _ => {
                freed = None;
                pause_until(waiting, until);
            }
        }
    }
}

/// Waits on `key` in slices until it frees (returned), `until` or a cancellation.
fn wait_for_key(
    shared: &Shared,
    recipe: &Recipe,
    waiting: &Waiting,
    key: &str,
    until: Instant,
) -> Option<String> {
    loop {
        if waiting.is_cancelled() {
            return None;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let slice = waiting.slice(CANCEL_CHECK).min(left);
        match recipe.wait_for_key(&mut lock(shared), key, slice) {
            Ok(Woken::Held) => {}
            Ok(Woken::Freed) => return Some(key.to_owned()),
            // A connection gone: the attempt reconnects, or reports the outage.
            Err(Fault::Unreachable(_)) => return None,
            // Refused (a deadlock among lock keys, which only a broken entry can cause): not
            // waited on again until the next re-check.
            Err(_) => return Some(key.to_owned()),
        }
    }
}

/// Gives up a place in line and its key (best effort: a place not renewed drops out within the
/// ttl, and a key goes with its session).
fn leave(shared: &Shared, recipe: &Recipe, request: &LockRequest, ticket: Option<i64>) {
    if ticket.is_some() {
        let _ = recipe.leave(&mut lock(shared), &request.name, &request.owner, ticket);
    }
}

/// Sleeps `most`, looking at the cancellation every `CANCEL_CHECK`.
fn pause(waiting: &Waiting, most: Duration) {
    pause_until(waiting, Instant::now() + most)
}

fn pause_until(waiting: &Waiting, until: Instant) {
    while !waiting.is_cancelled() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(waiting.slice(CANCEL_CHECK).min(left));
    }
}
