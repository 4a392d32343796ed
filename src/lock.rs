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
            _ => s.strip_prefix("limit:")?.parse().ok().map(Mode::Limit),
        }
    }
}

/// A fencing token: strictly increasing for a name across all its acquisitions, so a resource that
/// remembers the highest token it has seen can refuse writes from a holder whose lease has passed.
pub type Token = u64;

/// Who a holder is, as shown by `status` and `list` and stored by the backend beside the lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holder {
    #[serde(flatten)]
    pub mode: Mode,
    pub host: String,
    pub pid: u32,
    /// Random 128-bit id of this acquisition, in hex: renew and release act only on their own id.
    pub owner: String,
    /// Wall-clock time of the acquisition, for people to read; never used to judge expiry.
    #[serde(serialize_with = "serialize_time")]
    pub since: SystemTime,
    pub token: Token,
}

fn serialize_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_rfc3339_seconds(*t).to_string())
}

impl Holder {
    /// One line for people: `exclusive by host pid 123 since 2026-01-01T00:00:00Z, token 7`.
    pub fn describe(&self) -> String {
        format!(
            "{} by {} pid {} since {}, token {}",
            self.mode,
            self.host,
            self.pid,
            humantime::format_rfc3339_seconds(self.since),
            self.token
        )
    }
}

impl Holder {
    /// The holder as one line of text, `MODE TOKEN SINCE PID HOST` (since: Unix seconds; the host
    /// last, so it may hold anything but a newline). The owner id is kept beside it by each store:
    /// the file backend writes it in front, Redis uses it as the hash field, and Redis's
    /// acquire.lua builds this same line.
    pub fn record(&self) -> String {
        let since = self
            .since
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        format!(
            "{} {} {since} {} {}",
            self.mode.to_wire(),
            self.token,
            self.pid,
            self.host
        )
    }

    /// The inverse of `record`; `None` for a line it never produces.
    pub fn from_record(owner: String, record: &str) -> Option<Holder> {
        let mut fields = record.splitn(5, ' ');
        let mode = Mode::from_wire(fields.next()?)?;
        let token = fields.next()?.parse().ok()?;
        let since = UNIX_EPOCH + Duration::from_secs(fields.next()?.parse().ok()?);
        let pid = fields.next()?.parse().ok()?;
        let host = fields.next()?.to_owned();
        Some(Holder {
            mode,
            host,
            pid,
            owner,
            since,
            token,
        })
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
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Fills `buf` from the kernel's random source, getrandom(2), without the file fallback a
/// library takes in a static executable (which opens and polls /dev/random at every start).
pub fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the kernel writes at most `rest.len()` bytes into `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else {
            filled += n as usize;
        }
    }
    Ok(())
}

/// This machine's host name, for holder records.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
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

    #[test]
    fn holder_records_round_trip_with_the_host_last() {
        let h = Holder {
            mode: Mode::Limit(3),
            host: "build 01".into(),
            pid: 42,
            owner: "00ff".into(),
            since: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            token: 7,
        };
        assert_eq!(h.record(), "limit:3 7 1700000000 42 build 01");
        assert_eq!(Holder::from_record("00ff".into(), &h.record()), Some(h));
        assert_eq!(Holder::from_record("ab".into(), "bogus 7 1 2 h"), None);
    }

    #[test]
    fn modes_round_trip_through_their_wire_form() {
        for m in [Mode::Exclusive, Mode::Shared, Mode::Limit(3)] {
            assert_eq!(Mode::from_wire(&m.to_wire()), Some(m));
        }
        assert_eq!(Mode::from_wire("limit:x"), None);
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
