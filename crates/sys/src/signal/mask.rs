//! Which signals a thread has blocked: sets of signals, blocking for good or for a while (a guard
//! that puts the mask back), and what the command's process is reset to before `exec`.

use std::io;

use super::{RESET_IN_CHILD, WAKE_SIGNAL};

/// A set of signals.
#[derive(Clone, Copy)]
pub struct SigSet(libc::sigset_t);

impl SigSet {
    pub fn empty() -> SigSet {
        // SAFETY: sigset_t is plain integers, and on Linux all zero is the empty set (what
        // sigemptyset makes).
        SigSet(unsafe { std::mem::zeroed() })
    }

    /// Every signal (but those the C library keeps for itself, which it never lets a thread
    /// block).
    pub fn full() -> SigSet {
        let mut set = SigSet::empty();
        // SAFETY: `set` is a valid set to fill.
        unsafe { libc::sigfillset(&mut set.0) };
        set
    }

    pub fn of(signals: &[i32]) -> SigSet {
        let mut set = SigSet::empty();
        for &signal in signals {
            // SAFETY: `set` is a valid set; a number that is no signal only makes the call fail.
            unsafe { libc::sigaddset(&mut set.0, signal) };
        }
        set
    }

    pub(crate) fn as_raw(&self) -> &libc::sigset_t {
        &self.0
    }

    #[cfg(feature = "posix-spawn")]
    pub(crate) fn as_raw_mut(&mut self) -> &mut libc::sigset_t {
        &mut self.0
    }
}

/// Changes this thread's mask as `how` says; returns the mask before.
fn change(how: libc::c_int, set: &SigSet) -> io::Result<SigSet> {
    let mut before = SigSet::empty();
    // SAFETY: valid sets; only this thread's mask changes. Async-signal-safe.
    let rc = unsafe { libc::pthread_sigmask(how, &set.0, &mut before.0) };
    if rc == 0 {
        Ok(before)
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Blocks `set` on this thread for good (threads started later inherit it); returns the mask
/// before.
pub fn block(set: &SigSet) -> io::Result<SigSet> {
    change(libc::SIG_BLOCK, set)
}

/// Blocks every signal in this thread for good: for threads that libraries start (a tokio
/// runtime's workers, `on_thread_start`), which must never take a signal meant for the supervisor
/// (whatever mask was current when they were started: stop signals are unblocked while dlock
/// connects, see `interrupt`).
pub fn block_all_in_this_thread() {
    let _ = block(&SigSet::full());
}

/// While alive, a change of this thread's mask; dropping it puts back the mask before.
pub struct Masked {
    before: SigSet,
}

impl Masked {
    pub fn blocking(set: &SigSet) -> io::Result<Masked> {
        Ok(Masked {
            before: change(libc::SIG_BLOCK, set)?,
        })
    }

    pub fn unblocking(set: &SigSet) -> io::Result<Masked> {
        Ok(Masked {
            before: change(libc::SIG_UNBLOCK, set)?,
        })
    }

    /// Every signal blocked, as around a `clone`: the new task starts with this mask, so no
    /// handler of dlock's can run in it before it has reset what it must.
    pub fn blocking_all() -> io::Result<Masked> {
        Masked::blocking(&SigSet::full())
    }
}

impl Drop for Masked {
    fn drop(&mut self) {
        // Putting back a mask read from the kernel cannot fail.
        let _ = change(libc::SIG_SETMASK, &self.before);
    }
}

/// While alive, [`WAKE_SIGNAL`] is blocked on this thread, so that the last calls of a wait being
/// abandoned (removing its place in a queue) are not cut short by the supervisor's wake-ups.
pub struct WakeBlocked {
    _masked: Option<Masked>,
}

impl WakeBlocked {
    pub fn on_this_thread() -> WakeBlocked {
        WakeBlocked {
            _masked: Masked::blocking(&SigSet::of(&[WAKE_SIGNAL])).ok(),
        }
    }
}

/// While alive, SIGTTOU is blocked on this thread, so that dlock may hand the terminal's
/// foreground to a group (tcsetpgrp) from outside the foreground without being stopped for it.
pub struct TtouBlocked {
    _masked: Option<Masked>,
}

impl TtouBlocked {
    pub fn on_this_thread() -> TtouBlocked {
        TtouBlocked {
            _masked: Masked::blocking(&SigSet::of(&[libc::SIGTTOU])).ok(),
        }
    }
}

/// In the command's process, right after `clone`: resets the dispositions dlock changed
/// ([`RESET_IN_CHILD`]). Async-signal-safe, as that process shares dlock's memory.
pub fn reset_dispositions_in_child() {
    for signal in RESET_IN_CHILD {
        // SAFETY: SIG_DFL is a valid disposition for any signal; signal() is async-signal-safe.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// In the command's process, just before `exec`: the mask dlock started with (`mask`), which the
/// command gets back. Async-signal-safe.
pub fn restore_in_child(mask: &SigSet) {
    let _ = change(libc::SIG_SETMASK, mask);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_now() -> SigSet {
        change(libc::SIG_BLOCK, &SigSet::empty()).unwrap()
    }

    fn has(set: &SigSet, signal: i32) -> bool {
        // SAFETY: a valid set.
        unsafe { libc::sigismember(set.as_raw(), signal) == 1 }
    }

    #[test]
    fn wake_blocked_blocks_the_wake_signal_until_dropped() {
        // On a thread of its own, so the test harness's threads keep their masks.
        std::thread::spawn(|| {
            assert!(!has(&blocked_now(), WAKE_SIGNAL));
            let quiet = WakeBlocked::on_this_thread();
            assert!(has(&blocked_now(), WAKE_SIGNAL));
            drop(quiet);
            assert!(!has(&blocked_now(), WAKE_SIGNAL));
        })
        .join()
        .unwrap();
    }
}
