//! A failover behind Sentinel with a lock held and a waiter, measured for the redis backend's
//! table (crates/redis/README.md, Replication): when the new master was named, when the demoted one was
//! back as a replica, when the holder lost its lock and the waiter got in, with and without
//! `--replicas`, a forced failover (`SENTINEL FAILOVER`) and a frozen master (SIGSTOP). Each case
//! also checks that there were never two holders. The case the README guarantees (every replica,
//! `--ttl 30s`) is a test. A minute a case; the servers are started and stopped by the cases.
//!
//! Run: `cargo bench --bench failover`.

#[path = "../tests/support/mod.rs"]
mod support;
// Redis's test helpers, side by side as in tests/redis/ (each names the others as siblings).
#[path = "../tests/redis/failover_case.rs"]
mod failover_case;
#[path = "../tests/redis/sentinel_set.rs"]
mod sentinel_set;
#[path = "../tests/redis/server.rs"]
mod server;

use failover_case::{failover_case, Failover, Watch};

fn main() {
    println!(
        "{}",
        support::build::describe(std::path::Path::new(support::dlock_bin()))
    );
    let cases: [(Failover, &[&str]); 4] = [
        (Failover::Forced, &["--replicas", "0"]),
        (Failover::Forced, &["--replicas", "2"]),
        (Failover::Frozen, &["--replicas", "0"]),
        (Failover::Frozen, &["--replicas", "2", "--ttl", "30s"]),
    ];
    for (how, options) in cases {
        let figures = failover_case(how, options, Watch::Whole);
        println!(
            "{how:?} {options:?}: new master {:?}, demoted master back {:?}, holder lost it {:?} \
             (exit {}), waiter in {:?} (after the release: {}), tokens {:?}",
            figures.promoted,
            figures.both_replicas,
            figures.holder_lost,
            figures.holder_status,
            figures.waiter_in,
            figures.waiter_after_release,
            figures.tokens
        );
    }
}
