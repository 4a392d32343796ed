//! Open-file-description byte-range locks (fcntl F_OFD_*): owned by the open file like flock(2)
//! locks, independent of them, and dropped when the descriptor closes or the process dies. The
//! file backend keeps its header, holder records and seats with them; fcntl(2) through libc, as no
//! safe crate offers these commands.

use std::io;

/// `cmd` (F_OFD_SETLK, F_OFD_SETLKW, F_OFD_GETLK) for a lock of `kind` (F_RDLCK, F_WRLCK,
/// F_UNLCK) on `len` bytes from `start` (0: to the end) of the open file `fd`; what the kernel
/// filled in (F_OFD_GETLK: a conflicting lock, or F_UNLCK).
pub fn ofd_lock(fd: i32, cmd: i32, kind: i32, start: u64, len: u64) -> io::Result<libc::flock> {
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

/// Whether a lock attempt failed because another holds the range.
pub fn is_would_block(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EWOULDBLOCK) | Some(libc::EACCES)
    )
}

/// A write lock on the range if no other open file holds one; `Ok(false)` if one does.
pub fn try_range(fd: i32, start: u64, len: u64) -> io::Result<bool> {
    match ofd_lock(fd, libc::F_OFD_SETLK, libc::F_WRLCK, start, len) {
        Ok(_) => Ok(true),
        Err(e) if is_would_block(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the range up.
pub fn unlock_range(fd: i32, start: u64, len: u64) {
    // Unlocking a range we hold cannot fail in a way we could act on; closing the file unlocks too.
    let _ = ofd_lock(fd, libc::F_OFD_SETLK, libc::F_UNLCK, start, len);
}

/// Is some other open file holding a lock on this range?
pub fn range_is_locked(fd: i32, start: u64, len: u64) -> io::Result<bool> {
    let fl = ofd_lock(fd, libc::F_OFD_GETLK, libc::F_WRLCK, start, len)?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}
