//! The command as dlock's child: starting it (in its own process group, in the terminal's
//! foreground when dlock has it), passing signals on to it, waiting for its end while the leases
//! are renewed, terminating it when a lock is lost (SIGKILL after --kill-after), and turning its
//! end into dlock's exit status.

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use rustix::process::Rlimit;

use super::group::Member;
use super::heartbeat::{next_renewal, release_all, renew_due, Held};
use super::RunPlan;
use crate::exit::Status;
use crate::guard;
use crate::job::{self, Job};
use crate::lock::group::Party;
use crate::lock::{Ending, LockName, RunEnd, Token};
use crate::report::Reporter;
use crate::signal::wait::Signals;
use crate::signal::FORWARDED;
use dlock_sys::spawn;

/// The command to start: the program `program::resolve` found, its environment, and the limit on
/// open files it gets back.
pub(super) struct Child<'a> {
    pub program: &'a Path,
    pub env: &'a [(String, String)],
    pub file_limit: Option<Rlimit>,
}

/// Why the command is being terminated.
enum Terminating {
    /// A lock was lost.
    Lost,
    /// A newer `--cancel-in-progress` run asked this one to end.
    Cancelled(Party),
}

/// Starts the command, passes signals on to it, renews the locks until it ends (terminating it when
/// one is lost or a newer run cancels it, killing it once it outlives --kill-after), releases them,
/// and returns the exit status.
pub(super) fn supervise(
    held: Vec<Held>,
    child: Child<'_>,
    plan: &RunPlan,
    signals: &Signals,
    mut member: Option<&mut Member>,
    report: &Reporter,
) -> anyhow::Result<Status> {
    let Child {
        program,
        env,
        file_limit,
    } = child;
    let terminal = job::on_terminal();
    let foreground = terminal && job::in_foreground();
    let pid = match spawn::spawn(
        program,
        &plan.command,
        env,
        super::environment::withheld,
        foreground,
        file_limit,
        signals.original(),
    ) {
        Ok(pid) => pid,
        Err(e) => {
            release_all(held, &RunEnd::NOT_RUN, report);
            return Ok(spawn_failure(&plan.command[0], &e, report));
        }
    };
    if foreground {
        // Also from the parent, as shells do, so the order of the two calls does not matter.
        job::set_foreground(pid);
    }
    report.event(&format!(
        "started {:?} as pid {pid}",
        plan.command.join(" ")
    ));

    // Renewals happen on this thread, between events (see heartbeat.rs).
    let mut job = Job::new(pid, terminal);
    let mut held = held;
    let mut lost: Option<Instant> = None;
    let mut why: Option<Terminating> = None;
    let mut killed = false;
    loop {
        // A request to end wakes this thread by itself (see group.rs).
        let wake = match lost {
            None => next_renewal(&held),
            Some(at) if !killed => Some(at + plan.kill_after),
            Some(_) => None,
        };
        let timeout = wake.map_or(Duration::MAX, |w| {
            w.saturating_duration_since(Instant::now())
        });
        match signals.wait(timeout) {
            Some(libc::SIGCHLD) if job.exited() => break,
            Some(libc::SIGCONT) => job.continued(),
            Some(n) if FORWARDED.contains(&n) => {
                report.event(&format!(
                    "forwarding {} to the command",
                    crate::text::signal_name(n)
                ));
                job.signal(n);
            }
            _ => {}
        }
        // Timers are checked after every wake, so a stream of signals cannot starve renewals.
        let now = Instant::now();
        if lost.is_none() && next_renewal(&held).is_some_and(|d| d <= now) {
            if let Err(lost_why) = renew_due(&mut held, report) {
                report.error(&format!(
                    "lost the lock: {lost_why}; terminating the command"
                ));
                job.signal(libc::SIGTERM);
                lost = Some(Instant::now());
                why = Some(Terminating::Lost);
            }
        }
        match lost {
            None => {
                if let Some(asked) = member.as_deref_mut().and_then(Member::cancel_asked) {
                    let by = asked.by;
                    report.event(if asked.told {
                        "the store told of a change to the group records: a request to end"
                    } else {
                        "a read of the group records found a request to end"
                    });
                    report.notice(&format!(
                        "cancelled by {}, a newer --cancel-in-progress run; terminating the command",
                        by.describe()
                    ));
                    job.signal(libc::SIGTERM);
                    lost = Some(Instant::now());
                    why = Some(Terminating::Cancelled(by));
                }
            }
            Some(at) if !killed && now >= at + plan.kill_after => {
                report.error(&format!(
                    "the command outlived --kill-after {}; sending SIGKILL",
                    crate::text::duration(plan.kill_after)
                ));
                job.signal(libc::SIGKILL);
                killed = true;
            }
            _ => {}
        }
    }
    job.take_terminal();
    if lost.is_some() {
        // Whatever else the command's group left running goes too: it has no lock any more. (Before
        // the command is reaped, while its group id cannot have been reused.)
        job.signal(libc::SIGKILL);
    }
    // A normal end leaves what the command started in the background alone, as flock(1) does.
    guard::disarm();
    // Our own exited child cannot fail to be reaped; if it did, an internal error, not a hang.
    let status = job
        .reap()
        .unwrap_or_else(|| ExitStatus::from_raw(i32::from(Status::Internal.code()) << 8));
    report.event(&exited(status));
    let ending = match (&why, status.signal(), status.code()) {
        (Some(Terminating::Lost), _, _) => Ending::Lost,
        (Some(Terminating::Cancelled(_)), _, _) => Ending::Cancelled,
        (None, Some(n), _) => Ending::Signalled(n),
        (None, None, code) => Ending::Exited(code.unwrap_or(255)),
    };
    let end = RunEnd {
        ending,
        // A cancelled run's lock goes to the run that asked, whatever --min-hold says.
        keep: (!plan.release_on_failure || ending.succeeded()) && ending != Ending::Cancelled,
    };
    let tokens: Vec<(LockName, Token)> = held
        .iter()
        .map(|h| (h.name.clone(), h.lease.token()))
        .collect();
    let lost_by_the_end = release_all(held, &end, report);
    match why {
        Some(Terminating::Lost) => {
            if let Some(member) = member {
                member.abandon();
            }
            return Ok(Status::LockLost);
        }
        Some(Terminating::Cancelled(by)) => {
            if let Some(member) = member {
                member.cancelled(&by, &tokens);
            }
            // Cancelled, but the lock had gone before (a holder cut off past its lease hears the
            // request once it is back): it did not hold the lock to the end, whoever asked.
            if let Some(why) = lost_by_the_end {
                report.error(&format!(
                    "the lock was lost before the command was cancelled: {why}; exiting with {}",
                    Status::LockLost.code()
                ));
                return Ok(Status::LockLost);
            }
            return Ok(Status::Cancelled);
        }
        None => {}
    }
    // The command ended, but its lock had gone before dlock could tell (dlock was stopped past its
    // lease, or the lock was broken): the command's own status would claim it ran under the lock.
    if let Some(why) = lost_by_the_end {
        report.error(&format!(
            "the lock was lost before the command ended: {why}; exiting with {} instead of the \
             command's status ({status})",
            Status::LockLost.code()
        ));
        return Ok(Status::LockLost);
    }
    Ok(exit_code_of(status))
}

/// Replaces dlock with the command (every lock is already held by a parent dlock, whose guardian
/// and supervision cover it). Returns only when that fails: the exit status, after saying why.
#[allow(clippy::disallowed_methods)] // The user's command, by the path dlock resolved.
pub(super) fn replace_with(program: &Path, command: &[String], report: &Reporter) -> Status {
    let err = Command::new(program)
        .arg0(&command[0])
        .args(&command[1..])
        .exec();
    spawn_failure(&command[0], &err, report)
}

/// The exit status and message for a command that passed `program::resolve` but still could not
/// be started (changed meanwhile, or a missing ELF loader).
fn spawn_failure(program: &str, err: &io::Error, report: &Reporter) -> Status {
    match err.kind() {
        io::ErrorKind::NotFound => {
            report.error(&format!(
                "cannot execute {program}: it or its loader was not found"
            ));
            Status::NotFound
        }
        io::ErrorKind::PermissionDenied => {
            report.error(&format!("cannot execute {program}: permission denied"));
            Status::NotExecutable
        }
        _ => {
            report.error(&format!("cannot execute {program}: {err}"));
            Status::NotExecutable
        }
    }
}

fn exit_code_of(status: ExitStatus) -> Status {
    match (status.code(), status.signal()) {
        (Some(code), _) => Status::Command(u8::try_from(code).unwrap_or(u8::MAX)),
        (None, Some(n)) => Status::Signalled(n),
        (None, None) => Status::Internal,
    }
}

/// The `-v` line for how the command ended: `command exited with status 2`, or `command was
/// killed by signal SIGKILL` (not std's `exit status: 2`).
fn exited(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("command exited with status {code}"),
        (None, Some(n)) => format!(
            "command was killed by signal {}",
            crate::text::signal_name(n)
        ),
        (None, None) => format!("command ended: {status}"),
    }
}
