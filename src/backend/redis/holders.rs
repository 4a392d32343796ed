//! Who holds a lock, as the servers report it: `status`, `list` (a bounded SCAN by name prefix)
//! and `release --force`, merged over every server that answered.

use std::collections::BTreeMap;

use redis::Connection;

use super::fault::first_fatal;
use super::keys::{self, Keys};
use super::redlock::on_all;
use super::scripts::{self, HoldersScript};
use super::RedisBackend;
use crate::backend::{Listing, LockStatus};
use crate::exit::{FailWith, Failure};
use crate::lock::{Holder, LockName};

/// Most keys `list` looks at, so a huge keyspace cannot keep it scanning forever.
const MAX_SCAN_STEPS: usize = 100_000;

impl RedisBackend {
    /// The live holders of `name` on every server.
    pub(super) fn read_status(&self, name: &LockName) -> anyhow::Result<LockStatus> {
        Ok(LockStatus {
            name: name.clone(),
            holders: self.holders_everywhere(name, HoldersScript::Status)?,
            location: format!("{} key {}:*", self.location, Keys::of(name).base),
        })
    }

    /// The held locks whose names start with `prefix`.
    pub(super) fn list_held(&self, prefix: &str) -> anyhow::Result<Listing> {
        let pattern = keys::holders_pattern(prefix);
        let names = {
            let mut servers = self.servers();
            let timeout = self.connect_timeout;
            let found = on_all(&mut servers, |s| {
                s.call(timeout, |l| scan(&mut l.conn, &pattern))
            });
            let mut names = Vec::new();
            let mut faults = Vec::new();
            for result in found {
                match result {
                    Ok(keys) => names.extend(keys),
                    Err(fault) => faults.push(fault),
                }
            }
            if faults.len() == servers.len() {
                if let Some(fault) = faults.first() {
                    return Err(fault.to_error()).fail_with(Failure::BackendUnavailable);
                }
            }
            names
        };
        let mut names: Vec<LockName> = names
            .iter()
            .filter_map(|key| keys::name_of_holders_key(key, prefix))
            .collect();
        names.sort();
        names.dedup();
        let mut held = Vec::new();
        for name in names {
            let status = self.read_status(&name)?;
            if !status.holders.is_empty() {
                held.push(status);
            }
        }
        Ok(held.into())
    }

    /// Runs a read-or-break script on every server and merges the holders they report.
    pub(super) fn holders_everywhere(
        &self,
        name: &LockName,
        script: HoldersScript,
    ) -> anyhow::Result<Vec<Holder>> {
        let mut servers = self.servers();
        let keys = Keys::of(name);
        let timeout = self.connect_timeout;
        let replies = on_all(&mut servers, |s| {
            s.call(timeout, |l| scripts::holders(&mut l.conn, &keys, script))
        });
        let mut merged: BTreeMap<String, Holder> = BTreeMap::new();
        let mut faults = Vec::new();
        for reply in replies {
            match reply {
                Ok(holders) => {
                    for holder in holders {
                        merged.entry(holder.owner.clone()).or_insert(holder);
                    }
                }
                Err(fault) => faults.push(fault),
            }
        }
        if faults.len() == servers.len() || first_fatal(&faults).is_some() {
            if let Some(fault) = faults.first() {
                return Err(fault.to_error()).fail_with(Failure::BackendUnavailable);
            }
        }
        let mut holders: Vec<Holder> = merged.into_values().collect();
        holders.sort_by_key(|h| h.token);
        Ok(holders)
    }
}

/// SCAN for keys matching `pattern`, bounded by `MAX_SCAN_STEPS`.
fn scan(conn: &mut Connection, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    for _ in 0..MAX_SCAN_STEPS {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        keys.extend(batch.into_iter().filter_map(|k| String::from_utf8(k).ok()));
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    Ok(keys)
}
