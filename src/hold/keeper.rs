//! The keeper: takes the locks for a shell (with the supervisor's acquisition), tells the front,
//! detaches, and keeps them (with the supervisor's heartbeat) until the shell exits, however it
//! exits, or `dlock release` asks from the shell or a descendant of it. When a lock is lost it
//! sends SIGTERM to the shell and tells a later `dlock release` so.
//!
//! The shell is watched with a pidfd, taken before anything else and checked against the shell's
//! start time, so a pid reused by another process is never watched or signalled instead.

use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{flock, FlockOperation};
use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags, Signal};

use super::registry::{self, Process};
use super::{shell_lines, HELD};
use crate::cli::{GlobalArgs, HoldArgs};
use crate::exit::Status;
use crate::failure::{FailWith, Failure};
use crate::guard;
use crate::lock::{Ending, LockName, RunEnd};
use crate::reentry::{Claim, HELD_VAR};
use crate::report::Reporter;
use crate::signal::FORWARDED;
use crate::supervise::{self, next_renewal, release_all, renew_due, Held, Kept};

/// How often the keeper looks for signals sent to it (it waits in poll, not for signals).
const SIGNAL_TICK: Duration = Duration::from_millis(200);

/// What the keeper is asked, one line: give the hold up (`dlock release`), or say what it holds (a
/// `dlock run` of the lock inside the script, src/hold/nested.rs).
pub const RELEASE: &str = "release";
pub const WHO: &str = "who";

/// How long a keeper waits for the line that says what it is asked.
const ASKED_WITHIN: Duration = Duration::from_secs(1);

/// What a keeper answers `dlock release`, one line.
pub const RELEASED: &str = "released";
pub const LOST: &str = "lost";
pub const REFUSED: &str = "refused";

pub fn run(
    shell: Process,
    args: &HoldArgs,
    global: &GlobalArgs,
    report: &Reporter,
) -> anyhow::Result<Status> {
    // The keeper outlives neither the shell nor its files, and must not keep a pipe or a lock
    // file of the script's open.
    dlock_sys::start::close_inherited_descriptors();
    let front = rustix::process::getppid();
    // Dies with the front while acquiring: a `dlock hold` killed while it waits leaves nothing.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::TERM));
    if rustix::process::getppid() != front {
        return Ok(Status::Signalled(libc::SIGTERM));
    }
    if !front.is_some_and(|f| shell.is_or_is_ancestor_of(f.as_raw_pid().unsigned_abs())) {
        return Err(anyhow!(
            "the shell that ran dlock hold (pid {}) has ended",
            shell.pid
        ));
    }
    let gone = || {
        anyhow!(
            "the shell that ran dlock hold (pid {}) has ended",
            shell.pid
        )
    };
    let pid = rustix::process::Pid::from_raw(shell.pid.try_into().unwrap_or(0)).ok_or_else(gone)?;
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).map_err(|_| gone())?;
    // The pidfd names whichever process has the pid now: the shell, if it started when it did.
    if Process::now(shell.pid) != Some(shell) {
        return Err(gone());
    }
    // The locks are held for the shell: every record names it, as `status` then shows.
    crate::lock::acting_for::act_for(shell.pid);
    // Above the standard streams: the guardian closes those (see guard.rs, OWNER_PIDFD).
    let pidfd = rustix::io::fcntl_dupfd_cloexec(&pidfd, 3).map_err(|_| gone())?;
    let plan = args.plan(global)?;
    let dir = registry::dir(true)?;
    let place = registry::place(&plan.backend);
    // Claimed before acquiring, so a second `dlock hold` of the lock from this shell is refused at
    // once, also while this one still waits.
    let names: Vec<LockName> = plan.requests.iter().map(|r| r.name.clone()).collect();
    let claims = claim(&dir, shell, &place, &names)?;
    registry::sweep(&dir);
    let keeper = Keeper {
        shell,
        pidfd,
        dir,
        place,
        report,
    };
    let status = supervise::hold(plan, Box::new(move |kept| keeper.keep(kept)), report);
    // Removed while still locked: a claim only means something while its keeper lives.
    remove_claims(&claims);
    status
}

/// A file per lock, locked (flock) while a keeper of `shell` takes or keeps it at `place`: the
/// second keeper finds it locked and is refused. The lock goes with the keeper, however it ends.
fn claim(
    dir: &Path,
    shell: Process,
    place: &str,
    names: &[LockName],
) -> anyhow::Result<Vec<(PathBuf, fs::File)>> {
    let mut claims = Vec::new();
    for name in names {
        let mut path = registry::entry(dir, shell, place, name).into_os_string();
        path.push(".claim");
        let path = PathBuf::from(path);
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| {
                format!(
                    "cannot register the hold of lock {:?} in {}",
                    name.as_str(),
                    dir.display()
                )
            })?;
        let locked = flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok();
        // A sweep (registry.rs) removes a claim it could lock: one it removed between the open
        // and the lock is locked here, but no longer at its path. Made again once.
        let here = |f: &fs::File| {
            use std::os::unix::fs::MetadataExt;
            let (Ok(ours), Ok(now)) = (f.metadata(), fs::symlink_metadata(&path)) else {
                return false;
            };
            (ours.dev(), ours.ino()) == (now.dev(), now.ino())
        };
        let file = if locked && !here(&file) {
            let again = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .with_context(|| {
                    format!(
                        "cannot register the hold of lock {:?} in {}",
                        name.as_str(),
                        dir.display()
                    )
                })?;
            if flock(&again, FlockOperation::NonBlockingLockExclusive).is_err() || !here(&again) {
                return Err(anyhow!(
                    "this shell already holds lock {:?} with dlock hold, or is taking it; `dlock \
                     release {}` first",
                    name.as_str(),
                    name.as_str()
                ))
                .fail_with(Failure::Usage);
            }
            again
        } else {
            file
        };
        if !locked {
            return Err(anyhow!(
                "this shell already holds lock {:?} with dlock hold, or is taking it; `dlock \
                 release {}` first",
                name.as_str(),
                name.as_str()
            ))
            .fail_with(Failure::Usage);
        }
        claims.push((path, file));
    }
    Ok(claims)
}

fn remove_claims(claims: &[(PathBuf, fs::File)]) {
    for (path, _) in claims {
        let _ = fs::remove_file(path);
    }
}

struct Keeper<'a> {
    shell: Process,
    pidfd: OwnedFd,
    dir: PathBuf,
    place: String,
    report: &'a Reporter,
}

impl Keeper<'_> {
    fn keep(self, kept: Kept) -> anyhow::Result<Status> {
        let Kept { held, env, signals } = kept;
        let entries = match self.listen(&held) {
            Ok(entries) => entries,
            Err(e) => {
                release_all(held, &RunEnd::NOT_RUN, self.report);
                return Err(e);
            }
        };
        // The nested-run claims name the shell, as the records do; the script's environment is
        // not the keeper's to set, so they are told on asking instead (nested.rs), and an
        // inherited one is left as it is.
        let (claims, vars): (Vec<_>, Vec<_>) = env.into_iter().partition(|(k, _)| k == HELD_VAR);
        // What it tells a nested run: its own claims (naming the shell), one per line.
        let told_nested: String = claims
            .iter()
            .flat_map(|(_, value)| value.lines())
            .filter(|line| Claim::from_keeper(line, self.shell.pid).is_some())
            .map(|line| format!("{line}\n"))
            .collect();
        // From here the front may exit without ending the keeper; and a keeper that ends without
        // giving the hold up (killed) has its guardian send the shell SIGTERM, as a lost lock does.
        let _ = rustix::process::set_parent_process_death_signal(None);
        guard::watch_owner(self.pidfd.as_raw_fd());
        let told = {
            let mut out = io::stdout().lock();
            out.write_all(format!("{HELD}{}", shell_lines(&vars)).as_bytes())
                .and_then(|()| out.flush())
        };
        if told.is_err() {
            // The front is gone: nobody learnt that the locks are held.
            guard::unwatch_owner();
            release_all(held, &RunEnd::NOT_RUN, self.report);
            remove(&entries);
            return Ok(Status::Internal);
        }
        detach();

        let mut held = held;
        let mut lost: Option<String> = None;
        loop {
            let now = Instant::now();
            let mut timeout = SIGNAL_TICK;
            if lost.is_none() {
                if let Some(due) = next_renewal(&held) {
                    timeout = timeout.min(due.saturating_duration_since(now));
                }
            }
            let mut fds = vec![PollFd::new(&self.pidfd, PollFlags::IN)];
            fds.extend(entries.iter().map(|(_, l)| PollFd::new(l, PollFlags::IN)));
            let spec = Timespec::try_from(timeout).unwrap_or(Timespec {
                tv_sec: 0,
                tv_nsec: 200_000_000,
            });
            let _ = poll(&mut fds, Some(&spec));
            let shell_ended = !fds[0].revents().is_empty();
            let asked: Vec<bool> = fds[1..].iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            if shell_ended {
                guard::unwatch_owner();
                release_all(held, &ended(Ending::ShellExited), self.report);
                remove(&entries);
                return Ok(Status::Done);
            }
            for ((_, listener), _) in entries.iter().zip(asked).filter(|(_, a)| *a) {
                let Ok((mut conn, _)) = listener.accept() else {
                    continue;
                };
                if !self.is_the_shells(&conn) {
                    let _ = writeln!(conn, "{REFUSED}");
                    continue;
                }
                match read_request(&mut conn).as_deref() {
                    Some(RELEASE) => {}
                    Some(WHO) => {
                        // A lost hold covers no nested run.
                        if lost.is_none() {
                            let _ = conn.write_all(told_nested.as_bytes());
                        }
                        continue;
                    }
                    _ => {
                        let _ = writeln!(conn, "{REFUSED}");
                        continue;
                    }
                }
                guard::unwatch_owner();
                let lost_at_end = release_all(
                    std::mem::take(&mut held),
                    &ended(Ending::Released),
                    self.report,
                );
                let answer = match lost.take().or(lost_at_end) {
                    Some(why) => format!("{LOST} {why}"),
                    None => RELEASED.to_owned(),
                };
                let _ = writeln!(conn, "{answer}");
                remove(&entries);
                return Ok(Status::Done);
            }
            while let Some(n) = signals.wait(Duration::ZERO) {
                if FORWARDED.contains(&n) {
                    // The hold ends without the shell asking: the shell is told, as of a lost
                    // lock. The entries stay, closed, so its `dlock release` finds a keeper that
                    // is gone and says the lock was lost (release.rs). Closed before the shell is
                    // told, so that release never reaches a keeper that no longer answers.
                    guard::unwatch_owner();
                    drop(entries);
                    release_all(held, &ended(Ending::Signalled(n)), self.report);
                    if self.shell_lives() {
                        let _ = pidfd_send_signal(&self.pidfd, Signal::TERM);
                    }
                    return Ok(Status::Signalled(n));
                }
            }
            if lost.is_none() && next_renewal(&held).is_some_and(|d| d <= Instant::now()) {
                if let Err(why) = renew_due(&mut held, self.report) {
                    // The others go too: the script runs on no lock of this hold any more.
                    release_all(std::mem::take(&mut held), &ended(Ending::Lost), self.report);
                    let _ = pidfd_send_signal(&self.pidfd, Signal::TERM);
                    lost = Some(why);
                }
            }
        }
    }

    /// Whether the shell is still running (its pidfd is not readable yet).
    fn shell_lives(&self) -> bool {
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&zero)).is_ok_and(|n| n == 0)
    }

    /// A socket per lock in the registry. An entry left by a keeper that is gone is replaced; one
    /// whose keeper answers means this shell already holds the lock (two `dlock hold`s at once).
    fn listen(&self, held: &[Held]) -> anyhow::Result<Vec<(PathBuf, UnixListener)>> {
        let mut entries = Vec::new();
        for h in held {
            let path = registry::entry(&self.dir, self.shell, &self.place, h.name());
            let listener = match UnixListener::bind(&path) {
                Err(e)
                    if e.kind() == io::ErrorKind::AddrInUse
                        && UnixStream::connect(&path).is_err() =>
                {
                    let _ = fs::remove_file(&path);
                    UnixListener::bind(&path)
                }
                other => other,
            };
            match listener {
                Ok(listener) => entries.push((path, listener)),
                Err(e) => {
                    remove(&entries);
                    return Err(e).with_context(|| {
                        format!(
                            "cannot register the hold of lock {:?} in {}",
                            h.name().as_str(),
                            self.dir.display()
                        )
                    });
                }
            }
        }
        Ok(entries)
    }

    /// Whether the process at the other end of `conn` may release this hold or run under it: the
    /// user's own, and the shell itself or a descendant of it. (The registry is private to the
    /// user; this stops the user's other shells and daemons.)
    fn is_the_shells(&self, conn: &UnixStream) -> bool {
        let Ok(peer) = rustix::net::sockopt::socket_peercred(conn.as_fd()) else {
            return false;
        };
        peer.uid == rustix::process::getuid()
            && self
                .shell
                .is_or_is_ancestor_of(peer.pid.as_raw_nonzero().get().unsigned_abs())
    }
}

fn remove(entries: &[(PathBuf, UnixListener)]) {
    for (path, _) in entries {
        let _ = fs::remove_file(path);
    }
}

/// The keeper lives on after the front: in a session of its own (no terminal, no job control
/// signals), in `/`, with its standard streams on /dev/null.
fn detach() {
    let _ = rustix::process::setsid();
    let _ = rustix::process::chdir("/");
    if let Ok(null) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

/// The one line a client sends, without its newline; `None` if none came in time.
fn read_request(conn: &mut UnixStream) -> Option<String> {
    conn.set_read_timeout(Some(ASKED_WITHIN)).ok()?;
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.len() < 16 {
        match conn.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
    None
}

/// A keeper's answer, read.
pub fn read_answer(mut conn: UnixStream) -> io::Result<String> {
    conn.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    Ok(answer.trim_end().to_owned())
}

/// How a hold ended, for the store's record of its run: a hold's min-hold keeps the lock whatever
/// the ending (its keeper cannot see whether the shell's work succeeded).
fn ended(ending: Ending) -> RunEnd {
    RunEnd { ending, keep: true }
}
