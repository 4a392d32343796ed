//! The concurrency group records (lock/group.rs) in `<prefix>groups`, one row per name, changed
//! by compare-and-set (`group.sql`; tried again when another changed the row in between). A
//! holder reads its rows every `POLL_EVERY` (one round trip each): through a pooler as directly.

use std::time::Duration;

use anyhow::{anyhow, Context};

use super::connection::lock;
use super::PgBackend;
use dlock_core::backend::GroupRecords;
use dlock_core::exit::{FailWith, Failure};
use dlock_core::lock::LockName;

/// How often a holder reads its group records.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// Most tries of a change that others' changes keep beating: each lost try means another run
/// made progress, so this is never reached in practice.
const MAX_TRIES: usize = 100;

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
        for _ in 0..MAX_TRIES {
            let old = self.read(name)?;
            let new = change(old.as_deref());
            if new == old {
                return Ok(());
            }
            let mut conn = lock(&self.conn);
            let budget = conn.connect_timeout();
            let swapped = self
                .recipe
                .group_swap(&mut conn, budget, name, old.as_deref(), new.as_deref())
                .map_err(|f| conn.error(f))
                .with_context(|| {
                    format!("cannot write the group record of lock {:?}", name.as_str())
                })?;
            if swapped {
                return Ok(());
            }
        }
        Err(anyhow!(
            "the group record of lock {:?} kept changing under this dlock",
            name.as_str()
        ))
        .fail_with(Failure::BackendUnavailable)
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }
}
