//! The concurrency group records (lock/group.rs) in `<prefix>groups`, one row per name, changed
//! by compare-and-set (`group.sql`; tried again when another changed the row in between). A
//! holder reads its rows every `POLL_EVERY` (one round trip each).

use std::time::Duration;

use dlock_core::error;
use dlock_core::error::Context;

use super::connection::lock;
use super::MyBackend;
use dlock_core::backend::{update_by_swaps, GroupRecords};
use dlock_core::lock::LockName;

/// How often a holder reads its group records.
const POLL_EVERY: Duration = Duration::from_millis(100);

impl GroupRecords for MyBackend {
    fn read(&self, name: &LockName) -> error::Result<Option<String>> {
        let mut conn = lock(&self.conn);
        self.recipe
            .group_read(&mut conn, name)
            .map_err(|f| conn.error(f))
            .with_context(|| format!("cannot read the group record of lock {:?}", name.as_str()))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> error::Result<()> {
        // Nothing is written for an unchanged record, which MySQL would count as no row changed:
        // a swap lost.
        let record = format!("the group record of lock {:?}", name.as_str());
        let read = || Ok((self.read(name)?, ()));
        update_by_swaps(&record, change, read, |(), old, new| {
            let mut conn = lock(&self.conn);
            self.recipe
                .group_swap(&mut conn, name, old, new)
                .map_err(|f| conn.error(f))
                .with_context(|| format!("cannot write {record}"))
        })
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }
}
