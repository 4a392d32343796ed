//! The lock vocabulary every backend shares: what a lock name may be, the modes a holder can take,
//! who holds a lock, and the request a `dlock run` makes. Backends translate these into their own
//! storage (a file, Redis keys, znodes); nothing here knows about any backend.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Longest lock name accepted, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 512;

/// A validated lock name: 1 to 512 bytes of UTF-8 with no control characters.
/// Any other printable character, `/` included, is allowed; each backend maps the name to its storage
/// in a way that cannot escape its namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct LockName(String);

impl LockName {
    pub fn new(name: &str) -> Result<LockName, NameError> {
        if name.is_empty() {
            return Err(NameError::Empty);
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(NameError::TooLong(name.len()));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(NameError::ControlCharacter(c));
        }
        Ok(LockName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum NameError {
    Empty,
    TooLong(usize),
    ControlCharacter(char),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => write!(f, "lock name is empty"),
            NameError::TooLong(n) => {
                write!(
                    f,
                    "lock name is {n} bytes long; the limit is {MAX_NAME_BYTES}"
                )
            }
            NameError::ControlCharacter(c) => {
                write!(f, "lock name contains the control character {:?}", c)
            }
        }
    }
}

impl std::error::Error for NameError {}

/// How a holder holds a lock.
///
/// Exclusive excludes every other holder. Shared holders run together and exclude exclusive ones.
/// `Limit(n)` is a counting semaphore: at most `n` limit-holders at once; they exclude and are excluded
/// by exclusive holders, and run alongside shared holders (shared holders take no seat).
/// Everyone using one name is expected to pass the same limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "mode", content = "limit")]
pub enum Mode {
    Exclusive,
    Shared,
    Limit(u32),
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Exclusive => write!(f, "exclusive"),
            Mode::Shared => write!(f, "shared"),
            Mode::Limit(n) => write!(f, "limit {n}"),
        }
    }
}

impl Mode {
    /// The mode's word as stored by backends: `exclusive`, `shared` or `limit:N`.
    pub fn to_wire(self) -> String {
        match self {
            Mode::Exclusive => "exclusive".into(),
            Mode::Shared => "shared".into(),
            Mode::Limit(n) => format!("limit:{n}"),
        }
    }

    pub fn from_wire(s: &str) -> Option<Mode> {
        match s {
            "exclusive" => Some(Mode::Exclusive),
            "shared" => Some(Mode::Shared),
            // Only the spelling dlock writes: `limit:` and a count from 1, digits alone.
            _ => number(s.strip_prefix("limit:")?)
                .filter(|&n| n >= 1)
                .map(Mode::Limit),
        }
    }
}

/// A fencing token: strictly increasing for a name across all its acquisitions, so a resource that
/// remembers the highest token it has seen can refuse writes from a holder whose lease has passed.
pub type Token = u64;

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
    /// The stored record, escaped and truncated, when it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
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
    /// One line for people, as `Holder::describe` has it.
    pub fn describe(&self) -> String {
        Holder {
            mode: self.mode,
            owner: self.owner.clone(),
            host: self.host.clone(),
            pid: self.pid,
            since: self.since,
            token: None,
            message: self.message.clone(),
            expires_at: None,
            unreadable: self.unreadable.clone(),
        }
        .describe()
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

/// Text from outside made safe to print: control and other invisible characters escaped (`\u{1b}`,
/// `\n`), at most `max` characters kept (then `...`). A terminal shows it as it is written.
pub fn escaped(raw: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in raw.chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        match c {
            '"' | '\'' | '\\' => out.push(c),
            _ => out.extend(c.escape_debug()),
        }
    }
    out
}

/// Whether `text` needs no escaping to be printed.
pub fn is_plain(text: &str) -> bool {
    text.chars()
        .all(|c| matches!(c, '"' | '\'' | '\\') || c.escape_debug().eq([c]))
}

/// Whether `text` prints as itself where it is shown to other users: no control characters (a
/// newline, a tab, a terminal escape), nothing invisible that reorders or hides what follows
/// (U+202E), no combining mark at its start. The rule `--message` is held to.
pub fn prints_as_itself(text: &str) -> bool {
    // str::escape_debug leaves printable text as it is but for a backslash before `"`, `'` and `\`.
    let mut expected = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '"' | '\'' | '\\') {
            expected.push('\\');
        }
        expected.push(c);
    }
    text.escape_debug().eq(expected.chars())
}

/// A `--message` as given, or why it is refused: at most `MAX_MESSAGE_BYTES` and printable.
pub fn check_message(text: &str) -> Result<String, String> {
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "the message is {} bytes long; the limit is {MAX_MESSAGE_BYTES} bytes",
            text.len()
        ));
    }
    if !prints_as_itself(text) {
        // A combining mark is refused only at the start, where it has nothing to combine with.
        let c = text
            .chars()
            .find(|c| !prints_as_itself(&format!("a{c}")))
            .or(text.chars().next())
            .unwrap_or(' ');
        return Err(format!(
            "the message contains {}, which does not print as itself (other users read it on \
             their terminals); use printable text, at most {MAX_MESSAGE_BYTES} bytes",
            c.escape_debug()
        ));
    }
    Ok(text.to_owned())
}

/// A message read from a store, if dlock could have written it.
fn message_ok(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_MESSAGE_BYTES && prints_as_itself(text)
}

/// A decimal number in its plain spelling (no sign, no spaces), within `T`.
fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
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
            unreadable: Some(escaped(raw, MAX_SHOWN_CHARS)),
        }
    }

    /// One line for people: `exclusive by host pid 123 since 2026-01-01T00:00:00Z, token 7,
    /// message "deploy"`, with what is unknown left out; an unreadable record is shown as stored (escaped).
    pub fn describe(&self) -> String {
        format!("{}{}", self.mode, self.who())
    }

    /// ` by host pid 123 since 2026-01-01T00:00:00Z, token 7, message "deploy"`, or as much of it
    /// as is known.
    pub fn who(&self) -> String {
        if let Some(raw) = &self.unreadable {
            return format!(" (unreadable record \"{raw}\")");
        }
        let mut out = String::new();
        if let Some(host) = &self.host {
            out.push_str(&format!(" by {host}"));
        }
        if let Some(pid) = self.pid {
            out.push_str(&format!(" pid {pid}"));
        }
        if let Some(since) = self.since.and_then(rfc3339) {
            out.push_str(&format!(" since {since}"));
        }
        if let Some(token) = self.token {
            out.push_str(&format!(", token {token}"));
        }
        if let Some(expires) = self.expires_at.and_then(rfc3339) {
            out.push_str(&format!(", lease until {expires}"));
        }
        if let Some(message) = &self.message {
            // Quoted as lock names are (`"` and anything unprintable escaped).
            out.push_str(&format!(", message {message:?}"));
        }
        out
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

/// An owner id from outside as it may be shown: itself when it is one, else escaped.
fn shown_owner(owner: &str) -> String {
    if is_owner_id(owner) {
        owner.to_owned()
    } else {
        escaped(owner, MAX_OWNER_BYTES)
    }
}

/// What `dlock run` asks a backend for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRequest {
    pub name: LockName,
    pub mode: Mode,
    /// The lease: how long the lock outlives a holder that stops renewing it.
    pub ttl: Duration,
    /// This acquisition's identity, written beside the lock.
    pub owner: String,
    /// What the holder says it holds the lock for (`--message`), checked by `check_message`.
    pub message: Option<String>,
    /// Keep the lock taken until this long after the acquisition (by the store's clock), also
    /// when the holder ends sooner (`--min-hold`).
    pub min_hold: Option<Duration>,
}

/// The locks a tree lock on `path` takes, in the tree-locking scheme of document stores: every
/// ancestor shared, the path itself in `leaf` mode. `/projects/site/README.txt` gives `/projects`
/// and `/projects/site` shared and `/projects/site/README.txt` as asked. So siblings run together,
/// while a holder of `/projects/site` excludes (and waits for) all work below it.
///
/// The path is normalised (repeated and trailing `/`, `.` removed; a leading `/` added) and `..`
/// is refused, since it would let two spellings of one path take different locks.
pub fn tree_locks(path: &str, leaf: Mode) -> Result<Vec<(LockName, Mode)>, TreeError> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(TreeError::ParentComponent(path.to_owned())),
            _ => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Ok(vec![(LockName::new("/").map_err(TreeError::Name)?, leaf)]);
    }
    let mut locks = Vec::with_capacity(parts.len());
    let mut prefix = String::new();
    for (i, part) in parts.iter().enumerate() {
        prefix.push('/');
        prefix.push_str(part);
        let mode = if i + 1 == parts.len() {
            leaf
        } else {
            Mode::Shared
        };
        locks.push((LockName::new(&prefix).map_err(TreeError::Name)?, mode));
    }
    Ok(locks)
}

#[derive(Debug, PartialEq, Eq)]
pub enum TreeError {
    ParentComponent(String),
    Name(NameError),
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::ParentComponent(p) => {
                write!(f, "tree path {p:?} contains `..`; give it without")
            }
            TreeError::Name(e) => write!(f, "tree path: {e}"),
        }
    }
}

impl std::error::Error for TreeError {}

/// A new random 128-bit owner id in hex.
pub fn new_owner_id() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    random_bytes(&mut bytes).map_err(|e| anyhow::anyhow!("cannot get random bytes: {e}"))?;
    Ok(crate::text::hex(&bytes))
}

/// Fills `buf` from the kernel's random source, getrandom(2), without the file fallback a
/// library takes in a static executable (which opens and polls /dev/random at every start).
pub fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// This machine's host name, for holder records.
pub fn host_name() -> String {
    // What gethostname(2) returns on Linux.
    let name = rustix::system::uname();
    String::from_utf8_lossy(name.nodename().to_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_slashes_and_unicode_and_refuse_control_characters() {
        assert!(LockName::new("a/b/../c").is_ok());
        assert!(LockName::new("über lock ✓").is_ok());
        assert_eq!(LockName::new(""), Err(NameError::Empty));
        assert!(matches!(
            LockName::new("a\nb"),
            Err(NameError::ControlCharacter('\n'))
        ));
        assert!(matches!(
            LockName::new("a\u{7f}"),
            Err(NameError::ControlCharacter(_))
        ));
        assert!(LockName::new(&"x".repeat(512)).is_ok());
        assert_eq!(
            LockName::new(&"x".repeat(513)),
            Err(NameError::TooLong(513))
        );
    }

    #[test]
    fn tree_locks_take_ancestors_shared_and_the_leaf_as_asked() {
        let names = |p: &str, m| {
            tree_locks(p, m)
                .unwrap()
                .into_iter()
                .map(|(n, m)| format!("{n} {m}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names("/projects/site/README.txt", Mode::Exclusive),
            [
                "/projects shared",
                "/projects/site shared",
                "/projects/site/README.txt exclusive"
            ]
        );
        assert_eq!(
            names("projects//./site/", Mode::Shared),
            ["/projects shared", "/projects/site shared"]
        );
        assert_eq!(names("/", Mode::Exclusive), ["/ exclusive"]);
        assert!(matches!(
            tree_locks("/a/../b", Mode::Exclusive),
            Err(TreeError::ParentComponent(_))
        ));
    }

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
            unreadable: None,
        }
    }

    #[test]
    fn holder_records_round_trip_with_the_host_last() {
        let h = holder();
        assert_eq!(h.record(), "limit:3 7 1700000000 42 build 01");
        assert_eq!(Holder::from_record("00ff", &h.record()), h);
        assert_eq!(
            h.describe(),
            "limit 3 by build 01 pid 42 since 2023-11-14T22:13:20Z, token 7"
        );
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
    fn messages_are_refused_unless_they_print_as_themselves_within_the_limit() {
        for ok in [
            "deploy v1.4 by https://ci/1",
            "é \"q\" \\ '",
            "e\u{301}",
            "日本語",
        ] {
            assert!(check_message(ok).is_ok(), "{ok:?}");
        }
        assert!(check_message(&"é".repeat(128)).is_ok());
        for bad in [
            "a\nb",
            "a\tb",
            "\u{1b}[2J",
            "a\u{7f}",
            "a\u{9b}",
            "r\u{202e}l",
            "\u{301}e",
        ] {
            let why = check_message(bad).unwrap_err();
            assert!(!why.chars().any(char::is_control), "{why}");
        }
        let why = check_message(&"é".repeat(129)).unwrap_err();
        assert!(why.contains("258 bytes") && why.contains("256"), "{why}");
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
    fn escaping_keeps_text_printable_and_short() {
        assert_eq!(escaped("plain \"host\" \\", 50), "plain \"host\" \\");
        assert_eq!(escaped("a\nb\u{1b}c\u{202e}", 50), "a\\nb\\u{1b}c\\u{202e}");
        assert_eq!(escaped("abcdef", 3), "abc...");
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
        assert!(h.describe().contains("since 9999-12-31T23:59:59Z"));
    }

    #[test]
    fn modes_round_trip_through_their_wire_form() {
        for m in [Mode::Exclusive, Mode::Shared, Mode::Limit(3)] {
            assert_eq!(Mode::from_wire(&m.to_wire()), Some(m));
        }
        assert_eq!(Mode::from_wire("limit:x"), None);
        assert_eq!(Mode::from_wire("limit:+3"), None);
        assert_eq!(Mode::from_wire("limit:0"), None);
    }

    proptest::proptest! {
        /// Hostile names never panic: each is accepted or refused with a reason.
        #[test]
        fn any_string_is_a_name_or_a_clear_refusal(raw in "\\PC*|[\\x00-\\x1f]{0,4}.{0,600}") {
            match LockName::new(&raw) {
                Ok(name) => proptest::prop_assert!(!name.as_str().is_empty() && name.as_str().len() <= MAX_NAME_BYTES),
                Err(e) => proptest::prop_assert!(!e.to_string().is_empty()),
            }
        }

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
            let text = format!("{} owner {}", h.describe(), h.owner);
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

        /// Tree paths never yield a `..` component, and every lock is an ancestor of the last.
        #[test]
        fn tree_locks_are_nested_and_never_climb(path in "[a-z./]{0,40}") {
            if let Ok(locks) = tree_locks(&path, Mode::Exclusive) {
                let last = locks.last().map(|(n, _)| n.as_str().to_owned()).unwrap_or_default();
                for (name, _) in &locks {
                    proptest::prop_assert!(!name.as_str().split('/').any(|c| c == ".." || c == "."));
                    proptest::prop_assert!(last.starts_with(name.as_str()));
                }
            } else {
                proptest::prop_assert!(path.split('/').any(|c| c == ".."));
            }
        }
    }
}
