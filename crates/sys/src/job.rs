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

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, WaitOptions};
use rustix::stdio::stdin;

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
        let pid = Pid::from_raw(self.pid)?;
        // Nothing to report (or an error, which cannot happen for our own child): no change.
        let peek = |options: WaitIdOptions| {
            rustix::process::waitid(WaitId::Pid(pid), options | WaitIdOptions::NOHANG)
                .ok()
                .flatten()
        };
        let all = WaitIdOptions::EXITED | WaitIdOptions::STOPPED | WaitIdOptions::CONTINUED;
        let info = peek(all | WaitIdOptions::NOWAIT)?;
        if let Some(signal) = info.stopping_signal() {
            // Take exactly this stop (without EXITED an exit meanwhile stays unreaped).
            peek(WaitIdOptions::STOPPED);
            Some(Change::Stopped(signal))
        } else if info.continued() {
            peek(WaitIdOptions::CONTINUED);
            Some(Change::Continued)
        } else if info.exited() || info.killed() || info.dumped() {
            Some(Change::Exited)
        } else {
            None
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
        if let Some(own) = Signal::from_named_raw(own) {
            let _ = rustix::process::kill_current_process_group(own);
        }
    }

    /// dlock got SIGCONT (`fg`, `bg`): so does a stopped command, in the foreground if dlock is
    /// in it.
    pub fn continued(&mut self) {
        if !self.stopped {
            return;
        }
        if self.terminal && foreground() == Some(own_group()) {
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
        let own = own_group();
        match foreground() {
            Some(group) if group == own => {}
            Some(group) if group == self.pid || !group_exists(group) => set_foreground(own),
            _ => {}
        }
    }

    /// The command's exit status, once `exited` said so. Cannot fail for our own exited child;
    /// if it did, `None` (the caller's internal error rather than a hang).
    pub fn reap(self) -> Option<ExitStatus> {
        let pid = Pid::from_raw(self.pid)?;
        loop {
            match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
                Ok(Some((_, status))) => return Some(ExitStatus::from_raw(status.as_raw())),
                Err(Errno::INTR) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

/// Whether dlock's stdin is its controlling terminal: job control applies.
pub fn on_terminal() -> bool {
    rustix::termios::tcgetsid(stdin()).is_ok()
}

/// Whether dlock's group has the terminal's foreground, so the command should get it.
pub fn in_foreground() -> bool {
    foreground() == Some(own_group())
}

/// dlock's own process group.
fn own_group() -> libc::pid_t {
    rustix::process::getpgrp().as_raw_nonzero().get()
}

/// The terminal's foreground group.
fn foreground() -> Option<libc::pid_t> {
    let group = rustix::termios::tcgetpgrp(stdin())
        .ok()?
        .as_raw_nonzero()
        .get();
    (group > 0).then_some(group)
}

/// Gives the terminal's foreground to `group`. SIGTTOU is blocked meanwhile, since a background
/// process changing the foreground group would otherwise be stopped.
pub fn set_foreground(group: libc::pid_t) {
    let Some(group) = Pid::from_raw(group) else {
        return;
    };
    let _no_stop = TtouBlocked::on_this_thread();
    let _ = rustix::termios::tcsetpgrp(stdin(), group);
}

/// Sends `signal` to process group `group`; errors (the group is gone) are moot.
pub fn signal_group(group: libc::pid_t, signal: i32) {
    if let (Some(group), Some(signal)) = (Pid::from_raw(group), Signal::from_named_raw(signal)) {
        let _ = rustix::process::kill_process_group(group, signal);
    }
}

fn group_exists(group: libc::pid_t) -> bool {
    let Some(group) = Pid::from_raw(group) else {
        return false;
    };
    matches!(
        rustix::process::test_kill_process_group(group),
        Ok(()) | Err(Errno::PERM)
    )
}

/// Whether dlock's process group is orphaned: going up from dlock through its own group, the first
/// ancestor outside it is in another session (or there is none). Then no shell can continue the
/// group, and the kernel ignores Ctrl-Z for it. Unknown (an ancestor gone meanwhile): not orphaned.
fn own_group_orphaned() -> bool {
    let group = own_group();
    let Ok(session) = rustix::process::getsid(None) else {
        return false;
    };
    let session = session.as_raw_nonzero().get();
    let mut pid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
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
