//! What the suite's shared servers have in common. Every contract scenario of one test process
//! shares a store's servers (one Redis, three Redis for Redlock, a Sentinel set, one ZooKeeper, one
//! PostgreSQL...), each started by the first scenario that needs it: starting a server per
//! scenario (a JVM for ZooKeeper) would cost more than most scenarios take. Each store keeps its
//! own in its test folder (`Target::suite_NAME`, in `tests/NAME/`).
//!
//! Scenarios still share no state: each `Target` made on a shared server gets a namespace of its
//! own there (`next_namespace`: a Redis database, a ZooKeeper chroot, an etcd key prefix, a table
//! prefix, an index), so its lock names, `list` and tokens start afresh. Scenarios that stop, kill
//! or tamper with a server start a private one instead (`RedisServer::start`, `ZkServer::start`),
//! which its test drops.
//!
//! A static is never dropped, so a reaper ends each of these servers instead (see reaper.rs).

use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A server of the suite with the reapers that end it.
pub struct Lasting<S> {
    pub server: S,
    /// Holds the write end of each reaper's pipe open for as long as this process lives.
    pub reapers: Vec<Child>,
}

/// Namespaces handed out so far; 0 is never used (Redis's default database).
static NAMESPACES: AtomicUsize = AtomicUsize::new(0);

/// A namespace no other target of this test process has.
pub fn next_namespace() -> usize {
    NAMESPACES.fetch_add(1, Ordering::SeqCst) + 1
}
