//! Waiting for a turn: a place in `<prefix>queue`, and a LISTEN on the waiter's own channel, on
//! which a release (or a waiter leaving) notifies exactly the waiters it lets in. Between
//! notifications the waiter sends nothing, except one re-check when the first holder's lease
//! would run out or a third of its own ttl has passed (which also renews its place in line).

use dlock_core::error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, Shared};
use super::lease::PgLease;
use super::recipe::{Me, Recipe, Reply};
use crate::wait::{holders, recheck, Tries};
use dlock_core::backend::{Lease, Waiting, CANCEL_CHECK};
use dlock_core::lock::LockRequest;

/// Waits for `request`: `Ok(None)` when `waiting` is cancelled, leaving nothing in line.
pub fn wait(
    shared: &Shared,
    recipe: &Arc<Recipe>,
    me: &Me,
    request: &LockRequest,
    waiting: &Waiting,
) -> error::Result<Option<Box<dyn Lease>>> {
    let channel = recipe.channel(&request.owner);
    let mut ticket: Option<i64> = None;
    let mut listening: Option<u64> = None;
    let mut tries = Tries::new("postgres");
    loop {
        if waiting.is_cancelled() {
            leave(shared, recipe, request, ticket);
            return Ok(None);
        }
        let sent = Instant::now();
        let mut conn = lock(shared);
        let budget = conn.connect_timeout();
        let answered = tries.has_answered();
        let result = conn.ensure().and_then(|()| {
            // First, a lock nobody holds or waits for (the common case) is taken in plain SQL,
            // with no place in line and no LISTEN; else the attempt that follows at once takes
            // a place, with the LISTEN in force before it (so a release after it is heard).
            if !answered && ticket.is_none() {
                if let Some(granted) = recipe.acquire_free(&mut conn, budget, request, me)? {
                    return Ok(granted);
                }
            }
            let generation = conn.generation;
            let listen_now = listening != Some(generation);
            let listen = listen_now.then_some(channel.as_str());
            // An attempt with a place in line follows a wait: it reads the group record too.
            let waited = ticket.is_some();
            let reply =
                recipe.acquire(&mut conn, budget, request, me, true, ticket, listen, waited);
            if reply.is_ok() && listen_now && conn.generation == generation {
                listening = Some(generation);
            }
            reply
        });
        let shown = conn.url().shown.clone();
        let (expires_in, holders) = match result {
            Ok(Reply::Granted {
                token,
                free,
                run,
                group,
            }) => {
                drop(conn);
                waiting.reachable();
                return Ok(Some(Box::new(PgLease::granted(
                    shared.clone(),
                    recipe.clone(),
                    request,
                    (token, free, run, group),
                    sent,
                ))));
            }
            Ok(Reply::Busy {
                ticket: kept,
                expires_in,
            }) => {
                tries.answered();
                ticket = kept;
                if listening != Some(conn.generation) {
                    // In line now; listen, and look again, at once.
                    continue;
                }
                let holders = holders(waiting, || {
                    recipe
                        .entries(&mut conn, budget, request.name.as_str(), true)
                        .map(super::recipe::holders_of)
                });
                (expires_in, holders)
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
        // Sleep until told, or until it is time to look again unwoken.
        let until = recheck(request.ttl, expires_in);
        loop {
            if waiting.is_cancelled() {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let slice = waiting.slice(CANCEL_CHECK).min(left);
            match lock(shared).next_note(slice) {
                Ok(None) => {}
                // A notification, or a connection gone: try (or reconnect) now.
                Ok(Some(_)) | Err(_) => break,
            }
        }
    }
}

/// Gives up a place in line (best effort: a place not renewed drops out within the ttl anyway).
fn leave(shared: &Shared, recipe: &Recipe, request: &LockRequest, ticket: Option<i64>) {
    if let Some(ticket) = ticket {
        let mut conn = lock(shared);
        let budget = conn.connect_timeout().min(Duration::from_secs(1));
        let _ = recipe.leave(&mut conn, budget, &request.name, ticket);
    }
}
