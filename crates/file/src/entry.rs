//! What sits at a lock's path, and whether dlock may use it. The lock directory may hold anything
//! (a FIFO, a device, a directory, someone's data file, a lock file copied from another name), so
//! nothing there is trusted: it is opened without following links or blocking, must be a regular
//! file, and must be empty or carry dlock's header for this very name. Anything else is refused
//! with exit 69 and left as it is, byte for byte.
//!
//! A new lock file is written in full under a temporary name and only then linked at the lock's
//! path, so the path never shows a half-made file, and a file that cannot be written (a full disk)
//! leaves nothing behind.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use dlock_core::error;
use dlock_core::error::FailAs;

use super::{plain_io, MAGIC, NAME_LEN_OFFSET, NAME_OFFSET, TOKEN_OFFSET};
use dlock_core::lock::{random_bytes, LockName, Token, MAX_NAME_BYTES};

/// A lock file's header as found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Header {
    /// An empty file: made by flock(1) or `touch`; it becomes a dlock file at its first `run`.
    Empty,
    Dlock {
        name: String,
        token: Token,
    },
}

impl Header {
    /// The last token handed out (none yet: 0).
    pub(super) fn token(&self) -> Token {
        match self {
            Header::Empty => 0,
            Header::Dlock { token, .. } => *token,
        }
    }
}

/// Opens the regular file at `path`, or `Ok(None)` if there is nothing there. `O_NONBLOCK` keeps a
/// FIFO or a device from blocking the open and `O_NOCTTY` keeps a terminal from becoming ours; both
/// are refused right after, by their type.
pub(super) fn open_existing(path: &Path, write: bool) -> error::Result<Option<File>> {
    let opened = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(explain_open_error(path, &e)).unavailable(),
    };
    let meta = file
        .metadata()
        .map_err(|e| {
            error!(
                "cannot inspect lock file {}: {}",
                path.display(),
                plain_io(&e)
            )
        })
        .unavailable()?;
    if !meta.file_type().is_file() {
        return Err(not_a_lock_file(path, kind_of(&meta.file_type()))).unavailable();
    }
    // Back to ordinary blocking I/O for the file's whole life (some file systems pass the flag on).
    set_blocking(&file)
        .map_err(|e| error!("cannot use lock file {}: {}", path.display(), plain_io(&e)))
        .unavailable()?;
    Ok(Some(file))
}

fn set_blocking(file: &File) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(file)?;
    rustix::fs::fcntl_setfl(file, flags - rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

fn not_a_lock_file(path: &Path, what: &str) -> error::Error {
    error!(
        "{} is {what}, not a lock file; remove it or use another lock name",
        path.display()
    )
}

fn kind_of(t: &fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

pub(super) fn explain_open_error(path: &Path, e: &io::Error) -> error::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => error!(
            "lock file {} is a symbolic link; refusing to follow it",
            path.display()
        ),
        // What the open tripped over (a directory opened for writing, a socket), by its type.
        Some(libc::EISDIR) | Some(libc::ENXIO) | Some(libc::ENODEV) => {
            match fs::symlink_metadata(path) {
                Ok(meta) if !meta.is_file() => not_a_lock_file(path, kind_of(&meta.file_type())),
                _ => error!("cannot open lock file {}: {}", path.display(), plain_io(e)),
            }
        }
        _ => error!("cannot open lock file {}: {}", path.display(), plain_io(e)),
    }
}

/// Reads and checks the header. Refused (exit 69): a non-empty file without dlock's magic (not
/// ours, so never overwritten), and a dlock header that cannot be parsed.
pub(super) fn read_header(file: &File, path: &Path) -> error::Result<Header> {
    let refuse = |why: &str| {
        Err(error!(
            "lock file {} {why}; refusing to use it",
            path.display()
        ))
        .unavailable()
    };
    let io_failed =
        |e: io::Error| error!("cannot read lock file {}: {}", path.display(), plain_io(&e));
    let mut fixed = [0u8; NAME_OFFSET as usize];
    let n = read_up_to(file, &mut fixed, 0)
        .map_err(io_failed)
        .unavailable()?;
    if n == 0 {
        return Ok(Header::Empty);
    }
    if n < MAGIC.len() || &fixed[..MAGIC.len()] != MAGIC {
        return refuse("is not a dlock lock file (no dlock header), and may be someone's data");
    }
    if n < fixed.len() {
        return refuse("has a truncated dlock header");
    }
    let token = u64::from_le_bytes(le_bytes(&fixed, TOKEN_OFFSET));
    let len = u32::from_le_bytes(le_bytes(&fixed, NAME_LEN_OFFSET)) as usize;
    if len == 0 || len > MAX_NAME_BYTES {
        return refuse("has a malformed dlock header (bad name length)");
    }
    let mut name = vec![0u8; len];
    let n = read_up_to(file, &mut name, NAME_OFFSET)
        .map_err(io_failed)
        .unavailable()?;
    if n < len {
        return refuse("has a truncated dlock header");
    }
    match String::from_utf8(name) {
        Ok(name) if LockName::new(&name).is_ok() => Ok(Header::Dlock { name, token }),
        _ => refuse("has a malformed dlock header (bad name)"),
    }
}

fn le_bytes<const N: usize>(buf: &[u8], at: u64) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[at as usize..at as usize + N]);
    out
}

/// Reads until `buf` is full or the file ends; returns how much was read.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Is this header the lock `name`'s? A dlock file of another name was copied or renamed here (or,
/// absurdly, two names' hashes collide): using it would mix two locks' tokens.
pub(super) fn check_name(header: &Header, name: &LockName, path: &Path) -> error::Result<()> {
    match header {
        Header::Dlock { name: stored, .. } if stored != name.as_str() => Err(error!(
            "lock file {} belongs to the lock {stored:?}, not {:?} (copied or renamed?); refusing to use it",
            path.display(),
            name.as_str()
        ))
        .unavailable(),
        _ => Ok(()),
    }
}

/// The token after `header`'s. A counter at its end is refused rather than wrapped: a token that
/// went back to 0 would let a stale holder's writes through the resource again.
pub(super) fn next_token(header: &Header, path: &Path) -> error::Result<Token> {
    header.token().checked_add(1).ok_or_else(|| {
        error!(
            "lock file {} has used up its fencing tokens (the last was {}); dlock never wraps a token",
            path.display(),
            header.token()
        )
    })
    .unavailable()
}

/// Writes the header fields; the caller holds the header lock (or the file is not yet at a path).
pub(super) fn write_header(file: &File, name: &LockName, token: Token) -> io::Result<()> {
    let mut header = Vec::with_capacity(NAME_OFFSET as usize + MAX_NAME_BYTES);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&token.to_le_bytes());
    header.extend_from_slice(&(name.as_str().len() as u32).to_le_bytes());
    header.extend_from_slice(name.as_str().as_bytes());
    file.write_all_at(&header, 0)
}

/// A complete lock file for `name` whose last token is `token`, under a temporary name beside
/// `path` (which `list` skips). The caller links or renames it into place; on failure nothing is
/// left.
pub(super) fn write_fresh(path: &Path, name: &LockName, token: Token) -> io::Result<PathBuf> {
    let mut tag = [0u8; 8];
    random_bytes(&mut tag)?;
    let tag = dlock_core::text::hex(&tag);
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let fresh = path.with_file_name(format!(".{stem}.{}-{tag}.new", std::process::id()));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&fresh)?;
    if let Err(e) = write_header(&file, name, token) {
        let _ = fs::remove_file(&fresh);
        return Err(e);
    }
    Ok(fresh)
}

/// Puts a new lock file for `name` at `path` unless something is there already (then that is
/// what the caller opens next).
pub(super) fn create(path: &Path, name: &LockName) -> error::Result<()> {
    let fail = |e: io::Error| {
        Err(error!(
            "cannot create lock file {}: {}",
            path.display(),
            plain_io(&e)
        ))
        .unavailable()
    };
    let fresh = match write_fresh(path, name, 0) {
        Ok(fresh) => fresh,
        Err(e) => return fail(e),
    };
    // link(2), unlike rename(2), never replaces what another dlock put there meanwhile.
    let linked = fs::hard_link(&fresh, path);
    let _ = fs::remove_file(&fresh);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => fail(e),
    }
}
