//! What the two SQL backends (PostgreSQL, MySQL) do alike: the kinds of failure a call meets and
//! how they read, the renewal of a held row, the records of the last runs, and the parts of a
//! wait that do not depend on how the server wakes a waiter. Each backend keeps its own
//! statements, connection and wake-ups.

pub mod address;
pub mod fault;
pub mod lease;
pub mod record;
pub mod runs;
pub mod wait;

pub use fault::Fault;
