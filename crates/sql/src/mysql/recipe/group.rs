//! The concurrency group record of a name (`group.sql`): read, and changed only if it is still
//! what was read, each one statement.

use mysql::prelude::Queryable;
use mysql::Value;

use super::{first_set, with_values, Recipe};
use crate::mysql::connection::{Conn, Fault};
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
    /// The record of `name` as stored, if there is one (bytes that are not UTF-8 read as none).
    pub fn group_read(&self, conn: &mut Conn, name: &LockName) -> Result<Option<String>, Fault> {
        let sql = statement(&self.prefix, "read");
        let params: Vec<Value> = vec![name.as_str().into()];
        // Not creating: every dlock whose acquisition waited reads the record, and a missing
        // table (made by the first run with the options) is no record.
        let rows = match self.run(conn, false, |c| first_set(c, &sql, params.clone())) {
            Err(f) if f.is_missing_schema() => return Ok(None),
            read => read?,
        };
        Ok(rows.first().and_then(|row| match row.as_ref(0) {
            Some(Value::Bytes(b)) => String::from_utf8(b.clone()).ok(),
            _ => None,
        }))
    }

    /// Replaces the record `old` (none: there is none) of `name` with `new` (none: remove it);
    /// false when the record was not `old` any more.
    pub fn group_swap(
        &self,
        conn: &mut Conn,
        name: &LockName,
        old: Option<&str>,
        new: Option<&str>,
    ) -> Result<bool, Fault> {
        let name = name.as_str();
        let (which, params): (&str, Vec<Value>) = match (old, new) {
            (None, None) => return Ok(true),
            (None, Some(new)) => ("insert", vec![name.into(), new.into()]),
            (Some(old), Some(new)) => ("update", vec![new.into(), name.into(), old.into()]),
            (Some(old), None) => ("delete", vec![name.into(), old.into()]),
        };
        let sql = with_values(&statement(&self.prefix, which), &params);
        let changed = self.run(conn, true, |c| {
            c.query_drop(&sql)?;
            Ok(c.affected_rows())
        })?;
        Ok(changed == 1)
    }
}
