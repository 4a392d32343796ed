//! Why a store failed, as the stores say it: an `Error` whose variant is the kind of failure (which
//! the command turns into an exit status, see `exit::Status`) and whose `Chain` is what a message
//! needs, outermost context first. Nothing here knows of statuses or terminals: the command maps
//! the kind and renders the chain at its edge.
//!
//! An error starts as a message (`Error::usage`, `Error::unavailable`, `error!` for one that is
//! dlock's own) or as another library's error turned into an internal one (`From`, or `context`
//! on its `Result`). `Context` adds the words of the level above, keeping the kind; `FailAs`'s
//! `usage` and `unavailable` say what the failure means for the user, and make the chain so far
//! one part: the kind is that of the outermost such word.

use std::fmt;

/// A `Result` whose error is a store's `Error` unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failure, by what it means for the user: each kind is an exit status of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A request the store can never grant: a bad URL or option for it (EX_USAGE).
    Usage(Chain),
    /// The store cannot be reached or used: server down, wrong password, unusable lock directory
    /// (EX_UNAVAILABLE).
    Unavailable(Chain),
    /// Anything else: a failure that is dlock's own or one nobody said more of (EX_SOFTWARE).
    Internal(Chain),
}

/// What a message says of a failure, outermost context first; shown as its parts joined by ": ".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain(Vec<String>);

impl Chain {
    /// The parts, outermost first.
    pub fn parts(&self) -> &[String] {
        &self.0
    }

    /// The parts as one line.
    fn joined(&self) -> String {
        self.0.join(": ")
    }
}

impl Error {
    /// A usage error saying `message`.
    pub fn usage(message: impl fmt::Display) -> Error {
        Error::Usage(Chain(vec![message.to_string()]))
    }

    /// An unavailable store, saying `message`.
    pub fn unavailable(message: impl fmt::Display) -> Error {
        Error::Unavailable(Chain(vec![message.to_string()]))
    }

    /// An internal error saying `message` (see also `error!`).
    pub fn internal(message: impl fmt::Display) -> Error {
        Error::Internal(Chain(vec![message.to_string()]))
    }

    /// What the message says.
    pub fn chain(&self) -> &Chain {
        match self {
            Error::Usage(chain) | Error::Unavailable(chain) | Error::Internal(chain) => chain,
        }
    }

    fn chain_mut(&mut self) -> &mut Chain {
        match self {
            Error::Usage(chain) | Error::Unavailable(chain) | Error::Internal(chain) => chain,
        }
    }

    /// This error with `context` said before it, of the same kind.
    pub fn context(mut self, context: impl fmt::Display) -> Error {
        self.chain_mut().0.insert(0, context.to_string());
        self
    }

    /// This error as the kind `kind` (`Error::Usage`, ...), its chain so far one part.
    pub fn into_kind(self, kind: fn(Chain) -> Error) -> Error {
        kind(Chain(vec![self.chain().joined()]))
    }
}

/// `{}` shows the outermost part, `{:#}` the whole chain, "outer: inner: cause".
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chain = self.chain();
        if f.alternate() {
            f.write_str(&chain.joined())
        } else {
            f.write_str(chain.0.first().map_or("", String::as_str))
        }
    }
}

/// Another library's error is an internal one, unless the code that meets it says otherwise; the
/// chain is its message and those of its sources.
impl<E: std::error::Error> From<E> for Error {
    fn from(error: E) -> Error {
        let mut parts = vec![error.to_string()];
        let mut source = error.source();
        while let Some(cause) = source {
            parts.push(cause.to_string());
            source = cause.source();
        }
        Error::Internal(Chain(parts))
    }
}

/// An internal `Error` with a message made as `format!` makes it.
#[macro_export]
macro_rules! error {
    ($($message:tt)*) => {
        $crate::error::Error::internal(format!($($message)*))
    };
}

mod sealed {
    /// What `Context` works on: a store's `Error` or another library's.
    pub trait IntoError {
        fn into_error(self) -> super::Error;
    }

    impl IntoError for super::Error {
        fn into_error(self) -> super::Error {
            self
        }
    }

    impl<E: std::error::Error> IntoError for E {
        fn into_error(self) -> super::Error {
            super::Error::from(self)
        }
    }
}

/// Words on a failed `Result` (or a missing `Option`): the context of the level above, keeping
/// the kind.
pub trait Context<T> {
    /// `context` said before the error.
    fn context(self, context: impl fmt::Display) -> Result<T>;

    /// `context()` said before the error, made only if there is one.
    fn with_context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: sealed::IntoError> Context<T> for Result<T, E> {
    fn context(self, context: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into_error().context(context))
    }

    fn with_context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.into_error().context(context()))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, context: impl fmt::Display) -> Result<T> {
        self.ok_or_else(|| Error::internal(context))
    }

    fn with_context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T> {
        self.ok_or_else(|| Error::internal(context()))
    }
}

/// What a failed `Result` means for the user: its error as another kind.
pub trait FailAs<T> {
    /// The error as a usage error.
    fn usage(self) -> Result<T>;

    /// The error as an unavailable store.
    fn unavailable(self) -> Result<T>;
}

impl<T, E: sealed::IntoError> FailAs<T> for Result<T, E> {
    fn usage(self) -> Result<T> {
        self.map_err(|e| e.into_error().into_kind(Error::Usage))
    }

    fn unavailable(self) -> Result<T> {
        self.map_err(|e| e.into_error().into_kind(Error::Unavailable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_keep_the_kind_and_show_as_one_line() {
        let io = std::io::Error::other("refused");
        let e = Err::<(), _>(io)
            .context("connect")
            .unavailable()
            .context("open");
        let e = e.unwrap_err();
        assert!(matches!(e, Error::Unavailable(_)));
        assert_eq!(format!("{e:#}"), "open: connect: refused");
        assert_eq!(format!("{e}"), "open");
        let inner = Err::<(), _>(error!("bad {}", 1))
            .context("outer")
            .unwrap_err();
        assert_eq!(
            inner,
            Error::Internal(Chain(vec!["outer".into(), "bad 1".into()]))
        );
        assert_eq!(format!("{}", inner.into_kind(Error::Usage)), "outer: bad 1");
    }
}
