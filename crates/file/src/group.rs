//! The concurrency group record of a lock (see lock/group.rs), in a file of its own beside the
//! lock file: `STEM.group` for `STEM.lock`, opened and locked as the last runs' file is (see
//! `runs`): read under an OFD read lock, changed under a write lock on the whole file, so that no
//! change falls between another's read and write. An empty file is no record: a record is never
//! removed, as an unlinked file could still be written by one who opened it before. `list` looks
//! only at `*.lock` entries, so these never show there.
//!
//! A holder hears of a request to cancel it from the kernel: inotify tells it when one of its
//! record files is written, and it reads them then (and every second besides; every `POLL_EVERY`
//! where inotify cannot watch them, out of instances, say).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dlock_core::error;
use dlock_core::error::FailAs;

use super::runs::{lock, open};
use super::{lock_file::unlock_range, plain_io, FileBackend};
use dlock_core::backend::{GroupRecords, Hearing, OnChange, POLL_WHILE_HEARING};
use dlock_core::lock::group::MAX_GROUP_RECORD_BYTES;
use dlock_core::lock::LockName;

/// How often a holder reads its group records.
const POLL_EVERY: Duration = Duration::from_millis(50);

impl FileBackend {
    fn group_path(&self, name: &LockName) -> PathBuf {
        self.path_of(name).with_extension("group")
    }
}

/// The file's text (at most `MAX_GROUP_RECORD_BYTES` and one more byte, so a longer one does not
/// read as a record); `None` when empty.
fn text_of(file: &File) -> io::Result<Option<String>> {
    let mut buf = vec![0u8; MAX_GROUP_RECORD_BYTES + 1];
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(done);
    Ok((!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned()))
}

fn unusable(path: &Path, e: &io::Error) -> error::Error {
    error!("cannot use {}: {}", path.display(), plain_io(e))
}

impl GroupRecords for FileBackend {
    fn read(&self, name: &LockName) -> error::Result<Option<String>> {
        let path = self.group_path(name);
        let read = || -> io::Result<Option<String>> {
            let Some((file, _)) = open(&path, false, &self.trust)? else {
                return Ok(None);
            };
            let locked = lock(&file, libc::F_RDLCK)?;
            let text = text_of(&file);
            if locked {
                unlock_range(std::os::fd::AsRawFd::as_raw_fd(&file), 0, 0);
            }
            text
        };
        read().map_err(|e| unusable(&path, &e)).unavailable()
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> error::Result<()> {
        let path = self.group_path(name);
        let mut update = || -> io::Result<()> {
            let Some((file, meta)) = open(&path, true, &self.trust)? else {
                return Err(io::Error::other("it vanished"));
            };
            if !lock(&file, libc::F_WRLCK)? {
                return Err(io::Error::other("another kept it locked"));
            }
            // A hard link to another file of the user's at this path is not written through.
            if meta.nlink() != 1 {
                return Err(io::Error::other("it is linked elsewhere"));
            }
            let old = text_of(&file)?;
            let new = change(old.as_deref()).unwrap_or_default();
            file.write_all_at(new.as_bytes(), 0)?;
            if old.is_some_and(|old| old.len() > new.len()) {
                file.set_len(new.len() as u64)?;
            }
            // Closing the file lets the lock go.
            Ok(())
        };
        update().map_err(|e| unusable(&path, &e)).unavailable()
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }

    fn hear_changes(&self, names: &[LockName], changed: OnChange) -> Option<Hearing> {
        use rustix::fs::inotify;
        let watching =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
        for name in names {
            // The records this run enlisted in, as they are: a link is not followed.
            let flags = inotify::WatchFlags::MODIFY | inotify::WatchFlags::DONT_FOLLOW;
            inotify::add_watch(&watching, self.group_path(name), flags).ok()?;
        }
        Hearing::on_thread("file group records", POLL_WHILE_HEARING, move |wanted| {
            let mut buffer = [std::mem::MaybeUninit::uninit(); 4096];
            let wait = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 500_000_000,
            };
            // Its watches were set before the holder's first read.
            wanted.listening();
            while wanted.still() {
                let mut ready = [rustix::event::PollFd::new(
                    &watching,
                    rustix::event::PollFlags::IN,
                )];
                match rustix::event::poll(&mut ready, Some(&wait)) {
                    Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                    Ok(_) => {}
                    Err(_) => return,
                }
                // Every event so far, then one word for them all.
                let mut events = inotify::Reader::new(&watching, &mut buffer);
                while events.next().is_ok() {}
                changed();
            }
        })
    }
}
