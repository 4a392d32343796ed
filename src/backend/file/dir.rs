//! Which directory holds the lock files, and whether it is safe to use: whoever controls the
//! directory controls the locks.
//!
//! A directory the user named (`--url`, DLOCK_URL, the configuration file) must exist, as for
//! flock(1): dlock never creates it, so a mistyped `--url` is an error rather than a second set of
//! locks nobody else uses, and a directory meant to be shared is never made private by whoever ran
//! first. Only the default directory is created (by `run`), safely; `status`, `list` and `release`
//! find nothing in a default directory that does not exist yet.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};

use super::plain_io;
use crate::exit::{FailWith, Failure};
use crate::url::redact;

/// Where the default directory goes, first existing one wins. /run/lock and /var/lock are the same
/// for every session of a host: cron, systemd units (PrivateTmp= hides /tmp, not these), login
/// shells, `sudo -E`. Nothing read from the environment takes part, so no session can pick
/// another directory and slip past the locks of the others.
const DEFAULT_BASES: [&str; 2] = ["/run/lock", "/var/lock"];
/// The last resort when neither base exists (a container without /run/lock, say).
const FALLBACK_BASE: &str = "/tmp";

/// The directory for `--url` (one at most), which must exist, or the default. With `create`
/// (`run`), a missing default one is made mode 0700; without, it is returned as it is and reads as
/// empty.
pub(super) fn lock_dir(urls: &[String], create: bool) -> anyhow::Result<PathBuf> {
    match urls {
        [] => default_dir(create),
        [url] => explicit_dir(url),
        _ => Err(anyhow!(
            "the file backend takes one --url, not {}",
            urls.len()
        ))
        .fail_with(Failure::Usage),
    }
}

/// The per-user default, `/run/lock/dlock-UID` (see `DEFAULT_BASES`). Two users never share it.
pub(super) fn default_path() -> PathBuf {
    let base = DEFAULT_BASES
        .iter()
        .find(|base| fs::metadata(base).is_ok_and(|m| m.is_dir()))
        .unwrap_or(&FALLBACK_BASE);
    Path::new(base).join(format!("dlock-{}", current_uid()))
}

/// The default directory sits in a directory every user can write, so a squatter may have made it
/// first: it must be a real directory, ours, and writable by nobody else, or it is refused.
fn default_dir(create: bool) -> anyhow::Result<PathBuf> {
    let dir = default_path();
    if create {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(anyhow!(
                    "cannot create lock directory {}: {}",
                    dir.display(),
                    plain_io(&e)
                ))
                .fail_with(Failure::BackendUnavailable)
            }
        }
    }
    let meta = match fs::symlink_metadata(&dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(dir),
        Err(e) => {
            return Err(anyhow!(
                "cannot inspect lock directory {}: {}",
                dir.display(),
                plain_io(&e)
            ))
            .fail_with(Failure::BackendUnavailable)
        }
    };
    let refuse = |why: String| {
        Err(anyhow!("refusing lock directory {}: {why}", dir.display()))
            .fail_with(Failure::BackendUnavailable)
    };
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return refuse("it is not a directory".into());
    }
    if meta.uid() != current_uid() {
        return refuse(format!("it belongs to uid {}, not to you", meta.uid()));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return refuse(format!(
            "other users may write to it (mode {mode:o}); it should be 700"
        ));
    }
    check_writable(&dir)?;
    Ok(dir)
}

/// A directory named by `--url`: `file:///path`, or a plain path, which must exist.
fn explicit_dir(url: &str) -> anyhow::Result<PathBuf> {
    let path = match url.strip_prefix("file://") {
        Some(rest) if rest.starts_with('/') => PathBuf::from(rest),
        Some(_) => {
            return Err(anyhow!(
                "file URL {:?} must have an absolute path, like file:///var/lock/dlock",
                redact(url)
            ))
            .fail_with(Failure::Usage)
        }
        None if url.contains("://") => {
            return Err(anyhow!(
                "{:?} is not a directory or file:// URL for the file backend",
                redact(url)
            ))
            .fail_with(Failure::Usage)
        }
        None if url.is_empty() => {
            return Err(anyhow!("the lock directory (--url) is empty")).fail_with(Failure::Usage)
        }
        None => PathBuf::from(url),
    };
    if fs::symlink_metadata(&path).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        return Err(anyhow!(
            "lock directory {} does not exist: create it, or leave out --url for the default",
            path.display()
        ))
        .fail_with(Failure::BackendUnavailable);
    }
    let path = path
        .canonicalize()
        .map_err(|e| {
            anyhow!(
                "cannot use lock directory {}: {}",
                path.display(),
                plain_io(&e)
            )
        })
        .fail_with(Failure::BackendUnavailable)?;
    let meta = fs::metadata(&path)
        .with_context(|| format!("cannot inspect lock directory {}", path.display()))
        .fail_with(Failure::BackendUnavailable)?;
    if !meta.is_dir() {
        return Err(anyhow!(
            "lock directory {} is not a directory",
            path.display()
        ))
        .fail_with(Failure::BackendUnavailable);
    }
    // A shared directory named on purpose may be group-writable, but not writable by everyone
    // unless sticky, or anyone could swap the lock files.
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(anyhow!(
            "refusing lock directory {}: it is writable by every user and not sticky (mode {:o})",
            path.display(),
            mode & 0o7777
        ))
        .fail_with(Failure::BackendUnavailable);
    }
    check_writable(&path)?;
    Ok(path)
}

fn check_writable(dir: &Path) -> anyhow::Result<()> {
    use rustix::fs::Access;
    if let Err(e) = rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK) {
        return Err(anyhow!(
            "lock directory {} is not writable: {}",
            dir.display(),
            plain_io(&e.into())
        ))
        .fail_with(Failure::BackendUnavailable);
    }
    Ok(())
}

fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}
