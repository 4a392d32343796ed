//! What a key under a lock's prefix stands for: dlock writes `OWNER MODE 0 SINCE PID HOST` into
//! its keys (the holder record every backend shares, its token field unused: the token is the key's
//! create revision); etcd's own mutex (`etcdctl lock`) writes an empty value, an exclusive holder.
//! Values come from any client of the server, so each is parsed and checked; what does not read is
//! an unreadable holder that still counts, as exclusive unless it names another mode.

use std::time::{SystemTime, UNIX_EPOCH};

use super::rpc::KeyValue;

use super::kept::split;
use super::recipe::Kind;
use crate::lock::{escaped, host_name, Holder, LockRequest, Mode};

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
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| UNIX_EPOCH + std::time::Duration::from_secs(d.as_secs()))
        .ok();
    let holder = Holder {
        mode: request.mode,
        host: Some(host_name()),
        pid: Some(std::process::id()),
        owner: request.owner.clone(),
        since,
        token: None,
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
        let lease = format!("{:x}", kv.lease);
        let (value, kept) = match std::str::from_utf8(&kv.value) {
            Ok(text) => {
                let (record, kept) = split(text);
                (Ok(record), kept)
            }
            Err(e) => (Err(e), None),
        };
        // Only while the key lives by that lease: one moved back to its holder's is held as usual.
        let kept = kept.filter(|line| line.lease == kv.lease);
        let mut holder = match value {
            // etcd's mutex: an exclusive holder known by its lease alone.
            Ok("") => Holder {
                mode: Mode::Exclusive,
                host: None,
                pid: None,
                owner: lease,
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
                    if holder.unreadable.is_none() {
                        holder.token = token;
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
