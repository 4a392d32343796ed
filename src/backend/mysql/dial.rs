//! Connecting within one deadline, and ending at once on a stop signal.
//!
//! The `mysql` crate's timeouts bound each read: a server that drips its greeting a byte at a
//! time restarts that timeout with every byte, so TCP, greeting, TLS and authentication together
//! could last as long as the server likes; and the crate retries a read that a signal interrupted,
//! so SIGTERM could not end it either. The connection is made on a helper thread instead, while
//! the caller waits for it up to the connect timeout, looking for a stop signal every
//! [`STOP_POLL`]. A connection given up on is left to its thread, which drops it when it is made
//! or fails (by the per-read timeout, or the server's close); dlock then exits or tries again.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::connection::Fault;
use crate::signal::interrupt;

/// How often a caller waiting for a connection looks for a stop signal.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Connects with `opts` within `within` in all; `Err` with the library's error if it failed,
/// or the fault if it took too long or a stop signal came.
pub fn connect_within(
    opts: mysql::OptsBuilder,
    within: Duration,
) -> Result<Result<mysql::Conn, mysql::Error>, Fault> {
    let deadline = Instant::now() + within;
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("mysql-connect".into())
        .spawn(move || {
            // Signals are the supervisor's (and the waiting caller's): never this thread's.
            crate::signal::mask::block_all_in_this_thread();
            // Nobody waits any more: the connection is dropped, and the session with it.
            let _ = tx.send(mysql::Conn::new(opts));
        })
        .map_err(|e| Fault::Unreachable(format!("cannot start a thread to connect: {e}")))?;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left.min(STOP_POLL)) {
            Ok(result) => return Ok(result),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Fault::Unreachable("the connection attempt failed".into()))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if interrupt::caught().is_some() {
            return Err(Fault::Unreachable("interrupted".into()));
        }
        if Instant::now() >= deadline {
            return Err(Fault::Unreachable(format!(
                "no answer within {}",
                crate::text::duration(within)
            )));
        }
    }
}
