//! Every exit status dlock itself can return, in one place, so scripts can rely on them and the README,
//! the man page and the tests all speak of the same numbers. A child's own status passes through
//! unchanged; these are the statuses dlock adds.

use std::fmt;

/// A failure that carries the exit status it maps to. Code deep in a backend returns one inside an
/// `anyhow::Error`; `main` finds it in the chain and exits with its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Bad command line: unknown option, bad name, bad duration, missing `--` (EX_USAGE). Also a
    /// nested run that asks exclusively for a lock its own parent dlock holds shared or with a
    /// limit: a request that could never be granted.
    Usage,
    /// The backend cannot be reached or used: server down, wrong password, unusable lock directory
    /// (EX_UNAVAILABLE).
    BackendUnavailable,
}

pub const USAGE: u8 = 64;
pub const BACKEND_UNAVAILABLE: u8 = 69;
pub const INTERNAL: u8 = 70;
/// The lock is held by someone else and `--no-wait` was given or `--wait` expired (EX_TEMPFAIL);
/// `--conflict-exit-code` replaces it.
pub const BUSY: u8 = 75;
/// The lock was lost while the command ran (lease expired, broken by `release --force`, backend gone
/// for longer than the lease); the child was terminated.
pub const LOCK_LOST: u8 = 79;
/// The command exists but cannot be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;
/// `status`: the lock is free. (Held is 0, so `if dlock status -q NAME` reads naturally.)
pub const FREE: u8 = 1;

/// The status for death by signal `n`, as shells report it.
pub fn signalled(n: i32) -> u8 {
    (128 + n).clamp(0, 255) as u8
}

impl Failure {
    pub fn code(self) -> u8 {
        match self {
            Failure::Usage => USAGE,
            Failure::BackendUnavailable => BACKEND_UNAVAILABLE,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Failure::Usage => "usage error",
            Failure::BackendUnavailable => "backend unavailable",
        })
    }
}

/// An error tagged with the exit status it maps to. It shows as its cause alone, so the tag never
/// appears in messages; contexts added on top keep the tag findable.
#[derive(Debug)]
pub struct Tagged {
    pub failure: Failure,
    cause: anyhow::Error,
}

impl fmt::Display for Tagged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.cause)
    }
}

impl std::error::Error for Tagged {}

/// Extension to tag an error with the exit status it should produce.
pub trait FailWith<T> {
    fn fail_with(self, failure: Failure) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> FailWith<T> for Result<T, E> {
    fn fail_with(self, failure: Failure) -> anyhow::Result<T> {
        self.map_err(|e| {
            anyhow::Error::new(Tagged {
                failure,
                cause: e.into(),
            })
        })
    }
}

/// The exit status an error maps to: the outermost tag in its chain, else internal.
pub fn code_of(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(|e| e.downcast_ref::<Tagged>())
        .map_or(INTERNAL, |t| t.failure.code())
}

/// The one line to show for an error: its chain of causes.
pub fn message_of(err: &anyhow::Error) -> String {
    format!("{err:#}")
}
