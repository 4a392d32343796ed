//! The holder records: one line of text per holder in a 512-byte slot after the header, kept
//! live by an OFD lock on its slot, so the kernel says which records stand and a record left by a
//! killed holder is simply ignored. Anyone who can open the file can write a slot, so a record is
//! read as untrusted text; a holder that left no record (flock(1)) is found in /proc/locks.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

use super::lock_file::{range_is_locked, try_range, LockFile};
use super::{FileBackend, HEADER_LEN, MAX_RECORDS, RECORD_LEN};
use crate::lock::{host_name, Holder, Mode};

impl FileBackend {
    /// Live holders of an open lock file: dlock's own records, plus any flock(2) holder that left no
    /// record (someone using flock(1) on the file).
    pub(super) fn holders_of(&self, lock: &LockFile) -> io::Result<Vec<Holder>> {
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
}

/// Claims the first free record slot and writes the holder into it.
pub(super) fn claim_record(lock: &LockFile, holder: &Holder) -> io::Result<u64> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
