//! What a key under a lock's prefix stands for: dlock writes `OWNER MODE TOKEN SINCE PID HOST` into
//! its keys (the holder record every backend shares); etcd's own mutex (`etcdctl lock`) writes an
//! empty value, an exclusive holder. TOKEN is 0 until the holder's token is known, and then the
//! token is the key's last write: its creation for a key that owned the lock at once, the write
//! that took the grant (`Acquisition::take_token`) for one that waited. A key written again once
//! the token is known (`--min-hold`'s moves, kept.rs) says it in TOKEN.
//! Values come from any client of the server, so each is parsed and checked; what does not read is
//! an unreadable holder that still counts, as exclusive unless it names another mode. A key that
//! `--min-hold` keeps (kept.rs) has a second line, `kept LEASE UNTIL_MS HOLD_MS[ ended]`, written
//! and read here.

use std::time::{SystemTime, UNIX_EPOCH};

use super::recipe::Kind;
use super::rpc::KeyValue;
use dlock_core::lock::{escaped, host_name, time_from_millis, Holder, Kept, LockRequest, Mode};

/// A holder's or waiter's key, as read.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) key: Vec<u8>,
    pub(super) create_revision: i64,
    /// The lease the key is bound to (0: none).
    pub(super) lease: i64,
    pub(super) kind: Kind,
    /// The limit a seat is judged by (its own request's `--limit`); 1 otherwise.
    pub(super) limit: u32,
    pub(super) holder: Holder,
}

/// The value dlock writes into the key of `request`, by this process, now.
pub(super) fn value_of(request: &LockRequest) -> String {
    value_with_token(request, None)
}

/// `value_of`, saying the holder's `token` (none: not known yet, the key's last write is).
pub(super) fn value_with_token(request: &LockRequest, token: Option<u64>) -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| UNIX_EPOCH + std::time::Duration::from_secs(d.as_secs()))
        .ok();
    let holder = Holder {
        mode: request.mode,
        host: Some(host_name()),
        pid: Some(dlock_core::lock::acting_for::record_pid()),
        owner: request.owner.clone(),
        since,
        token,
        unreadable: None,
        message: request.message.clone(),
        expires_at: None,
        kept_until: None,
        kept: None,
    };
    format!("{} {}", request.owner, holder.record())
}

impl Entry {
    pub(super) fn of(kv: &KeyValue) -> Entry {
        let create_revision = kv.create_revision;
        let token = u64::try_from(create_revision).ok();
        // Of a key dlock wrote whose value names no token: see the module's comment.
        let last_write = u64::try_from(kv.mod_revision).ok();
        let lease = format!("{:x}", kv.lease);
        let (value, kept) = match std::str::from_utf8(&kv.value) {
            Ok(text) => {
                let (record, kept) = split_kept_line(text);
                (Ok(record), kept)
            }
            Err(e) => (Err(e), None),
        };
        // Only while the key lives by that lease: one moved back to its holder's is held as usual.
        let kept = kept.filter(|line| line.lease == kv.lease);
        let mut holder = match value {
            // etcd's mutex (`etcdctl lock`): an exclusive holder known by its lease alone,
            // labelled as other clients' holders are on the other stores.
            Ok("") => Holder {
                mode: Mode::Exclusive,
                host: None,
                pid: None,
                owner: format!("(not dlock: etcdctl lease {lease})"),
                since: None,
                token,
                unreadable: None,
                message: None,
                expires_at: None,
                kept_until: None,
                kept: None,
            },
            Ok(text) => match text.split_once(' ') {
                Some((owner, record)) => {
                    let mut holder = Holder::from_record(owner, record);
                    if holder.unreadable.is_none() && holder.token == Some(0) {
                        holder.token = last_write;
                    }
                    holder
                }
                None => Holder::unreadable(Mode::Exclusive, &lease, text),
            },
            Err(_) => Holder::unreadable(
                Mode::Exclusive,
                &lease,
                &escaped(&String::from_utf8_lossy(&kv.value), 120),
            ),
        };
        if let Some(line) = kept {
            holder.kept = Some(line.why);
            holder.kept_until = line.until;
        }
        let (kind, limit) = match holder.mode {
            Mode::Exclusive => (Kind::Exclusive, 1),
            Mode::Shared => (Kind::Shared, 0),
            Mode::Limit(n) => (Kind::Seat, n),
        };
        Entry {
            key: kv.key.clone(),
            create_revision,
            lease: kv.lease,
            kind,
            limit,
            holder,
        }
    }
}

/// A key's value while `--min-hold` keeps it (kept.rs): the holder's `record`, then the line that
/// says so, `kept LEASE UNTIL_MS HOLD_MS[ ended]`.
pub(super) fn with_kept_line(
    record: &str,
    lease: i64,
    until_ms: u128,
    hold_ms: u128,
    ended: bool,
) -> String {
    let ended = if ended { " ended" } else { "" };
    format!("{record}\nkept {lease:x} {until_ms} {hold_ms}{ended}")
}

/// What a key's `kept` line says: the min-hold's lease, when it ends (`None` from a dlock that
/// did not write it) and why it keeps the key.
#[derive(Debug, PartialEq)]
pub(super) struct KeptLine {
    pub(super) lease: i64,
    pub(super) until: Option<SystemTime>,
    pub(super) why: Kept,
}

/// A key's value without its `kept` line, and what that line says.
pub(super) fn split_kept_line(value: &str) -> (&str, Option<KeptLine>) {
    let Some((record, line)) = value.split_once("\nkept ") else {
        return (value, None);
    };
    let read = || {
        let (lease, note) = line.split_once(' ')?;
        let lease = i64::from_str_radix(lease, 16).ok()?;
        let dated = note.split_once(' ').and_then(|(until, note)| {
            let until = time_from_millis(until.parse().ok()?)?;
            Some((Some(until), Kept::from_note(note)?))
        });
        let (until, why) = dated.or_else(|| Some((None, Kept::from_note(note)?)))?;
        Some(KeptLine { lease, until, why })
    };
    (record, read())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_kept_line_reads_with_its_end_or_without_one() {
        let (record, line) =
            split_kept_line("o exclusive 0 1 2 h\nkept 1f 1700000000000 2000 ended");
        assert_eq!(record, "o exclusive 0 1 2 h");
        let line = line.expect("read");
        assert_eq!((line.lease, line.why.ended), (0x1f, true));
        assert_eq!(line.until, time_from_millis(1_700_000_000_000));
        assert_eq!(line.why.min_hold, Some(Duration::from_secs(2)));
        // As dlock wrote it before the end was in it.
        let line = split_kept_line("r\nkept 1f 2000 ended").1.expect("read");
        assert_eq!((line.until, line.why.ended), (None, true));
        let line = split_kept_line("r\nkept 1f 2000").1.expect("read");
        assert_eq!((line.until, line.why.ended), (None, false));
        assert!(split_kept_line("r\nkept 1f x 2000").1.is_none());
        assert!(split_kept_line("r\nkept zz 2000").1.is_none());
    }

    #[test]
    fn a_kept_line_reads_as_written() {
        let value = with_kept_line("o exclusive 0 1 2 h", 0x1f, 1_700_000_000_000, 2000, false);
        assert_eq!(value, "o exclusive 0 1 2 h\nkept 1f 1700000000000 2000");
        let (record, line) = split_kept_line(&value);
        assert_eq!(record, "o exclusive 0 1 2 h");
        let line = line.expect("read");
        assert_eq!((line.lease, line.why.ended), (0x1f, false));
        assert_eq!(line.until, time_from_millis(1_700_000_000_000));
    }
}
