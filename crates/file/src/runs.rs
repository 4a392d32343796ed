//! The last run and the last success of a lock (see lock/last_run.rs), in a file of their own
//! beside the lock file: `STEM.runs` for `STEM.lock`. Not in the lock file, whose every byte has a
//! meaning to someone: flock(1) users make it empty, and older dlocks read each slot after the
//! header as a holder's. `list`, this one's and older ones', looks only at `*.lock` entries, and no
//! lock's file ends in `.runs`, so the two kinds of entry never meet.
//!
//! The file is three lines: `dlock-runs1`, `last RECORD` and `success RECORD` (either record
//! missing when there is none), each RECORD in `Run::record`'s form. It is written in place under
//! an OFD write lock on the whole file and read under a read lock, so nobody reads half a write;
//! it is opened as lock files are (no symbolic link followed, no FIFO or device used, created with
//! their mode), and written only when it is dlock's (empty, or begun with `dlock-runs1`, and
//! linked nowhere else: see `is_ours`). Anyone who can write the directory can write it too, so
//! what it says is read with `Run::from_record` and never trusted, and nothing about it may stop a
//! lock operation: a lock on it that is not let go within `LOCK_PATIENCE` is given up (the record
//! goes unwritten, or is read unlocked), and a write that fails is skipped.
//!
//! The records of a name nobody runs any more are not swept: a file not written for
//! `RUN_RECORD_KEPT_FOR` reads as no record, and the next run writes it afresh.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::lock_file::{is_would_block, ofd_lock, unlock_range};
use super::trust::Trust;
use dlock_core::lock::last_run::{READER_CLOCK_SKEW, RUN_RECORD_KEPT_FOR};
use dlock_core::lock::{Ending, LastRuns, Run};

/// The first line of a records file.
const MAGIC: &str = "dlock-runs1";

/// Most of a records file read: its three lines at their longest, with room to spare.
const MAX_BYTES: u64 = 4096;

/// How long a read or a write waits for another's lock on the records file: others hold it for a
/// few system calls; one that holds it longer is not let stall a lock operation.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Opens the records file at `path` (creating it when `create`), or `Ok(None)` if there is none,
/// with what fstat says of it. Anything but a regular file there is refused, as at a lock's path.
/// (O_NONBLOCK only keeps the open from hanging on a FIFO: a regular file ignores it.) As root,
/// a file `trust` refuses is neither read nor written: its owner could write any record.
pub(super) fn open(
    path: &Path,
    create: bool,
    trust: &Trust,
) -> io::Result<Option<(File, Metadata)>> {
    let opened = OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    trust.file(&meta).map_err(io::Error::other)?;
    Ok(Some((file, meta)))
}

/// Takes a lock of `kind` on the whole file, trying for `LOCK_PATIENCE`; `false` if another kept
/// it all that time.
pub(super) fn lock(file: &File, kind: i32) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let deadline = Instant::now() + LOCK_PATIENCE;
    let mut pause = Duration::from_millis(1);
    loop {
        match ofd_lock(fd, libc::F_OFD_SETLK, kind, 0, 0) {
            Ok(_) => return Ok(true),
            Err(e) if is_would_block(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Whether a file last written at `meta`'s time is older than `RUN_RECORD_KEPT_FOR`: its records
/// read as none.
fn expired(meta: &Metadata) -> bool {
    let written = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    SystemTime::now()
        .duration_since(written)
        .is_ok_and(|age| age > RUN_RECORD_KEPT_FOR)
}

/// The records of an open file (`meta`: what fstat said of it): none when it is expired or empty.
fn read(file: &File, meta: &Metadata) -> io::Result<LastRuns> {
    if expired(meta) {
        return Ok(LastRuns::default());
    }
    // Dated by the clock of the host that wrote them, judged by this host's.
    Ok(parse(&bytes(file)?).judged_at(SystemTime::now(), READER_CLOCK_SKEW))
}

/// The file's first `MAX_BYTES` and one more (a longer file is none of dlock's).
/// (A regular file, as `open` made sure: a read that returns less than asked has reached its end.)
fn bytes(file: &File) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; MAX_BYTES as usize + 1];
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], done as u64) {
            Ok(n) if n < buf.len() - done => {
                done += n;
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(done);
    Ok(buf)
}

/// The records a file's bytes say; what dlock would not have written is an unreadable last run.
fn parse(bytes: &[u8]) -> LastRuns {
    if bytes.is_empty() {
        return LastRuns::default();
    }
    // Not `Run::from_record`: a bare record without the file's first line is not dlock's either.
    let unreadable = || LastRuns {
        last_run: Some(Run::unreadable(&String::from_utf8_lossy(bytes))),
        last_success: None,
    };
    let Ok(text) = std::str::from_utf8(bytes) else {
        return unreadable();
    };
    let mut lines = text.split('\n');
    if bytes.len() as u64 > MAX_BYTES || lines.next() != Some(MAGIC) {
        return unreadable();
    }
    let mut runs = LastRuns::default();
    for line in lines {
        if let Some(record) = line.strip_prefix("last ") {
            runs.last_run = Some(Run::from_record(record));
        } else if let Some(record) = line.strip_prefix("success ") {
            runs.last_success = Some(Run::from_record(record));
        }
    }
    runs
}

/// The text of a records file holding `runs` (records that could not be read are left out).
fn text(runs: &LastRuns) -> String {
    let mut text = format!("{MAGIC}\n");
    let readable = |run: &Option<Run>| run.clone().filter(|r| r.unreadable.is_none());
    if let Some(run) = readable(&runs.last_run) {
        text.push_str(&format!("last {}\n", run.record()));
    }
    if let Some(run) = readable(&runs.last_success) {
        text.push_str(&format!("success {}\n", run.record()));
    }
    text
}

/// Whether dlock may write the file whose bytes are `bytes`: empty (just made) or begun with
/// dlock's first line, and not also linked elsewhere. Anyone who can write the directory can put a
/// hard link to another file of the user's at the records path; what is not dlock's is left as it
/// is, as at a lock's path.
fn is_ours(meta: &Metadata, bytes: &[u8]) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.nlink() == 1 && (bytes.is_empty() || bytes.starts_with(format!("{MAGIC}\n").as_bytes()))
}

/// The records of the file at `path`: none when there is no file.
pub(super) fn last_runs(path: &Path, trust: &Trust) -> io::Result<LastRuns> {
    let Some((file, meta)) = open(path, false, trust)? else {
        return Ok(LastRuns::default());
    };
    // A file kept locked by someone else is read anyway: a half-written one reads as unreadable.
    let locked = lock(&file, libc::F_RDLCK)?;
    let runs = read(&file, &meta);
    if locked {
        unlock_range(std::os::fd::AsRawFd::as_raw_fd(&file), 0, 0);
    }
    runs
}

/// Changes the records of the file at `path` (made if missing) as `change` says, under the file's
/// write lock. `false`: the lock was not had in time, and nothing was written.
fn update(path: &Path, trust: &Trust, change: impl FnOnce(&mut LastRuns)) -> io::Result<bool> {
    let Some((file, meta)) = open(path, true, trust)? else {
        return Err(io::Error::other("the records file vanished"));
    };
    if !lock(&file, libc::F_WRLCK)? {
        return Ok(false);
    }
    let bytes = bytes(&file)?;
    if !is_ours(&meta, &bytes) {
        return Ok(false);
    }
    let mut runs = match expired(&meta) {
        true => LastRuns::default(),
        false => parse(&bytes),
    };
    change(&mut runs);
    let text = text(&runs);
    file.write_all_at(text.as_bytes(), 0)?;
    // Cut only what is left of a longer text (a truncate to the same length is a system call and
    // an inode write for nothing).
    if (text.len() as u64) < bytes.len() as u64 {
        file.set_len(text.len() as u64)?;
    }
    // Closing the file lets the lock go.
    Ok(true)
}

/// An acquisition's run, as the last run. Nothing stops the acquisition: a record that cannot be
/// written is skipped (`status` then shows an older run, or none).
pub(super) fn started(path: &Path, trust: &Trust, run: &Run) {
    let _ = update(path, trust, |runs| runs.last_run = Some(run.clone()));
}

/// How `run` ended, into the last run when that is still its own and not ended, and as the last
/// success when it succeeded. Skipped, as `started`, when it cannot be written.
pub(super) fn ended(path: &Path, trust: &Trust, run: &Run, ending: Ending) {
    let _ = update(path, trust, |runs| {
        let ended = run.clone().ended(ending, SystemTime::now());
        let ours = runs
            .last_run
            .as_ref()
            .is_some_and(|last| is_open_run_of(last, &run.owner));
        if ours {
            runs.last_run = Some(ended.clone());
        }
        if ending.succeeded() {
            runs.last_success = Some(ended);
        }
    });
}

/// `release --force` removed the holders whose owner ids are `owners`: the last run, if it is one
/// of theirs and not ended, ends as forced.
pub(super) fn forced(path: &Path, trust: &Trust, owners: &[&str]) {
    let _ = update(path, trust, |runs| {
        if let Some(last) = runs.last_run.take() {
            let theirs = owners.iter().any(|owner| is_open_run_of(&last, owner));
            runs.last_run = Some(if theirs {
                last.ended(Ending::Forced, SystemTime::now())
            } else {
                last
            });
        }
    });
}

/// Whether `run` is `owner`'s and not ended yet.
fn is_open_run_of(run: &Run, owner: &str) -> bool {
    run.unreadable.is_none() && run.ended.is_none() && run.owner == owner
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn run(owner: &str) -> Run {
        Run::started(
            owner,
            7,
            Some("nightly"),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
    }

    #[test]
    fn records_round_trip_through_their_text() {
        let runs = LastRuns {
            last_run: Some(run("00aa")),
            last_success: Some(run("00bb").ended(Ending::Exited(0), UNIX_EPOCH)),
        };
        assert_eq!(parse(text(&runs).as_bytes()), runs);
        assert_eq!(parse(b""), LastRuns::default());
        assert_eq!(parse(format!("{MAGIC}\n").as_bytes()), LastRuns::default());
    }

    #[test]
    fn a_foreign_file_is_an_unreadable_last_run_shown_escaped() {
        for bytes in [
            &b"\x1b[2Jhello"[..],
            b"\xff\xfe",
            b"dlock-runs1\nlast run1 x\n",
        ] {
            let runs = parse(bytes);
            let shown = runs.last_run.and_then(|r| r.unreadable);
            assert!(shown.is_some_and(|s| !s.contains('\x1b')), "{bytes:?}");
        }
        assert!(parse(&[b'a'; 5000]).last_run.unwrap().unreadable.is_some());
    }

    #[test]
    fn an_ending_goes_only_into_its_own_open_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.runs");
        let t = Trust::new(&[]);
        started(&path, &t, &run("00aa"));
        started(&path, &t, &run("00bb"));
        ended(&path, &t, &run("00aa"), Ending::Exited(0));
        let runs = last_runs(&path, &t).unwrap();
        assert_eq!(runs.last_run.unwrap().owner, "00bb");
        assert_eq!(runs.last_success.unwrap().owner, "00aa");
        forced(&path, &t, &["00bb"]);
        ended(&path, &t, &run("00bb"), Ending::Lost);
        let runs = last_runs(&path, &t).unwrap();
        assert_eq!(runs.last_run.unwrap().ending, Some(Ending::Forced));
    }
}
