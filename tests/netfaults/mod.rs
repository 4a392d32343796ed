//! Network faults on the Redis and ZooKeeper backends: a server down while a waiter waits or a
//! holder renews (`redis`, `zk`), servers that accept and never answer, answer slowly or speak
//! something else (`fake_servers`), and Redis ACL users without the permissions dlock needs; SQL
//! and Redis servers that drip a greeting or forge a length (`lying_servers`); servers that answer
//! without end, slowly, or with rows of the wrong shape (`endless_servers`), Cluster seeds and
//! sentinels among them (`endless_seeds`), an HTTP node's too (`endless_http`); a holder cut off
//! from its server on every network store (`partition`); a server answering "not now" while a
//! waiter waits (`not_now`); a waiter whose server stops or freezes, ended in time by its deadline
//! or a signal (`bounds`); an etcd server back after an outage, noticed in time, and a fake etcd answering a lease TTL of
//! i64::MAX or below zero (`etcd`).

mod bounds;
#[cfg(feature = "elasticsearch")]
mod endless_http;
#[cfg(feature = "redis")]
mod endless_seeds;
mod endless_servers;
#[cfg(feature = "etcd")]
mod etcd;
mod fake_servers;
mod lying_servers;
mod not_now;
#[cfg(any(
    feature = "redis",
    feature = "zk",
    feature = "etcd",
    feature = "postgres",
    feature = "mysql",
    feature = "elasticsearch"
))]
mod partition;
pub(crate) mod redis;
mod zk;

use std::process::Command;
use std::time::Duration;

use crate::redis::server::dlock_at;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn redis_at(url: &str, args: &[&str]) -> Command {
    dlock_at(&[url], args)
}

/// A shell command that writes `in` then holds until `go` exists (at most 60s).
fn hold(dir: &LockDir, tag: &str) -> String {
    format!(
        "touch {inside}; i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        inside = dir.file(&format!("{tag}.in")).display(),
        go = dir.file(&format!("{tag}.go")).display()
    )
}
