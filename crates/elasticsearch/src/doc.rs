//! A lock's document as read: its holders, its line of waiters and its last runs, each field
//! checked (other clients may write the index); an entry that does not read is an unreadable
//! holder, counted as the scripts count it, and a document that is not dlock's (a `_create` of the
//! same id by another tool) an unreadable exclusive holder: the lock stays busy.

use serde_json::Value;

use dlock_core::lock::time_from_millis;
use dlock_core::lock::{Holder, Kept, LastRuns, Mode, Run, Token};

/// One holder's or waiter's entry.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    /// The owner id as written (a string), for a release, a renewal or `release --force`.
    pub owner: Option<String>,
    /// As the scripts count it.
    pub mode: Mode,
    pub holder: Holder,
}

/// The document of one lock.
#[derive(Clone, Debug, Default)]
pub(super) struct Doc {
    pub holders: Vec<Entry>,
    pub waiters: Vec<Entry>,
    pub runs: LastRuns,
    /// What a release answered (`held` or `lost`).
    pub reply: Option<String>,
    /// The concurrency group record (group.rs), as stored.
    pub group: Option<String>,
}

impl Doc {
    /// The document from its `_source`.
    pub(super) fn of(source: &Value) -> Doc {
        let dlocks = source.get("dlock").is_some_and(|d| !d.is_null());
        let (Some(holders), Some(waiters), true) = (
            source.get("holders").and_then(Value::as_array),
            source.get("waiters").and_then(Value::as_array),
            dlocks,
        ) else {
            let raw = source.to_string();
            return Doc {
                holders: vec![Entry {
                    owner: None,
                    mode: Mode::Exclusive,
                    holder: Holder::unreadable(Mode::Exclusive, "?", &raw),
                }],
                ..Doc::default()
            };
        };
        Doc {
            holders: holders.iter().map(|e| Entry::of(e, true)).collect(),
            waiters: waiters.iter().map(|e| Entry::of(e, false)).collect(),
            runs: LastRuns {
                last_run: source.get("last_run").filter(|r| !r.is_null()).map(run_of),
                last_success: source
                    .get("last_success")
                    .filter(|r| !r.is_null())
                    .map(run_of),
            },
            reply: source
                .get("reply")
                .and_then(Value::as_str)
                .map(str::to_owned),
            group: source
                .get("group")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
                .map(str::to_owned),
        }
    }

    /// The entry of `owner` among the holders.
    pub(super) fn holder(&self, owner: &str) -> Option<&Entry> {
        self.holders
            .iter()
            .find(|e| e.owner.as_deref() == Some(owner))
    }

    /// Where `owner` waits in line, and whether it would be let in once the holders are gone (the
    /// head of the line, or one of the readers or seats at its head that go in together).
    pub(super) fn place(&self, owner: &str, mode: Mode) -> Option<(usize, bool)> {
        let at = self
            .waiters
            .iter()
            .position(|e| e.owner.as_deref() == Some(owner))?;
        let ahead: Vec<Mode> = self.waiters[..at].iter().map(|e| e.mode).collect();
        Some((at, fits(mode, &ahead)))
    }

    pub(super) fn holders(&self) -> Vec<Holder> {
        self.holders.iter().map(|e| e.holder.clone()).collect()
    }
}

/// Whether `mode` fits beside `counted`, as the scripts judge it (recipe/common.painless).
pub(super) fn fits(mode: Mode, counted: &[Mode]) -> bool {
    match mode {
        Mode::Exclusive => counted.is_empty(),
        Mode::Shared => counted.iter().all(|m| *m != Mode::Exclusive),
        Mode::Limit(n) => {
            let seats = counted
                .iter()
                .filter(|m| matches!(m, Mode::Limit(_)))
                .count();
            counted.iter().all(|m| *m != Mode::Exclusive)
                && u32::try_from(seats).is_ok_and(|s| s < n)
        }
    }
}

impl Entry {
    fn of(value: &Value, holding: bool) -> Entry {
        let owner = value
            .get("owner")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mode_word = value.get("mode").and_then(Value::as_str);
        let counted = match mode_word.and_then(Mode::from_wire) {
            Some(m @ (Mode::Shared | Mode::Limit(_))) => m,
            _ => Mode::Exclusive,
        };
        let holder = read_holder(value, holding).unwrap_or_else(|| {
            Holder::unreadable(counted, owner.as_deref().unwrap_or("?"), &value.to_string())
        });
        Entry {
            owner,
            mode: counted,
            holder,
        }
    }
}

fn millis(value: &Value, key: &str) -> Option<Option<u64>> {
    match value.get(key) {
        None | Some(Value::Null) => Some(None),
        Some(v) => Some(Some(v.as_u64()?)),
    }
}

fn read_holder(value: &Value, holding: bool) -> Option<Holder> {
    let mode = Mode::from_wire(value.get("mode")?.as_str()?)?;
    let owner = value.get("owner")?.as_str()?;
    let host = value.get("host")?.as_str()?;
    let pid = u32::try_from(value.get("pid")?.as_u64()?).ok()?;
    let since = value.get("since")?.as_u64()?;
    let token: Option<Token> = match (holding, millis(value, "token")?) {
        (true, Some(t)) if t > 0 => Some(t),
        (false, None) => None,
        _ => return None,
    };
    let message = match value.get("message") {
        None | Some(Value::Null) => None,
        Some(m) => Some(m.as_str()?),
    };
    let holder =
        Holder::checked(mode, owner, host, pid, since / 1000, token)?.with_message(message)?;
    let expires_at = time_from_millis(value.get("expires")?.as_u64()?);
    let kept_until = millis(value, "kept_until")?.and_then(time_from_millis);
    let min_hold = millis(value, "min_hold")?.map(std::time::Duration::from_millis);
    let ended = value.get("ended").and_then(Value::as_bool).unwrap_or(false);
    Some(Holder {
        since: time_from_millis(since),
        expires_at: if ended { kept_until } else { expires_at },
        kept_until,
        kept: kept_until.map(|_| Kept { min_hold, ended }),
        ..holder
    })
}

/// A run as the scripts keep it, through its one text form (`Run::record`), so that it is
/// checked as every store's is.
fn run_of(value: &Value) -> Run {
    let raw = value.to_string();
    let record = (|| {
        let word = |key: &str| match value.get(key) {
            None | Some(Value::Null) => Some("-".to_owned()),
            Some(v) => v.as_u64().map(|n| n.to_string()),
        };
        let ending = match value.get("ending") {
            None | Some(Value::Null) => "-".to_owned(),
            Some(v) => v.as_str()?.to_owned(),
        };
        let mut line = format!(
            "{} {} {} {} {} {} {} {}",
            dlock_core::lock::last_run::RUN_RECORD_VERSION,
            value.get("token")?.as_u64()?,
            value.get("acquired")?.as_u64()?,
            word("ended")?,
            ending,
            value.get("pid")?.as_u64()?,
            value.get("owner")?.as_str()?,
            value.get("host")?.as_str()?,
        );
        match value.get("message") {
            None | Some(Value::Null) => {}
            Some(m) => {
                line.push('\t');
                line.push_str(m.as_str()?);
            }
        }
        Some(line)
    })();
    match record {
        Some(line) => match Run::from_record(&line) {
            run if run.unreadable.is_none() => run,
            _ => Run::unreadable(&raw),
        },
        None => Run::unreadable(&raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_holder_and_a_run_read_and_forgeries_are_unreadable() {
        let source = serde_json::json!({
            "dlock": 1, "token": 3,
            "holders": [{"owner": OWNER, "mode": "limit:2", "token": 3, "since": 1_700_000_000_000u64,
                         "expires": 1_700_000_030_000u64, "pid": 7, "host": "h", "message": "hi"},
                        {"owner": "x", "mode": "shared", "token": "?"}],
            "waiters": [{"owner": OWNER, "mode": "exclusive", "since": 1_700_000_000_000u64,
                         "expires": 1, "pid": 8, "host": "h", "message": null}],
            "last_run": {"token": 3, "acquired": 1_700_000_000_000u64, "ended": null, "ending": null,
                         "pid": 7, "owner": OWNER, "host": "h", "message": null},
            "last_success": {"token": "x"},
        });
        let doc = Doc::of(&source);
        assert_eq!(doc.holders[0].holder.token, Some(3));
        assert_eq!(doc.holders[0].holder.message.as_deref(), Some("hi"));
        assert!(doc.holders[0].holder.unreadable.is_none());
        assert!(doc.holders[1].holder.unreadable.is_some());
        assert_eq!(doc.holders[1].mode, Mode::Shared);
        assert!(doc.waiters[0].holder.unreadable.is_none());
        let run = doc.runs.last_run.unwrap();
        assert_eq!((run.token, run.ending), (Some(3), None));
        assert!(doc.runs.last_success.unwrap().unreadable.is_some());
        let foreign = Doc::of(&serde_json::json!({"process_id": 4}));
        assert_eq!(foreign.holders.len(), 1);
        assert!(foreign.holders[0].holder.unreadable.is_some());
    }

    #[test]
    fn the_head_of_the_line_is_who_fits_beside_the_waiters_ahead() {
        assert!(fits(Mode::Shared, &[Mode::Shared, Mode::Limit(2)]));
        assert!(!fits(Mode::Limit(2), &[Mode::Limit(2), Mode::Limit(2)]));
        assert!(!fits(Mode::Exclusive, &[Mode::Shared]));
        assert!(fits(Mode::Exclusive, &[]));
    }
}
