//! Connecting within one deadline, and ending at once on a stop signal.
//!
//! The `mysql` crate's timeouts bound each read: a server that drips its greeting a byte at a
//! time restarts that timeout with every byte, so TCP, greeting, TLS and authentication together
//! could last as long as the server likes; and the crate retries a read that a signal interrupted,
//! so SIGTERM could not end it either. The connection is made on a helper thread instead, while
//! the caller waits for it up to the connect timeout, looking at the caller's `Stop` every
//! `CANCEL_CHECK`. A connection given up on is left to its thread, which drops it when it is made
//! or fails (by the per-read timeout, or the server's close); dlock then exits or tries again.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use dlock_core::backend::stop::{Stop, STOPPED};
use dlock_core::backend::CANCEL_CHECK;
use dlock_sys::blocking;

/// Why no connection was made: the client's error, or why dlock gave up on it (a stop, the
/// deadline), in words. (connection.rs makes either a `Fault`.)
pub enum NotMade {
    Client(mysql::Error),
    GaveUp(String),
}

/// Connects with `opts` within `within` in all, unless `stop` says to give up first.
pub fn connect_within(
    opts: mysql::OptsBuilder,
    within: Duration,
    stop: &Stop,
) -> Result<mysql::Conn, NotMade> {
    let deadline = Instant::now() + within;
    let (tx, rx) = mpsc::sync_channel(1);
    // Signals are the supervisor's (and the waiting caller's): never this thread's.
    blocking::thread("dlock-mysql-connect", move || {
        // Nobody waits any more: the connection is dropped, and the session with it.
        let _ = tx.send(mysql::Conn::new(opts));
    })
    .map_err(|e| NotMade::GaveUp(format!("cannot start a thread to connect: {e}")))?;
    // Bounded by the deadline: every turn waits until the next look or the deadline.
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(CANCEL_CHECK)) {
            Ok(result) => return result.map_err(NotMade::Client),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(NotMade::GaveUp("the connecting thread failed".into()))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if stop.requested() {
            return Err(NotMade::GaveUp(STOPPED.into()));
        }
        if Instant::now() >= deadline {
            return Err(NotMade::GaveUp(format!(
                "no answer within {}",
                dlock_core::text::duration(within)
            )));
        }
    }
}
