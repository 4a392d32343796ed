//! Where a keeper can be found: one Unix socket per lock it keeps, in a directory private to the
//! user, named by the shell that took the hold (pid and start time) and the lock's name. Only the
//! user can create or reach an entry; the keeper still checks who connects (see keeper.rs), so an
//! entry copied or guessed by the user's other processes releases nothing it should not.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use sha2::{Digest, Sha256};

use crate::backend::BackendConfig;
use crate::failure::{FailWith, Failure};
use crate::lock::LockName;
use crate::report::plain;

/// A process named so that a reused pid is not taken for it: its pid and start time (clock ticks
/// after boot, field 22 of /proc/PID/stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub start: u64,
}

impl Process {
    /// The process `pid` as it is now, if it exists.
    pub fn now(pid: u32) -> Option<Process> {
        let stat = crate::reentry::ProcStat::read(pid)?;
        Some(Process {
            pid,
            start: stat.start,
        })
    }

    /// `PID.START`, as the keeper is told its shell.
    pub fn text(self) -> String {
        format!("{}.{}", self.pid, self.start)
    }

    pub fn parse(text: &str) -> Option<Process> {
        let (pid, start) = text.split_once('.')?;
        Some(Process {
            pid: pid.parse().ok().filter(|&p| p > 0)?,
            start: start.parse().ok()?,
        })
    }

    /// Whether this process is `pid` itself or one of its ancestors (walking /proc up from `pid`).
    pub fn is_or_is_ancestor_of(self, pid: u32) -> bool {
        ancestry(pid).contains(&self)
    }
}

/// `pid` and its ancestors, nearest first, as far as /proc shows them.
pub fn ancestry(pid: u32) -> Vec<Process> {
    const MOST: usize = 1024;
    let mut chain = Vec::new();
    let mut pid = pid;
    while pid != 0 && chain.len() < MOST {
        let Some(stat) = crate::reentry::ProcStat::read(pid) else {
            break;
        };
        chain.push(Process {
            pid,
            start: stat.start,
        });
        pid = stat.parent;
    }
    chain
}

/// The directory for this user's holds: `/run/lock/dlock-holds-UID` (`/run/dlock-holds-0` for
/// root), beside the file backend's default directory and chosen the same way
/// (`file::default_base`), so `hold` and `release` always agree, whatever the environment says.
/// With `create`, made mode 0700 if missing. It may sit where every user can write, so one found
/// there must be a real directory, ours, that nobody else may enter.
pub fn dir(create: bool) -> anyhow::Result<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = dlock_file::default_base().join(format!("dlock-holds-{uid}"));
    if create {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(anyhow!(
                    "cannot create the directory of holds {}: {}",
                    dir.display(),
                    plain(&e)
                ))
                .fail_with(Failure::BackendUnavailable)
            }
            _ => {}
        }
    }
    let meta = match fs::symlink_metadata(&dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(dir),
        Err(e) => {
            return Err(anyhow!(
                "cannot inspect the directory of holds {}: {}",
                dir.display(),
                plain(&e)
            ))
            .fail_with(Failure::BackendUnavailable)
        }
    };
    let mode = meta.permissions().mode() & 0o7777;
    let wrong = if !meta.file_type().is_dir() {
        Some("it is not a directory".to_owned())
    } else if meta.uid() != uid {
        Some(dlock_file::not_ours(&dir, meta.uid(), ""))
    } else if mode & 0o077 != 0 {
        Some(format!(
            "other users may use it (mode {mode:o}); it should be 700"
        ))
    } else {
        None
    };
    match wrong {
        Some(why) => Err(anyhow!(
            "refusing the directory of holds {}: {why}",
            dir.display()
        ))
        .fail_with(Failure::BackendUnavailable),
        None => Ok(dir),
    }
}

/// The place a hold's locks are kept, as the entry's name knows it: the backend and its addresses
/// as configured (`-b`, `--url`, their variables), a file backend's directory made absolute. Taken
/// from the configuration, not from the backend, so `dlock release` finds the entry without
/// reaching the server; it must be given the same `-b` and `--url` as the hold.
pub fn place(config: &BackendConfig) -> String {
    let urls: Vec<String> = config
        .store
        .urls
        .iter()
        .map(|url| match config.kind.directory(url) {
            Some(dir) => fs::canonicalize(dir)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| url.clone()),
            None => url.clone(),
        })
        .collect();
    format!("{}\n{}", config.kind.as_str(), urls.join("\n"))
}

/// The entry of `shell`'s hold of `name` at `place` in `dir`. Place and name are hashed: they may
/// hold `/` and be longer than a socket's path may be (and the place may hold a password).
pub fn entry(dir: &Path, shell: Process, place: &str, name: &LockName) -> PathBuf {
    let mut hasher = Sha256::new();
    hasher.update(place.as_bytes());
    hasher.update([0u8]);
    hasher.update(name.as_str().as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{}.{}.{hex}", shell.pid, shell.start))
}

/// Removes the entries and claims of shells that have ended: a keeper killed with SIGKILL could
/// not remove its own. An entry of a shell still running is kept even when its keeper is gone,
/// since `dlock release` from that shell reads it as "ended without a release" (79). A shell
/// that has ended cannot start a keeper, so nothing removed here can be in use. A claim no keeper
/// has locked (its keeper was killed) is removed too, whoever's shell it names, under the lock
/// this takes (a keeper checks, once it has locked its claim, that it is still at its path).
pub fn sweep(dir: &Path) {
    let Ok(listing) = fs::read_dir(dir) else {
        return;
    };
    // Bounded: one pass over the listing.
    for entry in listing.flatten() {
        let name = entry.file_name();
        let Some(text) = name.to_str() else {
            continue;
        };
        let mut parts = text.splitn(3, '.');
        let owner = match (parts.next(), parts.next()) {
            (Some(pid), Some(start)) => Process::parse(&format!("{pid}.{start}")),
            _ => None,
        };
        if let Some(owner) = owner {
            if Process::now(owner.pid) != Some(owner) {
                let _ = fs::remove_file(entry.path());
            } else if text.ends_with(".claim") {
                remove_unheld(&entry.path());
            }
        }
    }
}

/// Removes the claim at `path` if no keeper has it locked, while holding its lock.
fn remove_unheld(path: &Path) {
    use rustix::fs::{flock, FlockOperation};
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    else {
        return;
    };
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
        let _ = fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_round_trips_and_nonsense_is_refused() {
        let p = Process {
            pid: 42,
            start: 123456,
        };
        assert_eq!(Process::parse(&p.text()), Some(p));
        for bad in ["", "42", "0.1", "x.1", "42.", ".5", "42.-1"] {
            assert_eq!(Process::parse(bad), None, "{bad:?}");
        }
    }
}
