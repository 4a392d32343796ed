//! What an operator asks of the lock directory: who holds a lock (`status`), every held lock
//! (`list`, which also names the entries that are not readable locks), and breaking a lock for
//! every holder (`release --force`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use dlock_core::error;
use dlock_core::error::FailAs;

use super::entry::{self, open_existing, read_header, Header};
use super::lock_file::{lock_header, LockFile};
use super::naming::name_of_stem;
use super::{plain_io, FileBackend, MAX_REPLACED};
use dlock_core::backend::{Listing, LockStatus};
use dlock_core::lock::{Holder, LockName};

impl FileBackend {
    /// `status`: who holds `name`, whose lock file is at `path`.
    pub(super) fn status_at(&self, name: &LockName, path: &Path) -> error::Result<LockStatus> {
        let location = path.display().to_string();
        let holders = match open_existing(path, false)? {
            None => vec![],
            Some(file) => {
                let lock = LockFile {
                    file,
                    path: path.to_owned(),
                };
                lock.check_header(name)?;
                self.holders_of(&lock)
                    .map_err(|e| error!("cannot read lock file {location}: {}", plain_io(&e)))
                    .unavailable()?
            }
        };
        Ok(LockStatus {
            name: name.clone(),
            holders,
            location,
            waiters: None,
        })
    }

    /// `list`: every held lock under `prefix`, and the entries that are not readable locks.
    pub(super) fn list_held(&self, prefix: &str) -> error::Result<Listing> {
        let mut listing = Listing::default();
        for (path, stem) in self.entries_ending(".lock")? {
            // An entry's name is known from its file name unless hashed; one that cannot match
            // the prefix is not looked at, readable or not.
            if name_of_stem(&stem).is_some_and(|name| !name.starts_with(prefix)) {
                continue;
            }
            match self.list_entry(&path, prefix) {
                Ok(Some(status)) => listing.held.push(status),
                Ok(None) => {}
                Err(e) => listing.unreadable.push(format!("{e:#}")),
            }
        }
        listing.held.sort_by(|a, b| a.name.cmp(&b.name));
        listing.unreadable.sort();
        Ok(listing)
    }

    /// `list --runs`: the locks with a `*.runs` file in the directory. A file's name says its lock,
    /// unless hashed: then the lock file beside it does, in its header. A name whose lock would
    /// live elsewhere (a file copied or renamed) is left out, as is what names no lock.
    pub(super) fn list_runs_at(&self, prefix: &str) -> error::Result<Vec<LockName>> {
        let mut names = Vec::new();
        for (path, stem) in self.entries_ending(".runs")? {
            let stem = stem.as_str();
            let name = match name_of_stem(stem) {
                Some(name) if !name.starts_with(prefix) => continue,
                Some(name) => LockName::new(&name).ok(),
                None => self.hashed_name(&path.with_extension("lock")),
            };
            let Some(name) = name else {
                continue;
            };
            if FileBackend::runs_path(&self.path_of(&name)) == path {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// The directory's entries whose names end in `suffix`, each with its name without it. A
    /// directory not made yet has none: only `run` makes it, and until then nothing is kept there.
    fn entries_ending(&self, suffix: &str) -> error::Result<Vec<(PathBuf, String)>> {
        let failed = |e: io::Error| {
            error!(
                "cannot read lock directory {}: {}",
                self.dir.display(),
                plain_io(&e)
            )
        };
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(failed(e)).unavailable(),
        };
        let mut found = Vec::new();
        for entry in entries {
            let path = entry.map_err(failed).unavailable()?.path();
            let stem = path
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(|f| f.strip_suffix(suffix))
                .map(str::to_owned);
            if let Some(stem) = stem {
                found.push((path, stem));
            }
        }
        Ok(found)
    }

    /// The name in the header of the lock file at `path`, if it has a dlock header.
    fn hashed_name(&self, path: &Path) -> Option<LockName> {
        let file = open_existing(path, false).ok()??;
        match read_header(&file, path).ok()? {
            Header::Dlock { name, .. } => LockName::new(&name).ok(),
            Header::Empty => None,
        }
    }

    /// `release --force`: replaces the lock file (see the module's documentation in mod.rs).
    pub(super) fn break_lock(&self, name: &LockName) -> error::Result<Vec<Holder>> {
        let path = self.path_of(name);
        for _ in 0..MAX_REPLACED {
            let Some(file) = open_existing(&path, true)? else {
                return Ok(vec![]);
            };
            self.trusted(&file, &path)?;
            let lock = LockFile {
                file,
                path: path.clone(),
            };
            lock.check_header(name)?;
            // The header lock orders us against acquirers and other breaks: one that took it
            // before us saw the old file current and its token is counted in the header we copy;
            // one after us sees the file replaced and starts over on the new one. So must we: a
            // break that waited here while another replaced the file would otherwise copy a stale
            // counter over the new file and hand its tokens out a second time.
            lock_header(&lock, libc::F_WRLCK)?;
            if !lock.is_current() {
                continue;
            }
            let header = lock.header(name)?;
            let holders = self
                .holders_of(&lock)
                .map_err(|e| error!("cannot read lock file {}: {}", path.display(), plain_io(&e)))
                .unavailable()?;
            if holders.is_empty() {
                return Ok(vec![]);
            }
            // Under the old file's header lock, so no new acquisition's run comes first.
            let owners: Vec<&str> = holders.iter().map(|h| h.owner.as_str()).collect();
            super::runs::forced(&FileBackend::runs_path(&path), &self.trust, &owners);
            let replaced = entry::write_fresh(&path, name, header.token()).and_then(|fresh| {
                fs::rename(&fresh, &path).inspect_err(|_| {
                    let _ = fs::remove_file(&fresh);
                })
            });
            return match replaced {
                Ok(()) => Ok(holders),
                Err(e) => Err(error!(
                    "cannot replace lock file {}: {}",
                    path.display(),
                    plain_io(&e)
                ))
                .unavailable(),
            };
        }
        Err(error!(
            "lock file {} was replaced {MAX_REPLACED} times while breaking it; try again",
            path.display()
        ))
        .unavailable()
    }

    /// One `*.lock` entry for `list`: its status if it is a held lock under `prefix` (an empty file
    /// held with flock(1) too, named by its file name), `None` if free, gone, another prefix's or
    /// an empty file with a hashed name, an error naming the
    /// entry if it is not a usable lock file.
    fn list_entry(&self, path: &Path, prefix: &str) -> error::Result<Option<LockStatus>> {
        let Some(file) = open_existing(path, false)? else {
            return Ok(None);
        };
        let lock = LockFile {
            file,
            path: path.to_owned(),
        };
        let name = match lock.settled(|l| read_header(&l.file, &l.path))? {
            Header::Dlock { name, .. } => LockName::new(&name)
                .map_err(|_| error!("lock file {} has a malformed dlock header", path.display()))?,
            // An empty file (flock(1) made it, or touch) names no lock: its file name does, unless
            // hashed. `status` of that name shows a flock(1) holder, so `list` does too.
            Header::Empty => {
                let stem = path
                    .file_name()
                    .and_then(|f| f.to_str())
                    .and_then(|f| f.strip_suffix(".lock"));
                match stem
                    .and_then(name_of_stem)
                    .and_then(|n| LockName::new(&n).ok())
                {
                    // Only the spelling `status` of that name opens (`%61.lock` is not "a"'s).
                    Some(name) if self.path_of(&name) == path => name,
                    _ => return Ok(None),
                }
            }
        };
        if self.path_of(&name) != path {
            return Err(error!(
                "lock file {} belongs to the lock {:?}, which lives in another file (copied or renamed?)",
                path.display(),
                name.as_str()
            ));
        }
        if !name.as_str().starts_with(prefix) {
            return Ok(None);
        }
        let holders = self
            .holders_of(&lock)
            .map_err(|e| error!("cannot read lock file {}: {}", path.display(), plain_io(&e)))?;
        Ok((!holders.is_empty()).then(|| LockStatus {
            name,
            holders,
            location: path.display().to_string(),
            waiters: None,
        }))
    }
}
