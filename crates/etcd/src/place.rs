//! Our place in a lock's queue: the key we put under the lock's prefix and the lease it lives by.
//! `acquisition` takes it, `wait` waits with it, `lease` holds it and `kept` moves its key to the
//! min-hold's lease and back.

use std::time::{Duration, Instant};

use super::runs::OurRun;

/// Our key in the queue and the lease it lives by.
pub(super) struct Place {
    pub(super) key: String,
    pub(super) lease: i64,
    /// The key's create revision: its place in the queue.
    pub(super) revision: i64,
    /// The fencing token: the create revision of a key that owned the lock as it joined the
    /// line, else the revision of the write that took the grant (`Acquisition::take_token`).
    pub(super) token: i64,
    /// By this side's clock, until when the lease surely stands.
    pub(super) stands_until: Instant,
    /// The TTL granted, in seconds.
    pub(super) ttl: i64,
    /// The run, for its record (runs.rs).
    pub(super) run: OurRun,
}

/// The longest lease a server's answer is believed for: a year and a day, above the longest
/// `--ttl` and `--min-hold` dlock asks for. A server answering a TTL beyond it (or below zero) is
/// taken at this bound, never added to a clock unchecked.
const LONGEST_TTL_SECS: i64 = 366 * 24 * 3600;

/// A TTL in seconds as a server answered it, within 0 and `LONGEST_TTL_SECS`.
pub(super) fn believed_ttl(answered: i64) -> i64 {
    answered.clamp(0, LONGEST_TTL_SECS)
}

/// Until when a lease of `ttl` seconds (as the server answered it), asked for at `sent`, surely
/// stands by this side's clock: less a margin for clocks that run at different rates
/// (`lease_clock::drift`) and for a loaded machine, where the holder's supervisor may wake tens
/// of milliseconds late to stop its command (a twentieth of the lease, 50 ms at least; the
/// partition test saw a holder stop 52 ms after a lease etcd ended on time).
pub(super) fn stands_until(sent: Instant, ttl: i64) -> Instant {
    let secs = u64::try_from(believed_ttl(ttl)).unwrap_or(0);
    let lease = Duration::from_secs(secs);
    let margin = dlock_core::backend::lease_clock::drift(lease) + (lease / 20).max(LOADED_MACHINE);
    sent.checked_add(lease.saturating_sub(margin))
        .unwrap_or(sent)
}

/// The least time a holder's stop is planned ahead of its lease's end for a loaded machine.
const LOADED_MACHINE: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_from_the_server_is_bounded_before_it_meets_a_clock() {
        let now = Instant::now();
        // 3 s: less 1% + 2 ms of drift and 150 ms (a twentieth) for a loaded machine.
        assert_eq!(
            stands_until(now, 3),
            now + Duration::from_millis(3000 - 32 - 150)
        );
        assert_eq!(stands_until(now, -5), now);
        let longest = Duration::from_secs(LONGEST_TTL_SECS as u64);
        assert!(stands_until(now, i64::MAX) <= now + longest);
        assert_eq!(believed_ttl(i64::MIN), 0);
    }
}
