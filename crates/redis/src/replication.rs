//! `--replicas N`: a change to a lock counts only once N replicas of the master acknowledged it
//! (`WAIT`), so a failover to one of them keeps the lease and the fencing counter. Without it a
//! master that fails over before replicating can hand the lock to a second client and a token out
//! twice (the README says so). Each URL may say it for its own servers (`?replicas=N`); the
//! option (DLOCK_REPLICAS, the configuration file's `replicas`) is the default for those that do
//! not. Here: reading `?replicas=`, and the `WAIT`; `Topology::call_acked` waits with it after
//! each grant and renewal.

use dlock_core::error;
use dlock_core::error::FailAs;
use redis::Connection;

/// The query parameter a Redis URL says `--replicas` with.
pub(super) const PARAMETER: &str = "replicas";

/// `?replicas=`'s value (`N`, 0 or more) in the URL shown as `shown`, or a usage error.
pub(super) fn count(value: &str, shown: &str) -> error::Result<u32> {
    let number = value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<u32>().ok())
        .flatten();
    number
        .ok_or_else(|| {
            error!("redis URL {shown:?}: replicas= takes a number of replicas (replicas=1)")
        })
        .usage()
}

/// The `replicas=` among the `&`-separated `pairs` of a URL's query (the others are not looked
/// at): `None` when it has none; a usage error when it is unreadable or given twice.
pub(super) fn in_query(pairs: &str, shown: &str) -> error::Result<Option<u32>> {
    let mut found = None;
    for pair in pairs.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != PARAMETER {
            continue;
        }
        if found.is_some() {
            return Err(error!("redis URL {shown:?} gives replicas= twice")).usage();
        }
        found = Some(count(value, shown)?);
    }
    Ok(found)
}

/// `WAIT`: how many replicas acknowledged the writes made so far on `conn`, waiting at most
/// `wait_ms` for `replicas` of them (see `Topology::call_acked`).
pub(super) fn wait(conn: &mut Connection, replicas: u32, wait_ms: u64) -> redis::RedisResult<i64> {
    redis::cmd("WAIT").arg(replicas).arg(wait_ms).query(conn)
}
