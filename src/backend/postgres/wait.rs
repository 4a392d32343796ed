//! Waiting for a turn: a place in `<prefix>queue`, and a LISTEN on the waiter's own channel, on
//! which a release (or a waiter leaving) notifies exactly the waiters it lets in. Between
//! notifications the waiter sends nothing, except one re-check when the first holder's lease
//! would run out or a third of its own ttl has passed (which also renews its place in line).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{lock, Fault, Shared};
use super::lease::PgLease;
use super::recipe::{Me, Recipe, Reply};
use crate::backend::{Lease, Waiting, RETRY_FIRST, RETRY_MOST};
use crate::lock::{Holder, LockRequest};

/// How often a waiter looks at its cancellation while nothing happens.
const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// Waits for `request`: `Ok(None)` when `waiting` is cancelled, leaving nothing in line.
pub fn wait(
    shared: &Shared,
    recipe: &Arc<Recipe>,
    me: &Me,
    request: &LockRequest,
    waiting: &Waiting,
) -> anyhow::Result<Option<Box<dyn Lease>>> {
    let channel = recipe.channel(&request.owner);
    let mut ticket: Option<i64> = None;
    let mut listening: Option<u64> = None;
    let mut backoff = RETRY_FIRST;
    let mut reported: Option<Vec<Holder>> = None;
    // A server unreachable at the very start is an error (69), as for `try_acquire`; once it has
    // answered, an outage is ridden out for the wait's budget.
    let mut answered = false;
    loop {
        if waiting.is_cancelled() {
            leave(shared, recipe, request, ticket);
            return Ok(None);
        }
        let sent = Instant::now();
        let mut conn = lock(shared);
        let budget = conn.connect_timeout();
        let result = conn.ensure().and_then(|()| {
            // The LISTEN goes with the attempts after the first: a free lock (the common case)
            // costs no LISTEN, and a release between the first attempt and the LISTEN is seen
            // by the attempt that goes with it.
            let generation = conn.generation;
            let listen_now = answered && listening != Some(generation);
            let listen = listen_now.then_some(channel.as_str());
            let reply = recipe.acquire(&mut conn, budget, request, me, true, ticket, listen);
            if reply.is_ok() && listen_now && conn.generation == generation {
                listening = Some(generation);
            }
            reply
        });
        let shown = conn.url().shown.clone();
        let (expires_in, holders) = match result {
            Ok(Reply::Granted(token)) => {
                drop(conn);
                waiting.reachable();
                return Ok(Some(Box::new(PgLease::granted(
                    shared.clone(),
                    recipe.clone(),
                    request,
                    token,
                    sent,
                ))));
            }
            Ok(Reply::Busy {
                ticket: kept,
                expires_in,
            }) => {
                answered = true;
                ticket = kept;
                backoff = RETRY_FIRST;
                if listening != Some(conn.generation) {
                    // In line now; listen, and look again, at once.
                    continue;
                }
                let holders = recipe
                    .entries(&mut conn, budget, request.name.as_str(), true)
                    .map(super::recipe::holders_of);
                (expires_in, holders)
            }
            Err(Fault::Unreachable(why)) if !answered => {
                let e = conn.error(Fault::Unreachable(why));
                drop(conn);
                return Err(e.context(format!("cannot acquire lock {:?}", request.name.as_str())));
            }
            Err(Fault::Unreachable(why)) => {
                drop(conn);
                waiting.unreachable(&format!("postgres at {shown}: {why}"));
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
        // Sleep until told, or until the first lease would have run out (a holder that died
        // tells nobody), or a third of our ttl (our place in line must be renewed).
        let recheck = expires_in.map_or(request.ttl / 3, |e| {
            (e + Duration::from_millis(1)).min(request.ttl / 3)
        });
        let until = Instant::now() + recheck;
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

/// Sleeps `most`, looking at the cancellation every `CANCEL_CHECK`.
fn pause(waiting: &Waiting, most: Duration) {
    let until = Instant::now() + most;
    while !waiting.is_cancelled() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(waiting.slice(CANCEL_CHECK).min(left));
    }
}
