//! Whose directories and files dlock running as root may use. Whoever can replace a lock
//! directory, or write a lock file or a records file in it, decides what root's locks mean: they
//! can unlink the file root holds and let the next job in beside it, reset its token, or hold
//! their own file open so that root's cron job waits or skips. So, as `ssh` does with its files,
//! root uses a lock directory only when it and every directory above it belong to root or to an
//! owner root names (`--trust-owner`), and are writable by nobody else unless sticky (then only a
//! file's owner may remove or rename it); and a lock file or records file only when it belongs to
//! root or to such an owner and neither its group nor others may write it. Anything else is
//! refused (69) with one line naming the path, its owner and the opt-in.
//!
//! Users other than root are not checked here: they cannot act on another user's behalf, and
//! directories they share on purpose (`--url` both can write) keep working as they always did.

use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The owners dlock trusts besides root, and whether it runs as root at all (when it does not,
/// nothing is checked).
#[derive(Clone, Debug)]
pub(super) struct Trust {
    root: bool,
    owners: Vec<u32>,
}

impl Trust {
    pub(super) fn new(owners: &[u32]) -> Trust {
        Trust {
            root: rustix::process::geteuid().is_root(),
            owners: owners.to_vec(),
        }
    }

    fn trusts(&self, uid: u32) -> bool {
        uid == 0 || self.owners.contains(&uid)
    }

    /// Why root may not use the lock directory `dir` (its real path): a problem with it or with a
    /// directory above it, in words for the end of a line.
    pub(super) fn directory(&self, dir: &Path) -> Result<(), String> {
        if !self.root {
            return Ok(());
        }
        for (at, above) in dir.ancestors().enumerate() {
            let meta = fs::symlink_metadata(above).map_err(|e| {
                format!(
                    "cannot inspect {}: {}",
                    above.display(),
                    dlock_core::report::plain(&e)
                )
            })?;
            let which = match at {
                0 => "it".to_owned(),
                _ => format!("the directory above it, {},", above.display()),
            };
            if !self.trusts(meta.uid()) {
                return Err(format!(
                    "{which} belongs to {}, who could swap root's lock files; {}",
                    owner(meta.uid()),
                    opt_in(meta.uid())
                ));
            }
            let mode = meta.mode() & 0o7777;
            if mode & 0o022 != 0 && mode & 0o1000 == 0 {
                return Err(format!(
                    "{which} may be written by other users (mode {mode:o}) and is not sticky, so \
                     they could swap root's lock files; chmod go-w or +t it"
                ));
            }
        }
        Ok(())
    }

    /// Why root may not use the lock file or records file `path` whose fstat is `meta`.
    pub(super) fn file(&self, meta: &Metadata) -> Result<(), String> {
        if !self.root {
            return Ok(());
        }
        if !self.trusts(meta.uid()) {
            return Err(format!(
                "it belongs to {}, who could change or replace it under root; {}",
                owner(meta.uid()),
                opt_in(meta.uid())
            ));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(format!(
                "other users may write to it (mode {mode:o}) and could reset its token; chmod \
                 go-w it"
            ));
        }
        Ok(())
    }

    /// Why root may not make the empty lock file whose fstat is `meta` a dlock file: with other
    /// names (hard links) it may be any empty file of root's that someone linked into a directory
    /// they may write, and writing a header would spoil it. (dlock's own files are never empty,
    /// and flock(1)'s have one name.)
    pub(super) fn empty(&self, meta: &Metadata) -> Result<(), String> {
        if self.root && meta.nlink() > 1 {
            return Err(format!(
                "it is empty and has {} names (hard links), so it may be another file of \
                 root's; remove it if it is a lock file",
                meta.nlink()
            ));
        }
        Ok(())
    }
}

/// How root opts in to trusting `uid`, for the end of a refusal.
fn opt_in(uid: u32) -> String {
    let name = user_name(uid).unwrap_or_else(|| uid.to_string());
    format!(
        "as root dlock uses only root's lock directories and files unless told to trust their \
         owner (--trust-owner {name}, or trust-owner in the configuration)"
    )
}

/// `alice (uid 1000)`, or `uid 1000` for a uid with no name.
pub fn owner(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// The name of user `uid` in /etc/passwd, if it is there (a name for a message, nothing more).
pub fn user_name(uid: u32) -> Option<String> {
    passwd()?
        .into_iter()
        .find_map(|(name, id)| (id == uid).then_some(name))
}

/// The uid of `--trust-owner`'s USER: a user named in /etc/passwd, or a number (white space
/// around it, as in `backup, deploy`, is not part of it).
pub fn uid_of(user: &str) -> Result<u32, String> {
    let user = user.trim();
    if let Some((_, uid)) = passwd()
        .unwrap_or_default()
        .into_iter()
        .find(|(name, _)| name == user)
    {
        return Ok(uid);
    }
    user.parse::<u32>()
        .map_err(|_| format!("no user {user:?} in /etc/passwd (a name there, or a uid)"))
}

/// The names and uids of /etc/passwd (its first MiB), leaving out lines that cannot be read and
/// names that could not be printed as they are.
fn passwd() -> Option<Vec<(String, u32)>> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open("/etc/passwd")
        .ok()?
        .take(1 << 20)
        .read_to_string(&mut text)
        .ok()?;
    Some(
        text.lines()
            .filter_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let id: u32 = fields.nth(1)?.parse().ok()?;
                (!name.is_empty() && name.chars().all(|c| c.is_ascii_graphic()))
                    .then(|| (name.to_owned(), id))
            })
            .collect(),
    )
}
