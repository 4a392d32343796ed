//! The part of the store contract for concurrency groups (`run --supersede` and
//! `--cancel-in-progress`): a store keeps each lock's group record; supervise/group.rs decides
//! everything from it.

use std::time::Duration;

use crate::lock::LockName;

/// A store's side of the concurrency groups: one record per lock name, kept beside the lock as
/// plain text the store never interprets (supervise/group.rs reads and writes it).
pub trait GroupRecords {
    /// The record of `name` as stored; `None` when there is none (an empty one is none too).
    fn read(&self, name: &LockName) -> anyhow::Result<Option<String>>;

    /// Replaces the record of `name` with what `change` makes of the one stored (`None`: there
    /// is none, or remove it), with no other update of it in between: under a lock, or as a
    /// compare-and-set the store repeats (so `change` may be called more than once).
    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> anyhow::Result<()>;

    /// How often a holder reads its records to hear of a request to cancel it, which bounds how
    /// soon it hears.
    fn poll_every(&self) -> Duration;
}
