//! `--replicas N`: a change to a lock counts only once N replicas of the master acknowledged it
//! (`WAIT`), so a failover to one of them keeps the lease and the fencing counter. Without it a
//! master that fails over before replicating can hand the lock to a second client and a token out
//! twice (the README says so). Each URL may say it for its own servers (`?replicas=N`); the
//! option (DLOCK_REPLICAS, the configuration file's `replicas`) is the default for those that do
//! not.

use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::fault::{Fault, FaultKind};
use super::link::Link;
use super::server::Server;
use crate::exit::{FailWith, Failure};

/// The query parameter a Redis URL says `--replicas` with.
pub(super) const PARAMETER: &str = "replicas";

/// `?replicas=`'s value (`N`, 0 or more) in the URL shown as `shown`, or a usage error.
pub(super) fn count(value: &str, shown: &str) -> anyhow::Result<u32> {
    let number = value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<u32>().ok())
        .flatten();
    number
        .ok_or_else(|| {
            anyhow!("redis URL {shown:?}: replicas= takes a number of replicas (replicas=1)")
        })
        .fail_with(Failure::Usage)
}

/// The `replicas=` among the `&`-separated `pairs` of a URL's query (the others are not looked
/// at): `None` when it has none; a usage error when it is unreadable or given twice.
pub(super) fn in_query(pairs: &str, shown: &str) -> anyhow::Result<Option<u32>> {
    let mut found = None;
    for pair in pairs.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != PARAMETER {
            continue;
        }
        if found.is_some() {
            return Err(anyhow!("redis URL {shown:?} gives replicas= twice"))
                .fail_with(Failure::Usage);
        }
        found = Some(count(value, shown)?);
    }
    Ok(found)
}

impl Server {
    /// `call`, and then, when `wrote` says `f` changed the lock and this server's `replicas` is
    /// not 0, `WAIT` on the same connection (so it waits for that write) until that many replicas
    /// acknowledged it,
    /// for at most half of `timeout`. Too few acknowledgements: a fault, whatever `f` answered,
    /// unless the sentinels now name another master, where it is done once more (a former
    /// master, not yet told, still takes writes but has no replicas left).
    pub(super) fn call_acked<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
        wrote: impl Fn(&T) -> bool,
    ) -> Result<T, Fault> {
        // WAIT 0 would wait for ever: at least a millisecond.
        let wait = (timeout / 2).max(Duration::from_millis(1));
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let started = Instant::now();
        let replicas = self.replicas;
        let mut run = |link: &mut Link| {
            let value = f(link)?;
            if replicas == 0 || !wrote(&value) {
                return Ok((value, None));
            }
            let acks: i64 = redis::cmd("WAIT")
                .arg(replicas)
                .arg(wait_ms)
                .query(&mut link.conn)?;
            Ok((value, Some(acks)))
        };
        let (mut value, mut acks) = self.call(timeout, &mut run)?;
        let short = |acks: Option<i64>| acks.is_some_and(|a| a < i64::from(replicas));
        if short(acks) {
            let left = timeout.saturating_sub(started.elapsed());
            if !left.is_zero() && self.master_moved(left / 2, true) {
                let left = timeout.saturating_sub(started.elapsed());
                (value, acks) = self.call(left.max(Duration::from_millis(1)), &mut run)?;
            }
        }
        match acks {
            Some(acks) if acks < i64::from(replicas) => Err(self.fault(
                FaultKind::Unreplicated,
                format!(
                    "only {} of {replicas} replicas acknowledged it within {}",
                    acks.max(0),
                    crate::text::duration(wait)
                ),
            )),
            _ => Ok(value),
        }
    }
}
