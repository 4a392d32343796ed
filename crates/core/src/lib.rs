//! What every part of dlock shares and no store owns: the lock vocabulary (names, modes, holders,
//! tokens, last runs: lock/), addresses (url/), the exit statuses and the tags that carry them
//! (exit.rs), the words of messages (text.rs, report.rs, last_runs.rs), and the contract every
//! store implements (backend/: `Backend`, `Lease`, `Waiting`, `Stop`). It names no store, and no
//! store crate names another or the command: the crate graph keeps the layers.

#![forbid(unsafe_code)]

pub mod backend;
pub mod error;
pub mod exit;
pub mod last_runs;
pub mod lock;
pub mod report;
pub mod text;
pub mod url;
