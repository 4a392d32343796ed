//! What a forced failover behind Sentinel does to a held lock and its waiter with `--replicas`
//! (every replica): the README's guarantee, on a real master, two replicas and three sentinels
//! (failover_case.rs). The cases without that guarantee are measured by `cargo bench --bench
//! failover`.

use crate::redis::failover_case::{failover_case, Failover, Watch};

/// The README's guarantee across a failover: with `--replicas N`, N = all replicas, and the
/// `--ttl 30s`, the holder keeps its lock, the waiter gets in only after it, with a higher token.
#[test]
fn with_all_replicas_a_forced_failover_keeps_the_lock_from_the_waiter() {
    let figures = failover_case(
        Failover::Forced,
        &["--replicas", "2", "--ttl", "30s"],
        Watch::UntilRenewedOnTheNewMaster,
    );
    assert_eq!(figures.holder_status, 0, "{figures:?}");
    assert_eq!(figures.waiter_in, None, "{figures:?}");
    assert!(figures.waiter_after_release, "{figures:?}");
    assert!(figures.tokens.1 > figures.tokens.0, "{figures:?}");
}
