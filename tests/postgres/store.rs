//! PostgreSQL as the rest of the suite sees it: its description (`STORE`: its arguments, its
//! capabilities, and how another client forges a holder record, a row of the target's table) and
//! its targets: the suite's shared server, with tables of its own per target, and a private one
//! that faults may hit.

use super::server::{PgServer, PASSWORD};
use crate::support::caps::{Caps, ForeignHolder, Forged};
use crate::support::store::{backend_at, Store};
use crate::support::suite_servers::next_namespace;
use crate::support::target::Target;
use crate::support::sql_server::tables_made;

pub static STORE: Store = Store {
    backend: "postgres",
    built: cfg!(feature = "postgres"),
    schemes: &["postgres", "postgresql"],
    args: |ports| {
        let url = format!("postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres", ports[0]);
        backend_at("postgres", url)
    },
    caps: Caps {
        shows_lease_end: true,
        keeps_a_line: true,
        tells_the_place_in_line: false,
        ttl_limit: None,
        dates_runs_by_its_clock: true,
        locks_are_files: false,
        records_a_run_lost_with_its_lease: true,
        loss_reason: "no longer ours",
        tokens_count_acquisitions: true,
        tells_of_changes: true,
        unreachable_url: |_, port| format!("postgres://dlock@127.0.0.1:{port}/dlock"),
        foreign_holder: ForeignHolder {
            // Its `since` past what a timestamptz holds, as FAR_FUTURE's is: a row's columns,
            // which dlock shows space-separated.
            unreadable: "exclusive 5 999999999999 2 host",
            forge,
        },
    },
    // An acquisition costs more than a lock file's.
    rounds_sixths: |_| 2,
    for_examples: Target::suite_postgres,
};

/// Writes a row in the target's own table, as any client with INSERT could: `record`'s fields as
/// columns, its message in its own column, as dlock writes it.
fn forge(t: &Target, record: &str, _json: &str) -> Forged {
    let prefix = tables_made(t);
    let (fields, message) = match record.split_once('\t') {
        Some((fields, message)) => (fields, format!("'{message}'")),
        None => (record, "NULL".to_owned()),
    };
    let since = fields.split(' ').nth(2).expect("a since field");
    PgServer::use_shared().psql(&format!(
        "INSERT INTO {prefix}locks (name, owner, mode, token, since, expires_at, pid, \
             host, message) VALUES ('x', 'ab', 'exclusive', 5, \
             to_timestamp({since}), now() + interval '1 hour', 2, 'host', {message})"
    ));
    Forged {
        stored: record.to_owned(),
        let_go: None,
    }
}

impl Target {
    /// The PostgreSQL backend on the test run's shared server, with tables of its own (a prefix
    /// per test), for the contract suite.
    pub fn suite_postgres() -> Target {
        let prefix = format!("c{}_", next_namespace());
        let url = PgServer::shared_url(&prefix);
        Target::on_shared_sql(&STORE, url, PgServer::use_shared().port())
    }

    /// dlock on a private PostgreSQL server.
    pub fn postgres_backend() -> Target {
        let server = PgServer::start();
        Target::on_private_sql(&STORE, server.port(), server)
    }
}
