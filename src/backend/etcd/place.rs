//! Our place in a lock's queue: the key we put under the lock's prefix and the lease it lives by.
//! `acquisition` takes it, `wait` waits with it, `lease` holds it and `kept` moves its key to the
//! min-hold's lease and back.

use std::time::Instant;

use super::runs::OurRun;

/// Our key in the queue and the lease it lives by.
pub(super) struct Place {
    pub(super) key: String,
    pub(super) lease: i64,
    /// The key's create revision: its place in the queue and the fencing token.
    pub(super) revision: i64,
    /// By this side's clock, until when the lease surely stands.
    pub(super) stands_until: Instant,
    /// The TTL granted, in seconds.
    pub(super) ttl: i64,
    /// The run, for its record (runs.rs).
    pub(super) run: OurRun,
}
