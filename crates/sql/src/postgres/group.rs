//! The concurrency group records (lock/group.rs) in `<prefix>groups`, one row per name, changed
//! by compare-and-set (`group.sql`; tried again when another changed the row in between).
//!
//! A holder hears of a request to cancel it by LISTEN/NOTIFY: every change of a row notifies one
//! channel for all the group records of dlock's tables (`Recipe::group_channel`) in its own
//! statement, so the word goes out when the change commits. A holder LISTENs on a connection of
//! its own, made on a thread of its own (`hear_changes` returns at once, whatever the server
//! does), reads its rows once the LISTEN is in force and at each word, and every `POLL_EVERY`
//! besides, as before it listened: a pooler in transaction mode leaves the LISTEN with whichever
//! server connection ran it, so no word comes, and dlock cannot tell a pooler is there; such a
//! holder hears at its next read, as a waiter does.

use std::time::Duration;

use dlock_core::error;
use dlock_core::error::Context;

use super::connection::{lock, Conn};
use super::PgBackend;
use dlock_core::backend::stop::Stop;
use dlock_core::backend::{update_by_swaps, GroupRecords, Hearing, OnChange, Wanted};
use dlock_core::lock::LockName;

/// How often a waiter or a holder reads its group records (a holder, listening or not: a pooler
/// may eat the words).
const POLL_EVERY: Duration = Duration::from_millis(100);

/// Longest wait for a notification before the listener looks whether it is still wanted.
const LISTEN_SLICE: Duration = Duration::from_millis(500);

impl GroupRecords for PgBackend {
    fn read(&self, name: &LockName) -> error::Result<Option<String>> {
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
    ) -> error::Result<()> {
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

    /// One channel for every name (see the module's comment): `names` go unused.
    fn hear_changes(&self, _names: &[LockName], changed: OnChange) -> Option<Hearing> {
        let (url, connect_timeout) = (self.url.clone(), self.connect_timeout);
        let (recipe, stop) = (self.recipe.clone(), self.stop.clone());
        Hearing::on_thread("postgres group records", POLL_EVERY, move |wanted| {
            // Connecting, and every call, give up as soon as the hearing is dropped (or dlock
            // is stopped), not at the end of the connect timeout.
            let unwanted = wanted.clone();
            let stopping = Stop::when(move || !unwanted.still() || stop.requested());
            let Ok(conn) = Conn::new(url, connect_timeout) else {
                return;
            };
            let mut conn = conn.stopping(stopping);
            if recipe.listen_to_groups(&mut conn, connect_timeout).is_err() {
                return;
            }
            hear(&mut conn, wanted, &changed);
        })
    }
}

/// Passes on each notification that arrives on `conn` (which LISTENs) while `wanted`; ends when
/// the connection does.
fn hear(conn: &mut Conn, wanted: &Wanted, changed: &OnChange) {
    // A change made after the holder's first read and before the LISTEN took effect notified
    // nobody: one read more, now that nothing is missed.
    wanted.listening();
    changed();
    while wanted.still() {
        match conn.next_note(LISTEN_SLICE) {
            Ok(None) => {}
            Ok(Some(_)) => changed(),
            Err(_) => return,
        }
    }
}
