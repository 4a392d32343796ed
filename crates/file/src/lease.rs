//! Taking a lock file's lock (a seat first for `--limit`, queued at a turnstile when all are
//! taken), handing out its fencing token under the header lock, and the lease that keeps it:
//! renewing checks that the file is still the one at the path, releasing clears the record and
//! closes the file.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use dlock_core::error;
use dlock_core::error::{Context, FailAs};
use rustix::fs::FlockOperation;

use super::entry::{self, next_token};
use super::kept::{kept_until, sleep_until};
use super::lock_file::{
    blocking, flock, is_would_block, lock_header, ofd_lock, try_range, unlock_range, LockFile,
};
use super::record::{claim_record, slots, KeptLine};
use super::runs;
use super::trust::Trust;
use super::{plain_io, FileBackend, HEADER_LEN, RECORD_LEN, SEATS_OFFSET, TURNSTILE_OFFSET};
use dlock_core::backend::{Lease, Released, Renewal, Waiting};
use dlock_core::lock::{host_name, Ending, Holder, LockRequest, Mode, Run, RunEnd, Token};

/// How an acquisition may wait.
pub(super) enum Wait<'a> {
    Never,
    Until(&'a Waiting),
}

/// How one attempt ended.
pub(super) enum Step {
    Held(Box<FileLease>),
    Busy(Vec<Holder>),
    Cancelled,
    /// The file was replaced under us (`release --force`): open the new one and start again.
    Retry,
}

impl FileBackend {
    /// One attempt at `request`'s lock, waiting for it or not as `wait` says.
    pub(super) fn attempt(&self, request: &LockRequest, wait: &Wait) -> error::Result<Step> {
        let lock = self.open_lock_file(&request.name)?;
        let fd = lock.fd();
        let path = lock.path.display().to_string();
        let ctx = || format!("cannot lock {path}");

        // A `--limit` holder first takes a seat, waiting its turn at the turnstile if all are taken.
        let seat = match request.mode {
            Mode::Limit(n) => match free_seat(&lock, n).with_context(ctx)? {
                Some(seat) => Some(seat),
                None => match wait {
                    Wait::Never => {
                        return Ok(Step::Busy(self.holders_of(&lock).unwrap_or_default()))
                    }
                    Wait::Until(waiting) => {
                        waiting.busy(&self.holders_of(&lock).unwrap_or_default());
                        match wait_for_seat(&lock, n, waiting).with_context(ctx)? {
                            Some(seat) => Some(seat),
                            None => return Ok(Step::Cancelled),
                        }
                    }
                },
            },
            _ => None,
        };

        let (op, op_now) = match request.mode {
            Mode::Exclusive => (
                FlockOperation::LockExclusive,
                FlockOperation::NonBlockingLockExclusive,
            ),
            Mode::Shared | Mode::Limit(_) => (
                FlockOperation::LockShared,
                FlockOperation::NonBlockingLockShared,
            ),
        };
        match flock(&lock.file, op_now) {
            Ok(()) => {}
            Err(e) if is_would_block(&e) => match wait {
                Wait::Never => return Ok(Step::Busy(self.holders_of(&lock).unwrap_or_default())),
                Wait::Until(waiting) => {
                    waiting.busy(&self.holders_of(&lock).unwrap_or_default());
                    if !blocking(waiting, || flock(&lock.file, op)).with_context(ctx)? {
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
        // A holder gone before its --min-hold ran out still keeps the lock (see `kept`).
        if let Some(until) = kept_until(&lock, request.mode, seat).with_context(ctx)? {
            unlock_range(fd, 0, HEADER_LEN);
            let holders = self.holders_of(&lock).unwrap_or_default();
            drop(lock);
            return match wait {
                Wait::Never => Ok(Step::Busy(holders)),
                Wait::Until(waiting) => {
                    waiting.busy(&holders);
                    Ok(if sleep_until(until, waiting) {
                        Step::Retry
                    } else {
                        Step::Cancelled
                    })
                }
            };
        }
        let token = next_token(&lock.header(&request.name)?, &lock.path)?;
        entry::write_header(&lock.file, &request.name, token)
            .map_err(|e| error!("cannot write lock file {path}: {}", plain_io(&e)))
            .unavailable()?;
        // Still under the header lock, so that the last run is the one with the latest token.
        let now = SystemTime::now();
        let run = Run::started(&request.owner, token, request.message.as_deref(), now);
        let runs_path = FileBackend::runs_path(&lock.path);
        runs::started(&runs_path, &self.trust, &run);
        unlock_range(fd, 0, HEADER_LEN);

        let kept = request.min_hold.map(|min_hold| KeptLine {
            until: now + min_hold,
            min_hold,
            seat,
        });
        let holder = Holder {
            mode: request.mode,
            host: Some(host_name()),
            pid: Some(dlock_core::lock::acting_for::record_pid()),
            owner: request.owner.clone(),
            since: Some(now),
            token: Some(token),
            message: request.message.clone(),
            expires_at: None,
            kept_until: None,
            kept: None,
            unreadable: None,
        };
        let record = claim_record(&lock, &holder, kept.as_ref())
            .map_err(|e| error!("cannot write a holder record in {path}: {}", plain_io(&e)))
            .unavailable()?;
        // The seat's lock lives as long as the file stays open.
        Ok(Step::Held(Box::new(FileLease {
            lock,
            token,
            record,
            check_every: request.ttl / 3,
            kept_until: kept.map(|k| k.until),
            run,
            runs_path,
            trust: self.trust.clone(),
        })))
    }
}

/// Takes a free seat among the first `n`, if one is free now: neither held nor kept by a holder's
/// `--min-hold` (a seat's kept record was written while its holder held it, so once the seat is
/// ours no new one can appear for it).
fn free_seat(lock: &LockFile, n: u32) -> io::Result<Option<u64>> {
    let fd = lock.fd();
    let kept: Vec<u64> = slots(lock)?.into_iter().filter_map(|s| s.seat).collect();
    for seat in 0..u64::from(n) {
        if !kept.contains(&seat) && try_range(fd, SEATS_OFFSET + seat, 1)? {
            return Ok(Some(seat));
        }
    }
    Ok(None)
}

/// Waits for a free seat among the first `n`; `None` when cancelled.
fn wait_for_seat(lock: &LockFile, n: u32, waiting: &Waiting) -> io::Result<Option<u64>> {
    let fd = lock.fd();
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
        if let Some(seat) = free_seat(lock, n)? {
            break Some(seat);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    };
    unlock_range(fd, TURNSTILE_OFFSET, 1);
    Ok(seat)
}

/// A held lock file. Its locks (flock, seat, record) all live in the open file and go when it closes.
pub(super) struct FileLease {
    lock: LockFile,
    token: Token,
    record: u64,
    check_every: Duration,
    /// Until when `--min-hold` keeps the lock (this host's clock).
    kept_until: Option<SystemTime>,
    /// This acquisition's run, and the file it was written to as the last run.
    run: Run,
    runs_path: PathBuf,
    /// Whose records file root may write (see `trust`).
    trust: Trust,
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

    fn release(self: Box<Self>, end: &RunEnd) -> error::Result<Released> {
        let released = if self.lock.is_current() {
            Released::Held
        } else {
            Released::Lost(self.replaced())
        };
        // The ending first: a reader who finds the holder's record gone would otherwise take the
        // run for one that never ended. It is written before the locks go, so the next holder's
        // run comes after it. A lock found lost ends the run `lost`, whatever the command did: it
        // did not hold the lock to its end.
        let ending = match released {
            Released::Held => end.ending,
            Released::Lost(_) => Ending::Lost,
        };
        runs::ended(&self.runs_path, &self.trust, &self.run, ending);
        // Clear the record first so nobody reads it as ours after the locks go; closing unlocks.
        // A record `--min-hold` still keeps stays: it keeps the lock taken until its end, unless
        // the run says not to keep it (a failure under --release-on-failure, nothing run).
        if !end.keep
            || self
                .kept_until
                .is_none_or(|until| until <= SystemTime::now())
        {
            let _ = self
                .lock
                .file
                .write_all_at(&[0u8; RECORD_LEN as usize], self.record);
        }
        drop(self.lock);
        Ok(released)
    }
}
