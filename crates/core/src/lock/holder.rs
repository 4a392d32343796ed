//! Who holds a lock, as `status` and `list` show it and as backends store it beside the lock: the
//! holder and waiter records, their bounds (records come from outside) and their text forms.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::plain::{escaped, is_plain, message_ok, number};
use super::{Mode, Token};

/// Who a holder is, as shown by `status` and `list` and stored by the backend beside the lock.
///
/// Records come from outside (other clients of the server, other users of the lock directory), so
/// every field is bounded when parsed, and what is unknown is `None` (`null` in JSON). A record that
/// does not parse still stands for a holder, marked `unreadable`: the lock stays busy, since dlock
/// never admits anyone on missing data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holder {
    #[serde(flatten)]
    pub mode: Mode,
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// Random 128-bit id of this acquisition, in hex: renew and release act only on their own id.
    pub owner: String,
    /// Wall-clock time of the acquisition, for people to read; never used to judge expiry.
    #[serde(serialize_with = "serialize_time")]
    pub since: Option<SystemTime>,
    pub token: Option<Token>,
    /// What the holder said it holds the lock for (`--message`): plain text, at most
    /// `MAX_MESSAGE_BYTES`.
    pub message: Option<String>,
    /// When the lease runs out unless renewed, by the backend's clock; `None` where the backend
    /// keeps no lease others can see (a lock file, a ZooKeeper session).
    #[serde(serialize_with = "serialize_time")]
    pub expires_at: Option<SystemTime>,
    /// Until when `--min-hold` keeps the lock taken, by the store's clock (the host's for the file
    /// backend); `None` without a min-hold.
    #[serde(serialize_with = "serialize_time")]
    pub kept_until: Option<SystemTime>,
    /// Why it is kept, for people: the min-hold asked for, and whether the holder is gone (its
    /// command ended or it died) so that only the min-hold keeps the lock.
    #[serde(skip)]
    pub kept: Option<Kept>,
    /// The stored record, escaped and truncated, when it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// Why a lock is kept past its holder's command (`--min-hold`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The `--min-hold` asked for, when the store says.
    pub min_hold: Option<Duration>,
    /// The holder let go (its command ended) or died: only the min-hold keeps the lock now.
    pub ended: bool,
}

impl Kept {
    /// `HOLD_MS` or `HOLD_MS ended`, the min-hold in milliseconds as a store keeps it beside the
    /// holder; `None` for anything dlock would not have written.
    pub fn from_note(note: &str) -> Option<Kept> {
        let (hold, ended) = match note.strip_suffix(" ended") {
            Some(hold) => (hold, true),
            None => (note, false),
        };
        Some(Kept {
            min_hold: Some(Duration::from_millis(number(hold)?)),
            ended,
        })
    }
}

/// A time in milliseconds since the epoch, as a store keeps it, if a record may carry it.
pub fn time_from_millis(ms: u64) -> Option<SystemTime> {
    (ms / 1000 <= MAX_SINCE_SECS).then(|| UNIX_EPOCH + Duration::from_millis(ms))
}

/// Someone in line for a lock, as `status` and `list` show it: who, in which mode, since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Waiter {
    #[serde(flatten)]
    pub mode: Mode,
    pub owner: String,
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// When it joined the line.
    #[serde(serialize_with = "serialize_time")]
    pub since: Option<SystemTime>,
    pub message: Option<String>,
    /// The stored entry, escaped and truncated, when it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

impl From<Holder> for Waiter {
    /// A waiter's entry read as a holder's record is (a holder's token and lease it has not).
    fn from(h: Holder) -> Waiter {
        Waiter {
            mode: h.mode,
            owner: h.owner,
            host: h.host,
            pid: h.pid,
            since: h.since,
            message: h.message,
            unreadable: h.unreadable,
        }
    }
}

impl Waiter {
    /// The waiter as a holder without a token or lease, for the words holders are said in.
    pub fn as_holder(&self) -> Holder {
        Holder {
            mode: self.mode,
            owner: self.owner.clone(),
            host: self.host.clone(),
            pid: self.pid,
            since: self.since,
            token: None,
            message: self.message.clone(),
            expires_at: None,
            kept_until: None,
            kept: None,
            unreadable: self.unreadable.clone(),
        }
    }
}

/// The latest time a record may carry: the end of year 9999, the last that RFC 3339 (and humantime)
/// can write.
pub const MAX_SINCE_SECS: u64 = 253_402_300_799;

/// Longest host name a record may carry (a DNS name is at most 253 bytes).
pub const MAX_HOST_BYTES: usize = 255;

/// Longest owner id a record may carry (dlock's own are 32 hex digits).
pub const MAX_OWNER_BYTES: usize = 64;

/// Longest `--message` accepted, in bytes of UTF-8. The file backend keeps a holder's record in a
/// 512-byte slot beside the host name (at most 64 bytes on Linux) and the other fields.
pub const MAX_MESSAGE_BYTES: usize = 256;

/// Most characters of an unreadable record shown.
const MAX_SHOWN_CHARS: usize = 120;

fn serialize_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t.and_then(rfc3339) {
        Some(text) => s.serialize_str(&text),
        None => s.serialize_none(),
    }
}

/// `t` in RFC 3339, or `None` outside the years 1970 to 9999 (humantime panics on those).
pub fn rfc3339(t: SystemTime) -> Option<String> {
    let secs = t.duration_since(UNIX_EPOCH).ok()?.as_secs();
    (secs <= MAX_SINCE_SECS).then(|| humantime::format_rfc3339_seconds(t).to_string())
}

impl Holder {
    /// A holder whose record could not be read: `raw` is kept, escaped and truncated, for people.
    /// `mode` is what the store counts it as (exclusive when it cannot tell).
    pub fn unreadable(mode: Mode, owner: &str, raw: &str) -> Holder {
        Holder {
            mode,
            host: None,
            pid: None,
            owner: shown_owner(owner),
            since: None,
            token: None,
            message: None,
            expires_at: None,
            kept_until: None,
            kept: None,
            unreadable: Some(escaped(raw, MAX_SHOWN_CHARS)),
        }
    }

    /// One line for people: `exclusive by host pid 123 since 3m 12s ago, token 7, message
    /// "deploy"`, with what is unknown left out; an unreadable record is shown as stored (escaped).
    pub fn describe(&self) -> String {
        format!("{}{}", self.mode, self.who())
    }

    /// ` by host pid 123 since 3m 12s ago, token 7, message "deploy"`, or as much of it as is
    /// known, its times from now.
    pub fn who(&self) -> String {
        self.who_at(SystemTime::now())
    }

    /// `who` as it reads at `now`: who and since when, then why it is kept and its message.
    pub fn who_at(&self, now: SystemTime) -> String {
        let (who, rest) = self.who_apart(now);
        rest.iter()
            .fold(who, |line, part| format!("{line}, {part}"))
    }

    /// The holder for `status`, at `now`: a first line (`exclusive by host pid 123 since 3m ago,
    /// token 7`), then what may be long on lines of their own (why it is kept, its message), so
    /// that each fits a screen.
    pub fn describe_apart(&self, now: SystemTime) -> (String, Vec<String>) {
        let (who, rest) = self.who_apart(now);
        (format!("{}{who}", self.mode), rest)
    }

    /// Who holds it and since when (with its lease), and apart, why it is kept and its message.
    /// Times are said from now ("3m ago", "in 12s"), not as UTC: that is what a reader asks of
    /// them (how long held, how long still), needs no time zone, and keeps the line short; JSON
    /// has them in RFC 3339. A lock kept by `--min-hold` whose lease ends when the min-hold does
    /// says that time once.
    fn who_apart(&self, now: SystemTime) -> (String, Vec<String>) {
        if let Some(raw) = &self.unreadable {
            return (format!(" (unreadable record \"{raw}\")"), Vec::new());
        }
        let shown = |t: Option<SystemTime>| t.filter(|t| rfc3339(*t).is_some());
        let mut out = String::new();
        if let Some(host) = &self.host {
            out.push_str(&format!(" by {host}"));
        }
        if let Some(pid) = self.pid {
            out.push_str(&format!(" pid {pid}"));
        }
        if let Some(since) = shown(self.since) {
            out.push_str(&format!(" since {}", crate::text::from_now(since, now)));
        }
        if let Some(token) = self.token {
            out.push_str(&format!(", token {token}"));
        }
        let kept_until = shown(self.kept_until);
        let apart = |a: SystemTime, b: SystemTime| {
            a.duration_since(b)
                .or_else(|_| b.duration_since(a))
                .unwrap_or_default()
        };
        if let Some(expires) = shown(self.expires_at) {
            if kept_until.is_none_or(|k| apart(k, expires) >= Duration::from_secs(1)) {
                let verb = if expires > now { "ends" } else { "ended" };
                out.push_str(&format!(
                    ", lease {verb} {}",
                    crate::text::from_now(expires, now)
                ));
            }
        }
        let mut rest = Vec::new();
        if let Some(until) = kept_until {
            let mut kept = if until > now {
                let left = until.duration_since(now).unwrap_or_default();
                format!("kept {} more", crate::text::duration(whole_secs(left)))
            } else {
                format!("kept until {}", crate::text::from_now(until, now))
            };
            if let Some(why) = self.kept {
                if let Some(d) = why.min_hold {
                    kept.push_str(&format!(" by --min-hold {}", crate::text::duration(d)));
                }
                if why.ended {
                    kept.push_str("; its command ended");
                }
            }
            rest.push(kept);
        }
        if let Some(message) = &self.message {
            // Quoted as lock names are (`"` and anything unprintable escaped).
            rest.push(format!("message {message:?}"));
        }
        (out, rest)
    }

    /// The holder as one line of text, `MODE TOKEN SINCE PID HOST`, then a tab and the message if
    /// there is one (since: Unix seconds; the host last, so it may hold anything but a newline or
    /// a tab, and a message has neither). Without a message the line is what dlock wrote before
    /// messages, which older versions read; with one, they show the record as unreadable (and
    /// still count the holder). The owner id is kept beside it by each store:
    /// the file backend writes it in front, Redis uses it as the hash field, and Redis's
    /// acquire.lua builds this same line. Only dlock's own holders are written, and they know
    /// every field; an unknown one is written as 0.
    pub fn record(&self) -> String {
        let since = self
            .since
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let mut line = format!(
            "{} {} {since} {} {}",
            self.mode.to_wire(),
            self.token.unwrap_or(0),
            self.pid.unwrap_or(0),
            self.host.as_deref().unwrap_or("?")
        );
        if let Some(message) = &self.message {
            line.push('\t');
            line.push_str(message);
        }
        line
    }

    /// The inverse of `record`. A record it never produces (a field missing or out of range, a
    /// host with control characters, an owner id that is no id) gives a holder marked unreadable,
    /// counted in the mode its first word names (as the Redis scripts count it), else exclusive.
    pub fn from_record(owner: &str, record: &str) -> Holder {
        Holder::parse_record(owner, record).unwrap_or_else(|| {
            let mode = record
                .split(' ')
                .next()
                .and_then(Mode::from_wire)
                .unwrap_or(Mode::Exclusive);
            Holder::unreadable(mode, owner, record)
        })
    }

    fn parse_record(owner: &str, record: &str) -> Option<Holder> {
        let mut fields = record.splitn(5, ' ');
        let mode = Mode::from_wire(fields.next()?)?;
        let token = number(fields.next()?)?;
        let since = number(fields.next()?)?;
        let pid = number(fields.next()?)?;
        let rest = fields.next()?;
        let (host, message) = match rest.split_once('\t') {
            Some((host, message)) => (host, Some(message)),
            None => (rest, None),
        };
        Holder::checked(mode, owner, host, pid, since, Some(token))?.with_message(message)
    }

    /// The holder with `message`, or `None` if dlock could not have written it (too long, empty,
    /// or not printable).
    pub fn with_message(mut self, message: Option<&str>) -> Option<Holder> {
        if let Some(text) = message {
            if !message_ok(text) {
                return None;
            }
            self.message = Some(text.to_owned());
        }
        Some(self)
    }

    /// A holder from fields a store read, each checked: `None` when any is out of bounds (an owner
    /// that is no id, an empty or overlong host or one with control characters, a time past 9999).
    pub fn checked(
        mode: Mode,
        owner: &str,
        host: &str,
        pid: u32,
        since_secs: u64,
        token: Option<Token>,
    ) -> Option<Holder> {
        let host_ok = !host.is_empty() && host.len() <= MAX_HOST_BYTES && is_plain(host);
        if !host_ok || !is_owner_id(owner) || since_secs > MAX_SINCE_SECS {
            return None;
        }
        Some(Holder {
            mode,
            host: Some(host.to_owned()),
            pid: Some(pid),
            owner: owner.to_owned(),
            since: Some(UNIX_EPOCH + Duration::from_secs(since_secs)),
            token,
            message: None,
            expires_at: None,
            kept_until: None,
            kept: None,
            unreadable: None,
        })
    }
}

/// An owner id as dlock writes them: 1 to 64 printable ASCII characters, no spaces.
pub fn is_owner_id(owner: &str) -> bool {
    !owner.is_empty()
        && owner.len() <= MAX_OWNER_BYTES
        && owner.bytes().all(|b| b.is_ascii_graphic())
}

/// `d` to the second, rounded up: what is left of a wait is never said shorter than it is.
fn whole_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// An owner id as a holder line shows it: dlock's own (32 hex digits) cut to their first 12, as
/// git shortens a commit's, which tells holders apart; JSON has it whole. Any other as it is.
pub fn short_owner(owner: &str) -> &str {
    match owner.get(..12) {
        Some(start) if owner.len() == 32 && owner.bytes().all(|b| b.is_ascii_hexdigit()) => start,
        _ => owner,
    }
}

/// An owner id from outside as it may be shown: itself when it is one, else escaped.
fn shown_owner(owner: &str) -> String {
    if is_owner_id(owner) {
        owner.to_owned()
    } else {
        escaped(owner, MAX_OWNER_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder() -> Holder {
        Holder {
            mode: Mode::Limit(3),
            host: Some("build 01".into()),
            pid: Some(42),
            owner: "00ff".into(),
            since: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            token: Some(7),
            message: None,
            expires_at: None,
            kept_until: None,
            kept: None,
            unreadable: None,
        }
    }

    #[test]
    fn holder_records_round_trip_with_the_host_last() {
        let h = holder();
        assert_eq!(h.record(), "limit:3 7 1700000000 42 build 01");
        assert_eq!(Holder::from_record("00ff", &h.record()), h);
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_192);
        assert_eq!(
            h.who_at(now),
            " by build 01 pid 42 since 3m 12s ago, token 7"
        );
        assert!(h
            .describe()
            .starts_with("limit 3 by build 01 pid 42 since "));
    }

    #[test]
    fn messages_follow_the_host_after_a_tab_and_records_without_one_read_as_before() {
        let mut h = holder();
        h.message = Some("deploy \"v1.4\" ✓".into());
        assert_eq!(
            h.record(),
            "limit:3 7 1700000000 42 build 01\tdeploy \"v1.4\" ✓"
        );
        assert_eq!(Holder::from_record("00ff", &h.record()), h);
        assert!(h
            .describe()
            .ends_with(", message \"deploy \\\"v1.4\\\" ✓\""));
        let old = Holder::from_record("00ff", "limit:3 7 1700000000 42 build 01");
        assert_eq!(old.message, None);
        assert_eq!(old.unreadable, None);
        for forged in [
            "a\u{1b}[2J",
            "two\tfields",
            "",
            &"x".repeat(MAX_MESSAGE_BYTES + 1),
        ] {
            let h = Holder::from_record("00ff", &format!("shared 7 1 42 h\t{forged}"));
            assert!(h.unreadable.is_some(), "{forged:?}");
            assert_eq!(h.mode, Mode::Shared);
        }
    }

    #[test]
    fn records_out_of_range_are_unreadable_holders_that_still_hold() {
        for (record, mode) in [
            ("exclusive 5 99999999999999 2 host", Mode::Exclusive),
            ("shared 5 1 99999999999 host", Mode::Shared),
            ("limit:2 18446744073709551616 1 2 host", Mode::Limit(2)),
            ("exclusive -1 1 2 host", Mode::Exclusive),
            ("exclusive +1 1 2 host", Mode::Exclusive),
            ("exclusive 1 1 2 ", Mode::Exclusive),
            ("exclusive 1 1 2 \u{1b}[2Jx", Mode::Exclusive),
            ("bogus 7 1 2 h", Mode::Exclusive),
            ("limit:0 7 1 2 h", Mode::Exclusive),
            ("", Mode::Exclusive),
        ] {
            let h = Holder::from_record("ab", record);
            assert_eq!(h.mode, mode, "{record:?}");
            assert_eq!((h.since, h.token, h.pid), (None, None, None), "{record:?}");
            let text = h.describe();
            assert!(text.contains("unreadable record"), "{text}");
            assert!(!text.contains('\u{1b}'), "{text}");
            let json = serde_json::to_value(&h).unwrap();
            assert_eq!(json["since"], serde_json::Value::Null);
            assert!(json["unreadable"].is_string(), "{json}");
        }
        let forged_owner = Holder::from_record("a\u{1b}]0;x\u{7}", "exclusive 1 1 2 h");
        assert!(forged_owner.unreadable.is_some());
        assert_eq!(forged_owner.owner, "a\\u{1b}]0;x\\u{7}");
    }

    #[test]
    fn each_time_is_said_once_from_now() {
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        let mut h = holder();
        h.expires_at = Some(at(1_700_086_400));
        h.kept_until = Some(at(1_700_086_400));
        h.kept = Some(Kept {
            min_hold: Some(Duration::from_secs(86_400)),
            ended: true,
        });
        let now = at(1_700_000_005);
        assert_eq!(
            h.who_at(now),
            " by build 01 pid 42 since 5s ago, token 7, kept 23h 59m more by --min-hold 24h; \
             its command ended"
        );
        h.kept_until = None;
        h.kept = None;
        assert!(
            h.who_at(now).ends_with(", lease ends in 23h 59m"),
            "{}",
            h.who_at(now)
        );
        assert!(h
            .who_at(at(1_700_086_402))
            .ends_with(", lease ended 2s ago"));
    }

    #[test]
    fn times_outside_rfc3339_years_are_unknown_not_a_panic() {
        let mut h = holder();
        h.since = Some(UNIX_EPOCH + Duration::from_secs(MAX_SINCE_SECS + 1));
        assert!(!h.describe().contains("since"), "{}", h.describe());
        assert_eq!(
            serde_json::to_value(&h).unwrap()["since"],
            serde_json::Value::Null
        );
        h.since = UNIX_EPOCH.checked_sub(Duration::from_secs(1));
        assert!(!h.describe().contains("since"));
        h.since = Some(UNIX_EPOCH + Duration::from_secs(MAX_SINCE_SECS));
        assert!(h.describe().contains("since in "), "{}", h.describe());
    }

    proptest::proptest! {
        /// Whatever a record holds, it parses into a holder that formats and prints: every field at
        /// its extremes, as text for people and as JSON, with nothing unprintable in either.
        #[test]
        fn any_record_formats_and_prints(
            mode in "exclusive|shared|limit:[0-9]{1,11}|[a-z:]{0,8}",
            token in "[0-9]{1,21}|-[0-9]{1,3}|18446744073709551615|18446744073709551616",
            since in "[0-9]{1,21}|253402300799|253402300800|18446744073709551615",
            pid in "[0-9]{1,11}|4294967295|4294967296",
            host in "\\PC{0,300}|[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{202e}]{1,5}",
            owner in "[0-9a-f]{32}|\\PC{0,80}|[\\x00-\\x1f]{1,3}",
            raw in proptest::option::of("\\PC{0,300}"),
        ) {
            let record = raw.unwrap_or_else(|| format!("{mode} {token} {since} {pid} {host}"));
            let h = Holder::from_record(&owner, &record);
            let text = format!("{}, owner {}", h.describe(), h.owner);
            proptest::prop_assert!(!text.chars().any(|c| c.is_control()), "{:?}", text);
            let json = serde_json::to_string_pretty(&h).expect("a holder always serialises");
            let back: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
            proptest::prop_assert!(back["owner"].is_string());
            proptest::prop_assert_eq!(h.unreadable.is_some(), back["unreadable"].is_string());
            if h.unreadable.is_none() {
                proptest::prop_assert_eq!(Holder::from_record(&h.owner, &h.record()), h);
            } else {
                proptest::prop_assert!(h.since.is_none() && h.token.is_none() && h.pid.is_none());
            }
        }
    }
}
