//! An open lock file and the kernel's locks on it: the flock(2) lock that decides who holds the
//! name, and the open-file-description byte-range locks on the header, the holder records and the
//! seats. All of them belong to the open file and go when it closes or its process dies.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::anyhow;
use rustix::fs::FlockOperation;

use super::entry::{check_name, read_header, Header};
use super::{plain_io, HEADER_LEN};
use crate::backend::blocking::Alarm;
use crate::backend::{Waiting, CANCEL_CHECK};
use crate::exit::{FailWith, Failure};
use crate::lock::LockName;

/// An open lock file and the path it was opened at.
pub(super) struct LockFile {
    pub(super) file: File,
    pub(super) path: PathBuf,
}

impl LockFile {
    pub(super) fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    /// Is the file we hold still the one at the path? (`release --force` replaces it.)
    pub(super) fn is_current(&self) -> bool {
        let Ok(ours) = self.file.metadata() else {
            return false;
        };
        match fs::symlink_metadata(&self.path) {
            Ok(there) => there.dev() == ours.dev() && there.ino() == ours.ino(),
            Err(_) => false,
        }
    }

    /// The header, checked to be this lock's (see `entry::read_header`).
    pub(super) fn check_header(&self, name: &LockName) -> anyhow::Result<Header> {
        self.settled(|lock| lock.header(name))
    }

    /// Reads the header without the header lock, as nearly always nothing writes it; a header that
    /// looks wrong is read again under the lock before it is refused, in case another dlock was
    /// that moment making an empty file its own.
    pub(super) fn settled<T>(
        &self,
        read: impl Fn(&LockFile) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
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
    pub(super) fn header(&self, name: &LockName) -> anyhow::Result<Header> {
        let header = read_header(&self.file, &self.path)?;
        check_name(&header, name, &self.path)?;
        Ok(header)
    }
}

/// Takes the header lock (`F_WRLCK` to change the header, `F_RDLCK` to read it), waiting for it:
/// others hold it only for a few system calls.
pub(super) fn lock_header(lock: &LockFile, kind: i32) -> anyhow::Result<()> {
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

/// flock(2) on the lock file.
pub(super) fn flock(file: &File, op: FlockOperation) -> io::Result<()> {
    Ok(rustix::fs::flock(file, op)?)
}

/// Open-file-description byte-range locks (fcntl F_OFD_*): owned by the open file like flock(2)
/// locks, independent of them, and dropped when the descriptor closes or the process dies.
pub(super) fn ofd_lock(
    fd: i32,
    cmd: i32,
    kind: i32,
    start: u64,
    len: u64,
) -> io::Result<libc::flock> {
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

pub(super) fn is_would_block(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EWOULDBLOCK) | Some(libc::EACCES)
    )
}

pub(super) fn try_range(fd: i32, start: u64, len: u64) -> io::Result<bool> {
    match ofd_lock(fd, libc::F_OFD_SETLK, libc::F_WRLCK, start, len) {
        Ok(_) => Ok(true),
        Err(e) if is_would_block(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

pub(super) fn unlock_range(fd: i32, start: u64, len: u64) {
    // Unlocking a range we hold cannot fail in a way we could act on; closing the file unlocks too.
    let _ = ofd_lock(fd, libc::F_OFD_SETLK, libc::F_UNLCK, start, len);
}

/// Is some other open file holding a lock on this range?
pub(super) fn range_is_locked(fd: i32, start: u64, len: u64) -> io::Result<bool> {
    let fl = ofd_lock(fd, libc::F_OFD_GETLK, libc::F_WRLCK, start, len)?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// Blocks until `op` succeeds, or returns `Ok(false)` once `waiting` is cancelled. Each call of
/// `op` is cut short by an alarm after `waiting.slice(CANCEL_CHECK)` (or by the wake signal the
/// caller may send), so the cancellation is looked at at least that often; EINTR is the cue to look.
pub(super) fn blocking<F: FnMut() -> io::Result<()>>(
    waiting: &Waiting,
    mut op: F,
) -> io::Result<bool> {
    loop {
        if waiting.is_cancelled() {
            return Ok(false);
        }
        let _alarm = Alarm::at(Instant::now() + waiting.slice(CANCEL_CHECK));
        match op() {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}
