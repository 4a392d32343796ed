//! `dlock release NAME` without `--force`: finds the keeper of this shell's `dlock hold` of NAME
//! (the nearest ancestor of this process with an entry in the registry, or this process, when the
//! shell exec'd it), asks it to release, and waits for its answer.

use std::fs;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;

use super::keeper::{read_answer, LOST, RELEASE, RELEASED};
use super::registry;
use crate::backend::BackendConfig;
use crate::exit::Status;
use crate::lock::LockName;
use crate::report::{plain, Reporter};

/// What asking a keeper came to, once connected.
enum Asked {
    Answered(String),
    Failed(io::Error),
}

/// Asks the keeper at `path` to release, and reads its answer. A keeper that is killed has its
/// listening socket closed by the kernel a moment after its shell may be told (guard.rs), so a
/// connection that is dropped without an answer is tried again, until the entry refuses
/// (`ConnectionRefused`: the keeper is gone) or answers.
fn ask(path: &Path) -> io::Result<Asked> {
    const TRIES: u32 = 20;
    const APART: Duration = Duration::from_millis(50);
    let mut last = None;
    for _ in 0..TRIES {
        let mut conn = UnixStream::connect(path)?;
        writeln!(conn, "{RELEASE}")?;
        match read_answer(conn) {
            Ok(answer) if !answer.is_empty() => return Ok(Asked::Answered(answer)),
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
        std::thread::sleep(APART);
    }
    Ok(match last {
        Some(e) => Asked::Failed(e),
        None => Asked::Answered(String::new()),
    })
}

/// The exit status: 0 released, 79 the hold had lost its lock, 1 no hold of this shell's.
pub fn release(
    name: &LockName,
    backend: &BackendConfig,
    report: &Reporter,
) -> anyhow::Result<Status> {
    let dir = registry::dir(false)?;
    let place = registry::place(backend);
    // Its ancestors, nearest first, and this process itself first of all: a shell runs its last
    // command in its own place (`bash -c 'dlock hold x; dlock release x'` execs the release), so
    // the shell that holds may be this very process.
    for process in registry::ancestry(std::process::id()) {
        let path = registry::entry(&dir, process, &place, name);
        let conn = match ask(&path) {
            Ok(conn) => conn,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                // Its keeper ended without giving the hold up (it removes its entry when it
                // does): killed. The shell was sent SIGTERM; the lock may be another's by now.
                let _ = fs::remove_file(&path);
                report.error(&format!(
                    "the hold of lock {:?} ended without a release (its keeper was stopped); \
                     the lock may be held by another by now",
                    name.as_str()
                ));
                return Ok(Status::LockLost);
            }
            Err(e) => {
                return Err(anyhow!(
                    "cannot reach the keeper of lock {:?} at {}: {}",
                    name.as_str(),
                    path.display(),
                    plain(&e)
                ))
            }
        };
        let answer = match conn {
            Asked::Answered(answer) => Ok(answer),
            Asked::Failed(e) => Err(e),
        }
        .map_err(|e| {
            anyhow!(
                "the keeper of lock {:?} did not answer: {}",
                name.as_str(),
                plain(&e)
            )
        })?;
        if answer == RELEASED {
            report.event(&format!("released {:?}", name.as_str()));
            return Ok(Status::Done);
        }
        if let Some(why) = answer.strip_prefix(LOST) {
            report.error(&format!(
                "the hold of lock {:?} had lost it: {}",
                name.as_str(),
                why.trim()
            ));
            return Ok(Status::LockLost);
        }
        // Refused: not this shell's after all (a process reused an ancestor's pid and start).
    }
    report.error(&no_hold(name, &holders(name, backend)));
    Ok(Status::Free)
}

/// What the backend says of who holds `name`: `Some(holders)` (none when free), or `None` when it
/// could not be asked (then the line says nothing of others).
fn holders(name: &LockName, backend: &BackendConfig) -> Option<Vec<String>> {
    let status = crate::backend::open(backend).ok()?.status(name).ok()?;
    Some(status.holders.iter().map(|h| h.describe()).collect())
}

/// The line for a `release` with no hold of this shell's: `--force` is pointed to only where
/// someone else holds the lock (for a free lock it would release nothing).
fn no_hold(name: &LockName, holders: &Option<Vec<String>>) -> String {
    let line = format!(
        "this shell holds no lock {:?} from dlock hold",
        name.as_str()
    );
    match holders {
        Some(holders) if holders.is_empty() => format!("{line}, and nobody holds it"),
        Some(holders) => format!(
            "{line}; it is held ({}): to break it for whoever holds it, say `dlock release --force {}`",
            holders.join("; "),
            name.as_str()
        ),
        None => line,
    }
}
