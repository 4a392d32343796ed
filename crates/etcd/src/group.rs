//! The concurrency group record of a lock (lock/group.rs) in the key `/dlock/NAME:group`, beside
//! the lock's prefix as its run records are (`runs`), with no lease: changed by a transaction
//! that holds only while the key is still at the revision read (a compare-and-set, tried again
//! when another changed it in between). A holder reads it every `POLL_EVERY`.

use std::time::Duration;

use super::connection::{bounded, CALL_TIMEOUT};
use super::naming::{escaped_name, ROOT};
use super::rpc::{Compare, KeyValue, RangeRequest, RequestOp, TxnRequest};
use super::EtcdBackend;
use dlock_core::backend::{update_by_swaps, GroupRecords};
use dlock_core::lock::LockName;

/// The key's suffix after the lock's escaped name.
pub(super) const GROUP: &str = ":group";

/// How often a holder reads its group records.
const POLL_EVERY: Duration = Duration::from_millis(100);

fn key_of(name: &LockName) -> String {
    format!("{ROOT}{}{GROUP}", escaped_name(name))
}

impl EtcdBackend {
    /// The record's key-value, if there is one.
    fn group_kv(&self, name: &LockName) -> anyhow::Result<Option<KeyValue>> {
        let conn = self.connection()?;
        let key = key_of(name);
        let read = conn
            .runtime()
            .block_on(bounded(
                CALL_TIMEOUT,
                conn.client().range(RangeRequest::key(&key)),
            ))
            .map_err(|f| conn.fail(f, &format!("cannot read {key}")))?;
        Ok(read.kvs.into_iter().next())
    }
}

fn text_of(kv: &KeyValue) -> Option<String> {
    String::from_utf8(kv.value.clone())
        .ok()
        .filter(|t| !t.is_empty())
}

impl GroupRecords for EtcdBackend {
    fn read(&self, name: &LockName) -> anyhow::Result<Option<String>> {
        Ok(self.group_kv(name)?.as_ref().and_then(text_of))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> anyhow::Result<()> {
        let key = key_of(name);
        let read = || {
            let kv = self.group_kv(name)?;
            Ok((
                kv.as_ref().and_then(text_of),
                kv.map_or(0, |kv| kv.mod_revision),
            ))
        };
        update_by_swaps(
            &format!("the group record {key}"),
            change,
            read,
            |revision, _, new| {
                let op = match new {
                    Some(text) => RequestOp::put(key.as_str(), text, 0),
                    None => RequestOp::delete(key.as_str()),
                };
                let txn =
                    TxnRequest::new(vec![Compare::modified_at(key.as_str(), revision)], vec![op]);
                let conn = self.connection()?;
                let done = conn
                    .runtime()
                    .block_on(bounded(CALL_TIMEOUT, conn.client().txn(txn)))
                    .map_err(|f| conn.fail(f, &format!("cannot write {key}")))?;
                Ok(done.succeeded)
            },
        )
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }
}
