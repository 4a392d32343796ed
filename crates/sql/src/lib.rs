//! The SQL backends, one dialect each (postgres/, mysql/, each behind its feature), and what they
//! do alike: the kinds of failure a call meets and how they read, the renewal of a held row, the
//! records of the last runs, and the parts of a wait that do not depend on how the server wakes a
//! waiter. Each dialect keeps its own statements, connection and wake-ups.

#![forbid(unsafe_code)]

pub mod address;
pub mod fault;
pub mod lease;
pub mod record;
pub mod runs;
pub mod wait;

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;

pub use fault::Fault;
