//! The caller's "give up" for a connection being made: `open` and `try_acquire` get no `Waiting`,
//! yet a signal must end a connection to a server that accepts and never answers at once, not at
//! the end of `--connect-timeout`. The supervisor gives each backend a `Stop` in its
//! `BackendConfig`; a backend's connection code looks at it at least every `CANCEL_CHECK` while it
//! connects (also while it waits to try a full server again); a backend may also abandon a call
//! under way when the stop comes, but never one begun after it, so that a release still gets
//! through. A backend also asks it, once a wait or a call has ended
//! (`Waiting::is_cancelled` says that it must), whether a stop signal ended it: that is an error
//! ("interrupted"), which the supervisor turns into its exit, where the caller's own cancellation
//! is not. It is the only way a backend learns of a signal (see `blocking` for the rest).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::CANCEL_CHECK;

/// Whether to give up connecting; by default never.
#[derive(Clone, Default)]
pub struct Stop(Option<Arc<dyn Fn() -> bool + Send + Sync>>);

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Stop(checked)"
        } else {
            "Stop(never)"
        })
    }
}

impl Stop {
    /// A stop that `check` says has come.
    pub fn when(check: impl Fn() -> bool + Send + Sync + 'static) -> Stop {
        Stop(Some(Arc::new(check)))
    }

    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|check| check())
    }

    /// `work`, unless a stop comes first (`None`). The stop is looked at every `CANCEL_CHECK`: a
    /// signal interrupts the runtime's own wait, but the runtime goes back to it.
    #[cfg(feature = "tokio")]
    pub async fn unless<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        if self.0.is_none() {
            return Some(work.await);
        }
        let stopped = async {
            while !self.requested() {
                tokio::time::sleep(CANCEL_CHECK).await;
            }
        };
        tokio::select! {
            value = work => Some(value),
            () = stopped => None,
        }
    }
}

impl Stop {
    /// Sleeps `most` on this thread, looking at the stop every `CANCEL_CHECK`; false when a stop
    /// came first.
    pub fn sleep(&self, most: Duration) -> bool {
        let end = Instant::now() + most;
        // Bounded: each turn sleeps until the next look or the end.
        loop {
            if self.requested() {
                return false;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(CANCEL_CHECK));
        }
    }
}

/// The words of a connection given up because dlock was asked to stop (the supervisor reports
/// the signal instead, and ends with 128+N).
pub const STOPPED: &str = "stopped while connecting";

/// The words of a call abandoned because dlock was asked to stop (reported as `STOPPED` is).
pub const INTERRUPTED: &str = "interrupted";
