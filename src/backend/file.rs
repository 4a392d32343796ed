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
//! they locked is still the one at the path, so the replacement cannot let two holders in.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context};
use sha2::{Digest, Sha256};

use super::{Attempt, Backend, BackendConfig, Lease, LockStatus, Renewal, Waiting};
use crate::exit::{FailWith, Failure};
use crate::lock::{host_name, Holder, LockName, LockRequest, Mode, Token, MAX_NAME_BYTES};
use crate::url::redact;

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

pub struct FileBackend {
    dir: PathBuf,
}

impl FileBackend {
    pub fn open(config: &BackendConfig) -> anyhow::Result<FileBackend> {
        let dir = match config.urls.as_slice() {
            [] => default_dir()?,
            [url] => explicit_dir(url)?,
            _ => {
                return Err(anyhow!(
                    "the file backend takes one --url, not {}",
                    config.urls.len()
                ))
                .fail_with(Failure::Usage)
            }
        };
        Ok(FileBackend { dir })
    }

    /// The lock file for a name: readable when the name is plain, percent-encoded when it has other
    /// characters (so `/` and `..` never reach the file system), hashed when that would be too long.
    pub fn path_of(&self, name: &LockName) -> PathBuf {
        self.dir.join(format!("{}.lock", file_stem(name)))
    }

    fn open_lock_file(&self, name: &LockName) -> anyhow::Result<LockFile> {
        let path = self.path_of(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| explain_open_error(&path, e))
            .fail_with(Failure::BackendUnavailable)?;
        Ok(LockFile { file, path })
    }
}

fn explain_open_error(path: &Path, e: io::Error) -> anyhow::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        anyhow!(
            "lock file {} is a symbolic link; refusing to follow it",
            path.display()
        )
    } else {
        anyhow!("cannot open lock file {}: {e}", path.display())
    }
}

/// `$XDG_RUNTIME_DIR/dlock`, else `/tmp/dlock-<uid>`: created 0700, refused if it is a symbolic
/// link or another user's, since whoever controls the directory controls the locks.
fn default_dir() -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(run) if !run.is_empty() => PathBuf::from(run).join("dlock"),
        _ => PathBuf::from(format!("/tmp/dlock-{}", current_uid())),
    };
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(anyhow!(
                "cannot create lock directory {}: {e}",
                dir.display()
            ))
            .fail_with(Failure::BackendUnavailable)
        }
    }
    let meta = fs::symlink_metadata(&dir)
        .with_context(|| format!("cannot inspect lock directory {}", dir.display()))
        .fail_with(Failure::BackendUnavailable)?;
    let refuse = |why: &str| {
        Err(anyhow!("refusing lock directory {}: {why}", dir.display()))
            .fail_with(Failure::BackendUnavailable)
    };
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link");
    }
    if !meta.is_dir() {
        return refuse("it is not a directory");
    }
    if meta.uid() != current_uid() {
        return refuse(&format!("it belongs to uid {}, not to you", meta.uid()));
    }
    check_dir_usable(&dir, &meta)?;
    Ok(dir)
}

/// A directory named by `--url`: `file:///path`, or a plain path. Created if missing.
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
    if !path.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("cannot create lock directory {}", path.display()))
            .fail_with(Failure::BackendUnavailable)?;
    }
    let path = path
        .canonicalize()
        .with_context(|| format!("cannot use lock directory {}", path.display()))
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
    check_dir_usable(&path, &meta)?;
    Ok(path)
}

/// Writable by us, and not writable by everyone unless sticky (else anyone could swap lock files).
fn check_dir_usable(dir: &Path, meta: &fs::Metadata) -> anyhow::Result<()> {
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Err(anyhow!(
            "refusing lock directory {}: it is writable by every user and not sticky (mode {:o})",
            dir.display(),
            mode & 0o7777
        ))
        .fail_with(Failure::BackendUnavailable);
    }
    let c_path = CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: c_path is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(anyhow!(
            "lock directory {} is not writable: {}",
            dir.display(),
            io::Error::last_os_error()
        ))
        .fail_with(Failure::BackendUnavailable);
    }
    Ok(())
}

fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
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

    fn read_token(&self) -> io::Result<Token> {
        let mut buf = [0u8; 8];
        match self.file.read_exact_at(&mut buf, TOKEN_OFFSET) {
            Ok(()) => Ok(u64::from_le_bytes(buf)),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Writes the header fields; the caller holds the header lock.
    fn write_header(&self, name: &LockName, token: Token) -> io::Result<()> {
        let mut header = Vec::with_capacity(NAME_OFFSET as usize + MAX_NAME_BYTES);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&token.to_le_bytes());
        header.extend_from_slice(&(name.as_str().len() as u32).to_le_bytes());
        header.extend_from_slice(name.as_str().as_bytes());
        self.file.write_all_at(&header, 0)
    }

    /// Checks the magic and the stored name, so a file that is not ours (or, absurdly, a hash
    /// collision) is never mistaken for the lock of `name`.
    fn check_header(&self, name: &LockName) -> anyhow::Result<()> {
        match read_header_name(&self.file)? {
            None => Ok(()),
            Some(stored) if stored == name.as_str() => Ok(()),
            Some(stored) => bail!(
                "lock file {} belongs to the lock {stored:?}, not {:?}",
                self.path.display(),
                name.as_str()
            ),
        }
    }
}

/// The name stored in a lock file's header; `None` for a file without one (new, or made by flock(1)).
fn read_header_name(file: &File) -> io::Result<Option<String>> {
    let mut fixed = [0u8; NAME_OFFSET as usize];
    match file.read_exact_at(&mut fixed, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    if &fixed[..8] != MAGIC {
        return Ok(None);
    }
    let len_at = NAME_LEN_OFFSET as usize;
    let len = u32::from_le_bytes(fixed[len_at..len_at + 4].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_NAME_BYTES {
        return Ok(None);
    }
    let mut name = vec![0u8; len];
    file.read_exact_at(&mut name, NAME_OFFSET)?;
    Ok(String::from_utf8(name).ok())
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
        ofd_lock(fd, libc::F_OFD_SETLKW, libc::F_WRLCK, 0, HEADER_LEN).with_context(ctx)?;
        if !lock.is_current() {
            return Ok(Step::Retry);
        }
        lock.check_header(&request.name)?;
        let token = lock.read_token().with_context(ctx)? + 1;
        lock.write_header(&request.name, token).with_context(ctx)?;
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
        let record = claim_record(&lock, &holder).with_context(ctx)?;
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
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(LockStatus {
                    name: name.clone(),
                    holders: vec![],
                    location,
                })
            }
            Err(e) => {
                return Err(explain_open_error(path, e)).fail_with(Failure::BackendUnavailable)
            }
        };
        let lock = LockFile {
            file,
            path: path.to_owned(),
        };
        let holders = self
            .holders_of(&lock)
            .with_context(|| format!("cannot read lock file {location}"))?;
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

    fn list(&self, prefix: &str) -> anyhow::Result<Vec<LockStatus>> {
        let entries = fs::read_dir(&self.dir)
            .with_context(|| format!("cannot read lock directory {}", self.dir.display()))
            .fail_with(Failure::BackendUnavailable)?;
        let mut held = Vec::new();
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "lock") {
                continue;
            }
            let Ok(file) = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
            else {
                continue;
            };
            let Some(Ok(name)) = read_header_name(&file)?.map(|n| LockName::new(&n)) else {
                continue;
            };
            if !name.as_str().starts_with(prefix) || self.path_of(&name) != path {
                continue;
            }
            let status = self.status_at(&name, &path)?;
            if !status.holders.is_empty() {
                held.push(status);
            }
        }
        held.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(held)
    }

    fn force_release(&self, name: &LockName) -> anyhow::Result<Vec<Holder>> {
        let path = self.path_of(name);
        let status = self.status_at(name, &path)?;
        if status.holders.is_empty() {
            return Ok(vec![]);
        }
        let lock = self.open_lock_file(name)?;
        let ctx = || format!("cannot replace lock file {}", path.display());
        // The header lock orders us against acquirers: one that took it before us saw the old file
        // current and its token is already counted; one after us sees the file replaced and retries.
        ofd_lock(lock.fd(), libc::F_OFD_SETLKW, libc::F_WRLCK, 0, HEADER_LEN).with_context(ctx)?;
        let token = lock.read_token().with_context(ctx)?;
        let fresh_path = self
            .dir
            .join(format!(".{}.{}.new", file_stem(name), std::process::id()));
        let fresh = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&fresh_path)
            .with_context(ctx)?;
        let fresh = LockFile {
            file: fresh,
            path: fresh_path.clone(),
        };
        let written = fresh
            .write_header(name, token)
            .and_then(|_| fs::rename(&fresh_path, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&fresh_path);
            return Err(e).with_context(ctx);
        }
        Ok(status.holders)
    }
}

/// A held lock file. Its locks (flock, seat, record) all live in the open file and go when it closes.
struct FileLease {
    lock: LockFile,
    token: Token,
    record: u64,
    check_every: Duration,
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
            Renewal::Lost(format!(
                "lock file {} was removed or replaced (dlock release --force?)",
                self.lock.path.display()
            ))
        }
    }

    fn release(self: Box<Self>) -> anyhow::Result<()> {
        // Clear the record first so nobody reads it as ours after the locks go; closing unlocks.
        let _ = self
            .lock
            .file
            .write_all_at(&[0u8; RECORD_LEN as usize], self.record);
        drop(self.lock);
        Ok(())
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
