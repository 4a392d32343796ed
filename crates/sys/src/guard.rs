//! The command's whole process group dies with dlock, even when dlock is SIGKILLed.
//!
//! `PR_SET_PDEATHSIG` only reaches the command's first process, and the kernel clears it when that
//! process execs a setuid or setgid program. So dlock starts a guardian first: a task that shares
//! dlock's memory (`clone(CLONE_VM)`, no page tables copied, no exec) and does nothing but block
//! in `read` on a pipe whose only write end dlock holds. When dlock dies, however it dies, the
//! kernel closes that end and the read returns; the guardian then SIGKILLs the process group
//! recorded in [`COMMAND_GROUP`], if any, and exits.
//!
//! The guardian shares dlock's memory but has no thread of its own in the C library's sense: it
//! makes raw system calls only (rustix's), never touching `errno` or thread-local storage, and its
//! stack is a mapping that is never freed. All signals are blocked in it, it has a process group of
//! its own (so neither the terminal's Ctrl-C and Ctrl-Z nor `kill -9 %1` of dlock's job reach it),
//! and it exits with no signal to dlock, which never waits for it (once dlock is gone, the kernel
//! hands it to init, which reaps it).
//!
//! `dlock hold`'s keeper uses the same guardian to tell the script's shell when the keeper ends
//! without giving its hold up (killed, SIGKILL too): it records a pidfd of the shell in
//! [`OWNER_PIDFD`], and the guardian sends the shell SIGTERM, as a lost lock does.
//!
//! Not covered: processes that leave the command's group on purpose (`setsid`, `setpgid`), and the
//! two ways the kernel ends every task that shares dlock's memory at once: the OOM killer choosing
//! dlock, and dlock dumping core.

use std::io::{self, PipeWriter};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::signal::mask::Masked;

/// The command's process group while the guardian should kill it: written by the command's own
/// process after `setpgid` and before `exec` (so there is no moment when the command runs and the
/// guardian does not know its group), cleared by dlock before it reaps the command. 0: nothing to
/// kill. A static, so it lives as long as the memory the guardian shares.
pub static COMMAND_GROUP: AtomicI32 = AtomicI32::new(0);

/// A pidfd of the process to send SIGTERM when dlock ends while this is set (`dlock hold`'s shell,
/// see src/hold/keeper.rs); -1: nobody. The descriptor must have been open when the guardian was
/// started (it has a copy of the descriptor table as it was then) and be above 2.
pub static OWNER_PIDFD: AtomicI32 = AtomicI32::new(-1);

const STACK: usize = 64 * 1024;

/// A running guardian. Dropping it changes nothing: the guardian stays until dlock exits.
pub struct Guardian {
    pid: libc::pid_t,
    /// The pipe's only write end (close-on-exec, so the command never holds it).
    _alive: PipeWriter,
}

/// The two ends of the pipe, in the guardian's single argument.
fn encode(read: RawFd, write: RawFd) -> *mut libc::c_void {
    ((read as u32 as usize) | ((write as u32 as usize) << 32)) as *mut libc::c_void
}

fn decode(arg: *mut libc::c_void) -> (RawFd, RawFd) {
    let arg = arg as usize;
    (
        (arg & 0xffff_ffff) as u32 as RawFd,
        (arg >> 32) as u32 as RawFd,
    )
}

impl Guardian {
    /// Starts the guardian. Call it before dlock opens anything of its own (lock files,
    /// connections): the guardian gets a copy of the descriptor table as it is now and closes only
    /// the terminal's (0, 1, 2) and the pipe's write end.
    pub fn start() -> io::Result<Guardian> {
        let (reader, writer) = io::pipe()?;
        // SAFETY: a fresh private anonymous mapping; checked below.
        let stack = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if stack == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // The guardian inherits the mask it is cloned with: every signal blocked.
        let all_blocked = Masked::blocking_all()?;
        // SAFETY: the stack's top is 16-byte aligned (mmap returns whole pages) and the mapping is
        // never unmapped, so it outlives the guardian; without CLONE_VFORK dlock goes on at once,
        // and the guardian touches only its own stack, the static COMMAND_GROUP and descriptors.
        // No exit signal: dlock is never told of it and never reaps it.
        let pid = unsafe {
            libc::clone(
                guardian_main,
                stack.cast::<u8>().add(STACK).cast(),
                libc::CLONE_VM,
                encode(reader.as_raw_fd(), writer.as_raw_fd()),
            )
        };
        let clone_error = io::Error::last_os_error();
        drop(all_blocked);
        if pid < 0 {
            return Err(clone_error);
        }
        // Its own process group, so signals for dlock's job never reach it. From here, since the
        // guardian itself must not call into the C library. A failure leaves it in dlock's group,
        // where it still works (its signals are blocked) unless the whole job is SIGKILLed.
        if let Some(child) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::setpgid(Some(child), Some(child));
        }
        drop(reader);
        Ok(Guardian {
            pid,
            _alive: writer,
        })
    }

    /// Ends the guardian before dlock replaces itself with the command (`exec`), which then has a
    /// parent dlock no more: the outer dlock's guardian already covers it.
    pub fn dismiss(self) {
        let Some(pid) = rustix::process::Pid::from_raw(self.pid) else {
            return;
        };
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        // __WCLONE: it has no exit signal.
        let clone = rustix::process::WaitOptions::from_bits_retain(libc::__WCLONE as u32);
        let _ = rustix::process::waitpid(Some(pid), clone);
    }
}

/// The guardian: raw system calls only (see the module's documentation).
extern "C" fn guardian_main(arg: *mut libc::c_void) -> libc::c_int {
    let (read, write) = decode(arg);
    // The write end first, or the read below never ends; then the terminal, which the guardian
    // must not keep open after dlock is gone.
    for fd in [write, 0, 1, 2] {
        if fd != read {
            // SAFETY: this task's own copies of the descriptors; nothing else uses them here.
            unsafe { rustix::io::close(fd) };
        }
    }
    // SAFETY: `read` stays open in this task until it exits.
    let read = unsafe { BorrowedFd::borrow_raw(read) };
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(read, &mut byte[..]) {
            Ok(0) => break,
            Err(rustix::io::Errno::INTR) | Ok(_) => continue,
            // Cannot wait any more: better to do nothing than to kill on a guess.
            Err(_) => return 0,
        }
    }
    let group = COMMAND_GROUP.load(Ordering::SeqCst);
    if let Some(group) = rustix::process::Pid::from_raw(group.max(0)) {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    let owner = OWNER_PIDFD.load(Ordering::SeqCst);
    if owner > 2 {
        // SAFETY: a copy of the pidfd the keeper opened before starting the guardian (see
        // OWNER_PIDFD); this task never closes it.
        let owner = unsafe { BorrowedFd::borrow_raw(owner) };
        let _ = rustix::process::pidfd_send_signal(owner, rustix::process::Signal::TERM);
    }
    0
}

/// Asks the guardian to send SIGTERM to the process of `pidfd` when dlock ends, until
/// [`unwatch_owner`].
pub fn watch_owner(pidfd: RawFd) {
    OWNER_PIDFD.store(pidfd, Ordering::SeqCst);
}

/// dlock is about to end on purpose (the hold is given up): nobody to tell.
pub fn unwatch_owner() {
    OWNER_PIDFD.store(-1, Ordering::SeqCst);
}

/// Records the command's group for the guardian. Called by the command's own process between
/// `setpgid` and `exec`, so it must stay async-signal-safe: one atomic store.
pub fn arm(group: libc::pid_t) {
    COMMAND_GROUP.store(group, Ordering::SeqCst);
}

/// The command exited (it is about to be reaped): what its group left behind is no longer the
/// guardian's business, as with flock(1). Also stops the group id from being killed once it may be
/// reused.
pub fn disarm() {
    COMMAND_GROUP.store(0, Ordering::SeqCst);
}
