//! What a store keeps of a lock's runs: the last run (the latest acquisition, and how it ended
//! once it has) and the last that succeeded, so that `status` can say what happened last time
//! and `status --ran-within` whether the job ran. Each store keeps the two records beside the lock
//! in its own way; they are written in the round trips that acquire and release where the store
//! allows, and they share one text form, `Run::record`.
//!
//! The rules every store follows:
//! - An acquisition writes its run as the last run, not ended (`Run::started`).
//! - A release, or the end of a hold, writes the ending into the last run only when that record is
//!   still its own (the same owner id) and not ended yet: a later acquisition's record is never
//!   overwritten, nor an ending already written (a run forced away stays "forced", not "lost").
//! - A release that finds the lock no longer this holder's (the finding that makes it say
//!   `Released::Lost`: a lease that passed while dlock was stopped, a lock broken or deleted)
//!   writes `Lost`, whatever the supervisor passed: the command did not hold the lock to its end,
//!   even if it exited 0.
//! - A successful ending (`Ending::succeeded`) is also written as the last success, whatever the
//!   last run is (a later shared holder's record may be there), but never by a release that found
//!   the lock lost.
//! - With several servers (Redlock), each applies these rules on its own, by whether it still had
//!   the lease: servers that disagree keep different endings of one run (`lost` on some, the
//!   command's and a success on others), while the release's answer goes by the majority; the
//!   store's reading goes by the majority too (backend/redis/runs.rs).
//! - `release --force` writes `Forced` into the last run when it removes that run's holder.
//! - A last run that never ended, whose holder no longer holds the lock, is shown as "never
//!   ended": its host died, or it was killed beyond dlock's reach, and its lease has passed.
//!
//! Records come from outside like holder records: every field is bounded when read, and one that
//! does not read is shown escaped, never trusted.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::holder::{is_owner_id, rfc3339, MAX_HOST_BYTES, MAX_SINCE_SECS};
use super::plain::{escaped, is_plain, message_ok, number};
use super::Token;

/// The first word of every run record, so that a later format can be told apart.
pub const RUN_RECORD_VERSION: &str = "run1";

/// Longest run record a store may hand back, in bytes; a longer one is unreadable.
pub const MAX_RUN_RECORD_BYTES: usize = 1024;

/// How long a store keeps the records of a name nobody acquires any more: 400 days, so that a
/// yearly job still finds its last run.
pub const RUN_RECORD_KEPT_FOR: Duration = Duration::from_secs(400 * 24 * 3600);

/// How far ahead of the reader's clock a record written by another host's may be dated (the file
/// backend, etcd: stores without a clock of their own), for clocks kept in step by NTP.
pub const READER_CLOCK_SKEW: Duration = Duration::from_secs(1);

/// Most characters of an unreadable record shown.
const MAX_SHOWN_CHARS: usize = 120;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The command exited with this status.
    Exited(i32),
    /// The command was ended by this signal.
    Signalled(i32),
    /// The lock was lost while the command ran (exit 79).
    Lost,
    /// `release --force` took the lock away.
    Forced,
    /// A `dlock hold` given up by `dlock release`.
    Released,
    /// A `dlock hold` whose shell exited without `dlock release`.
    ShellExited,
    /// A newer `--cancel-in-progress` run asked for the lock, and the command was terminated
    /// (who asked is in the lock's group record, see `lock::group`).
    Cancelled,
    /// The lock was given back before any command ran (another of several names stayed busy, or
    /// a signal came first).
    NotRun,
}

impl Ending {
    /// Whether the run counts as a success: the command exited 0, or a hold was released.
    pub fn succeeded(self) -> bool {
        matches!(self, Ending::Exited(0) | Ending::Released)
    }

    /// The word a store keeps: `exit:N`, `signal:N`, `lost`, `forced`, `released`,
    /// `shell-exited`, `not-run`.
    pub fn to_wire(self) -> String {
        match self {
            Ending::Exited(n) => format!("exit:{n}"),
            Ending::Signalled(n) => format!("signal:{n}"),
            Ending::Lost => "lost".into(),
            Ending::Forced => "forced".into(),
            Ending::Released => "released".into(),
            Ending::ShellExited => "shell-exited".into(),
            Ending::NotRun => "not-run".into(),
            Ending::Cancelled => "cancelled".into(),
        }
    }

    /// The inverse of `to_wire`; `None` for anything dlock does not write.
    pub fn from_wire(word: &str) -> Option<Ending> {
        Some(match word {
            "lost" => Ending::Lost,
            "forced" => Ending::Forced,
            "released" => Ending::Released,
            "shell-exited" => Ending::ShellExited,
            "not-run" => Ending::NotRun,
            "cancelled" => Ending::Cancelled,
            _ => match word.split_once(':')? {
                ("exit", n) => Ending::Exited(number::<i32>(n).filter(|n| (0..=255).contains(n))?),
                ("signal", n) => {
                    Ending::Signalled(number::<i32>(n).filter(|n| (1..=64).contains(n))?)
                }
                _ => return None,
            },
        })
    }
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::Exited(n) => write!(f, "exit {n}"),
            Ending::Signalled(n) => write!(f, "killed by {}", crate::text::signal_name(*n)),
            Ending::Lost => write!(f, "lost the lock"),
            Ending::Forced => write!(f, "forced away by release --force"),
            Ending::Released => write!(f, "released"),
            Ending::ShellExited => write!(f, "its shell exited"),
            Ending::NotRun => write!(f, "given back before its command ran"),
            Ending::Cancelled => write!(f, "cancelled by a newer --cancel-in-progress run"),
        }
    }
}

impl Serialize for Ending {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_wire())
    }
}

/// What the supervisor tells a lease when it gives the lock up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunEnd {
    pub ending: Ending,
    /// Whether `--min-hold` keeps the lock taken past the release (false: given up at once, as
    /// after a failure under `--release-on-failure`, or when there is no min-hold).
    pub keep: bool,
}

impl RunEnd {
    /// A release before any command ran: nothing is kept.
    pub const NOT_RUN: RunEnd = RunEnd {
        ending: Ending::NotRun,
        keep: false,
    };
}

/// One run of a lock, as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Run {
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub owner: String,
    pub token: Option<Token>,
    pub message: Option<String>,
    /// When the lock was acquired, by the store's clock where it has one.
    #[serde(serialize_with = "serialize_time")]
    pub acquired: Option<SystemTime>,
    /// When the run ended, by the store's clock where it has one; `None`: not ended (still
    /// running, or never ended if its holder no longer holds the lock).
    #[serde(serialize_with = "serialize_time")]
    pub ended: Option<SystemTime>,
    pub ending: Option<Ending>,
    /// The stored record, escaped and truncated, when it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

fn serialize_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t.and_then(rfc3339) {
        Some(text) => s.serialize_str(&text),
        None => s.serialize_none(),
    }
}

fn millis(t: Option<SystemTime>) -> String {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or_else(|| "-".into(), |d| d.as_millis().to_string())
}

fn time(ms: &str) -> Option<Option<SystemTime>> {
    if ms == "-" {
        return Some(None);
    }
    let ms: u64 = number(ms)?;
    (ms / 1000 <= MAX_SINCE_SECS).then(|| Some(UNIX_EPOCH + Duration::from_millis(ms)))
}

impl Run {
    /// A run just acquired, not ended.
    pub fn started(owner: &str, token: Token, message: Option<&str>, acquired: SystemTime) -> Run {
        Run {
            host: Some(super::host_name()),
            pid: Some(super::acting_for::record_pid()),
            owner: owner.to_owned(),
            token: Some(token),
            message: message.map(str::to_owned),
            acquired: Some(acquired),
            ended: None,
            ending: None,
            unreadable: None,
        }
    }

    /// This run, ended now (by `at`) in the way `ending` says.
    pub fn ended(mut self, ending: Ending, at: SystemTime) -> Run {
        self.ended = Some(at);
        self.ending = Some(ending);
        self
    }

    /// The run as one line of text, as every store keeps it:
    /// `run1 TOKEN ACQUIRED_MS ENDED_MS ENDING PID OWNER HOST`, then a tab and the message if
    /// there is one. Times are milliseconds since the epoch; `ENDED_MS` and `ENDING` are `-`
    /// until the run ends. A store with a clock of its own writes its times in place of these
    /// (the fields are at fixed places, so a script can splice them).
    pub fn record(&self) -> String {
        let mut line = format!(
            "{RUN_RECORD_VERSION} {} {} {} {} {} {} {}",
            self.token.unwrap_or(0),
            millis(self.acquired),
            millis(self.ended),
            self.ending.map_or_else(|| "-".into(), Ending::to_wire),
            self.pid.unwrap_or(0),
            self.owner,
            self.host.as_deref().unwrap_or("?"),
        );
        if let Some(message) = &self.message {
            line.push('\t');
            line.push_str(message);
        }
        line
    }

    /// The inverse of `record`; a record dlock would not have written gives a run marked
    /// unreadable.
    pub fn from_record(raw: &str) -> Run {
        Run::parse(raw).unwrap_or_else(|| Run::unreadable(raw))
    }

    /// A run that could not be read: `raw` (what was read, or why nothing was), shown escaped.
    pub fn unreadable(raw: &str) -> Run {
        Run {
            host: None,
            pid: None,
            owner: String::new(),
            token: None,
            message: None,
            acquired: None,
            ended: None,
            ending: None,
            unreadable: Some(escaped(raw, MAX_SHOWN_CHARS)),
        }
    }

    /// This run as read when the clock that dated it says `now` (the store's, or the reader's for
    /// a store that has none, give or take `skew`): a run dated later, acquired or ended after
    /// `now` (and `skew`), is unreadable, not a success within any time (a clock that was wrong,
    /// or a record forged).
    pub fn judged_at(self, now: SystemTime, skew: Duration) -> Run {
        if self
            .acquired
            .max(self.ended)
            .is_none_or(|t| t <= now + skew)
        {
            return self;
        }
        let now = rfc3339(now).unwrap_or_else(|| "?".into());
        Run::unreadable(&format!(
            "dated after {now}, the time now: {}",
            self.record()
        ))
    }

    fn parse(raw: &str) -> Option<Run> {
        if raw.len() > MAX_RUN_RECORD_BYTES {
            return None;
        }
        let mut fields = raw.splitn(8, ' ');
        if fields.next()? != RUN_RECORD_VERSION {
            return None;
        }
        let token: Token = number(fields.next()?)?;
        let acquired = time(fields.next()?)?;
        let ended = time(fields.next()?)?;
        let ending = match fields.next()? {
            "-" => None,
            word => Some(Ending::from_wire(word)?),
        };
        if ended.is_some() != ending.is_some() {
            return None;
        }
        let pid: u32 = number(fields.next()?)?;
        let owner = fields.next()?;
        let rest = fields.next()?;
        let (host, message) = match rest.split_once('\t') {
            Some((host, message)) => (host, Some(message)),
            None => (rest, None),
        };
        let host_ok = !host.is_empty() && host.len() <= MAX_HOST_BYTES && is_plain(host);
        if !host_ok || !is_owner_id(owner) || !message.is_none_or(message_ok) {
            return None;
        }
        Some(Run {
            host: Some(host.to_owned()),
            pid: Some(pid),
            owner: owner.to_owned(),
            token: Some(token),
            message: message.map(str::to_owned),
            acquired,
            ended,
            ending,
            unreadable: None,
        })
    }
}

/// What a store keeps of a lock's runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LastRuns {
    /// The latest acquisition, and how it ended once it has.
    pub last_run: Option<Run>,
    /// The latest run that succeeded (`Ending::succeeded`).
    pub last_success: Option<Run>,
}

impl LastRuns {
    /// Both records as read when the clock that dated them says `now` (see `Run::judged_at`).
    pub fn judged_at(self, now: SystemTime, skew: Duration) -> LastRuns {
        LastRuns {
            last_run: self.last_run.map(|run| run.judged_at(now, skew)),
            last_success: self.last_success.map(|run| run.judged_at(now, skew)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Run {
        Run {
            host: Some("host-3".into()),
            pid: Some(42),
            owner: "0123456789abcdef0123456789abcdef".into(),
            token: Some(17),
            message: Some("nightly backup".into()),
            acquired: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
            ended: None,
            ending: None,
            unreadable: None,
        }
    }

    #[test]
    fn run_records_round_trip_started_and_ended() {
        let started = run();
        assert_eq!(
            started.record(),
            "run1 17 1700000000123 - - 42 0123456789abcdef0123456789abcdef host-3\tnightly backup"
        );
        assert_eq!(Run::from_record(&started.record()), started);
        for ending in [
            Ending::Exited(0),
            Ending::Exited(3),
            Ending::Signalled(15),
            Ending::Lost,
            Ending::Forced,
            Ending::Released,
            Ending::ShellExited,
            Ending::NotRun,
        ] {
            let ended = run().ended(ending, UNIX_EPOCH + Duration::from_secs(1_700_000_100));
            assert_eq!(Run::from_record(&ended.record()), ended, "{ending:?}");
        }
    }

    #[test]
    fn only_a_zero_exit_and_a_release_succeed() {
        assert!(Ending::Exited(0).succeeded());
        assert!(Ending::Released.succeeded());
        for ending in [
            Ending::Exited(1),
            Ending::Signalled(9),
            Ending::Lost,
            Ending::Forced,
            Ending::ShellExited,
            Ending::NotRun,
        ] {
            assert!(!ending.succeeded(), "{ending:?}");
        }
    }

    #[test]
    fn records_dlock_would_not_write_are_unreadable_and_escaped() {
        for raw in [
            "",
            "run2 17 1 - - 42 0123456789abcdef host",
            "run1 17 1 - exit:0 42 0123456789abcdef host",
            "run1 17 1 5 - 42 0123456789abcdef host",
            "run1 17 1 5 exit:256 42 0123456789abcdef host",
            "run1 17 1 5 signal:0 42 0123456789abcdef host",
            "run1 -1 1 - - 42 0123456789abcdef host",
            "run1 17 99999999999999999 - - 42 0123456789abcdef host",
            "run1 17 1 - - 42 0123456789abcdef ho\x1bst",
            "run1 17 1 - - 42 0123456789abcdef host\t\x07bell",
        ] {
            let run = Run::from_record(raw);
            let shown = run
                .unreadable
                .as_deref()
                .unwrap_or_else(|| panic!("{raw:?}"));
            assert!(
                !shown.contains('\x1b') && !shown.contains('\x07'),
                "{shown:?}"
            );
        }
        let long = format!("run1 1 1 - - 1 o {}", "h".repeat(2000));
        assert_eq!(
            Run::from_record(&long).unreadable.unwrap().chars().count(),
            123
        );
    }

    #[test]
    fn a_run_dated_after_now_is_unreadable() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        let ended = run().ended(Ending::Exited(0), now);
        assert_eq!(ended.clone().judged_at(now, Duration::ZERO), ended);
        let earlier = now - Duration::from_millis(1);
        let skew = Duration::from_millis(1);
        assert_eq!(ended.clone().judged_at(earlier, skew), ended);
        // Ended after `earlier`; acquired (at ...000.123) after ...000.
        let before_start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for (run, at, shown) in [
            (ended.clone(), earlier, "2023-11-14T22:14:59Z"),
            (run(), before_start, "2023-11-14T22:13:20Z"),
        ] {
            let why = run
                .judged_at(at, Duration::ZERO)
                .unreadable
                .expect("unreadable");
            assert!(why.starts_with(&format!("dated after {shown}, ")), "{why}");
        }
    }
}
