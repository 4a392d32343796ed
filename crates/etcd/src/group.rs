//! The concurrency group record of a lock (lock/group.rs) in the key `/dlock/NAME:group`, beside
//! the lock's prefix as its run records are (`runs`), with no lease: changed by a transaction
//! that holds only while the key is still at the revision read (a compare-and-set, tried again
//! when another changed it in between).
//!
//! A holder hears of a request to cancel it from a watch: one on each of its records' keys, all
//! on one gRPC stream (`Client::watch_changes`) on the backend's connection, which a thread of
//! its own reads; each answer that carries events is a word to read the records, and so is the
//! moment every watch stands (a request made before would otherwise wait for the next read). It
//! reads them every second besides, and every `POLL_EVERY` where no watch could be made.

use dlock_core::error;
use std::sync::Arc;
use std::time::Duration;

use super::connection::{bounded, Connection, CALL_TIMEOUT};
use super::naming::{escaped_name, ROOT};
use super::rpc::{Compare, KeyValue, RangeRequest, RequestOp, TxnRequest};
use super::EtcdBackend;
use dlock_core::backend::stop::Stop;
use dlock_core::backend::{
    update_by_swaps, GroupRecords, Hearing, OnChange, Wanted, POLL_WHILE_HEARING,
};
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
    fn group_kv(&self, name: &LockName) -> error::Result<Option<KeyValue>> {
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
    fn read(&self, name: &LockName) -> error::Result<Option<String>> {
        Ok(self.group_kv(name)?.as_ref().and_then(text_of))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> error::Result<()> {
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

    fn hear_changes(&self, names: &[LockName], changed: OnChange) -> Option<Hearing> {
        let keys = names.iter().map(|name| key_of(name).into_bytes()).collect();
        // The backend's connection, which a holder has (it enlisted before it waited); without
        // one, the listener connects on its own thread: this must not wait on the cluster.
        let connected = self
            .connection
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (url, connect_timeout) = (self.url.clone(), self.connect_timeout);
        Hearing::on_thread("etcd group records", POLL_WHILE_HEARING, move |wanted| {
            let still = wanted.clone();
            let unwanted = Stop::when(move || !still.still());
            let conn = match connected {
                Some(conn) => conn,
                None => match Connection::open(&url, connect_timeout, &unwanted) {
                    Ok(conn) => Arc::new(conn),
                    Err(_) => return,
                },
            };
            conn.runtime()
                .block_on(unwanted.unless(listen(&conn, keys, &changed, wanted)));
        })
    }
}

/// Calls `changed` for each change to `keys` the cluster reports, and once when every watch
/// stands, until the stream fails or ends (quietly: the holder still reads every second).
async fn listen(conn: &Connection, keys: Vec<Vec<u8>>, changed: &dyn Fn(), wanted: &Wanted) {
    let watches = keys.len();
    let Ok(mut watch) = bounded(CALL_TIMEOUT, conn.client().watch_changes(keys)).await else {
        return;
    };
    let mut standing = 0;
    // Each answer is a watch created, a change, or the end of the stream.
    while let Ok(Some(answer)) = watch.answers.message().await {
        if answer.canceled {
            return;
        }
        if answer.created {
            standing += 1;
            if standing == watches {
                wanted.listening();
                changed();
            }
        }
        if !answer.events.is_empty() {
            changed();
        }
    }
}
