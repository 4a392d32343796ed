//! The concurrency group records (lock/group.rs) in `<prefix>groups`, one row per name, changed
//! by compare-and-set (`group.sql`; tried again when another changed the row in between). A
//! holder reads its rows every `POLL_EVERY` (one round trip each): through a pooler as directly.

use std::time::Duration;

use anyhow::Context;

use super::connection::lock;
use super::PgBackend;
use dlock_core::backend::{update_by_swaps, GroupRecords};
use dlock_core::lock::LockName;

/// How often a holder reads its group records.
const POLL_EVERY: Duration = Duration::from_millis(100);

impl GroupRecords for PgBackend {
    fn read(&self, name: &LockName) -> anyhow::Result<Option<String>> {
        let mut conn = lock(&self.conn);
        let budget = conn.connect_timeout();
        self.recipe
            .group_read(&mut conn, budget, name)
            .map_err(|f| conn.error(f))
            .with_context(|| format!("cannot read the group record of lock {:?}", name.as_str()))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> anyhow::Result<()> {
        let record = format!("the group record of lock {:?}", name.as_str());
        let read = || Ok((self.read(name)?, ()));
        update_by_swaps(&record, change, read, |(), old, new| {
            let mut conn = lock(&self.conn);
            let budget = conn.connect_timeout();
            self.recipe
                .group_swap(&mut conn, budget, name, old, new)
                .map_err(|f| conn.error(f))
                .with_context(|| format!("cannot write {record}"))
        })
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }
}
