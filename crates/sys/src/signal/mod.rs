//! Every signal dlock blocks, catches, waits for or passes on, and why: the one module that knows
//! the signal contract. The others ask it; none of them touches a signal mask or a handler.
//!
//! The contract:
//! - **Blocked from the start.** Before any thread exists, the main thread blocks the signals it
//!   takes itself: [`FORWARDED`], SIGCHLD, SIGCONT (which still continues dlock: blocking only lets
//!   the main thread see it, see job.rs) and [`event_signal`] ([`wait::Signals::block`]). Every
//!   thread inherits that mask, so none of them ever meets one of these with its default action,
//!   which would kill dlock without passing anything on.
//! - **While acquiring, a signal only means "stop".** Until the locks are held, the forwarded
//!   signals the caller does not ignore are unblocked on the main thread, with a handler that notes
//!   the first one ([`interrupt::caught`]) and is installed without SA_RESTART, so that a blocking
//!   call (a connection to a server that does not answer) returns EINTR and dlock ends with 128+N
//!   ([`interrupt::Interruptible`]). One the caller ignores stays ignored and blocked, so the
//!   command inherits it ignored (as under nohup).
//! - **[`WAKE_SIGNAL`] ends a blocking call early.** It has a no-op handler, also without
//!   SA_RESTART: a per-call timer sends it to its own thread at a deadline ([`interrupt::Alarm`]),
//!   the stop handler fires that timer at once, and the supervisor sends it to the acquiring thread
//!   after cancelling its `Waiting` ([`interrupt::wake_thread`]). A backend that must finish a few
//!   last calls uninterrupted blocks it meanwhile ([`mask::WakeBlocked`]).
//! - **Taken one at a time.** Once the locks are held, and while a helper thread waits for them,
//!   the main thread takes signals with sigtimedwait(2) in the loop that also watches deadlines,
//!   renewals and the command ([`wait::Signals::wait`]): a forwarded signal goes on to the
//!   command's process group, SIGCHLD reports a change of the command, SIGCONT continues a stopped
//!   job, and [`event_signal`] says the acquiring thread sent news over its channel.
//! - **The command starts clean.** Every signal is blocked around the `clone` that starts it (and
//!   the guardian) ([`mask::Masked::blocking_all`]); in the command's process the dispositions
//!   dlock changed are reset ([`RESET_IN_CHILD`]) and, just before `exec`, the mask dlock started
//!   with is restored ([`mask::restore_in_child`]). Every other disposition passes through.
//! - **Job control.** SIGTTOU is blocked while dlock hands the terminal's foreground around, which
//!   a process outside the foreground would otherwise be stopped for (job.rs).

pub mod interrupt;
pub mod mask;
pub mod wait;

/// Signals dlock passes on to the command's process group; before the command runs, each of
/// them stops dlock.
pub const FORWARDED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Part of the `Waiting` contract (dlock-core's backend/mod.rs): after cancelling, the supervisor
/// sends this signal to the acquiring thread until it returns, so a blocking system call ends with
/// EINTR (its handler is installed without SA_RESTART). SIGURG is ignored by default, so a stray
/// one harms nothing.
pub const WAKE_SIGNAL: i32 = libc::SIGURG;

/// Dispositions dlock changed that the command must not inherit: Rust ignores SIGPIPE (std's own
/// `Command` resets it too), and dlock has a no-op handler on [`WAKE_SIGNAL`]. Every other
/// disposition, an ignored SIGHUP under nohup for one, passes through untouched.
pub const RESET_IN_CHILD: [i32; 2] = [libc::SIGPIPE, WAKE_SIGNAL];

/// At dlock's start, as Rust's own start does: a write to a closed pipe fails with EPIPE instead
/// of killing dlock. The command gets SIGPIPE's default back ([`RESET_IN_CHILD`]).
pub fn ignore_broken_pipes() {
    // SAFETY: setting a standard disposition, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// The acquiring thread's "look at the channel" to the main thread: a real-time signal, so it is
/// never one a user sends.
pub fn event_signal() -> i32 {
    libc::SIGRTMIN() + 1
}

/// Whether `signal` is ignored (SIG_IGN), as dlock's caller may have left it.
pub fn is_ignored(signal: i32) -> bool {
    // SAFETY: sigaction is plain data, and all zero is a valid value of it.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `current`, which is valid.
    let read = unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } == 0;
    read && current.sa_sigaction == libc::SIG_IGN
}
