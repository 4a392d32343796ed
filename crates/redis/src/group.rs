//! The concurrency group record of a lock (lock/group.rs) in the key `dlock:{NAME}:group`, in the
//! lock's slot: read (bounded) and changed by `group.lua`, the change only if it is still what was
//! read (a compare-and-set, tried again when another changed it meanwhile). On one server, behind
//! Sentinel or on a Cluster; not with Redlock, whose servers would each keep their own (the
//! options are refused there). Each change is published on the record's channel
//! (`dlock:wake:group:dlock:{NAME}`, classic pub/sub, which a Cluster carries to every node, under
//! the channels the minimal grants allow); a holder listens there on a connection of its own and
//! reads its records when told, and every second besides (every `POLL_EVERY` when it cannot
//! listen: its connection broke, or the server refused the subscription).

use std::time::Duration;

use dlock_core::error;
use dlock_core::error::FailAs;

use super::keys::Keys;
use super::topology::Topology;
use super::RedisBackend;
use dlock_core::backend::{
    update_by_swaps, GroupRecords, Hearing, OnChange, Wanted, POLL_WHILE_HEARING,
};
use dlock_core::lock::group::MAX_GROUP_RECORD_BYTES;
use dlock_core::lock::last_run::RUN_RECORD_KEPT_FOR;
use dlock_core::lock::LockName;

/// Reads and changes the record (see the file).
const SCRIPT: &str = include_str!("group.lua");

/// How often a holder reads its group records: a GETRANGE each time.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// How long a holder's listener waits for a message before it looks whether it is still wanted.
const LISTEN_SLICE: Duration = Duration::from_millis(500);

fn key(backend: &RedisBackend, name: &LockName) -> (String, String) {
    let base = Keys::on(name, backend.sharded).base;
    let key = format!("{base}:group");
    (base, key)
}

/// The channel a change of the record of the lock `base` is published on.
fn channel(base: &str) -> String {
    format!("dlock:wake:group:{base}")
}

impl RedisBackend {
    /// Whether this backend keeps group records: not with Redlock.
    pub(super) fn keeps_groups(&self) -> bool {
        self.count == 1
    }

    fn read_group(&self, name: &LockName) -> error::Result<String> {
        let (base, key) = key(self, name);
        let mut servers = self.servers();
        let server = servers
            .first_mut()
            .ok_or_else(|| error!("no Redis server"))?;
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
            .unavailable()
    }
}

impl GroupRecords for RedisBackend {
    fn read(&self, name: &LockName) -> error::Result<Option<String>> {
        let text = self.read_group(name)?;
        Ok((!text.is_empty()).then_some(text))
    }

    fn update(
        &self,
        name: &LockName,
        change: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> error::Result<()> {
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
                    .ok_or_else(|| error!("no Redis server"))?;
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
                            .arg(channel(&base))
                            .query(&mut l.conn)
                    })
                    .map_err(|fault| fault.to_error())
                    .unavailable()?;
                Ok(changed == 1)
            },
        )
    }

    fn poll_every(&self) -> Duration {
        POLL_EVERY
    }

    fn hear_changes(&self, names: &[LockName], changed: OnChange) -> Option<Hearing> {
        let (url, replicas) = self.one_url.clone()?;
        let bases: Vec<String> = names.iter().map(|n| key(self, n).0).collect();
        let timeout = self.connect_timeout;
        Hearing::on_thread("redis group records", POLL_WHILE_HEARING, move |wanted| {
            listen(&url, replicas, timeout, &bases, &changed, wanted);
        })
    }
}

/// A holder's listener: its own connection to the server of `url` (the master behind Sentinel,
/// the node of the first lock on a Cluster), subscribed to the records' channels; `changed` for
/// each message there, until no longer wanted or the connection breaks.
fn listen(
    url: &str,
    replicas: u32,
    timeout: Duration,
    bases: &[String],
    changed: &OnChange,
    wanted: &Wanted,
) {
    let Ok(mut server) = Topology::parse(url, replicas) else {
        return;
    };
    if server.connect(timeout).is_err() {
        return;
    }
    if let Some(base) = bases.first() {
        server.at(base);
    }
    let channels: Vec<String> = bases.iter().map(|b| channel(b)).collect();
    let subscribed = server.call(timeout, |l| {
        // RESP3, so that messages come beside replies, as a waiter's do.
        redis::cmd("HELLO").arg(3).exec(&mut l.conn)?;
        l.resp3 = true;
        for channel in &channels {
            l.conn
                .send_packed_command(&redis::cmd("SUBSCRIBE").arg(channel).get_packed_command())?;
            if super::link::confirmation(&mut l.conn, channel)? != super::link::Subscribed::Yes {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the server did not confirm SUBSCRIBE",
                )));
            }
        }
        Ok(())
    });
    if subscribed.is_err() {
        return;
    }
    wanted.listening();
    // A change made while this connected was told to nobody.
    changed();
    while wanted.still() {
        if server.read_message(LISTEN_SLICE).is_err() {
            return;
        }
        if server.told(&channels) {
            changed();
        }
    }
}
