//! Why a call to a SQL server failed, for PostgreSQL and MySQL alike: each backend names its own
//! error codes (`C`: PostgreSQL's SQLSTATE, MySQL's error number) and which of them mean what.

use anyhow::anyhow;

use crate::exit::{FailWith, Failure};

/// Why a call failed.
#[derive(Debug)]
pub enum Fault<C> {
    /// The server could not be reached or did not answer in time: worth trying again.
    Unreachable(String),
    /// The server answered with an error (`code`: its own code for it).
    Refused { code: C, message: String },
    /// dlock's tables could not be created: the whole error, for the user.
    Setup(anyhow::Error),
}

impl<C> Fault<C> {
    pub fn message(&self) -> String {
        match self {
            Fault::Unreachable(m) => m.clone(),
            Fault::Refused { message, .. } => message.clone(),
            Fault::Setup(e) => format!("{e:#}"),
        }
    }

    /// The error for the user, naming the server (`postgres at 10.0.0.5:5432: ...`), tagged
    /// backend-unavailable; a failed setup is its own error, which names the server already.
    pub fn into_error(self, backend: &str, shown: &str) -> anyhow::Error {
        if let Fault::Setup(e) = self {
            return e;
        }
        let message = format!("{backend} at {shown}: {}", self.message());
        match Err::<(), _>(anyhow!("{message}")).fail_with(Failure::BackendUnavailable) {
            Err(e) => e,
            Ok(()) => anyhow!("{message}"),
        }
    }
}

/// How a read or write to the server failed, as people say it, for the kinds both clients meet
/// alike; `None` for another kind, which each client words itself.
pub fn io_words(io: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind;
    match io.kind() {
        ErrorKind::ConnectionRefused => Some("connection refused"),
        ErrorKind::ConnectionReset => Some("connection reset"),
        ErrorKind::UnexpectedEof => Some("the server closed the connection"),
        _ => None,
    }
}
