//! The holder records: one line of text per holder in a 512-byte slot after the header, kept
//! live by an OFD lock on its slot, so the kernel says which records stand and a record left by a
//! killed holder is simply ignored (unless `--min-hold` still keeps it, see `kept`). Anyone who can open the file can write a slot, so a record is
//! read as untrusted text; a holder that left no record (flock(1)) is found in /proc/locks.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::lock_file::{range_is_locked, try_range, unlock_range, LockFile};
use super::{FileBackend, HEADER_LEN, MAX_RECORDS, RECORD_LEN};
use dlock_core::lock::{acting_for, host_name, Holder, Kept, Mode, MAX_SINCE_SECS};

impl FileBackend {
    /// Live holders of an open lock file: dlock's own records (and those `--min-hold` still keeps
    /// after their holder let go), plus any flock(2) holder that left no record (someone using
    /// flock(1) on the file), exclusive or shared as it holds.
    pub(super) fn holders_of(&self, lock: &LockFile) -> io::Result<Vec<Holder>> {
        let mut holders: Vec<Holder> = slots(lock)?.into_iter().map(|s| s.holder).collect();
        // Someone else (flock(1)) can hold only when no dlock holder holds exclusive: reading
        // /proc/locks costs more than all of the above, so it is read only then. A dlock holder's
        // own flock(2) lock is there too, under its pid; a record kept by `--min-hold` after its
        // holder ended has none.
        let live: Vec<&Holder> = holders
            .iter()
            .filter(|h| !h.kept.is_some_and(|k| k.ended))
            .collect();
        if live
            .iter()
            .all(|h| h.mode == Mode::Shared || matches!(h.mode, Mode::Limit(_)))
        {
            let here = host_name();
            // Nor is this process's own: a waiter that took the flock(2) lock, then found a
            // record `--min-hold` keeps, reads the holders before it lets go.
            let me = std::process::id();
            let named = acting_for::record_pid();
            let ours: Vec<u32> = live
                .iter()
                .filter(|h| h.host.as_deref() == Some(here.as_str()))
                .filter_map(|h| h.pid)
                .filter(|&pid| pid != me && pid != named)
                .collect();
            let mut flocks = proc_locks_flock_holders(&lock.file)?;
            flocks.retain(|&(pid, _)| pid != me);
            // At most as many as there are flock(2) locks beyond our holders' own.
            let others = flocks.len().saturating_sub(ours.len());
            // A hold's record names the script's shell, and its keeper holds the flock(2) lock.
            let is_ours = |pid: u32| {
                ours.contains(&pid)
                    || acting_for::keeper_shell(pid).is_some_and(|s| ours.contains(&s))
            };
            let foreign: Vec<Holder> = flocks
                .into_iter()
                .filter(|&(pid, _)| !is_ours(pid))
                .take(others)
                .map(|(pid, shared)| foreign_holder(pid, shared))
                .collect();
            holders.extend(foreign);
        }
        Ok(holders)
    }
}

/// A record slot that stands for a holder.
pub(super) struct Slot {
    pub(super) holder: Holder,
    /// The seat a `--limit` holder kept by `--min-hold` still takes.
    pub(super) seat: Option<u64>,
}

/// The record slots that stand: those whose holder keeps them locked, and those `--min-hold`
/// keeps after their holder let go or died (judged by this host's clock).
pub(super) fn slots(lock: &LockFile) -> io::Result<Vec<Slot>> {
    let fd = lock.fd();
    let size = lock.file.metadata()?.len();
    let now = SystemTime::now();
    let mut found = Vec::new();
    let mut index = 0;
    while HEADER_LEN + index * RECORD_LEN < size && index < MAX_RECORDS {
        let start = HEADER_LEN + index * RECORD_LEN;
        index += 1;
        let mut buf = vec![0u8; RECORD_LEN as usize];
        let n = lock.file.read_at(&mut buf, start)?;
        if n == 0 || buf[0] == 0 {
            continue;
        }
        let live = range_is_locked(fd, start, RECORD_LEN)?;
        let kept = read_kept(&buf[..n]).filter(|k| k.until > now);
        if !live && kept.is_none() {
            continue;
        }
        if let Some(mut holder) = parse_record(&buf[..n]) {
            if let Some(kept) = &kept {
                holder.kept_until = Some(kept.until);
                holder.kept = Some(Kept {
                    min_hold: Some(kept.min_hold),
                    ended: !live,
                });
            }
            let seat = kept.filter(|_| !live).and_then(|k| k.seat);
            found.push(Slot { holder, seat });
        }
    }
    Ok(found)
}

/// Claims the first free record slot (neither held nor kept by `--min-hold`) and writes the holder
/// into it, with `kept` as its second line.
pub(super) fn claim_record(
    lock: &LockFile,
    holder: &Holder,
    kept: Option<&KeptLine>,
) -> io::Result<u64> {
    let fd = lock.fd();
    let now = SystemTime::now();
    for index in 0..MAX_RECORDS {
        let start = HEADER_LEN + index * RECORD_LEN;
        if try_range(fd, start, RECORD_LEN)? {
            let mut old = vec![0u8; RECORD_LEN as usize];
            let n = lock.file.read_at(&mut old, start)?;
            if read_kept(&old[..n]).is_some_and(|k| k.until > now) {
                unlock_range(fd, start, RECORD_LEN);
                continue;
            }
            let mut text = format_record(holder);
            if let Some(kept) = kept {
                text.push_str(&kept.to_line());
            }
            let mut buf = text.into_bytes();
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

/// A record slot's second line while `--min-hold` keeps the lock: `kept UNTIL HOLD [SEAT]`, the
/// end and the min-hold in milliseconds (the end since the epoch, by this host's clock) and the
/// seat of a `--limit` holder. Older dlocks read the first line only.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct KeptLine {
    pub(super) until: SystemTime,
    pub(super) min_hold: Duration,
    pub(super) seat: Option<u64>,
}

impl KeptLine {
    fn to_line(&self) -> String {
        let until = self
            .until
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut line = format!("kept {until} {}", self.min_hold.as_millis());
        if let Some(seat) = self.seat {
            line.push_str(&format!(" {seat}"));
        }
        line.push('\n');
        line
    }
}

/// The `kept` line of a record slot, if it has one dlock could have written.
fn read_kept(buf: &[u8]) -> Option<KeptLine> {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let text = std::str::from_utf8(&buf[..end]).ok()?;
    let line = text.lines().nth(1)?.strip_prefix("kept ")?;
    let mut fields = line.split(' ');
    let millis = |s: &str| -> Option<u64> {
        (s.len() <= 15 && s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty())
            .then(|| s.parse().ok())?
    };
    let until = millis(fields.next()?)?;
    let min_hold = millis(fields.next()?)?;
    let seat = match fields.next() {
        Some(seat) => Some(millis(seat)?),
        None => None,
    };
    let until = UNIX_EPOCH + Duration::from_millis(until);
    (until.duration_since(UNIX_EPOCH).ok()?.as_secs() <= MAX_SINCE_SECS).then_some(KeptLine {
        until,
        min_hold: Duration::from_millis(min_hold),
        seat,
    })
}

/// A holder's line in its record slot: `dlock1 OWNER` and the holder's record.
fn format_record(h: &Holder) -> String {
    format!("dlock1 {} {}\n", h.owner, h.record())
}

/// The holder a live record slot stands for. Anyone who can open the lock file can write the slot,
/// so a record that does not parse is still a holder (the slot is locked), marked unreadable;
/// `None` only for a blank slot.
pub(super) fn parse_record(buf: &[u8]) -> Option<Holder> {
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
/// (and that it is on this machine) and whether it holds shared (`flock -s`); it keeps no time or
/// token.
fn foreign_holder(pid: u32, shared: bool) -> Holder {
    Holder {
        mode: if shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        },
        host: Some(host_name()),
        pid: Some(pid),
        owner: "(not dlock: flock)".into(),
        since: None,
        token: None,
        message: None,
        expires_at: None,
        kept_until: None,
        kept: None,
        unreadable: None,
    }
}

/// Pids holding (not waiting for) a flock(2) lock on this file, from /proc/locks, each with
/// whether it holds shared.
fn proc_locks_flock_holders(file: &File) -> io::Result<Vec<(u32, bool)>> {
    let meta = file.metadata()?;
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let table = match fs::read_to_string("/proc/locks") {
        Ok(t) => t,
        Err(_) => return Ok(vec![]),
    };
    Ok(flock_holders_in(&table, &id))
}

/// The flock(2) holders of the file `id` (`MAJOR:MINOR:INODE`) in a /proc/locks table, each
/// once. The kernel hands the table out a page per read and lets go of it between reads, so on a
/// busy host a lock taken or dropped meanwhile shifts the rest: a line can come twice (or not
/// at all). A pid that holds the file twice, through two opens, is shown once.
fn flock_holders_in(table: &str, id: &str) -> Vec<(u32, bool)> {
    let mut holders: Vec<(u32, bool)> = table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->" after the number.
            if fields.get(1) != Some(&"FLOCK") || fields.get(5) != Some(&id) {
                return None;
            }
            let shared = match *fields.get(3)? {
                "READ" => true,
                "WRITE" => false,
                _ => return None,
            };
            Some((fields.get(4)?.parse().ok()?, shared))
        })
        .collect();
    holders.sort_unstable();
    holders.dedup();
    holders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flock_holder_listed_twice_in_proc_locks_is_one_holder() {
        // Read a page at a time while other locks come and go, the table repeated a line.
        let table = "1: FLOCK  ADVISORY  READ 21423 08:01:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 500 08:01:99 0 EOF\n\
                     3: -> FLOCK  ADVISORY  WRITE 600 08:01:77 0 EOF\n\
                     4: POSIX  ADVISORY  READ 700 08:01:77 0 EOF\n\
                     5: FLOCK  ADVISORY  READ 21423 08:01:77 0 EOF\n\
                     6: FLOCK  ADVISORY  READ 800 08:01:77 0 EOF\n";
        assert_eq!(
            flock_holders_in(table, "08:01:77"),
            [(800, true), (21423, true)]
        );
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
            message: Some("deploy \"v1.4\" ✓".into()),
            expires_at: None,
            kept_until: None,
            kept: None,
            unreadable: None,
        };
        assert_eq!(parse_record(format_record(&h).as_bytes()), Some(h));
        let forged = parse_record(b"dlock1 ab exclusive 5 99999999999999 2 host\n").unwrap();
        assert!(forged.describe().contains("unreadable record"));
        assert!(parse_record(b"\xff\x1b[2J").unwrap().unreadable.is_some());
        assert_eq!(parse_record(b"\0\0"), None);
    }

    #[test]
    fn kept_lines_round_trip_and_older_readers_skip_them() {
        let kept = KeptLine {
            until: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            min_hold: Duration::from_secs(3600),
            seat: Some(2),
        };
        let line = format!(
            "dlock1 00ff exclusive 1 1700000000 42 box\n{}",
            kept.to_line()
        );
        assert_eq!(read_kept(line.as_bytes()), Some(kept));
        assert_eq!(parse_record(line.as_bytes()).unwrap().owner, "00ff");
        assert_eq!(
            read_kept(b"dlock1 00ff exclusive 1 1 1 box\nkept 99999999999999999 1\n"),
            None
        );
        assert_eq!(read_kept(b"dlock1 00ff exclusive 1 1 1 box\n"), None);
    }

    proptest::proptest! {
        #[test]
        fn records_never_panic_on_garbage(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = read_kept(&bytes);
            if let Some(h) = parse_record(&bytes) {
                let text = h.describe();
                proptest::prop_assert!(!text.chars().any(|c| c.is_control()), "{:?}", text);
                serde_json::to_string(&h).expect("a holder always serialises");
            }
        }
    }
}
