//! Who holds a lock, as the servers report it: `status`, `list` (a bounded SCAN by name prefix)
//! and `release --force`, merged over every server that answered.

use std::collections::BTreeMap;

use redis::Connection;

use super::fault::{first_fatal, Fault, FaultKind};
use super::keys::{self, Keys};
use super::quorum::on_all;
use super::scripts::{self, HoldersScript};
use super::RedisBackend;
use dlock_core::backend::{Listing, LockStatus};
use dlock_core::error;
use dlock_core::error::FailAs;
use dlock_core::lock::{Holder, LockName, Waiter};

/// Most keys `list` looks at, so a huge keyspace cannot keep it scanning forever.
const MAX_SCAN_STEPS: usize = 100_000;

impl RedisBackend {
    /// The live holders of `name` on every server.
    pub(super) fn read_status(&self, name: &LockName) -> error::Result<LockStatus> {
        let (holders, waiters) = self.status_everywhere(name)?;
        Ok(LockStatus {
            name: name.clone(),
            holders,
            location: format!("{} key {}:*", self.location, Keys::of(name).base),
            waiters: Some(waiters),
        })
    }

    /// The live holders and waiters of `name` on every server, merged: a holder's lease ends at
    /// the earliest expiry a server reports for it (each judged by that server's clock); the
    /// waiters in the order of the server that lists the most, then any others it lacks.
    fn status_everywhere(&self, name: &LockName) -> error::Result<(Vec<Holder>, Vec<Waiter>)> {
        self.status_or_fault(name)
            .map_err(|fault| fault.to_error())
            .unavailable()
    }

    /// As `status_everywhere`, or the fault that stopped it.
    fn status_or_fault(&self, name: &LockName) -> Result<(Vec<Holder>, Vec<Waiter>), Fault> {
        let mut servers = self.servers();
        let keys = Keys::on(name, self.sharded);
        let timeout = self.connect_timeout;
        let replies = on_all(&mut servers, |s| {
            s.at(&keys.base);
            s.call(timeout, |l| scripts::status(&mut l.conn, &keys))
        });
        let mut merged: BTreeMap<String, Holder> = BTreeMap::new();
        let mut lines: Vec<Vec<Waiter>> = Vec::new();
        let mut faults = Vec::new();
        for reply in replies {
            match reply {
                Ok(status) => {
                    for holder in status.holders {
                        let earliest = merged.get(&holder.owner).and_then(|h| h.expires_at);
                        let kept = merged.entry(holder.owner.clone()).or_insert(holder.clone());
                        kept.expires_at = match (earliest, holder.expires_at) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                    lines.push(status.waiters);
                }
                Err(fault) => faults.push(fault),
            }
        }
        if faults.len() == servers.len() || first_fatal(&faults).is_some() {
            if let Some(fault) = first_fatal(&faults).or(faults.first()) {
                return Err(fault.clone());
            }
        }
        let mut holders: Vec<Holder> = merged.into_values().collect();
        holders.sort_by_key(|h| h.token);
        lines.sort_by_key(|line| std::cmp::Reverse(line.len()));
        let mut waiters: Vec<Waiter> = Vec::new();
        for waiter in lines.into_iter().flatten() {
            if !waiters.iter().any(|w| w.owner == waiter.owner) {
                waiters.push(waiter);
            }
        }
        Ok((holders, waiters))
    }

    /// The keys matching `pattern` on every server (on Cluster, every master); an error only when
    /// no server answered.
    pub(super) fn scan_everywhere(&self, pattern: &str) -> error::Result<Vec<String>> {
        let mut servers = self.servers();
        let timeout = self.connect_timeout;
        let found: Vec<_> = on_all(&mut servers, |s| {
            s.call_everywhere(timeout, |l| scan(&mut l.conn, pattern))
        })
        .into_iter()
        .flatten()
        .collect();
        let mut names = Vec::new();
        let mut faults = Vec::new();
        let total = found.len();
        for result in found {
            match result {
                Ok(keys) => names.extend(keys),
                Err(fault) => faults.push(fault),
            }
        }
        if faults.len() == total {
            if let Some(fault) = faults.first() {
                return Err(fault.to_error()).unavailable();
            }
        }
        Ok(names)
    }

    /// The held locks whose names start with `prefix`.
    pub(super) fn list_held(&self, prefix: &str) -> error::Result<Listing> {
        let names = self.scan_everywhere(&keys::holders_pattern(prefix))?;
        let mut names: Vec<LockName> = names
            .iter()
            .filter_map(|key| keys::name_of_holders_key(key, prefix))
            .collect();
        names.sort();
        names.dedup();
        let mut held = Vec::new();
        let mut unreadable = Vec::new();
        for name in names {
            match self.status_or_fault(&name) {
                Ok((holders, waiters)) if !holders.is_empty() => held.push(LockStatus {
                    location: format!("{} key {}:*", self.location, Keys::of(&name).base),
                    name,
                    holders,
                    waiters: Some(waiters),
                }),
                Ok(_) => {}
                // One lock's bad key hides no other lock.
                Err(fault) if matches!(fault.kind, FaultKind::BadKey) => {
                    unreadable.push(format!("lock {:?}: {}", name.as_str(), fault.to_error()))
                }
                Err(fault) => return Err(fault.to_error()).unavailable(),
            }
        }
        Ok(Listing { held, unreadable })
    }

    /// Runs a read-or-break script on every server and merges the holders they report.
    pub(super) fn holders_everywhere(
        &self,
        name: &LockName,
        script: HoldersScript,
    ) -> error::Result<Vec<Holder>> {
        let mut servers = self.servers();
        let keys = Keys::on(name, self.sharded);
        let timeout = self.connect_timeout;
        let replies = on_all(&mut servers, |s| {
            s.at(&keys.base);
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
                return Err(fault.to_error()).unavailable();
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
