//! The command's errors and their exit statuses. The command keeps its own errors as
//! `anyhow::Error`; a store's typed `dlock_core::error::Error` enters them here (`from_store`),
//! its kind a tag, and `main` turns the outermost tag of an error into its status (`status_of`)
//! and the chain into the line shown (`message_of`). An error without a tag is internal.

use std::fmt;

use dlock_core::error::{Chain, Error};

use crate::exit::Status;

/// What an error means for the user, where it means more than an internal error: the two
/// statuses an error can end with besides `Status::Internal`.
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

impl From<Failure> for Status {
    fn from(failure: Failure) -> Status {
        match failure {
            Failure::Usage => Status::Usage,
            Failure::BackendUnavailable => Status::Unavailable,
        }
    }
}

/// An error tagged with the failure it means. It shows as its cause alone, so the tag never
/// appears in messages; contexts added on top keep the tag findable.
#[derive(Debug)]
struct Tagged {
    failure: Failure,
    cause: anyhow::Error,
}

impl fmt::Display for Tagged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.cause)
    }
}

impl std::error::Error for Tagged {}

/// Extension to tag an error with the failure it means.
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

/// A store's error as one of the command's: the same chain, its kind the tag of its innermost
/// part (a kind is given to the whole chain at the time, see `dlock_core::error`, and the
/// contexts said since are its outer parts).
pub fn from_store(error: Error) -> anyhow::Error {
    let (failure, chain): (Option<Failure>, Chain) = match error {
        Error::Usage(chain) => (Some(Failure::Usage), chain),
        Error::Unavailable(chain) => (Some(Failure::BackendUnavailable), chain),
        Error::Internal(chain) => (None, chain),
    };
    let mut parts = chain.parts().iter().rev();
    let innermost = anyhow::anyhow!("{}", parts.next().map_or("", String::as_str));
    let mut error = match failure {
        Some(failure) => anyhow::Error::new(Tagged {
            failure,
            cause: innermost,
        }),
        None => innermost,
    };
    for part in parts {
        error = error.context(part.clone());
    }
    error
}

/// Extension to take a store's result into the command's.
pub trait FromStore<T> {
    fn or_store(self) -> anyhow::Result<T>;
}

impl<T> FromStore<T> for Result<T, Error> {
    fn or_store(self) -> anyhow::Result<T> {
        self.map_err(from_store)
    }
}

/// The exit status an error maps to: the outermost tag in its chain, else internal.
pub fn status_of(err: &anyhow::Error) -> Status {
    err.chain()
        .find_map(|e| e.downcast_ref::<Tagged>())
        .map_or(Status::Internal, |t| t.failure.into())
}

/// The one line to show for an error: its chain of causes, without what libraries add for
/// their developers (see `text::without_internals`).
pub fn message_of(err: &anyhow::Error) -> String {
    crate::text::for_terminal(&crate::text::without_internals(&format!("{err:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlock_core::error::{Context, FailAs};

    /// A store's error reads and ends as it would have as the command's own.
    #[test]
    fn a_store_error_keeps_its_words_and_status() {
        let e: Result<(), Error> = Err(dlock_core::error!("refused"));
        let e = from_store(
            e.context("connect")
                .unavailable()
                .context("open")
                .unwrap_err(),
        );
        assert_eq!(format!("{e:#}"), "open: connect: refused");
        assert_eq!(format!("{e}"), "open");
        assert_eq!(status_of(&e), Status::Unavailable);
        let e = from_store(Error::internal("x").context("y"));
        assert_eq!(
            (format!("{e:#}"), status_of(&e)),
            ("y: x".into(), Status::Internal)
        );
    }
}
