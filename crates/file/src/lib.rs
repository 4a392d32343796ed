//! The serverless backend: one lock file per name in a local directory, locked with flock(2) so that
//! `flock(1)` on the same file excludes `dlock run` and the reverse. The kernel drops a dead
//! process's locks at once, so a SIGKILLed holder frees the lock with no timeout.
//!
//! Layout of a lock file (all of it optional: a file made by `flock(1)` is empty and works too):
//! - bytes 0..4096, the header: magic `dlock-v1`, the last fencing token (u64, little-endian) at 8,
//!   the name's length (u32) at 16 and the name at 20. Header updates happen under an OFD lock on
//!   this range, which is independent of the flock(2) lock that decides who holds the name.
//! - from 4096, holder records of 512 bytes, one line of text each. A holder keeps an OFD write lock
//!   on its record's range while it holds, so `status` asks the kernel which records are live and a
//!   record left by a killed holder is simply ignored; one whose second line says `--min-hold`
//!   keeps it until a time still to come stands until then (see `kept`).
//! - `--limit N` seats are one-byte OFD locks far past the end of the file (no data there).
//!
//! `release --force` cannot take a flock(2) lock away from a process; it replaces the file (keeping
//! the token) so new acquirers use a new inode, and each old holder notices at its next check that
//! its file is gone and reports the lock lost. Acquirers check, under the header lock, that the file
//! they locked is still the one at the path, so the replacement cannot let two holders in; a
//! forced release checks the same before copying the token counter, so it never copies a stale one.
//!
//! Files: `dir` chooses and checks the lock directory, `trust` says whose directories and files
//! root may use, `entry` decides whether what sits at a lock's path may be used (and creates new
//! lock files whole), `naming` turns a lock's name into its file's name and back, `lock_file` holds
//! the kernel's locks on an open lock file, `lease` takes a lock (a seat first for `--limit`) and
//! keeps it, `record` writes and reads the holder records, `kept` makes acquirers wait out the
//! records `--min-hold` keeps, `runs` keeps the last run and the last success beside the lock file
//! (`STEM.runs`), `group` the concurrency group record (`STEM.group`), and `listing` answers
//! `status`, `list` and `release --force`; this file is the layout and the backend's entry points.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use dlock_core::error;
use dlock_core::error::FailAs;

use dlock_core::backend::{Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Waiting};
use dlock_core::lock::{Holder, LastRuns, LockName, LockRequest, Run};
/// An OS error in words, for the messages of every file of this backend.
use dlock_core::report::plain as plain_io;

const MAGIC: &[u8; 8] = b"dlock-v1";
const TOKEN_OFFSET: u64 = 8;
const NAME_LEN_OFFSET: u64 = 16;
const NAME_OFFSET: u64 = 20;
const HEADER_LEN: u64 = 4096;
const RECORD_LEN: u64 = 512;
/// Most holder records a lock file can carry at once (shared holders and seats together).
const MAX_RECORDS: u64 = 4096;
/// Seats of `--limit N` locks: one byte each at this offset, never written, only locked.
const SEATS_OFFSET: u64 = 1 << 40;
/// The queue of `--limit` waiters: one of them at a time looks for a free seat.
const TURNSTILE_OFFSET: u64 = SEATS_OFFSET - 1;

mod dir;
mod entry;
mod group;
mod kept;
mod lease;
mod listing;
mod lock_file;
mod naming;
mod record;
mod runs;
mod trust;

pub use dir::{default_base, not_ours};
use entry::open_existing;
use lease::{Step, Wait};
use lock_file::LockFile;
use naming::file_stem;
pub use trust::uid_of;

pub struct FileBackend {
    dir: PathBuf,
    /// Whose lock files and records files root may use (see `trust`).
    trust: trust::Trust,
}

/// How many times an operation starts over on a lock file replaced under it before giving up;
/// each start over means another dlock made progress, so this is never reached in practice.
const MAX_REPLACED: u32 = 1000;

impl FileBackend {
    /// Only `run` (`config.create`) creates a missing lock directory, and only the default one.
    pub fn open(config: &BackendConfig) -> error::Result<FileBackend> {
        let trust = trust::Trust::new(&config.trust_owners);
        Ok(FileBackend {
            dir: dir::lock_dir(&config.urls, config.create, &trust)?,
            trust,
        })
    }

    /// The lock file for a name: readable when the name is plain, percent-encoded when it has other
    /// characters (so `/` and `..` never reach the file system), hashed when that would be too long.
    pub fn path_of(&self, name: &LockName) -> PathBuf {
        self.dir.join(format!("{}.lock", file_stem(name)))
    }

    /// The file of a lock's last runs (see `runs`): beside its lock file, `.runs` for `.lock`.
    fn runs_path(lock_path: &Path) -> PathBuf {
        lock_path.with_extension("runs")
    }

    /// Opens the lock file for `name` to lock it, creating it if missing, and refuses (before any
    /// wait) a file that is not this lock's.
    fn open_lock_file(&self, name: &LockName) -> error::Result<LockFile> {
        let path = self.path_of(name);
        for _ in 0..MAX_REPLACED {
            if let Some(file) = open_existing(&path, true)? {
                self.trusted(&file, &path)?;
                let lock = LockFile { file, path };
                if lock.check_header(name)? == entry::Header::Empty {
                    self.trusted_empty(&lock)?;
                }
                return Ok(lock);
            }
            entry::create(&path, name)?;
        }
        Err(error!(
            "lock file {} keeps disappearing; is something removing it?",
            path.display()
        ))
        .unavailable()
    }

    /// Refuses, as root, an empty lock file with other names (see `Trust::empty`).
    fn trusted_empty(&self, lock: &LockFile) -> error::Result<()> {
        let refused = match lock.file.metadata() {
            Ok(meta) => self.trust.empty(&meta),
            Err(e) => Err(format!("cannot inspect it: {}", plain_io(&e))),
        };
        refused
            .map_err(|why| error!("refusing lock file {}: {why}", lock.path.display()))
            .unavailable()
    }

    /// Refuses, as root, a lock file another user owns or may write (see `trust`).
    fn trusted(&self, file: &std::fs::File, path: &Path) -> error::Result<()> {
        let refused = match file.metadata() {
            Ok(meta) => self.trust.file(&meta),
            Err(e) => Err(format!("cannot inspect it: {}", plain_io(&e))),
        };
        refused
            .map_err(|why| error!("refusing lock file {}: {why}", path.display()))
            .unavailable()
    }
}

impl Backend for FileBackend {
    fn location(&self) -> String {
        format!("file:{}", self.dir.display())
    }

    fn try_acquire(&self, request: &LockRequest) -> error::Result<Attempt> {
        loop {
            match self.attempt(request, &Wait::Never)? {
                Step::Held(lease) => return Ok(Attempt::Acquired(lease)),
                Step::Busy(holders) => return Ok(Attempt::Busy(holders)),
                Step::Cancelled => return Ok(Attempt::Busy(vec![])),
                Step::Retry => continue,
            }
        }
    }

    fn acquire(
        &self,
        request: &LockRequest,
        waiting: &Waiting,
    ) -> error::Result<Option<Box<dyn Lease>>> {
        loop {
            match self.attempt(request, &Wait::Until(waiting))? {
                Step::Held(lease) => return Ok(Some(lease)),
                Step::Busy(_) | Step::Cancelled => return Ok(None),
                Step::Retry => continue,
            }
        }
    }

    fn status(&self, name: &LockName) -> error::Result<LockStatus> {
        self.status_at(name, &self.path_of(name))
    }

    fn list(&self, prefix: &str) -> error::Result<Listing> {
        self.list_held(prefix)
    }

    fn last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        let path = FileBackend::runs_path(&self.path_of(name));
        runs::last_runs(&path, &self.trust)
            .map_err(|e| error!("cannot read {}: {}", path.display(), plain_io(&e)))
            .unavailable()
    }

    fn list_runs(&self, prefix: &str) -> error::Result<dlock_core::backend::RunsFound> {
        let names = self.list_runs_at(prefix)?;
        // A records file that cannot be read (a FIFO at its path, no right to read it) hides no
        // other: it is shown as an unreadable record saying why.
        dlock_core::backend::runs_of(prefix, names, |name| {
            Ok(self.last_runs(name).unwrap_or_else(|e| LastRuns {
                last_run: Some(Run::unreadable(&format!("{e:#}"))),
                last_success: None,
            }))
        })
    }

    fn force_release(&self, name: &LockName) -> error::Result<Vec<Holder>> {
        self.break_lock(name)
    }

    fn groups(&self) -> Option<&dyn dlock_core::backend::GroupRecords> {
        Some(self)
    }
}
