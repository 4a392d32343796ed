//! Ending a blocking network call early, on the thread that makes it: at a deadline, so that one
//! budget bounds a whole exchange however slowly a server drips its bytes; and, while dlock
//! acquires, when a signal that stops it arrives, so that SIGTERM never waits for a silent server.
//!
//! Both work alike: the thread gets `WAKE_SIGNAL`, whose handler is installed without SA_RESTART,
//! so its blocking system call returns EINTR, and the caller then looks at why (`caught`, or the
//! clock). Outside these windows signals stay blocked and the supervisor takes them one at a time.

use std::io;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Once;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::mask::{Masked, SigSet};
use super::{is_ignored, WAKE_SIGNAL};

/// The stop signal a handler caught while acquiring (0: none).
static CAUGHT: AtomicI32 = AtomicI32::new(0);

/// The alarm of the call in progress, if one is armed (0: none), so that a caught signal can fire
/// it at once and interrupt a call that had just started when the signal came.
static ARMED: AtomicUsize = AtomicUsize::new(0);

/// The stop signal caught while acquiring, if any.
pub fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        n => Some(n),
    }
}

extern "C" fn wake(_: libc::c_int) {}

extern "C" fn catch(n: libc::c_int) {
    let _ = CAUGHT.compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst);
    let armed = ARMED.load(Ordering::SeqCst);
    if armed != 0 {
        // timer_settime is async-signal-safe; a timer deleted meanwhile just makes it fail.
        set_timer(armed as libc::timer_t, Duration::from_nanos(1));
    }
}

/// Installs `handler` for `signal` without SA_RESTART.
fn install(signal: i32, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: sigaction is plain data; all zero is no flags (no SA_RESTART: the interrupted call
    // must return EINTR) and an empty sa_mask.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as usize;
    // SAFETY: a valid action; both handlers are async-signal-safe (atomics and timer_settime).
    if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Installs the wake-up signal's handler (once; later calls do nothing).
pub fn install_wake_handler() -> io::Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| result = install(WAKE_SIGNAL, wake));
    result
}

/// Interrupts `thread`'s blocking system call (after its `Waiting` was cancelled, say).
pub fn wake_thread<T>(thread: &JoinHandle<T>) {
    // SAFETY: the handle is joinable, so the thread id stays valid even if the thread has
    // finished; the wake-up signal has a handler (installed before any thread waits), so it
    // cannot end dlock.
    unsafe { libc::pthread_kill(thread.as_pthread_t(), WAKE_SIGNAL) };
}

/// While alive, `signals` are unblocked on this thread and a handler notes the first that comes
/// (`caught`) and interrupts the call in progress. For the acquisition, before any command runs:
/// a signal then only means "stop". A signal the caller ignores is left alone, ignored and blocked
/// as before, so that the command inherits it ignored (as under nohup).
pub struct Interruptible {
    /// Dropping it blocks the signals again: those that come from then on stay pending for the
    /// supervisor; one caught before is in `caught`.
    _unblocked: Masked,
}

impl Interruptible {
    pub fn new(signals: &[i32]) -> io::Result<Interruptible> {
        install_wake_handler()?;
        let signals: Vec<i32> = signals
            .iter()
            .copied()
            .filter(|&n| !is_ignored(n))
            .collect();
        for &n in &signals {
            install(n, catch)?;
        }
        Ok(Interruptible {
            _unblocked: Masked::unblocking(&SigSet::of(&signals))?,
        })
    }
}

/// Interrupts this thread's blocking system call at a deadline, once: a library that retries
/// its call after EINTR is then still bounded by its socket timeout (firing again and again would
/// restart that timeout every time).
pub struct Alarm {
    timer: libc::timer_t,
}

impl Alarm {
    /// `None` when no timer can be made; the socket timeouts still bound each system call then.
    pub fn at(deadline: Instant) -> Option<Alarm> {
        install_wake_handler().ok()?;
        // SAFETY: sigevent is plain data; the fields set are the ones SIGEV_THREAD_ID reads.
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = WAKE_SIGNAL;
        event.sigev_notify_thread_id = rustix::thread::gettid().as_raw_pid();
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid pointers to an initialised sigevent and to the timer id to fill.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) } != 0 {
            return None;
        }
        let alarm = Alarm { timer };
        let after = deadline.saturating_duration_since(Instant::now());
        set_timer(timer, after.max(Duration::from_nanos(1)));
        let _ = ARMED.compare_exchange(0, timer as usize, Ordering::SeqCst, Ordering::SeqCst);
        Some(alarm)
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        let _ = ARMED.compare_exchange(self.timer as usize, 0, Ordering::SeqCst, Ordering::SeqCst);
        // SAFETY: the timer was created by `at` and is deleted once.
        unsafe { libc::timer_delete(self.timer) };
    }
}

/// Arms `timer` to go off once, after `after`. Async-signal-safe.
fn set_timer(timer: libc::timer_t, after: Duration) {
    let spec = |d: Duration| libc::timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    let value = libc::itimerspec {
        it_interval: spec(Duration::ZERO),
        it_value: spec(after),
    };
    // SAFETY: a valid itimerspec; an invalid timer id only makes the call fail.
    unsafe { libc::timer_settime(timer, 0, &value, std::ptr::null_mut()) };
}
