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

use dlock_core::error;
use dlock_core::error::{Context, FailAs};

use super::plain_io;
use super::trust::Trust;
use dlock_core::url::redact;

/// Where the default directories go (this one and `dlock hold`'s registry), first existing one
/// wins. /run/lock and /var/lock are the same for every session of a host: cron, systemd units
/// (PrivateTmp= hides /tmp, not these), login shells, `sudo -E`. Nothing read from the environment
/// takes part, so no session can pick another directory and slip past the locks of the others.
/// Every user may create there, so another user may make a user's directory first: it is then
/// refused, never replaced by another (which a squatter could take away again, splitting the
/// user's locks between two directories).
const DEFAULT_BASES: [&str; 2] = ["/run/lock", "/var/lock"];
/// The last resort when neither base exists (a container without /run/lock, say).
const FALLBACK_BASE: &str = "/tmp";
/// Root's base, where nobody else can create a directory before root does.
const ROOT_BASE: &str = "/run";

/// The directory for `--url` (one at most), which must exist, or the default. With `create`
/// (`run`), a missing default one is made mode 0700; without, it is returned as it is and reads as
/// empty.
pub(super) fn lock_dir(urls: &[String], create: bool, trust: &Trust) -> error::Result<PathBuf> {
    match urls {
        [] => default_dir(create),
        [url] => explicit_dir(url, trust),
        _ => Err(error!(
            "the file backend takes one --url, not {}",
            urls.len()
        ))
        .usage(),
    }
}

/// The directory this user's default directories go in: /run for root, when it is a directory
/// only root may write (as on every systemd host); otherwise the first of `DEFAULT_BASES` that
/// exists, or `FALLBACK_BASE`. The same answer in every session of the user.
pub fn default_base() -> &'static Path {
    if current_uid() == 0
        && fs::symlink_metadata(ROOT_BASE)
            .is_ok_and(|m| m.is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0)
    {
        return Path::new(ROOT_BASE);
    }
    let base = DEFAULT_BASES
        .iter()
        .find(|base| fs::metadata(base).is_ok_and(|m| m.is_dir()))
        .unwrap_or(&FALLBACK_BASE);
    Path::new(base)
}

/// Why the default directory `dir`, found belonging to `owner`, is refused, and what fixes it, in
/// a few words for the end of a line: `otherwise` says what the user can do meanwhile.
pub fn not_ours(dir: &Path, owner: u32, otherwise: &str) -> String {
    let me = current_uid();
    let who = super::trust::owner(owner);
    let me = super::trust::user_name(me).unwrap_or_else(|| me.to_string());
    format!(
        "it belongs to {who}, not to you: another user made it first; an administrator can \
         remove it, and create it at boot before anyone else can with the tmpfiles.d line \
         `d {} 0700 {me} - -`{otherwise}",
        dir.display()
    )
}

/// The per-user default, `/run/lock/dlock-UID` (`/run/dlock-0` for root; see `default_base`). Two
/// users never share it.
pub(super) fn default_path() -> PathBuf {
    default_base().join(format!("dlock-{}", current_uid()))
}

/// The default directory sits in a directory every user can write, so a squatter may have made it
/// first: it must be a real directory, ours, and writable by nobody else, or it is refused.
fn default_dir(create: bool) -> error::Result<PathBuf> {
    let dir = default_path();
    if create {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(error!(
                    "cannot create lock directory {}: {}",
                    dir.display(),
                    plain_io(&e)
                ))
                .unavailable()
            }
        }
    }
    let meta = match fs::symlink_metadata(&dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(dir),
        Err(e) => {
            return Err(error!(
                "cannot inspect lock directory {}: {}",
                dir.display(),
                plain_io(&e)
            ))
            .unavailable()
        }
    };
    let refuse =
        |why: String| Err(error!("refusing lock directory {}: {why}", dir.display())).unavailable();
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if !meta.is_dir() {
        return refuse("it is not a directory".into());
    }
    if meta.uid() != current_uid() {
        return refuse(not_ours(
            &dir,
            meta.uid(),
            "; meanwhile --url can name a directory of your own",
        ));
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

/// A directory named by `--url`: `file:///path`, or a plain path, which must exist (and, as root,
/// be trusted: see `trust`).
fn explicit_dir(url: &str, trust: &Trust) -> error::Result<PathBuf> {
    let path = match url.strip_prefix("file://") {
        Some(rest) if rest.starts_with('/') => PathBuf::from(rest),
        Some(_) => {
            return Err(error!(
                "file URL {:?} must have an absolute path, like file:///var/lock/dlock",
                redact(url)
            ))
            .usage()
        }
        None if url.contains("://") => {
            return Err(error!(
                "{:?} is not a directory or file:// URL for the file backend",
                redact(url)
            ))
            .usage()
        }
        None if url.is_empty() => {
            return Err(error!("the lock directory (--url) is empty")).usage()
        }
        None => PathBuf::from(url),
    };
    if fs::symlink_metadata(&path).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        return Err(error!(
            "lock directory {} does not exist: create it, or leave out --url for the default",
            path.display()
        ))
        .unavailable();
    }
    let path = path
        .canonicalize()
        .map_err(|e| {
            error!(
                "cannot use lock directory {}: {}",
                path.display(),
                plain_io(&e)
            )
        })
        .unavailable()?;
    let meta = fs::metadata(&path)
        .with_context(|| format!("cannot inspect lock directory {}", path.display()))
        .unavailable()?;
    if !meta.is_dir() {
        return Err(error!(
            "lock directory {} is not a directory",
            path.display()
        ))
        .unavailable();
    }
    // A shared directory named on purpose may be group-writable, but not writable by everyone
    // unless sticky, or anyone could swap the lock files.
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(error!(
            "refusing lock directory {}: it is writable by every user and not sticky (mode {:o})",
            path.display(),
            mode & 0o7777
        ))
        .unavailable();
    }
    if let Err(why) = trust.directory(&path) {
        return Err(error!("refusing lock directory {}: {why}", path.display())).unavailable();
    }
    check_writable(&path)?;
    Ok(path)
}

fn check_writable(dir: &Path) -> error::Result<()> {
    use rustix::fs::Access;
    if let Err(e) = rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK) {
        return Err(error!(
            "lock directory {} is not writable: {}",
            dir.display(),
            plain_io(&e.into())
        ))
        .unavailable();
    }
    Ok(())
}

fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}
