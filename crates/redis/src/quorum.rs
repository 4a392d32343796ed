//! Majorities: how many servers make one, whether enough answered, and running one call on every
//! server at once.

use dlock_core::error;
use dlock_core::error::FailAs;

use super::fault::{self, first_fatal, Fault};
use super::topology::Topology;
use super::RedisBackend;

impl RedisBackend {
    /// An error (exit 69) when fewer than a majority of servers answered.
    pub(super) fn check_quorum(&self, answered: usize, faults: &[Fault]) -> error::Result<()> {
        let total = answered + faults.len();
        if answered >= quorum(total) {
            return Ok(());
        }
        if let [only] = faults {
            if total == 1 {
                return Err(only.to_error()).unavailable();
            }
        }
        if let Some(auth) = first_fatal(faults) {
            return Err(auth.to_error()).unavailable();
        }
        Err(error!(
            "only {answered} of {total} redis servers answered, a majority is {}: {}",
            quorum(total),
            fault::describe(faults)
        ))
        .unavailable()
    }
}

/// The majority of `n` servers.
pub(super) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Runs `f` on every server, in parallel when there are several (so one slow server costs one
/// timeout, not one per server), and returns the results in server order.
pub(super) fn on_all<T: Send>(
    servers: &mut [Topology],
    f: impl Fn(&mut Topology) -> T + Sync,
) -> Vec<T> {
    on_each(servers, |_, server| f(server))
}

/// `on_all`, telling `f` each server's index too.
pub(super) fn on_each<T: Send>(
    servers: &mut [Topology],
    f: impl Fn(usize, &mut Topology) -> T + Sync,
) -> Vec<T> {
    if let [only] = servers {
        return vec![f(0, only)];
    }
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = servers
            .iter_mut()
            .enumerate()
            .map(|(i, server)| scope.spawn(move || f(i, server)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_is_more_than_half() {
        assert_eq!([1, 2, 3, 4, 5].map(quorum), [1, 2, 2, 3, 3]);
    }
}
