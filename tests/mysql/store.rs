//! MySQL as the rest of the suite sees it: its description (`STORE`: its arguments, its
//! capabilities, and how another client forges a holder record, a row of the target's table) and
//! its targets: the suite's shared MariaDB, with tables of its own per target, and a private one
//! that faults may hit.

use super::server::{MyServer, DATABASE, PASSWORD};
use crate::support::caps::{Caps, ForeignHolder, Forged};
use crate::support::store::{backend_at, Store};
use crate::support::suite_servers::next_namespace;
use crate::support::target::Target;
use crate::support::sql_server::tables_made;

pub static STORE: Store = Store {
    backend: "mysql",
    built: cfg!(feature = "mysql"),
    schemes: &["mysql", "mariadb"],
    args: |ports| {
        let url = format!("mysql://root:{PASSWORD}@127.0.0.1:{}/{DATABASE}", ports[0]);
        backend_at("mysql", url)
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
        tells_of_changes: false,
        unreachable_url: |_, port| format!("mysql://dlock@127.0.0.1:{port}/dlock"),
        foreign_holder: ForeignHolder {
            // A DATETIME cannot be past the year 9999: a row's columns with a pid below zero
            // instead.
            unreadable: "exclusive 5 1700000000 -2 host",
            forge,
        },
    },
    // An acquisition costs more than a lock file's.
    rounds_sixths: |_| 2,
    for_examples: Target::suite_mysql,
};

/// Writes a row in the target's own table, as any client with INSERT could: `record`'s fields as
/// columns, the message after the tab.
fn forge(t: &Target, record: &str, _json: &str) -> Forged {
    let prefix = tables_made(t);
    let (fields, message) = record.split_once('\t').unwrap_or((record, ""));
    let f: Vec<&str> = fields.split(' ').collect();
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    let message = if message.is_empty() {
        "NULL".to_owned()
    } else {
        format!("UNHEX('{}')", hex(message))
    };
    MyServer::shared().lock().unwrap().sql(&format!(
        "REPLACE INTO {prefix}locks (name, owner, mode, token, since, expires_at, \
         pid, host, message) VALUES ('x', 'ab', '{}', {}, \
         '1970-01-01' + INTERVAL {} SECOND, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, {}, \
         '{}', {message})",
        f[0], f[1], f[2], f[3], f[4]
    ));
    Forged {
        stored: record.to_owned(),
        let_go: None,
    }
}

impl Target {
    /// The MySQL backend on the test run's shared MariaDB, with tables of its own (a prefix per
    /// test), for the contract suite.
    pub fn suite_mysql() -> Target {
        let prefix = format!("c{}_", next_namespace());
        let url = MyServer::shared_url(&prefix);
        let port = MyServer::shared()
            .lock()
            .map(|s| s.port())
            .unwrap_or_default();
        Target::on_shared_sql(&STORE, url, port)
    }

    /// dlock on a private MariaDB server.
    pub fn mysql_backend() -> Target {
        let server = MyServer::start();
        Target::on_private_sql(&STORE, server.port(), server)
    }
}
