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

/// The longest lease a server's answer is ever believed for: a year and a day, above the longest
/// `--ttl` and `--min-hold` dlock asks for. A server answering a TTL beyond it (or below zero) is
/// taken at this bound, never added to a clock unchecked.
pub(super) const LONGEST_TTL_SECS: i64 = 366 * 24 * 3600;

/// A TTL in seconds as a server answered it, believed within 0 and what dlock `asked` for, or
/// etcd's shortest lease if that is longer (`SHORTEST_LEASE_SECS`; never past `LONGEST_TTL_SECS`).
/// A holder that believed a server's word beyond that would hold on for that long after the
/// server last answered (a year, for one answering i64::MAX). Believing less is safe: the lease
/// then ends by this side's count first.
pub(super) fn believed_ttl(answered: i64, asked: i64) -> i64 {
    let most = asked.clamp(SHORTEST_LEASE_SECS, LONGEST_TTL_SECS);
    answered.clamp(0, most)
}

/// The shortest lease a default etcd grants (its minimum TTL, 1.5 election timeouts of 1 s,
/// rounded up), whatever shorter one was asked for: it is what a sub-2s `--ttl` really gets, and
/// what renewals are counted against (a keep-alive taking 700 ms on a loaded machine must not end
/// such a lease by dlock's count when etcd keeps it 2 s). An etcd with a longer election timeout
/// grants longer leases still; dlock counts on this much of them.
const SHORTEST_LEASE_SECS: i64 = 2;

/// Until when a lease of `ttl` seconds (as the server answered it), asked for at `sent`, surely
/// stands by this side's clock: less a margin for clocks that run at different rates
/// (`lease_clock::drift`) and for a loaded machine, where the holder's supervisor may wake tens
/// of milliseconds late to stop its command (a twentieth of the lease, 50 ms at least; the
/// partition test saw a holder stop 52 ms after a lease etcd ended on time).
pub(super) fn stands_until(sent: Instant, ttl: i64) -> Instant {
    let secs = u64::try_from(believed_ttl(ttl, LONGEST_TTL_SECS)).unwrap_or(0);
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
        assert_eq!(believed_ttl(i64::MIN, 3), 0);
        assert_eq!(believed_ttl(i64::MAX, 3), 3);
        assert_eq!(
            believed_ttl(i64::MAX, 1),
            2,
            "a default etcd's shortest lease"
        );
        assert_eq!(believed_ttl(8, 1), 2);
        assert_eq!(believed_ttl(2, i64::MAX), 2);
    }
}
