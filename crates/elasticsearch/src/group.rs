//! The concurrency group record of a lock (dlock-core's lock/group.rs) in the lock's document, as
//! its field `group`: read with the document; changed by `recipe/group.painless`, which the node
//! runs on the primary shard and which replaces the record only while it is still the one read (a
//! compare-and-set, tried again when another change came in between). A holder reads it every
//! `POLL_EVERY`: one `GET` of the document.

use std::time::Duration;

use dlock_core::error;
use dlock_core::error::FailAs;
use serde_json::json;

use super::recipe::{lock, Outcome, GROUP};
use super::EsBackend;
use dlock_core::backend::GroupRecords;
use dlock_core::lock::LockName;

/// How often a holder reads its group records.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// Most tries of a change that others' changes keep beating: each lost try means another run
/// made progress, so this is never reached in practice.
const MAX_TRIES: usize = 100;

impl GroupRecords for EsBackend {
    fn read(&self, name: &LockName) -> error::Result<Option<String>> {
        let found = {
            let mut store = lock(&self.store);
            let budget = store.connect_timeout();
            store.get(name, budget)
        };
        let doc = found.map_err(|f| {
            self.fail(
                f,
                format!("cannot read the group record of lock {:?}", name.as_str()),
            )
        })?;
        Ok(doc.and_then(|d| d.group))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> error::Result<()> {
        let doing = || format!("cannot change the group record of lock {:?}", name.as_str());
        for _ in 0..MAX_TRIES {
            let old = self.read(name)?;
            let new = change(old.as_deref());
            if new == old {
                return Ok(());
            }
            let params = json!({
                "name": name.as_str(),
                "old": old.as_deref().unwrap_or_default(),
                "new": new.as_deref().unwrap_or_default(),
            });
            let outcome = {
                let mut store = lock(&self.store);
                let budget = store.connect_timeout();
                store.update(name, GROUP, params, true, budget)
            };
            match outcome.map_err(|f| self.fail(f, doing()))? {
                Outcome::Written(_) => return Ok(()),
                // Left as read: the document is not dlock's (another tool made it).
                Outcome::Unchanged(doc) if doc.group == old => {
                    return Err(error!("{}: its document is not dlock's", doing())).unavailable()
                }
                // Another change came between the read and this one: read again.
                Outcome::Unchanged(_) | Outcome::Missing => {}
            }
        }
        Err(error!("{}: it kept changing under this dlock", doing())).unavailable()
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }
}
