//! The concurrency group record of a lock (lock/group.rs) in the key `dlock:{NAME}:group`, in the
//! lock's slot: read (bounded) and changed by `group.lua`, the change only if it is still what was
//! read (a compare-and-set, tried again when another changed it meanwhile). On one server, behind
//! Sentinel or on a Cluster; not with Redlock, whose servers would each keep their own (the
//! options are refused there). A holder reads its records every `POLL_EVERY`.

use std::time::Duration;

use anyhow::anyhow;

use super::keys::Keys;
use super::RedisBackend;
use dlock_core::backend::{update_by_swaps, GroupRecords};
use dlock_core::exit::{FailWith, Failure};
use dlock_core::lock::group::MAX_GROUP_RECORD_BYTES;
use dlock_core::lock::last_run::RUN_RECORD_KEPT_FOR;
use dlock_core::lock::LockName;

/// Reads and changes the record (see the file).
const SCRIPT: &str = include_str!("group.lua");

/// How often a holder reads its group records: a GETRANGE each time.
const POLL_EVERY: Duration = Duration::from_millis(100);

fn key(backend: &RedisBackend, name: &LockName) -> (String, String) {
    let base = Keys::on(name, backend.sharded).base;
    let key = format!("{base}:group");
    (base, key)
}

impl RedisBackend {
    /// Whether this backend keeps group records: not with Redlock.
    pub(super) fn keeps_groups(&self) -> bool {
        self.count == 1
    }

    fn read_group(&self, name: &LockName) -> anyhow::Result<String> {
        let (base, key) = key(self, name);
        let mut servers = self.servers();
        let server = servers
            .first_mut()
            .ok_or_else(|| anyhow!("no Redis server"))?;
        server.at(&base);
        server
            .call(self.connect_timeout, |l| {
                redis::cmd("EVAL")
                    .arg(SCRIPT)
                    .arg(1)
                    .arg(&key)
                    .arg("read")
                    .arg(MAX_GROUP_RECORD_BYTES)
                    .query::<String>(&mut l.conn)
            })
            .map_err(|fault| fault.to_error())
            .fail_with(Failure::BackendUnavailable)
    }
}

impl GroupRecords for RedisBackend {
    fn read(&self, name: &LockName) -> anyhow::Result<Option<String>> {
        let text = self.read_group(name)?;
        Ok((!text.is_empty()).then_some(text))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> anyhow::Result<()> {
        let (base, key) = key(self, name);
        let kept = RUN_RECORD_KEPT_FOR.as_millis() as u64;
        let read = || Ok((GroupRecords::read(self, name)?, ()));
        update_by_swaps(
            &format!("the group record {key}"),
            change,
            read,
            |(), old, new| {
                let mut servers = self.servers();
                let server = servers
                    .first_mut()
                    .ok_or_else(|| anyhow!("no Redis server"))?;
                server.at(&base);
                let changed: i64 = server
                    .call(self.connect_timeout, |l| {
                        redis::cmd("EVAL")
                            .arg(SCRIPT)
                            .arg(1)
                            .arg(&key)
                            .arg("swap")
                            .arg(old.unwrap_or_default())
                            .arg(new.unwrap_or_default())
                            .arg(kept)
                            .query(&mut l.conn)
                    })
                    .map_err(|fault| fault.to_error())
                    .fail_with(Failure::BackendUnavailable)?;
                Ok(changed == 1)
            },
        )
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }
}
