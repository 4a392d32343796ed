//! Redis as the rest of the suite sees it: its description (`STORE`: its arguments, its
//! capabilities, and how another client forges a holder record, in the lock's hash of owners on
//! every server). Its targets are in targets.rs.

use crate::support::caps::{Caps, ForeignHolder, Forged, FAR_FUTURE};
use crate::support::store::Store;
use crate::support::target::Target;

pub static STORE: Store = Store {
    backend: "redis",
    built: cfg!(feature = "redis"),
    schemes: &[
        "redis",
        "rediss",
        "redis+sentinel",
        "rediss+sentinel",
        "redis+cluster",
        "rediss+cluster",
    ],
    args: |ports| {
        let mut args = vec!["--backend".to_owned(), "redis".to_owned()];
        for port in ports {
            args.extend(["--url".to_owned(), format!("redis://127.0.0.1:{port}")]);
        }
        args
    },
    caps: Caps {
        shows_lease_end: true,
        keeps_a_line: true,
        tells_the_place_in_line: true,
        ttl_limit: None,
        dates_runs_by_its_clock: true,
        locks_are_files: false,
        records_a_run_lost_with_its_lease: true,
        loss_reason: "no longer ours",
        tokens_count_acquisitions: true,
        tells_of_changes: true,
        unreachable_url: |_, port| format!("redis://127.0.0.1:{port}"),
        foreign_holder: ForeignHolder {
            unreadable: FAR_FUTURE,
            forge,
        },
    },
    // Several servers (Redlock's majority, a cluster) cost more than one.
    rounds_sixths: |t| if t.ports.len() == 1 { 4 } else { 1 },
    for_examples: Target::suite_redis,
};

/// Writes `record` in the lock's hash of owners on every server, so that Redlock's majority sees
/// it too (in a cluster, on the node that serves the lock: the others answer MOVED).
fn forge(t: &Target, record: &str, _json: &str) -> Forged {
    let clustered = t.urls()[0].starts_with("redis+cluster://");
    for url in redis_urls(t) {
        let mut conn = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(std::time::Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        let added = redis::cmd("ZADD")
            .arg("dlock:{x}:holders")
            .arg(99_999_999_999_999u64)
            .arg("ab")
            .query::<()>(&mut conn);
        match added {
            Err(e) if clustered && e.code() == Some("MOVED") => continue,
            added => added.unwrap(),
        }
        redis::cmd("HSET")
            .arg("dlock:{x}:owners")
            .arg("ab")
            .arg(record)
            .query::<()>(&mut conn)
            .unwrap();
    }
    Forged {
        stored: record.to_owned(),
        let_go: None,
    }
}

/// The Redis servers' own URLs, for writing to them directly: for a `redis+sentinel://` URL its
/// master's (the suite's sentinel set never fails over), in the same database.
fn redis_urls(t: &Target) -> Vec<String> {
    // A cluster: each of its nodes (a script must go to the node that serves its keys).
    if t.urls().iter().any(|u| u.starts_with("redis+cluster://")) {
        let nodes = t.ports.iter();
        return nodes.map(|p| format!("redis://127.0.0.1:{p}")).collect();
    }
    let urls = t.urls().into_iter().zip(&t.ports);
    urls.map(|(url, port)| match url.strip_prefix("redis+sentinel://") {
        Some(rest) => {
            let db = rest.rsplit('/').next().unwrap_or("0");
            format!("redis://127.0.0.1:{port}/{db}")
        }
        None => url.to_owned(),
    })
    .collect()
}
