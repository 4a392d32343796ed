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
//!   record left by a killed holder is simply ignored.
//! - `--limit N` seats are one-byte OFD locks far past the end of the file (no data there).
//!
//! `release --force` cannot take a flock(2) lock away from a process; it replaces the file (keeping
//! the token) so new acquirers use a new inode, and each old holder notices at its next check that
//! its file is gone and reports the lock lost. Acquirers check, under the header lock, that the file
//! they locked is still the one at the path, so the replacement cannot let two holders in; a
//! forced release checks the same before copying the token counter, so it never copies a stale one.
//!
//! Files: `dir` chooses and checks the lock directory, `entry` decides whether what sits at a
//! lock's path may be used (and creates new lock files whole); this file keeps the locks.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Context};
use sha2::{Digest, Sha256};

use super::{
    Attempt, Backend, BackendConfig, Lease, Listing, LockStatus, Released, Renewal, Waiting,
};
use crate::exit::{FailWith, Failure};
use crate::lock::{host_name, Holder, LockName, LockRequest, Mode, Token};

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
/// Longest file stem kept readable before falling back to a hash of the name.
const MAX_READABLE_STEM: usize = 200;

mod dir;
mod entry;

use entry::{check_name, next_token, open_existing, read_header, Header};

pub struct FileBackend {
    dir: PathBuf,
}

/// How many times an operation starts over on a lock file replaced under it before giving up;
/// each start over means another dlock made progress, so this is never reached in practice.
const MAX_REPLACED: u32 = 1000;

impl FileBackend {
    /// Only `run` (`config.create`) creates a missing lock directory.
    pub fn open(config: &BackendConfig) -> anyhow::Result<FileBackend> {
        Ok(FileBackend {
            dir: dir::lock_dir(&config.urls, config.create)?,
        })
    }

    /// The lock file for a name: readable when the name is plain, percent-encoded when it has other
    /// characters (so `/` and `..` never reach the file system), hashed when that would be too long.
    pub fn path_of(&self, name: &LockName) -> PathBuf {
        self.dir.join(format!("{}.lock", file_stem(name)))
    }

    /// Opens the lock file for `name` to lock it, creating it if missing, and refuses (before any
    /// wait) a file that is not this lock's.
    fn open_lock_file(&self, name: &LockName) -> anyhow::Result<LockFile> {
        let path = self.path_of(name);
        for _ in 0..MAX_REPLACED {
            if let Some(file) = open_existing(&path, true)? {
                let lock = LockFile { file, path };
                lock.check_header(name)?;
                return Ok(lock);
            }
            entry::create(&path, name)?;
        }
        Err(anyhow!(
            "lock file {} keeps disappearing; is something removing it?",
            path.display()
        ))
        .fail_with(Failure::BackendUnavailable)
    }
}

/// An OS error in words, without Rust's `(os error N)`: `no space left on device`.
fn plain_io(e: &io::Error) -> String {
    let text = e.to_string();
    let text = text
        .rfind(" (os error ")
        .map_or(&text[..], |at| &text[..at]);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn is_plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// See `FileBackend::path_of`. Percent-encoded stems always contain `%XX`, hashed ones start with
/// `%%`, and plain ones contain no `%`, so two names never share a stem short of a hash collision.
pub fn file_stem(name: &LockName) -> String {
    let bytes = name.as_str().as_bytes();
    let plain = bytes.iter().all(|&b| is_plain_byte(b)) && bytes[0] != b'.';
    if plain && bytes.len() <= MAX_READABLE_STEM {
        return name.as_str().to_owned();
    }
    let mut encoded = String::with_capacity(bytes.len() * 3);
    for (i, &b) in bytes.iter().enumerate() {
        if is_plain_byte(b) && !(i == 0 && b == b'.') {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    if encoded.len() <= MAX_READABLE_STEM {
        return encoded;
    }
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("%%{hex}")
}

/// An open lock file and the path it was opened at.
struct LockFile {
    file: File,
    path: PathBuf,
}

impl LockFile {
    fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    /// Is the file we hold still the one at the path? (`release --force` replaces it.)
    fn is_current(&self) -> bool {
        let Ok(ours) = self.file.metadata() else {
            return false;
        };
        match fs::symlink_metadata(&self.path) {
            Ok(there) => there.dev() == ours.dev() && there.ino() == ours.ino(),
            Err(_) => false,
        }
    }

    /// The header, checked to be this lock's (see `entry::read_header`).
    fn check_header(&self, name: &LockName) -> anyhow::Result<Header> {
        self.settled(|lock| lock.header(name))
    }

    /// Reads the header without the header lock, as nearly always nothing writes it; a header that
    /// looks wrong is read again under the lock before it is refused, in case another dlock was
    /// that moment making an empty file its own.
    fn settled<T>(&self, read: impl Fn(&LockFile) -> anyhow::Result<T>) -> anyhow::Result<T> {
        match read(self) {
            Ok(found) => Ok(found),
            Err(_) => {
                lock_header(self, libc::F_RDLCK)?;
                let again = read(self);
                unlock_range(self.fd(), 0, HEADER_LEN);
                again
            }
        }
    }

    /// The header, read as it is (under the header lock for a result that stays true).
    fn header(&self, name: &LockName) -> anyhow::Result<Header> {
        let header = read_header(&self.file, &self.path)?;
        check_name(&header, name, &self.path)?;
        Ok(header)
    }
}

/// Takes the header lock (`F_WRLCK` to change the header, `F_RDLCK` to read it), waiting for it:
/// others hold it only for a few system calls.
fn lock_header(lock: &LockFile, kind: i32) -> anyhow::Result<()> {
    loop {
        match ofd_lock(lock.fd(), libc::F_OFD_SETLKW, kind, 0, HEADER_LEN) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(anyhow!(
                    "cannot lock the header of {}: {}",
                    lock.path.display(),
                    plain_io(&e)
                ))
                .fail_with(Failure::BackendUnavailable)
            }
        }
    }
}

/// flock(2) operations.
fn flock(fd: i32, op: i32) -> io::Result<()> {
    // SAFETY: flock on a valid descriptor has no memory effects.
    if unsafe { libc::flock(fd, op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Open-file-description byte-range locks (fcntl F_OFD_*): owned by the open file like flock(2)
/// locks, independent of them, and dropped when the descriptor closes or the process dies.
fn ofd_lock(fd: i32, cmd: i32, kind: i32, start: u64, len: u64) -> io::Result<libc::flock> {
    // SAFETY: an all-zero flock struct is valid; we set the fields the call reads.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    // SAFETY: fl is a valid flock struct for the duration of the call.
    if unsafe { libc::fcntl(fd, cmd, &mut fl) } == 0 {
        Ok(fl)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn is_would_block(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EWOULDBLOCK) | Some(libc::EACCES)
    )
}

fn try_range(fd: i32, start: u64, len: u64) -> io::Result<bool> {
    match ofd_lock(fd, libc::F_OFD_SETLK, libc::F_WRLCK, start, len) {
        Ok(_) => Ok(true),
        Err(e) if is_would_block(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

fn unlock_range(fd: i32, start: u64, len: u64) {
    // Unlocking a range we hold cannot fail in a way we could act on; closing the file unlocks too.
    let _ = ofd_lock(fd, libc::F_OFD_SETLK, libc::F_UNLCK, start, len);
}

/// Is some other open file holding a lock on this range?
fn range_is_locked(fd: i32, start: u64, len: u64) -> io::Result<bool> {
    let fl = ofd_lock(fd, libc::F_OFD_GETLK, libc::F_WRLCK, start, len)?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// Blocks until `op` succeeds, or returns `Ok(false)` once `waiting` is cancelled. The supervisor
/// interrupts the blocking call with a signal after cancelling, so EINTR is the cue to look.
fn blocking<F: FnMut() -> io::Result<()>>(waiting: &Waiting, mut op: F) -> io::Result<bool> {
    loop {
        if waiting.is_cancelled() {
            return Ok(false);
        }
        match op() {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// How an acquisition may wait.
enum Wait<'a> {
    Never,
    Until(&'a Waiting),
}

enum Step {
    Held(FileLease),
    Busy(Vec<Holder>),
    Cancelled,
    /// The file was replaced under us (`release --force`): open the new one and start again.
    Retry,
}

impl FileBackend {
    fn attempt(&self, request: &LockRequest, wait: &Wait) -> anyhow::Result<Step> {
        let lock = self.open_lock_file(&request.name)?;
        let fd = lock.fd();
        let path = lock.path.display().to_string();
        let ctx = || format!("cannot lock {path}");

        // A `--limit` holder first takes a seat, waiting its turn at the turnstile if all are taken.
        let seat = match request.mode {
            Mode::Limit(n) => match take_seat(fd, n, wait).with_context(ctx)? {
                Some(seat) => Some(seat),
                None if matches!(wait, Wait::Never) => {
                    return Ok(Step::Busy(self.holders_of(&lock).unwrap_or_default()))
                }
                None => return Ok(Step::Cancelled),
            },
            _ => None,
        };

        let op = match request.mode {
            Mode::Exclusive => libc::LOCK_EX,
            Mode::Shared | Mode::Limit(_) => libc::LOCK_SH,
        };
        match flock(fd, op | libc::LOCK_NB) {
            Ok(()) => {}
            Err(e) if is_would_block(&e) => match wait {
                Wait::Never => return Ok(Step::Busy(self.holders_of(&lock).unwrap_or_default())),
                Wait::Until(waiting) => {
                    waiting.busy(&self.holders_of(&lock).unwrap_or_default());
                    if !blocking(waiting, || flock(fd, op)).with_context(ctx)? {
                        return Ok(Step::Cancelled);
                    }
                }
            },
            Err(e) => return Err(e).with_context(ctx),
        }

        // Under the header lock: is this still the file at the path, and what is the next token?
        // Every token is handed out here, after this check, so a file replaced by `release
        // --force` never hands out one more, and the counter only grows (never wraps, see
        // `next_token`).
        lock_header(&lock, libc::F_WRLCK)?;
        if !lock.is_current() {
            return Ok(Step::Retry);
        }
        let token = next_token(&lock.header(&request.name)?, &lock.path)?;
        entry::write_header(&lock.file, &request.name, token)
            .map_err(|e| anyhow!("cannot write lock file {path}: {}", plain_io(&e)))
            .fail_with(Failure::BackendUnavailable)?;
        unlock_range(fd, 0, HEADER_LEN);

        let holder = Holder {
            mode: request.mode,
            host: Some(host_name()),
            pid: Some(std::process::id()),
            owner: request.owner.clone(),
            since: Some(SystemTime::now()),
            token: Some(token),
            unreadable: None,
        };
        let record = claim_record(&lock, &holder)
            .map_err(|e| anyhow!("cannot write a holder record in {path}: {}", plain_io(&e)))
            .fail_with(Failure::BackendUnavailable)?;
        let _ = seat; // the seat's lock lives as long as the file stays open
        Ok(Step::Held(FileLease {
            lock,
            token,
            record,
            check_every: request.ttl / 3,
        }))
    }

    /// Live holders of an open lock file: dlock's own records, plus any flock(2) holder that left no
    /// record (someone using flock(1) on the file).
    fn holders_of(&self, lock: &LockFile) -> io::Result<Vec<Holder>> {
        let fd = lock.fd();
        let size = lock.file.metadata()?.len();
        let mut holders = Vec::new();
        let mut index = 0;
        while HEADER_LEN + index * RECORD_LEN < size && index < MAX_RECORDS {
            let start = HEADER_LEN + index * RECORD_LEN;
            index += 1;
            let mut buf = vec![0u8; RECORD_LEN as usize];
            let n = lock.file.read_at(&mut buf, start)?;
            if n == 0 || buf[0] == 0 || !range_is_locked(fd, start, RECORD_LEN)? {
                continue;
            }
            if let Some(holder) = parse_record(&buf[..n]) {
                holders.push(holder);
            }
        }
        // Only when no dlock holder is recorded can the holder be someone else (flock(1)); reading
        // /proc/locks costs more than all of the above, so it is the last resort.
        if holders.is_empty() {
            holders.extend(
                proc_locks_flock_holders(&lock.file)?
                    .into_iter()
                    .map(foreign_holder),
            );
        }
        Ok(holders)
    }

    fn status_at(&self, name: &LockName, path: &Path) -> anyhow::Result<LockStatus> {
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
                    .map_err(|e| anyhow!("cannot read lock file {location}: {}", plain_io(&e)))
                    .fail_with(Failure::BackendUnavailable)?
            }
        };
        Ok(LockStatus {
            name: name.clone(),
            holders,
            location,
        })
    }
}

/// Takes a free seat among the first `n`, or returns `None` (busy, or cancelled while waiting).
fn take_seat(fd: i32, n: u32, wait: &Wait) -> io::Result<Option<u64>> {
    let try_seats = || -> io::Result<Option<u64>> {
        for seat in 0..u64::from(n) {
            if try_range(fd, SEATS_OFFSET + seat, 1)? {
                return Ok(Some(seat));
            }
        }
        Ok(None)
    };
    if let Some(seat) = try_seats()? {
        return Ok(Some(seat));
    }
    let Wait::Until(waiting) = wait else {
        return Ok(None);
    };
    // The kernel cannot wait for "any of N ranges", so waiters queue on the turnstile and only the
    // one at its head polls the seats, with a short backoff: no herd, and first come first served.
    let turnstile =
        || ofd_lock(fd, libc::F_OFD_SETLKW, libc::F_WRLCK, TURNSTILE_OFFSET, 1).map(|_| ());
    if !blocking(waiting, turnstile)? {
        return Ok(None);
    }
    let mut pause = Duration::from_millis(1);
    let seat = loop {
        if waiting.is_cancelled() {
            break None;
        }
        if let Some(seat) = try_seats()? {
            break Some(seat);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    };
    unlock_range(fd, TURNSTILE_OFFSET, 1);
    Ok(seat)
}

/// Claims the first free record slot and writes the holder into it.
fn claim_record(lock: &LockFile, holder: &Holder) -> io::Result<u64> {
    let fd = lock.fd();
    for index in 0..MAX_RECORDS {
        let start = HEADER_LEN + index * RECORD_LEN;
        if try_range(fd, start, RECORD_LEN)? {
            let mut buf = format_record(holder).into_bytes();
            buf.truncate(RECORD_LEN as usize - 1);
            buf.resize(RECORD_LEN as usize, 0);
            lock.file.write_all_at(&buf, start)?;
            return Ok(start);
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_RECORDS} holders at once"
    )))
}

/// A holder's line in its record slot: `dlock1 OWNER` and the holder's record.
fn format_record(h: &Holder) -> String {
    format!("dlock1 {} {}\n", h.owner, h.record())
}

/// The holder a live record slot stands for. Anyone who can open the lock file can write the slot,
/// so a record that does not parse is still a holder (the slot is locked), marked unreadable;
/// `None` only for a blank slot.
fn parse_record(buf: &[u8]) -> Option<Holder> {
    let end = buf
        .iter()
        .position(|&b| b == b'\n' || b == 0)
        .unwrap_or(buf.len());
    if end == 0 {
        return None;
    }
    let line = String::from_utf8_lossy(&buf[..end]);
    match line.strip_prefix("dlock1 ").and_then(|l| l.split_once(' ')) {
        Some((owner, record)) => Some(Holder::from_record(owner, record)),
        None => Some(Holder::unreadable(Mode::Exclusive, "", &line)),
    }
}

/// A holder that is not dlock (flock(1), or a program calling flock(2)): all we know is its pid
/// (and that it is on this machine); it keeps no time or token.
fn foreign_holder(pid: u32) -> Holder {
    Holder {
        mode: Mode::Exclusive,
        host: Some(host_name()),
        pid: Some(pid),
        owner: "(not dlock: flock)".into(),
        since: None,
        token: None,
        unreadable: None,
    }
}

/// Pids holding (not waiting for) a flock(2) lock on this file, from /proc/locks.
fn proc_locks_flock_holders(file: &File) -> io::Result<Vec<u32>> {
    let meta = file.metadata()?;
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let table = match fs::read_to_string("/proc/locks") {
        Ok(t) => t,
        Err(_) => return Ok(vec![]),
    };
    Ok(table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->" after the number.
            if fields.get(1) != Some(&"FLOCK") || fields.get(5) != Some(&id.as_str()) {
                return None;
            }
            fields.get(4)?.parse().ok()
        })
        .collect())
}

impl Backend for FileBackend {
    fn location(&self) -> String {
        format!("file:{}", self.dir.display())
    }

    fn try_acquire(&self, request: &LockRequest, _then_wait: bool) -> anyhow::Result<Attempt> {
        loop {
            match self.attempt(request, &Wait::Never)? {
                Step::Held(lease) => return Ok(Attempt::Acquired(Box::new(lease))),
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
    ) -> anyhow::Result<Option<Box<dyn Lease>>> {
        loop {
            match self.attempt(request, &Wait::Until(waiting))? {
                Step::Held(lease) => return Ok(Some(Box::new(lease))),
                Step::Busy(_) | Step::Cancelled => return Ok(None),
                Step::Retry => continue,
            }
        }
    }

    fn status(&self, name: &LockName) -> anyhow::Result<LockStatus> {
        self.status_at(name, &self.path_of(name))
    }

    fn list(&self, prefix: &str) -> anyhow::Result<Listing> {
        let failed = |e: io::Error| {
            anyhow!(
                "cannot read lock directory {}: {}",
                self.dir.display(),
                plain_io(&e)
            )
        };
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            // Only `run` makes the directory; until then no lock is held in it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listing::default()),
            Err(e) => return Err(failed(e)).fail_with(Failure::BackendUnavailable),
        };
        let mut listing = Listing::default();
        for entry in entries {
            let path = entry
                .map_err(failed)
                .fail_with(Failure::BackendUnavailable)?
                .path();
            let Some(stem) = path
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(|f| f.strip_suffix(".lock"))
            else {
                continue;
            };
            // An entry's name is known from its file name unless hashed; one that cannot match
            // the prefix is not looked at, readable or not.
            if name_of_stem(stem).is_some_and(|name| !name.starts_with(prefix)) {
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

    fn force_release(&self, name: &LockName) -> anyhow::Result<Vec<Holder>> {
        let path = self.path_of(name);
        for _ in 0..MAX_REPLACED {
            let Some(file) = open_existing(&path, true)? else {
                return Ok(vec![]);
            };
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
                .map_err(|e| anyhow!("cannot read lock file {}: {}", path.display(), plain_io(&e)))
                .fail_with(Failure::BackendUnavailable)?;
            if holders.is_empty() {
                return Ok(vec![]);
            }
            let replaced = entry::write_fresh(&path, name, header.token()).and_then(|fresh| {
                fs::rename(&fresh, &path).inspect_err(|_| {
                    let _ = fs::remove_file(&fresh);
                })
            });
            return match replaced {
                Ok(()) => Ok(holders),
                Err(e) => Err(anyhow!(
                    "cannot replace lock file {}: {}",
                    path.display(),
                    plain_io(&e)
                ))
                .fail_with(Failure::BackendUnavailable),
            };
        }
        Err(anyhow!(
            "lock file {} was replaced {MAX_REPLACED} times while breaking it; try again",
            path.display()
        ))
        .fail_with(Failure::BackendUnavailable)
    }
}

impl FileBackend {
    /// One `*.lock` entry for `list`: its status if it is a held lock under `prefix`, `None` if
    /// free, gone, empty (flock(1)'s, which names no lock) or another prefix's, an error naming the
    /// entry if it is not a usable lock file.
    fn list_entry(&self, path: &Path, prefix: &str) -> anyhow::Result<Option<LockStatus>> {
        let Some(file) = open_existing(path, false)? else {
            return Ok(None);
        };
        let lock = LockFile {
            file,
            path: path.to_owned(),
        };
        let Header::Dlock { name, .. } = lock.settled(|l| read_header(&l.file, &l.path))? else {
            return Ok(None);
        };
        let name = LockName::new(&name)
            .map_err(|_| anyhow!("lock file {} has a malformed dlock header", path.display()))?;
        if self.path_of(&name) != path {
            return Err(anyhow!(
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
            .map_err(|e| anyhow!("cannot read lock file {}: {}", path.display(), plain_io(&e)))?;
        Ok((!holders.is_empty()).then(|| LockStatus {
            name,
            holders,
            location: path.display().to_string(),
        }))
    }
}

/// The lock name a file stem spells (the inverse of `file_stem`), or `None` for a hashed stem or
/// one `file_stem` never makes.
fn name_of_stem(stem: &str) -> Option<String> {
    if stem.starts_with("%%") {
        return None;
    }
    let bytes = stem.as_bytes();
    let mut name = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            name.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            name.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(name).ok()
}

/// A held lock file. Its locks (flock, seat, record) all live in the open file and go when it closes.
struct FileLease {
    lock: LockFile,
    token: Token,
    record: u64,
    check_every: Duration,
}

impl FileLease {
    fn replaced(&self) -> String {
        format!(
            "lock file {} was removed or replaced (dlock release --force?)",
            self.lock.path.display()
        )
    }
}

impl Lease for FileLease {
    fn token(&self) -> Token {
        self.token
    }

    fn renew(&mut self) -> Renewal {
        if self.lock.is_current() {
            Renewal::Held {
                next: self.check_every,
            }
        } else {
            Renewal::Lost(self.replaced())
        }
    }

    fn release(self: Box<Self>) -> anyhow::Result<Released> {
        let released = if self.lock.is_current() {
            Released::Held
        } else {
            Released::Lost(self.replaced())
        };
        // Clear the record first so nobody reads it as ours after the locks go; closing unlocks.
        let _ = self
            .lock
            .file
            .write_all_at(&[0u8; RECORD_LEN as usize], self.record);
        drop(self.lock);
        Ok(released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stem(s: &str) -> String {
        file_stem(&LockName::new(s).unwrap())
    }

    #[test]
    fn plain_names_keep_their_spelling() {
        assert_eq!(stem("nightly-backup"), "nightly-backup");
        assert_eq!(stem("a.b_c"), "a.b_c");
    }

    #[test]
    fn names_that_could_escape_the_directory_are_encoded() {
        assert_eq!(stem("../etc/passwd"), "%2E.%2Fetc%2Fpasswd");
        assert_eq!(stem(".."), "%2E.");
        assert_eq!(stem("a/b"), "a%2Fb");
        assert!(!stem("x/../../y").contains('/'));
    }

    #[test]
    fn long_names_are_hashed_and_distinct() {
        let a = stem(&"é".repeat(200));
        let b = stem(&format!("{}x", "é".repeat(199)));
        assert!(a.starts_with("%%") && a.len() == 66);
        assert_ne!(a, b);
    }

    #[test]
    fn records_round_trip() {
        let h = Holder {
            mode: Mode::Limit(3),
            host: Some("box".into()),
            pid: Some(42),
            owner: "00ff".into(),
            since: Some(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            token: Some(9),
            unreadable: None,
        };
        assert_eq!(parse_record(format_record(&h).as_bytes()), Some(h));
        let forged = parse_record(b"dlock1 ab exclusive 5 99999999999999 2 host\n").unwrap();
        assert!(forged.describe().contains("unreadable record"));
        assert!(parse_record(b"\xff\x1b[2J").unwrap().unreadable.is_some());
        assert_eq!(parse_record(b"\0\0"), None);
    }

    proptest::proptest! {
        /// Hostile names: whatever the name, its lock file is one plain entry of the lock
        /// directory (no `/`, not `.` or `..`, short enough for any file system), and distinct names
        /// get distinct files.
        #[test]
        fn any_name_maps_to_one_safe_file_name(a in "\\PC{1,200}", b in "\\PC{1,200}") {
            for raw in [&a, &b] {
                let Ok(name) = LockName::new(raw) else { continue };
                let stem = file_stem(&name);
                proptest::prop_assert!(!stem.contains('/') && !stem.contains('\0'));
                proptest::prop_assert!(!stem.starts_with('.'));
                proptest::prop_assert!(stem.len() <= 200 && !stem.is_empty());
                let path = Path::new("/locks").join(format!("{stem}.lock"));
                proptest::prop_assert_eq!(path.parent(), Some(Path::new("/locks")));
            }
            if let (Ok(na), Ok(nb)) = (LockName::new(&a), LockName::new(&b)) {
                proptest::prop_assert_eq!(na == nb, file_stem(&na) == file_stem(&nb));
            }
        }

        #[test]
        fn records_never_panic_on_garbage(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            if let Some(h) = parse_record(&bytes) {
                let text = h.describe();
                proptest::prop_assert!(!text.chars().any(|c| c.is_control()), "{:?}", text);
                serde_json::to_string(&h).expect("a holder always serialises");
            }
        }
    }
}
