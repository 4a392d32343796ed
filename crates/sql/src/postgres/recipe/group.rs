//! The concurrency group record of a name (`group.sql`): read, and changed only if it is still
//! what was read, each one statement in a transaction of its own, which also notifies the
//! channel of the group records (`group_channel`) when it changed the row; and the LISTEN of a
//! holder's own connection on that channel.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_postgres::types::{ToSql, Type};

use super::{in_schema, read_committed, Recipe};
use crate::postgres::connection::{Conn, Fault};
use dlock_core::backend::stop::STOPPED;
use dlock_core::lock::group::MAX_GROUP_RECORD_BYTES;
use dlock_core::lock::LockName;

/// A statement of `group.sql`, by the line that starts it, with the prefix filled in.
fn statement(prefix: &str, which: &str) -> String {
    let text = include_str!("../group.sql");
    let start = format!("-- {which}\n");
    let body = text.split_once(&start).map_or("", |(_, rest)| rest);
    let body = body.split("\n-- ").next().unwrap_or_default();
    body.replace("{p}", prefix)
        .replace("{most}", &(MAX_GROUP_RECORD_BYTES + 1).to_string())
}

impl Recipe {
    /// The one channel every change of a group record in the tables of `schema` (quoted, as in
    /// `{s}`) with this prefix is notified on: the prefix, `groups_` and 64 bits of a hash of the
    /// schema (at most 30 + 7 + 16 of PostgreSQL's 63 bytes, whatever the schema's name; never a
    /// waiter's channel, the prefix and 32 hex digits). Notifications go to every session of the
    /// database: the schema keeps those of another set of dlock's tables apart, and the lock's
    /// name is left out (any name fits, and whoever may connect may listen).
    fn group_channel(&self, schema: &str) -> String {
        let digest = Sha256::digest(schema.as_bytes());
        format!(
            "{}groups_{}",
            self.channel,
            dlock_core::text::hex(&digest[..8])
        )
    }

    /// LISTENs on the group records' channel (`group_channel`), on a connection of the holder's
    /// own: what changes a record notifies it at commit (`group.sql`).
    pub fn listen_to_groups(&self, conn: &mut Conn, budget: Duration) -> Result<(), Fault> {
        let schema = self.guard.schema(conn, budget)?;
        // A listener no longer wanted sends nothing more (which would run to its end).
        if conn.stopped() {
            return Err(Fault::Unreachable(STOPPED.into()));
        }
        // Plain lowercase letters, digits and `_` (the prefix is checked so): nothing to escape.
        let listen = format!("LISTEN \"{}\"", self.group_channel(&schema));
        conn.call(budget, |client| async move {
            client.batch_execute(&listen).await
        })
    }

    /// The record of `name` as stored, if there is one.
    pub fn group_read(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
    ) -> Result<Option<String>, Fault> {
        let sql = statement(&self.channel, "read");
        // Not creating: every dlock whose acquisition waited reads the record, and a missing
        // table (made by the first run with the options) is no record.
        let read = self
            .guard
            .run(conn, budget, false, false, |client, guard, schema| {
                let (name, sql) = (name.as_str().to_owned(), in_schema(&sql, schema));
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 1] = [(&name, Type::TEXT)];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            });
        let rows = match read {
            Err(f) if f.is_missing_schema() => return Ok(None),
            read => read?,
        };
        Ok(rows
            .first()
            .and_then(|row| row.try_get::<_, Option<String>>(0).ok().flatten()))
    }

    /// Replaces the record `old` (none: there is none) of `name` with `new` (none: remove it);
    /// false when the record was not `old` any more.
    pub fn group_swap(
        &self,
        conn: &mut Conn,
        budget: Duration,
        name: &LockName,
        old: Option<&str>,
        new: Option<&str>,
    ) -> Result<bool, Fault> {
        let which = match (old, new) {
            (None, None) => return Ok(true),
            (None, Some(_)) => "insert",
            (Some(_), Some(_)) => "update",
            (Some(_), None) => "delete",
        };
        let sql = statement(&self.channel, which);
        let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
        let rows = self
            .guard
            .run(conn, budget, true, false, |client, guard, schema| {
                let (name, sql) = (name.as_str().to_owned(), in_schema(&sql, schema));
                let (old, new) = (old.to_owned(), new.to_owned());
                let channel = self.group_channel(schema);
                async move {
                    let params: [(&(dyn ToSql + Sync), Type); 4] = [
                        (&name, Type::TEXT),
                        (&old, Type::TEXT),
                        (&new, Type::TEXT),
                        (&channel, Type::TEXT),
                    ];
                    read_committed(&client, guard.as_ref(), None, &sql, &params).await
                }
            })?;
        Ok(!rows.is_empty())
    }
}
