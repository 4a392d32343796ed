//! Keeps the supervisor's wake-up signal away from a waiter's last commands to the servers, so
//! giving up a place in line is not itself interrupted. (It joins the signal code later.)

/// Blocks the supervisor's wake-up signal in this thread while alive.
pub(super) struct BlockedWakeSignal {
    old: libc::sigset_t,
}

impl BlockedWakeSignal {
    pub(super) fn new() -> BlockedWakeSignal {
        // SAFETY: plain signal-mask manipulation on this thread with valid, initialised sets.
        unsafe {
            let mut block: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut block);
            libc::sigaddset(&mut block, crate::backend::WAKE_SIGNAL);
            libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
            BlockedWakeSignal { old }
        }
    }
}

impl Drop for BlockedWakeSignal {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}
