//! An open lock file and the kernel's locks on it: the flock(2) lock that decides who holds the
//! name, and the open-file-description byte-range locks on the header, the holder records and the
//! seats. All of them belong to the open file and go when it closes or its process dies.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Instant;

use dlock_core::error;
use dlock_core::error::FailAs;
use rustix::fs::FlockOperation;

use super::entry::{check_name, read_header, Header};
use super::{plain_io, HEADER_LEN};
use dlock_core::backend::{Waiting, CANCEL_CHECK};
use dlock_core::lock::LockName;
use dlock_sys::blocking::Alarm;

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
    pub(super) fn check_header(&self, name: &LockName) -> error::Result<Header> {
        self.settled(|lock| lock.header(name))
    }

    /// Reads the header without the header lock, as nearly always nothing writes it; a header that
    /// looks wrong is read again under the lock before it is refused, in case another dlock was
    /// that moment making an empty file its own.
    pub(super) fn settled<T>(
        &self,
        read: impl Fn(&LockFile) -> error::Result<T>,
    ) -> error::Result<T> {
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
    pub(super) fn header(&self, name: &LockName) -> error::Result<Header> {
        let header = read_header(&self.file, &self.path)?;
        check_name(&header, name, &self.path)?;
        Ok(header)
    }
}

/// Takes the header lock (`F_WRLCK` to change the header, `F_RDLCK` to read it), waiting for it:
/// others hold it only for a few system calls.
pub(super) fn lock_header(lock: &LockFile, kind: i32) -> error::Result<()> {
    loop {
        match ofd_lock(lock.fd(), libc::F_OFD_SETLKW, kind, 0, HEADER_LEN) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(error!(
                    "cannot lock the header of {}: {}",
                    lock.path.display(),
                    plain_io(&e)
                ))
                .unavailable()
            }
        }
    }
}

/// flock(2) on the lock file.
pub(super) fn flock(file: &File, op: FlockOperation) -> io::Result<()> {
    Ok(rustix::fs::flock(file, op)?)
}

pub(super) use dlock_sys::ofd::{
    is_would_block, ofd_lock, range_is_locked, try_range, unlock_range,
};

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
