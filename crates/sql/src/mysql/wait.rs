//! Waiting for a turn: a place in `<prefix>queue`, and a wait on the lock key of the entry ahead
//! that blocks this one: its session holds that key while it holds or waits, so the key frees the
//! moment it releases, leaves the line or its session ends, and the waiter tries again at once. A
//! handoff costs the release, and a wake-up and an attempt per waiter it lets in; waiters further
//! back wait on keys still held, and send nothing.
//!
//! The wait on a key starts with one slice of `CANCEL_CHECK` inside the busy attempt's own call
//! (most waits on a busy lock end within it, and the call then tries again: one call for the
//! whole wait); a longer one goes on as one `GET_LOCK` until the next re-check, on a connection
//! of its own (the doorbell, made at the first long wait and kept for the next ones: the other
//! connection's calls are bounded by a fifth of the ttl, and its session holds this waiter's own
//! key), run on a helper thread while the caller's thread looks at the cancellation every
//! `CANCEL_CHECK`. So a waiter sends nothing while nothing changes,
//! however long it waits. A cancelled wait has its `GET_LOCK` ended by `KILL
//! QUERY` from the other connection and does not wait for the helper, which drops the doorbell.
//!
//! A blocker whose key is free although its entry stands (a row dlock did not write, a holder
//! whose session was cut) is not waited on: the waiter tries again when its lease or place would
//! run out, and at least every third of its own ttl, which renews its place in line. Nor is a
//! holder kept only by `--min-hold` after its command ended (its key freed with its release): the
//! server says so, and how long it is kept, and the waiter sleeps until then.

use dlock_core::error;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, within, Conn, Fault, Shared};
use super::lease::MyLease;
use super::recipe::{Blocker, Me, Recipe, Reply, Woken};
use crate::wait::{holders, pause_until, recheck, Tries};
use dlock_core::backend::{Lease, Waiting, CANCEL_CHECK, LEAVE_WITHIN};
use dlock_core::lock::LockRequest;
use dlock_sys::blocking;

/// Waits for `request`: `Ok(None)` when `waiting` is cancelled, leaving nothing in line.
pub fn wait(
    shared: &Shared,
    recipe: &Arc<Recipe>,
    me: &Me,
    request: &LockRequest,
    waiting: &Waiting,
) -> error::Result<Option<Box<dyn Lease>>> {
    let mut ticket: Option<i64> = None;
    let mut tries = Tries::new("mysql");
    // The key the last wait found free: named again by the next attempt, it is not held by its
    // entry, and waiting on it would spin.
    let mut freed: Option<String> = None;
    let mut doorbell: Option<Conn> = None;
    lock(shared).fit_ttl(request.ttl);
    loop {
        if waiting.is_cancelled() {
            leave(shared, recipe, request, ticket);
            return Ok(None);
        }
        let mut conn = lock(shared);
        let shown = conn.url().shown.clone();
        // The first slice of a wait on the blocker's key goes with the attempt, in the same call:
        // a connection cut during it (`KILL`) comes before any answer, from a server reached.
        let slice = waiting.slice(CANCEL_CHECK);
        let attempt = conn.ensure().and_then(|()| {
            tries.reached();
            recipe.acquire(&mut conn, request, me, true, ticket, slice)
        });
        let (blocker, spent, holders) = match attempt {
            Ok(Reply::Granted(token, sent, run)) => {
                drop(conn);
                waiting.reachable();
                return Ok(Some(Box::new(MyLease::new(
                    shared.clone(),
                    recipe.clone(),
                    request,
                    (token, run),
                    sent,
                ))));
            }
            Ok(Reply::Busy {
                ticket: kept,
                blocker,
                waited_out,
                found_free,
            }) => {
                tries.answered();
                ticket = kept;
                if found_free.is_some() {
                    freed = found_free;
                }
                let holders = holders(waiting, || {
                    recipe
                        .entries(&mut conn, request.name.as_str(), true, false)
                        .map(|h| h.into_iter().map(|(_, h)| h).collect::<Vec<_>>())
                });
                (blocker, waited_out, holders)
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
                freed = wait_for_key(
                    shared,
                    recipe,
                    waiting,
                    (&mut doorbell, spent),
                    request.ttl,
                    &key,
                    until,
                );
            }
            _ => {
                freed = None;
                pause_until(waiting, until);
            }
        }
    }
}

/// Waits until `key` frees (returned), `until` or a cancellation: a first slice on the shared
/// connection (unless `spent`: the attempt waited it already), then on the `doorbell`
/// connection (made here the first time), in one `GET_LOCK` run by a helper thread.
fn wait_for_key(
    shared: &Shared,
    recipe: &Arc<Recipe>,
    waiting: &Waiting,
    (doorbell, spent): (&mut Option<Conn>, bool),
    ttl: Duration,
    key: &str,
    until: Instant,
) -> Option<String> {
    // Most waits of a busy lock end within a slice: on the connection at hand, as a slice of
    // the wait, without a thread or a connection more.
    if doorbell.is_none() && !spent {
        let slice = waiting
            .slice(CANCEL_CHECK)
            .min(until.saturating_duration_since(Instant::now()));
        if slice.is_zero() || waiting.is_cancelled() {
            return None;
        }
        match recipe.wait_for_key(&mut lock(shared), key, slice) {
            Ok(Woken::Held) => {}
            woken => return freed(woken, key),
        }
    }
    let most = until.saturating_duration_since(Instant::now());
    if most.is_zero() || waiting.is_cancelled() {
        return None;
    }
    let mut bell = match doorbell.take() {
        Some(bell) => bell,
        // The longest wait: until a re-check, a third of the ttl at most.
        None => lock(shared).for_waits(ttl / 3),
    };
    let (send, answer) = channel();
    let (send_id, id) = channel();
    let (recipe_, key_) = (recipe.clone(), key.to_owned());
    // A thread that never takes a signal: the supervisor waits for them on its main thread. It
    // connects too (for the session's id, which a cancellation kills the wait by), so that a
    // server that accepts and never answers holds up the helper, not the deadline or a signal: a
    // connection that cannot be made is an outage, which the next attempt reports.
    let helper = blocking::thread("dlock-doorbell", move || {
        let woken = bell.session_id().and_then(|session| {
            let _ = send_id.send(session);
            recipe_.wait_for_key(&mut bell, &key_, most)
        });
        let _ = send.send((bell, woken));
    });
    if helper.is_err() {
        return None;
    }
    loop {
        match answer.recv_timeout(waiting.slice(CANCEL_CHECK)) {
            Ok((bell, woken)) => {
                // A broken doorbell is made again at the next long wait.
                if !matches!(woken, Err(Fault::Unreachable(_) | Fault::Full(_))) {
                    *doorbell = Some(bell);
                }
                return freed(woken, key);
            }
            Err(RecvTimeoutError::Timeout) if waiting.is_cancelled() => {
                // Best effort, within `LEAVE_WITHIN`: the helper ends with the statement, or when
                // dlock exits (as it does when it is still connecting).
                let Ok(id) = id.try_recv() else {
                    return None;
                };
                let _ = within(shared, LEAVE_WITHIN, move |conn| {
                    conn.call(|c| {
                        mysql::prelude::Queryable::query_drop(c, format!("KILL QUERY {id}"))
                    })
                });
                return None;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// What a wait on `key` tells the next attempt: the key it found free (not to be waited on again
/// if the same entry still blocks), or `None`.
fn freed(woken: Result<Woken, Fault>, key: &str) -> Option<String> {
    match woken {
        Ok(Woken::Freed) => Some(key.to_owned()),
        // Still held at the re-check, or a connection gone: the attempt reconnects, or reports
        // the outage.
        Ok(Woken::Held) | Err(Fault::Unreachable(_) | Fault::Full(_)) => None,
        // Refused (a deadlock among lock keys, which only a broken entry can cause): not waited
        // on again until the next re-check.
        Err(_) => Some(key.to_owned()),
    }
}

/// Gives up a place in line and its key (best effort: a place not renewed drops out within the
/// ttl, and a key goes with its session), within `LEAVE_WITHIN`: a server that stopped answering
/// must not hold up the exit at the deadline or at a signal by a whole call's timeout.
fn leave(shared: &Shared, recipe: &Arc<Recipe>, request: &LockRequest, ticket: Option<i64>) {
    if ticket.is_some() {
        let (recipe, name, owner) = (recipe.clone(), request.name.clone(), request.owner.clone());
        let _ = within(shared, LEAVE_WITHIN, move |conn| {
            recipe.leave(conn, &name, &owner, ticket)
        });
    }
}
