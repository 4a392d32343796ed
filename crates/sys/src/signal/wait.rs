//! Taking signals synchronously: the main thread keeps the signals it handles blocked and takes
//! them one at a time with sigtimedwait(2), in the same loop that watches deadlines, renewals and
//! the command, so that no handler runs behind its back once the locks are held.

use std::io;
use std::time::{Duration, Instant};

use super::mask::{self, SigSet};
use super::{event_signal, FORWARDED};

/// The signals dlock takes synchronously, blocked in every thread it starts.
#[derive(Clone, Copy)]
pub struct Signals {
    waited: SigSet,
    /// The mask dlock started with, which the command gets back.
    original: SigSet,
    main_thread: libc::pthread_t,
}

impl Signals {
    /// Blocks the forwarded signals, SIGCHLD, SIGCONT and the event signal. Must run on the main
    /// thread before any other thread is started, since threads inherit the mask: a signal must
    /// never reach a thread with the default action (which would kill dlock without forwarding
    /// anything).
    pub fn block() -> io::Result<Signals> {
        let mut taken = FORWARDED.to_vec();
        taken.extend([libc::SIGCHLD, libc::SIGCONT, event_signal()]);
        let waited = SigSet::of(&taken);
        let original = mask::block(&waited)?;
        Ok(Signals {
            waited,
            original,
            // SAFETY: pthread_self has no preconditions.
            main_thread: unsafe { libc::pthread_self() },
        })
    }

    /// The mask dlock started with, for the command.
    pub fn original(&self) -> &SigSet {
        &self.original
    }

    /// The next signal, or `None` once `timeout` has passed (`Duration::MAX`: no limit).
    pub fn wait(&self, timeout: Duration) -> Option<i32> {
        next_signal(&self.waited, timeout)
    }

    /// A forwarded signal already pending (taking it), if any; the other pending signals (an
    /// inherited child's SIGCHLD, say) are taken and ignored, as the waiting loop does.
    pub fn take_pending_stop(&self) -> Option<i32> {
        loop {
            let n = self.wait(Duration::ZERO)?;
            if FORWARDED.contains(&n) {
                return Some(n);
            }
        }
    }

    /// What another thread uses to wake the main thread out of `wait`.
    pub fn main_waker(&self) -> MainWaker {
        MainWaker(self.main_thread)
    }
}

/// Wakes the main thread out of [`Signals::wait`] (with the event signal), from another thread.
#[derive(Clone, Copy)]
pub struct MainWaker(libc::pthread_t);

impl MainWaker {
    pub fn wake(self) {
        // SAFETY: the main thread outlives every helper (dlock exits from it), and the event
        // signal is blocked in every thread, so it only ends a wait.
        unsafe { libc::pthread_kill(self.0, event_signal()) };
    }
}

/// The next signal of `set` (all blocked), or `None` once `timeout` has passed (`Duration::MAX`:
/// no limit).
fn next_signal(set: &SigSet, timeout: Duration) -> Option<i32> {
    let end = Instant::now().checked_add(timeout);
    loop {
        let left = end.map(|e| e.saturating_duration_since(Instant::now()));
        let spec = left.map(|l| libc::timespec {
            tv_sec: l.as_secs() as libc::time_t,
            tv_nsec: l.subsec_nanos() as libc::c_long,
        });
        let n = match &spec {
            // SAFETY: a valid set and timespec; the siginfo out-pointer may be null.
            Some(spec) => unsafe { libc::sigtimedwait(set.as_raw(), std::ptr::null_mut(), spec) },
            // SAFETY: a valid set; the siginfo out-pointer may be null.
            None => unsafe { libc::sigwaitinfo(set.as_raw(), std::ptr::null_mut()) },
        };
        if n > 0 {
            return Some(n);
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}
