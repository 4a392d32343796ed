//! `--replicas N`: a change to a lock counts only once N replicas of the master acknowledged it
//! (`WAIT`), so a failover to one of them keeps the lease and the fencing counter. Without it a
//! master that fails over before replicating can hand the lock to a second client and a token out
//! twice (the README says so).

use std::time::{Duration, Instant};

use super::fault::{Fault, FaultKind};
use super::link::Link;
use super::server::Server;

impl Server {
    /// `call`, and then, when `wrote` says `f` changed the lock and `replicas` is not 0, `WAIT` on
    /// the same connection (so it waits for that write) until that many replicas acknowledged it,
    /// for at most half of `timeout`. Too few acknowledgements: a fault, whatever `f` answered,
    /// unless the sentinels now name another master, where it is done once more (a former
    /// master, not yet told, still takes writes but has no replicas left).
    pub(super) fn call_acked<T>(
        &mut self,
        timeout: Duration,
        replicas: u32,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
        wrote: impl Fn(&T) -> bool,
    ) -> Result<T, Fault> {
        // WAIT 0 would wait for ever: at least a millisecond.
        let wait = (timeout / 2).max(Duration::from_millis(1));
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let started = Instant::now();
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
