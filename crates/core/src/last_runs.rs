//! What `status` and `list` say of a lock's last runs (see lock/last_run.rs): the lines after the
//! holders, the `last_run` and `last_success` fields of the JSON, and `status --ran-within`'s check
//! of the last success, one line for a monitoring system and its exit status.
//!
//! A last run that has not ended is running while its owner still holds the lock; once it does
//! not (its host died, it was killed beyond dlock's reach, its lease passed), it never ended.

use std::time::{Duration, SystemTime};

use crate::exit::Check;
use crate::lock::last_run::{Ending, LastRuns, Run};
use crate::lock::{Holder, MAX_SINCE_SECS};

/// Whether `run` has not ended and its owner holds the lock now (a `--min-hold` record kept after
/// its holder ended does not count).
fn running(run: &Run, holders: &[Holder]) -> bool {
    run.ended.is_none()
        && run.unreadable.is_none()
        && holders
            .iter()
            .any(|h| h.owner == run.owner && !h.kept.is_some_and(|k| k.ended))
}

/// How long from `from` to `to`, for people; nothing when a clock went back.
fn took(from: Option<SystemTime>, to: SystemTime) -> Option<String> {
    from.and_then(|from| to.duration_since(from).ok())
        .map(|d| crate::text::duration(round(d)))
}

/// To the second, past ten seconds: a record's times are kept to the millisecond.
fn round(d: Duration) -> Duration {
    if d < Duration::from_secs(10) {
        d
    } else {
        Duration::from_secs(d.as_secs())
    }
}

/// `t` from `now` (`3m 12s ago`), as holders' times are shown; `?` for none, or one outside the
/// years a record may carry.
fn time(t: Option<SystemTime>, now: SystemTime) -> String {
    t.filter(|t| {
        t.duration_since(std::time::UNIX_EPOCH)
            .is_ok_and(|d| d.as_secs() <= MAX_SINCE_SECS)
    })
    .map_or_else(|| "?".into(), |t| crate::text::from_now(t, now))
}

/// One run as `status` shows it, its times from `now`: `host-3 pid 42, ended 3h ago after 4m
/// 11s, exit 0, token 17`, or `running since 3m ago`, or `acquired 2d 1h ago, never ended`.
pub fn describe(run: &Run, holders: &[Holder], now: SystemTime) -> String {
    if let Some(raw) = &run.unreadable {
        return format!("unreadable record \"{raw}\"");
    }
    let mut out = run.host.clone().unwrap_or_else(|| "?".into());
    if let Some(pid) = run.pid {
        out.push_str(&format!(" pid {pid}"));
    }
    match (run.ended, run.ending) {
        (Some(ended), Some(ending)) => {
            out.push_str(&format!(", ended {}", time(Some(ended), now)));
            if let Some(took) = took(run.acquired, ended) {
                out.push_str(&format!(" after {took}"));
            }
            out.push_str(&format!(", {ending}"));
        }
        _ if running(run, holders) => {
            out.push_str(&format!(", running since {}", time(run.acquired, now)))
        }
        _ => out.push_str(&format!(
            ", acquired {}, never ended",
            time(run.acquired, now)
        )),
    }
    if let Some(token) = run.token {
        out.push_str(&format!(", token {token}"));
    }
    if let Some(message) = &run.message {
        out.push_str(&format!(", message {message:?}"));
    }
    out
}

/// The lines `status` prints after the holders: the last run, and the last success when it is
/// another run.
pub fn lines(runs: &LastRuns, holders: &[Holder], now: SystemTime) -> String {
    let mut text = String::new();
    if let Some(run) = &runs.last_run {
        text.push_str(&format!("  last run: {}\n", describe(run, holders, now)));
    }
    if let Some(success) = &runs.last_success {
        if runs.last_run.as_ref() != Some(success) {
            text.push_str(&format!(
                "  last success: {}\n",
                describe(success, holders, now)
            ));
        }
    }
    text
}

/// The line `list --runs` prints of a lock: `NAME<TAB>held, last run RUN` (or `free`), as `list`
/// sets the name apart, then `; last success RUN` when that is another run.
pub fn line(name: &str, runs: &LastRuns, holders: &[Holder], now: SystemTime) -> String {
    let mut parts = Vec::new();
    if let Some(run) = &runs.last_run {
        parts.push(format!("last run {}", describe(run, holders, now)));
    }
    if let Some(success) = &runs.last_success {
        if runs.last_run.as_ref() != Some(success) {
            parts.push(format!("last success {}", describe(success, holders, now)));
        }
    }
    let held = if holders.is_empty() { "free" } else { "held" };
    format!("{name}\t{held}, {}", parts.join("; "))
}

/// A run for `--json`: its fields, and `running` (see `running`); null for none.
fn run_json(run: Option<&Run>, holders: &[Holder]) -> serde_json::Value {
    let Some(run) = run else {
        return serde_json::Value::Null;
    };
    let mut value = serde_json::to_value(run).unwrap_or(serde_json::Value::Null);
    if let Some(fields) = value.as_object_mut() {
        fields.insert("running".into(), running(run, holders).into());
        // `ending`'s numbers, for a script: null when it did not end that way.
        let (exit_code, signal) = match run.ending {
            Some(Ending::Exited(n)) => (Some(n), None),
            Some(Ending::Signalled(n)) => (None, Some(n)),
            _ => (None, None),
        };
        fields.insert("exit_code".into(), exit_code.into());
        fields.insert("signal".into(), signal.into());
    }
    value
}

/// The `last_run` and `last_success` fields of `status --json` and `list --json`.
pub fn json(runs: &LastRuns, holders: &[Holder]) -> (serde_json::Value, serde_json::Value) {
    (
        run_json(runs.last_run.as_ref(), holders),
        run_json(runs.last_success.as_ref(), holders),
    )
}

/// `status NAME --ran-within WITHIN`: whether the last success ended within `within` of `now`,
/// and the one line that says so (`OK: nightly last succeeded 3h 12m ago on host-3`).
pub fn check(
    name: &str,
    runs: &LastRuns,
    holders: &[Holder],
    within: Duration,
    now: SystemTime,
) -> (Check, String) {
    let say = |check: Check, what: String| (check, format!("{}: {name} {what}", check.word()));
    let Some(success) = &runs.last_success else {
        if let Some(raw) = runs.last_run.as_ref().and_then(|r| r.unreadable.as_ref()) {
            return say(
                Check::Unknown,
                format!("has an unreadable record of its last run \"{raw}\""),
            );
        }
        let last = match &runs.last_run {
            Some(run) => format!(" (last run: {})", describe(run, holders, now)),
            None => " (no run on record)".into(),
        };
        return say(Check::Critical, format!("has never succeeded{last}"));
    };
    if let Some(raw) = &success.unreadable {
        return say(
            Check::Unknown,
            format!("has an unreadable record of its last success \"{raw}\""),
        );
    }
    let (Some(ended), true) = (success.ended, success.ending.is_some_and(|e| e.succeeded())) else {
        return say(
            Check::Unknown,
            "has a record of its last success that says it did not succeed".into(),
        );
    };
    let host = success.host.as_deref().unwrap_or("?");
    // A success ended "in the future" by this host's clock ended just now.
    let ago = now.duration_since(ended).unwrap_or_default();
    let ago_text = crate::text::duration(round(ago));
    if ago <= within {
        say(
            Check::Ok,
            format!("last succeeded {ago_text} ago on {host}"),
        )
    } else {
        say(
            Check::Warning,
            format!(
                "last succeeded {ago_text} ago on {host}, more than {} ago",
                crate::text::duration(within)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn run(acquired: u64) -> Run {
        let mut run = Run::started("00aa", 17, None, at(acquired));
        run.host = Some("host-3".into());
        run.pid = Some(42);
        run
    }

    #[test]
    fn an_ended_run_says_when_how_long_and_how() {
        let ended = run(1_700_000_000).ended(Ending::Exited(0), at(1_700_000_251));
        assert_eq!(
            describe(&ended, &[], at(1_700_003_851)),
            "host-3 pid 42, ended 1h ago after 4m 11s, exit 0, token 17"
        );
        let open = run(1_700_000_000);
        assert!(describe(&open, &[], at(1_700_000_100)).contains("acquired 1m 40s ago"));
        assert!(describe(&open, &[], at(1_700_000_100)).ends_with("never ended, token 17"));
    }

    #[test]
    fn a_list_line_names_the_lock_and_the_last_success_only_when_another_run() {
        let ok = run(1_700_000_000).ended(Ending::Exited(0), at(1_700_000_251));
        let failed = run(1_700_100_000).ended(Ending::Exited(3), at(1_700_100_001));
        let same = LastRuns {
            last_run: Some(ok.clone()),
            last_success: Some(ok.clone()),
        };
        let line = line("nightly", &same, &[], at(1_800_000_000));
        assert!(
            line.starts_with("nightly\tfree, last run host-3 pid 42, "),
            "{line}"
        );
        assert!(!line.contains("last success"), "{line}");
        let other = LastRuns {
            last_run: Some(failed),
            last_success: Some(ok),
        };
        let line = super::line("nightly", &other, &[], at(1_800_000_000));
        assert!(
            line.contains(", exit 3, token 17; last success host-3 "),
            "{line}"
        );
    }

    #[test]
    fn ran_within_says_ok_warning_critical_or_unknown() {
        let now = at(1_700_100_000);
        let success = run(1_700_000_000).ended(Ending::Exited(0), at(1_700_000_000));
        let runs = LastRuns {
            last_run: Some(success.clone()),
            last_success: Some(success),
        };
        let day = Duration::from_secs(86_400);
        let (check, line) = check("nightly", &runs, &[], 2 * day, now);
        assert_eq!(
            (check, line.as_str()),
            (
                Check::Ok,
                "OK: nightly last succeeded 27h 46m ago on host-3"
            )
        );
        assert_eq!(check_of(&runs, day, now), Check::Warning);
        let failed = LastRuns {
            last_run: Some(run(1).ended(Ending::Exited(3), at(2))),
            last_success: None,
        };
        assert_eq!(check_of(&failed, day, now), Check::Critical);
        assert_eq!(check_of(&LastRuns::default(), day, now), Check::Critical);
        let unreadable = LastRuns {
            last_run: Some(Run::from_record("garbage\x1b")),
            last_success: None,
        };
        assert_eq!(check_of(&unreadable, day, now), Check::Unknown);
    }

    fn check_of(runs: &LastRuns, within: Duration, now: SystemTime) -> Check {
        check("nightly", runs, &[], within, now).0
    }
}
