//! `--min-hold` on lock files: a holder's record slot carries a second line, `kept UNTIL ...`
//! (see `record::KeptLine`), and stays after its holder let go or died, until that end by this
//! host's clock (the host is the lock's only judge). The kernel's locks know nothing of it, so
//! each acquirer, once it has the flock(2) lock and the header lock, looks for kept records that
//! exclude it, and lets go and waits them out if it finds one.

use std::io;
use std::time::SystemTime;

use super::lock_file::LockFile;
use super::record::slots;
use dlock_core::backend::{Waiting, CANCEL_CHECK};
use dlock_core::lock::Mode;

/// The earliest end of a kept record that excludes a holder in `mode` (on `seat`), if any: a
/// kept exclusive holder excludes everyone, a kept shared or limit holder excludes exclusive
/// ones, and a kept limit holder also keeps its seat.
pub(super) fn kept_until(
    lock: &LockFile,
    mode: Mode,
    seat: Option<u64>,
) -> io::Result<Option<SystemTime>> {
    Ok(slots(lock)?
        .into_iter()
        .filter(|s| s.holder.kept.is_some_and(|k| k.ended))
        .filter(|s| {
            mode == Mode::Exclusive
                || s.holder.mode == Mode::Exclusive
                || (seat.is_some() && s.seat == seat)
        })
        .filter_map(|s| s.holder.kept_until)
        .min())
}

/// Sleeps until `until` by this host's clock, looking at the cancellation at least every
/// `CANCEL_CHECK`; `false` when cancelled first.
pub(super) fn sleep_until(until: SystemTime, waiting: &Waiting) -> bool {
    loop {
        if waiting.is_cancelled() {
            return false;
        }
        let Ok(left) = until.duration_since(SystemTime::now()) else {
            return true;
        };
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(waiting.slice(CANCEL_CHECK)));
    }
}
