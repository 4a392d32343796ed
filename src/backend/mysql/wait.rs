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
use std::time::Instant;

use super::connection::{lock, Fault, Shared};
use super::lease::MyLease;
use super::recipe::{Blocker, Me, Recipe, Reply, Woken};
use crate::backend::sql::wait::{holders, pause_until, recheck, Tries};
use crate::backend::{Lease, Waiting, CANCEL_CHECK};
use crate::lock::LockRequest;

/// Waits for `request`: `Ok(None)` when `waiting` is cancelled, leaving nothing in line.
pub fn wait(
    shared: &Shared,
    recipe: &Arc<Recipe>,
    me: &Me,
    request: &LockRequest,
    waiting: &Waiting,
) -> anyhow::Result<Option<Box<dyn Lease>>> {
    let mut ticket: Option<i64> = None;
    let mut tries = Tries::new("mysql");
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
                tries.answered();
                ticket = kept;
                let holders = holders(waiting, || {
                    recipe
                        .entries(&mut conn, request.name.as_str(), true, false)
                        .map(|h| h.into_iter().map(|(_, h)| h).collect::<Vec<_>>())
                });
                (blocker, holders)
            }
            Err(f) => {
                drop(conn);
                tries.failed(waiting, request, &shown, f, || {
                    leave(shared, recipe, request, ticket)
                })?;
                continue;
            }
        };
        drop(conn);
        tries.report(waiting, holders);
        let until = recheck(request.ttl, blocker.as_ref().map(|b| b.lasts));
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
