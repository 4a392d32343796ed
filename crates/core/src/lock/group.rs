//! A lock's concurrency group record, for `run --supersede` and `run --cancel-in-progress`: who
//! is the newest `--supersede` waiter, which holders (and waiters) said `--cancel-in-progress`,
//! the request to cancel under way (which also reserves the lock for its asker), and the last
//! holder cancelled and by whom. Each store keeps one record per lock name beside the lock and
//! changes it only by `GroupRecords::update`, a read-modify-write no other writer interleaves
//! with; the rules live in supervise/group.rs. The record is JSON, read like every record that
//! comes from outside: bounded, and what does not read is no record at all (nobody is cancelled
//! or superseded on data that cannot be read).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::holder::{is_owner_id, MAX_HOST_BYTES, MAX_MESSAGE_BYTES};
use super::plain::message_ok;

/// The first field of every group record, so that a later format can be told apart.
const VERSION: &str = "group1";

/// Longest group record read, in bytes.
pub const MAX_GROUP_RECORD_BYTES: usize = 16 * 1024;

/// Most runs a record lists as cancellable (shared holders and waiters); the oldest go first.
const MAX_CANCELLABLE: usize = 32;

/// A run named in a group record: who, for the messages and `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Party {
    /// The run's owner id (one per `dlock run`, the id its holder records carry).
    pub owner: String,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub message: Option<String>,
    /// When it was written, in milliseconds since the epoch.
    pub at_ms: u64,
}

/// A request to cancel the holders `targets` (owner ids), made by `by`. It also reserves the
/// lock for `by`: another dlock that gets the lock first gives it back, until `until_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    pub targets: Vec<String>,
    pub by: Party,
    pub until_ms: u64,
}

/// A holder cancelled: who (`holder`, with its token) and by whom.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    pub holder: Party,
    pub token: Option<u64>,
    pub by: Party,
}

/// One lock's group record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The newest `--supersede` waiter.
    pub supersede: Option<Party>,
    /// Runs that said `--cancel-in-progress`, oldest first.
    pub cancellable: Vec<Party>,
    /// The request to cancel under way.
    pub cancel: Option<CancelRequest>,
    /// The last holder cancelled.
    pub last_cancelled: Option<Cancelled>,
}

/// The stored form: the record and its version.
#[derive(Serialize, Deserialize)]
struct Stored {
    v: String,
    #[serde(flatten)]
    record: GroupRecord,
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Party {
    /// This process, as owner `owner` with `message`.
    pub fn me(owner: &str, message: Option<&str>) -> Party {
        Party {
            owner: owner.to_owned(),
            host: Some(super::host_name()),
            pid: Some(super::acting_for::record_pid()),
            message: message.map(str::to_owned),
            at_ms: now_ms(),
        }
    }

    /// `host pid 123 ("deploy v2")`, or as much of it as is known.
    pub fn describe(&self) -> String {
        let mut out = self.host.clone().unwrap_or_else(|| "unknown host".into());
        if let Some(pid) = self.pid {
            out.push_str(&format!(" pid {pid}"));
        }
        if let Some(message) = &self.message {
            out.push_str(&format!(" ({message:?})"));
        }
        out
    }

    fn readable(&self) -> bool {
        is_owner_id(&self.owner)
            && self
                .host
                .as_ref()
                .is_none_or(|h| h.len() <= MAX_HOST_BYTES && !h.chars().any(char::is_control))
            && self
                .message
                .as_ref()
                .is_none_or(|m| m.len() <= MAX_MESSAGE_BYTES && message_ok(m))
    }
}

impl GroupRecord {
    /// The record in `text`, or `None` when it cannot be read as one dlock wrote (then it counts
    /// as empty: nobody is superseded or cancelled on its word).
    pub fn read(text: &str) -> Option<GroupRecord> {
        if text.len() > MAX_GROUP_RECORD_BYTES {
            return None;
        }
        let stored: Stored = serde_json::from_str(text).ok()?;
        let r = stored.record;
        let parties = r
            .supersede
            .iter()
            .chain(&r.cancellable)
            .chain(r.cancel.iter().map(|c| &c.by))
            .chain(
                r.last_cancelled
                    .iter()
                    .flat_map(|c| [&c.holder, &c.by].into_iter()),
            );
        let ok = stored.v == VERSION
            && r.cancellable.len() <= MAX_CANCELLABLE
            && r.cancel.as_ref().is_none_or(|c| {
                c.targets.len() <= MAX_CANCELLABLE && c.targets.iter().all(|t| is_owner_id(t))
            })
            && { parties }.all(Party::readable);
        ok.then(|| r.clone())
    }

    /// The stored text.
    pub fn text(&self) -> String {
        let mut record = self.clone();
        let over = record.cancellable.len().saturating_sub(MAX_CANCELLABLE);
        record.cancellable.drain(..over);
        serde_json::to_string(&Stored {
            v: VERSION.into(),
            record,
        })
        .unwrap_or_default()
    }

    /// Whether the record says nothing: the store may remove it.
    pub fn is_empty(&self) -> bool {
        *self == GroupRecord::default()
    }

    /// Whether the run `owner` said `--cancel-in-progress`.
    pub fn is_cancellable(&self, owner: &str) -> bool {
        self.cancellable.iter().any(|p| p.owner == owner)
    }

    /// The request under way that reserves the lock for another run than `owner`, if one does.
    pub fn reserved_for_other(&self, owner: &str, now_ms: u64) -> Option<&CancelRequest> {
        self.cancel
            .as_ref()
            .filter(|c| c.by.owner != owner && c.until_ms > now_ms)
    }
}

impl GroupRecord {
    /// What `status` shows of the record, a line each, after the holders (`holders`: their owner
    /// ids, to tell a holder from a waiter).
    pub fn lines(&self, holders: &[&str]) -> String {
        let mut text = String::new();
        for p in &self.cancellable {
            let role = if holders.contains(&p.owner.as_str()) {
                "holder"
            } else {
                "waiter"
            };
            text.push_str(&format!(
                "  cancellable {role} (--cancel-in-progress): {}, owner {}\n",
                p.describe(),
                p.owner
            ));
        }
        if let Some(p) = &self.supersede {
            text.push_str(&format!(
                "  --supersede waiter (a newer one replaces it): {}, owner {}\n",
                p.describe(),
                p.owner
            ));
        }
        if let Some(c) = &self.cancel {
            text.push_str(&format!(
                "  cancel requested by {} (owner {}) for owner {}\n",
                c.by.describe(),
                c.by.owner,
                c.targets.join(", ")
            ));
        }
        if let Some(c) = &self.last_cancelled {
            let token = c.token.map(|t| format!(", token {t}")).unwrap_or_default();
            text.push_str(&format!(
                "  last cancelled: {}{token}, by {}\n",
                c.holder.describe(),
                c.by.describe()
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn party(owner: &str) -> Party {
        Party {
            owner: owner.into(),
            host: Some("h".into()),
            pid: Some(1),
            message: Some("deploy".into()),
            at_ms: 5,
        }
    }

    #[test]
    fn a_record_reads_back_and_forgeries_do_not() {
        let record = GroupRecord {
            supersede: Some(party(&"a".repeat(32))),
            cancellable: vec![party(&"b".repeat(32))],
            cancel: Some(CancelRequest {
                targets: vec!["b".repeat(32)],
                by: party(&"c".repeat(32)),
                until_ms: 9,
            }),
            last_cancelled: None,
        };
        assert_eq!(GroupRecord::read(&record.text()), Some(record.clone()));
        let forged = record.text().replace("deploy", "de\\u001bploy");
        assert_eq!(GroupRecord::read(&forged), None);
        assert_eq!(GroupRecord::read("{\"v\":\"group9\"}"), None);
        assert_eq!(
            GroupRecord::read(&" ".repeat(MAX_GROUP_RECORD_BYTES + 1)),
            None
        );
        assert!(GroupRecord::read(&GroupRecord::default().text()).is_some_and(|r| r.is_empty()));
    }
}
