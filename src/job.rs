//! The command as a job: its process group, whether it is stopped, and on a terminal the foreground
//! and the stops a shell's job control expects (Ctrl-Z, `fg`, `bg`, `kill %1`), as with flock(1).
//!
//! The shell's job is dlock, but the command runs in a process group of its own, which dlock puts
//! in the terminal's foreground. So Ctrl-Z stops only the command; dlock, seeing it stop, takes the
//! terminal back and stops its own group with the same signal, so that the shell sees its job stop
//! and prints the prompt. When the shell continues dlock (`fg`, `bg`, or `kill %1`, which also sends
//! SIGCONT), dlock gives the terminal back to the command if dlock itself is in the foreground, and
//! continues it. Off a terminal nobody expects dlock to stop: a stopped command leaves it running,
//! renewing the lease. A signal dlock forwards to a stopped command is followed by SIGCONT, so the
//! command can act on it.
//!
//! dlock sees only its own child stop. A stop that catches that child between vfork and exec (a
//! shell starting a program) stops the vfork child, but the kernel lets the shell itself stop only
//! once that child has exec'd, so no stop is ever reported; a shell running the command directly
//! would wait the same way.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use rustix::process::Pid;

use crate::signal::is_ignored;
use crate::signal::mask::TtouBlocked;

/// How many state changes one SIGCHLD may stand for (standard signals do not queue).
const CHANGES_PER_WAKE: usize = 64;

/// The command dlock started.
pub struct Job {
    pid: libc::pid_t,
    /// dlock's stdin is its controlling terminal: job control applies.
    terminal: bool,
    stopped: bool,
    /// A signal was forwarded while the command looked running: if a stop shows up next, it may
    /// have come first, and the command must be continued to act on the signal.
    signalled_running: bool,
}

/// What `waitid` reports.
enum Change {
    Exited,
    Stopped(i32),
    Continued,
}

impl Job {
    /// The command `pid`, leader of its own process group.
    pub fn new(pid: libc::pid_t, terminal: bool) -> Job {
        Job {
            pid,
            terminal,
            stopped: false,
            signalled_running: false,
        }
    }

    /// Follows the command's stops and continues after a SIGCHLD. True once it has exited: it is
    /// not reaped yet (see `reap`), so its pid and group id cannot be reused meanwhile.
    pub fn exited(&mut self) -> bool {
        let exited = self.follow();
        self.signalled_running = false;
        exited
    }

    /// Takes the changes the command has reported (see `exited`).
    fn follow(&mut self) -> bool {
        for _ in 0..CHANGES_PER_WAKE {
            match self.next_change() {
                None => return false,
                Some(Change::Exited) => return true,
                Some(Change::Stopped(_)) if self.signalled_running => {
                    self.signalled_running = false;
                    signal_group(self.pid, libc::SIGCONT);
                }
                Some(Change::Stopped(signal)) => {
                    self.stopped = true;
                    self.suspend(signal);
                }
                Some(Change::Continued) => self.stopped = false,
            }
        }
        false
    }

    /// The next change, taken (except an exit, only looked at).
    fn next_change(&self) -> Option<Change> {
        let peek = |flags: i32| {
            // SAFETY: an all-zero siginfo_t is valid; waitid fills it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waiting for our own child with a valid out-pointer.
            let rc = unsafe {
                libc::waitid(
                    libc::P_PID,
                    self.pid as libc::id_t,
                    &mut info,
                    flags | libc::WNOHANG,
                )
            };
            // SAFETY: waitid filled `info` for a child (si_pid 0: nothing to report).
            (rc == 0 && unsafe { info.si_pid() } != 0).then_some(info)
        };
        let info = peek(libc::WEXITED | libc::WSTOPPED | libc::WCONTINUED | libc::WNOWAIT)?;
        match info.si_code {
            libc::CLD_STOPPED => {
                // Take exactly this stop (without WEXITED an exit meanwhile stays unreaped).
                peek(libc::WSTOPPED);
                // SAFETY: for CLD_STOPPED si_status is the stopping signal.
                Some(Change::Stopped(unsafe { info.si_status() }))
            }
            libc::CLD_CONTINUED => {
                peek(libc::WCONTINUED);
                Some(Change::Continued)
            }
            libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED => Some(Change::Exited),
            _ => None,
        }
    }

    /// The command stopped by `signal`. On a terminal, the job stops as a whole: dlock takes the
    /// terminal back and stops its own group with the same kind of signal.
    fn suspend(&self, signal: i32) {
        if !self.terminal {
            return;
        }
        if signal == libc::SIGTSTP && own_group_orphaned() {
            // No shell could continue dlock's job, so the kernel would ignore Ctrl-Z for it, as it
            // does for any process of an orphaned group: so does dlock for the command.
            signal_group(self.pid, libc::SIGCONT);
            return;
        }
        self.take_terminal();
        // dlock's whole group, as Ctrl-Z would have stopped it had it kept the terminal (the rest
        // of a pipeline, the script that ran dlock). A stop signal dlock ignores would not stop it.
        let own = if is_ignored(signal) {
            libc::SIGSTOP
        } else {
            signal
        };
        // SAFETY: kill(0, ..) signals our own process group.
        unsafe { libc::kill(0, own) };
    }

    /// dlock got SIGCONT (`fg`, `bg`): so does a stopped command, in the foreground if dlock is
    /// in it.
    pub fn continued(&mut self) {
        if !self.stopped {
            return;
        }
        // SAFETY: getpgrp cannot fail.
        if self.terminal && foreground() == Some(unsafe { libc::getpgrp() }) {
            set_foreground(self.pid);
        }
        signal_group(self.pid, libc::SIGCONT);
    }

    /// Sends `signal` to the command's group, and continues a stopped group so it can act on it.
    pub fn signal(&mut self, signal: i32) {
        // A stop may be reported but not yet taken: the SIGCHLD comes after lower-numbered signals.
        self.follow();
        signal_group(self.pid, signal);
        if signal == libc::SIGKILL {
            return;
        }
        if self.stopped {
            signal_group(self.pid, libc::SIGCONT);
        } else {
            self.signalled_running = true;
        }
    }

    /// Gives the terminal back to dlock's group if the command's group has it, or left it to a
    /// group of its own that is gone; never when the shell has taken it back meanwhile.
    pub fn take_terminal(&self) {
        if !self.terminal {
            return;
        }
        // SAFETY: getpgrp cannot fail.
        let own = unsafe { libc::getpgrp() };
        match foreground() {
            Some(group) if group == own => {}
            Some(group) if group == self.pid || !group_exists(group) => set_foreground(own),
            _ => {}
        }
    }

    /// The command's exit status, once `exited` said so.
    pub fn reap(self) -> ExitStatus {
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child with a valid out-pointer.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if rc == self.pid {
                return ExitStatus::from_raw(status);
            }
            if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                // Cannot happen for our own exited child; an internal error rather than a hang.
                return ExitStatus::from_raw(i32::from(crate::exit::Status::Internal.code()) << 8);
            }
        }
    }
}

/// Whether dlock's stdin is its controlling terminal: job control applies.
pub fn on_terminal() -> bool {
    // SAFETY: plain queries on fd 0.
    unsafe { libc::tcgetsid(0) >= 0 }
}

/// Whether dlock's group has the terminal's foreground, so the command should get it.
pub fn in_foreground() -> bool {
    // SAFETY: getpgrp cannot fail.
    foreground() == Some(unsafe { libc::getpgrp() })
}

/// The terminal's foreground group.
fn foreground() -> Option<libc::pid_t> {
    // SAFETY: a plain query on fd 0.
    let group = unsafe { libc::tcgetpgrp(0) };
    (group > 0).then_some(group)
}

/// Gives the terminal's foreground to `group`. SIGTTOU is blocked meanwhile, since a background
/// process changing the foreground group would otherwise be stopped.
pub fn set_foreground(group: libc::pid_t) {
    let Some(group) = Pid::from_raw(group) else {
        return;
    };
    let _no_stop = TtouBlocked::on_this_thread();
    let _ = rustix::termios::tcsetpgrp(rustix::stdio::stdin(), group);
}

pub fn signal_group(group: libc::pid_t, signal: i32) {
    // SAFETY: kill with a negative pid signals that process group; errors (group gone) are moot.
    unsafe { libc::kill(-group, signal) };
}

fn group_exists(group: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks.
    let rc = unsafe { libc::kill(-group, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether dlock's process group is orphaned: going up from dlock through its own group, the first
/// ancestor outside it is in another session (or there is none). Then no shell can continue the
/// group, and the kernel ignores Ctrl-Z for it. Unknown (an ancestor gone meanwhile): not orphaned.
fn own_group_orphaned() -> bool {
    // SAFETY: these calls cannot fail for the calling process.
    let (group, session, mut pid) = unsafe { (libc::getpgrp(), libc::getsid(0), libc::getppid()) };
    for _ in 0..64 {
        if pid <= 1 {
            return true;
        }
        let Some((parent, pid_group, pid_session)) = parent_group_session(pid) else {
            return false;
        };
        if pid_group != group {
            return pid_session != session;
        }
        pid = parent;
    }
    false
}

/// A process's parent, process group and session, from /proc.
fn parent_group_session(pid: libc::pid_t) -> Option<(libc::pid_t, libc::pid_t, libc::pid_t)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (which may hold anything, ")" too): state ppid pgrp session ...
    let mut fields = stat.rsplit_once(") ")?.1.split(' ').skip(1);
    let mut next = || fields.next()?.parse().ok();
    Some((next()?, next()?, next()?))
}
