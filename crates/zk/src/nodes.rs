//! Reading a lock directory's nodes beyond dlock's own records: several nodes in one consistent
//! read (`read_children`), and a node another client (Curator, kazoo) wrote, as a holder
//! (`foreign_holder`). Both `record` and `semaphores` read through these.

use dlock_core::error;
use std::time::{Duration, UNIX_EPOCH};

use zookeeper_client as zk;

use super::session::{is_connection_loss, Session};
use super::MAX_RETRIES;
use dlock_core::lock::{is_plain, Holder, Mode, MAX_HOST_BYTES, MAX_SINCE_SECS};

/// A holder written by another client, labelled `owner`: what its node's name and stat tell, and
/// its data as its host if it reads as one (Curator stores the client's IP address there).
pub(super) fn foreign_holder(mode: Mode, owner: String, data: &[u8], stat: &zk::Stat) -> Holder {
    let text = String::from_utf8_lossy(data);
    let host = (!text.is_empty() && text.len() <= MAX_HOST_BYTES && is_plain(&text))
        .then(|| text.into_owned());
    let since = u64::try_from(stat.ctime)
        .ok()
        .filter(|ms| ms / 1000 <= MAX_SINCE_SECS)
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
    Holder {
        mode,
        host,
        pid: None,
        owner,
        since,
        token: u64::try_from(stat.czxid).ok(),
        message: None,
        expires_at: None,
        kept_until: None,
        kept: None,
        unreadable: None,
    }
}

/// The data and stat of the children `names` of `dir`, in one multi-read (a consistent view),
/// each `None` if it is gone.
pub(super) async fn read_children(
    session: &Session,
    dir: &str,
    names: &[&str],
) -> error::Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
    if names.is_empty() {
        return Ok(vec![]);
    }
    let client = session.client();
    let mut tries = 0;
    let results = loop {
        let mut reader = client.new_multi_reader();
        for name in names {
            let path = format!("{dir}/{name}");
            reader
                .add_get_data(&path)
                .map_err(|e| session.fail(e, &format!("cannot read {path}")))?;
        }
        match reader.commit().await {
            Err(e) if is_connection_loss(&e) && tries < MAX_RETRIES => tries += 1,
            result => {
                break result
                    .map_err(|e| session.fail(e, &format!("cannot read the nodes of {dir}")))?
            }
        }
    };
    Ok(results
        .into_iter()
        .map(|result| match result {
            zk::MultiReadResult::Data { data, stat } => Some((data, stat)),
            _ => None,
        })
        .collect())
}
