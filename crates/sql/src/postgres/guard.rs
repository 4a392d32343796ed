//! What runs before dlock's statements on a connection, so that nothing of a role dlock does not
//! trust is ever reached: first, alone, the schema of dlock's objects and its owner
//! (`schema_owner.sql`), then, first in the connection's first transaction, the owners of the
//! tables and functions dlock uses and the triggers on its tables (`untrusted.sql`, or
//! `untrusted_tables.sql` when a call uses no function of dlock's). A finding is refused with one
//! line naming the object, its owner and the URL's `owner=`.

use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use super::connection::{odd, Conn, Fault, Schema};
use crate::runs;

/// The checks of every call (see `run`), with the prefix filled in.
pub struct Guard {
    /// Sent first in a connection's first transaction: refuses objects of untrusted roles
    /// (`untrusted.sql`); `tables` when the call uses no function of dlock's.
    all: Check,
    tables: Check,
    /// Sent alone, first on a connection: the schema of dlock's objects, and whether its owner is
    /// trusted (`schema_owner.sql`).
    schema_owner: String,
}

/// `untrusted.sql` (or `untrusted_tables.sql`) and the roles the URL names as trusted (`owner=`),
/// its `$1`.
#[derive(Clone)]
pub struct Check {
    sql: String,
    trusted: Vec<String>,
}

/// The functions dlock calls (each version it creates), which `untrusted.sql` checks.
const FUNCTIONS: [&str; 7] = [
    "kind_v2",
    "acquire_v4",
    "acquire_v5",
    "wake_v2",
    "release_v3",
    "leave_v2",
    "break_v3",
];

/// The marker `untrusted.sql` puts before its finding, read back from the server's error.
const UNTRUSTED: &str = "dlock-untrusted: ";

/// What `untrusted_tables.sql` answers when a table has a trigger: then `untrusted.sql` decides.
const TRIGGERS: &str = "dlock-triggers: ";

impl Check {
    /// Sends the check (a statement of the caller's transaction): fails when it finds an object
    /// of a role dlock does not trust.
    pub async fn send(&self, client: &Client) -> Result<Vec<Row>, tokio_postgres::Error> {
        let trusted: [(&(dyn ToSql + Sync), Type); 1] = [(&self.trusted, Type::TEXT_ARRAY)];
        client.query_typed(&self.sql, &trusted).await
    }
}

impl Guard {
    /// The checks for tables named with `prefix`; `trusted`: the roles of the URL's `owner=`.
    pub fn new(prefix: &str, trusted: &[String]) -> Guard {
        let fill = |sql: &str| runs::fill(&sql.replace("{p}", prefix));
        let functions: Vec<String> = FUNCTIONS.iter().map(|f| format!("'{prefix}{f}'")).collect();
        Guard {
            all: Check {
                sql: fill(include_str!("untrusted.sql"))
                    .replace("{functions}", &functions.join(", ")),
                trusted: trusted.to_vec(),
            },
            tables: Check {
                sql: fill(include_str!("untrusted_tables.sql")),
                trusted: trusted.to_vec(),
            },
            schema_owner: include_str!("schema_owner.sql").to_owned(),
        }
    }

    /// `conn.call` (`creating`: `call_creating`) of `op`, which is handed a check when this
    /// connection has not passed one yet: then `op` sends it first in its transaction (see
    /// `recipe::read_committed`), so that nothing of a role dlock does not trust runs before
    /// the check.
    /// `functions`: `op` calls dlock's functions, whose owners are checked too (with the triggers
    /// on the tables); else only the tables' owners are, unless a table has a trigger.
    ///
    /// `op` is also handed the schema of dlock's objects (quoted), found first on a new connection
    /// (`schema`), for the `{s}` of its statements (`in_schema`).
    pub fn run<T, F, Fut>(
        &self,
        conn: &mut Conn,
        budget: Duration,
        creating: bool,
        functions: bool,
        op: F,
    ) -> Result<T, Fault>
    where
        F: Fn(std::sync::Arc<Client>, Option<Check>, &str) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let schema = self.schema(conn, budget)?;
        let mut full = functions;
        loop {
            let guard = match (conn.trusted(full), full) {
                (true, _) => None,
                (false, true) => Some(&self.all),
                (false, false) => Some(&self.tables),
            };
            let guard = guard.map(|g| Check {
                sql: in_schema(&g.sql, &schema),
                trusted: g.trusted.clone(),
            });
            let call = |client| op(client, guard.clone(), &schema);
            let result = if creating {
                conn.call_creating(budget, call)
            } else {
                conn.call(budget, call)
            };
            return match result {
                Ok(value) => {
                    if guard.is_some() {
                        conn.mark_trusted(full);
                    }
                    Ok(value)
                }
                // A table has a trigger: the whole check, in the same call again (the
                // transaction was aborted before anything in it ran).
                Err(Fault::Refused { message, .. }) if message.contains(TRIGGERS) && !full => {
                    full = true;
                    continue;
                }
                Err(Fault::Refused { message, .. }) if message.contains(UNTRUSTED) => {
                    Err(Fault::Refused {
                        code: "untrusted".into(),
                        message: untrusted(&message, &self.all.trusted),
                    })
                }
                Err(f) => Err(f),
            };
        }
    }

    /// The schema of dlock's objects on `conn` (quoted), found on its first connection
    /// (`schema_owner.sql`): the session's current schema, refused unless a role dlock trusts owns
    /// it. Found before anything else is sent, and never again: a schema made later, earlier in
    /// the search path, changes nothing. A new connection (a reconnect, maybe to another server)
    /// checks the owner of that same schema again.
    pub fn schema(&self, conn: &mut Conn, budget: Duration) -> Result<String, Fault> {
        if let Some(schema) = conn.schema() {
            return Ok(schema.to_owned());
        }
        let (sql, trusted) = (&self.schema_owner, &self.all.trusted);
        let found = conn.found_schema().map(str::to_owned);
        let rows = conn.call(budget, |client| async move {
            let params: [(&(dyn ToSql + Sync), Type); 2] =
                [(trusted, Type::TEXT_ARRAY), (&found, Type::TEXT)];
            client.query_typed(sql, &params).await
        })?;
        let refused = |message: String| Fault::Refused {
            code: "schema".into(),
            message,
        };
        let Some(row) = rows.first() else {
            return Err(refused(
                "no schema of the search path exists (dlock's tables are made in its first)".into(),
            ));
        };
        let schema: String = row.try_get(0).map_err(|_| odd("schema"))?;
        let owner: String = row.try_get(1).map_err(|_| odd("schema"))?;
        let trusted: bool = row.try_get(2).map_err(|_| odd("schema"))?;
        let name: String = row.try_get(3).map_err(|_| odd("schema"))?;
        if !trusted {
            return Err(Fault::Refused {
                code: "untrusted".into(),
                message: refusal(
                    &format!("schema {schema} belongs to {owner}"),
                    &self.all.trusted,
                ),
            });
        }
        // Also written inside string literals (`'{s}.{p}locks'::regclass`).
        if schema.contains('\'') {
            return Err(refused(format!(
                "the schema of dlock's tables, {schema}, has a quote in its name"
            )));
        }
        conn.set_schema(Schema {
            name,
            quoted: schema.clone(),
        });
        Ok(schema)
    }
}

/// The line for `untrusted.sql`'s finding, read from the server's error `message` (`... "dlock-
/// untrusted: table public.dlock_tokens belongs to mallory"`), whatever the server's language.
fn untrusted(message: &str, trusted: &[String]) -> String {
    let finding = message
        .split_once(UNTRUSTED)
        .map(|(_, rest)| rest.rsplit_once('"').map_or(rest, |(f, _)| f))
        .unwrap_or(message);
    refusal(finding, trusted)
}

/// The line refusing what `finding` says (`table public.dlock_tokens belongs to mallory`).
fn refusal(finding: &str, trusted: &[String]) -> String {
    let named = if trusted.is_empty() {
        String::new()
    } else {
        format!(", nor one the URL names ({})", trusted.join(", "))
    };
    format!(
        "refusing {finding}: not the connecting role{named}; drop it, or name \
         its owner in the URL's owner= if it is to be trusted"
    )
}

/// `sql` with the schema of dlock's objects (quoted) for its `{s}`.
pub fn in_schema(sql: &str, schema: &str) -> String {
    sql.replace("{s}", schema)
}
