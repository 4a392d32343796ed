//! The lock vocabulary every backend shares: what a lock name may be, the modes a holder can take,
//! who holds a lock, and the request a `dlock run` makes. Backends translate these into their own
//! storage (a file, Redis keys, znodes); nothing here knows about any backend.

pub mod acting_for;
pub mod group;
mod holder;
pub mod last_run;
mod plain;
mod tree;

use crate::error;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

pub use holder::{
    short_owner, time_from_millis, Holder, Kept, Waiter, MAX_HOST_BYTES, MAX_MESSAGE_BYTES,
    MAX_SINCE_SECS,
};
pub use last_run::{Ending, LastRuns, Run, RunEnd};
use plain::number;
pub use plain::{check_message, escaped, is_plain};
pub use tree::tree_locks;

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
    /// `--min-hold`: the lock stays taken until this long after it was acquired, by the store's
    /// clock, even once its holder released it or died. `None`: released at once.
    pub min_hold: Option<Duration>,
}

/// A new random 128-bit owner id in hex.
pub fn new_owner_id() -> error::Result<String> {
    let mut bytes = [0u8; 16];
    random_bytes(&mut bytes).map_err(|e| error!("cannot get random bytes: {e}"))?;
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
    }
}
