//! The last runs as both SQL backends keep them: one row per name in `<prefix>runs`, the last run
//! and the last success as their one text form (`Run::record`), written by the statements that
//! acquire and release with the server's clock. The server writes the times and the token; the
//! client hands it the rest of the record (`tail`), and at the release the record it was handed
//! back (`Started`), which is still its own and not ended exactly when the row holds it unchanged.

use std::time::UNIX_EPOCH;

use dlock_core::lock::{escaped, LastRuns, LockRequest, Run, RunEnd};

/// Most characters of a record that is not UTF-8 shown (as `Run::from_record` shows one).
const MAX_SHOWN_CHARS: usize = 120;

/// How much of a stored record is read (the statements' `{read}`): one more than a readable
/// record may have, so that a longer one reads as unreadable without the whole of it crossing the
/// network.
pub const READ_BYTES: usize = dlock_core::lock::last_run::MAX_RUN_RECORD_BYTES + 1;

/// How many days a name's records are kept unwritten (`RUN_RECORD_KEPT_FOR`), for the
/// statements' `{kept_days}`: 400.
pub fn kept_days() -> u64 {
    dlock_core::lock::last_run::RUN_RECORD_KEPT_FOR.as_secs() / (24 * 3600)
}

/// `sql` with `{kept_days}` and `{read}` filled in.
pub fn fill(sql: &str) -> String {
    sql.replace("{kept_days}", &kept_days().to_string())
        .replace("{read}", &READ_BYTES.to_string())
}

/// The fields of this acquisition's record after its token, times and ending:
/// `PID OWNER HOST[\tMESSAGE]`, which the server writes after `run1 TOKEN ACQUIRED_MS - - `.
pub fn tail(request: &LockRequest) -> String {
    let record = Run::started(&request.owner, 0, request.message.as_deref(), UNIX_EPOCH).record();
    record.splitn(6, ' ').nth(5).unwrap_or_default().to_owned()
}

/// The record an acquisition wrote, as the server handed it back, split where the release writes
/// its ending: `run1 TOKEN ACQUIRED_MS` (`head`) and `PID OWNER HOST[\tMESSAGE]` (`tail`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub head: String,
    pub tail: String,
}

impl Started {
    /// The record `raw` the acquisition of `owner` was answered with; `None` for anything else
    /// (an answer that is not a record of this acquisition, not ended).
    pub fn of(raw: &str, owner: &str) -> Option<Started> {
        let run = Run::from_record(raw);
        if run.unreadable.is_some() || run.ended.is_some() || run.owner != owner {
            return None;
        }
        let fields: Vec<&str> = raw.splitn(6, ' ').collect();
        match fields.as_slice() {
            [version, token, acquired, "-", "-", tail] => Some(Started {
                head: format!("{version} {token} {acquired}"),
                tail: (*tail).to_owned(),
            }),
            _ => None,
        }
    }
}

/// What a release writes: the ending's word, and whether it is also the last success.
pub fn ending(end: &RunEnd) -> (String, bool) {
    (end.ending.to_wire(), end.ending.succeeded())
}

/// A stored record as read (any bytes: other clients may write these tables), never trusted.
pub fn run_of(raw: Option<&[u8]>) -> Option<Run> {
    let raw = raw?;
    Some(match std::str::from_utf8(raw) {
        Ok(text) => Run::from_record(text),
        Err(_) => {
            let shown = escaped(&String::from_utf8_lossy(raw), MAX_SHOWN_CHARS);
            Run {
                unreadable: Some(shown),
                ..Run::from_record("")
            }
        }
    })
}

/// The two records of a name, as read.
pub fn last_runs(last_run: Option<&[u8]>, last_success: Option<&[u8]>) -> LastRuns {
    LastRuns {
        last_run: run_of(last_run),
        last_success: run_of(last_success),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlock_core::lock::Ending;

    const OWNER: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_started_record_splits_where_the_ending_goes_and_joins_back() {
        let raw = format!("run1 7 1700000000123 - - 42 {OWNER} host-3\tnightly backup");
        let started = Started::of(&raw, OWNER).unwrap();
        assert_eq!(started.head, "run1 7 1700000000123");
        assert_eq!(started.tail, format!("42 {OWNER} host-3\tnightly backup"));
        assert_eq!(format!("{} - - {}", started.head, started.tail), raw);
        let ended = format!("{} 1700000000999 exit:3 {}", started.head, started.tail);
        assert_eq!(Run::from_record(&ended).ending, Some(Ending::Exited(3)));
    }

    #[test]
    fn only_an_own_record_not_ended_is_a_start() {
        let other = "fedcba9876543210fedcba9876543210";
        for raw in [
            format!("run1 7 1 - - 42 {other} host"),
            format!("run1 7 1 5 exit:0 42 {OWNER} host"),
            "run1 7 1 - - 42".to_owned(),
            String::new(),
        ] {
            assert_eq!(Started::of(&raw, OWNER), None, "{raw:?}");
        }
    }

    #[test]
    fn records_that_are_not_utf8_are_unreadable() {
        let run = run_of(Some(
            b"run1 7 1 - - 42 0123456789abcdef0123456789abcdef h\xff",
        ))
        .unwrap();
        assert!(run.unreadable.is_some(), "{run:?}");
        assert_eq!(run_of(None), None);
    }
}
