//! Elasticsearch as the rest of the suite sees it, on the OpenSearch node the tests start: its
//! description (`STORE`: its arguments, its capabilities, and how another client forges a holder
//! record, an entry of the lock's document) and its targets: the suite's shared node, in an index
//! of its own per target, and a private node that faults may hit.

use super::server::OpenSearchServer;
use crate::support::caps::{Caps, ForeignHolder, Forged, FAR_FUTURE};
use crate::support::store::{backend_at, loopback_hosts, Store};
use crate::support::suite_servers::next_namespace;
use crate::support::target::Target;
use crate::support::LockDir;

pub static STORE: Store = Store {
    backend: "elasticsearch",
    built: cfg!(feature = "elasticsearch"),
    schemes: &[
        "elasticsearch",
        "elasticsearchs",
        "opensearch",
        "opensearchs",
    ],
    // The default index, `dlock`, of a node of the test's own.
    args: |ports| backend_at("elasticsearch", format!("elasticsearch://{}", loopback_hosts(ports))),
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
        unreachable_url: |_, port| format!("elasticsearch://127.0.0.1:{port}"),
        foreign_holder: ForeignHolder {
            unreadable: FAR_FUTURE,
            forge,
        },
    },
    // An acquisition costs more than a lock file's.
    rounds_sixths: |_| 2,
    for_examples: Target::suite_elasticsearch,
};

/// Puts the lock's document, as any client that can write the index could, with `record` as its
/// only holder's entry; dlock reads the entry back as stored (its `since` in milliseconds).
fn forge(t: &Target, record: &str, _json: &str) -> Forged {
    let index = t.urls()[0].rsplit('/').next().expect("an index in the URL");
    let entry = es_entry(record);
    let stored = entry.to_string();
    let doc = serde_json::json!({
        "dlock": 1, "name": "x", "token": 5, "holders": [entry], "waiters": [],
    });
    let node = OpenSearchServer::shared();
    let (status, json) = node.json(
        "PUT",
        &format!("/{index}/_doc/x?refresh=true"),
        Some(&doc.to_string()),
    );
    assert!(status == 200 || status == 201, "{json}");
    Forged {
        stored,
        let_go: None,
    }
}

fn es_entry(record: &str) -> serde_json::Value {
    let (fields, message) = match record.split_once('\t') {
        Some((fields, message)) => (fields, Some(message)),
        None => (record, None),
    };
    let f: Vec<&str> = fields.split(' ').collect();
    let number = |s: &str| s.parse::<u64>().expect("a number in the record");
    // 2100-01-01: the lease outlasts the scenario, and reads the same each time.
    let expires = 4_102_444_800_000u64;
    let mut entry = serde_json::json!({
        "owner": "ab", "mode": f[0], "token": number(f[1]), "since": number(f[2]) * 1000,
        "pid": number(f[3]), "host": f[4], "expires": expires,
    });
    if let Some(message) = message {
        entry["message"] = message.into();
    }
    entry
}

impl Target {
    /// The Elasticsearch backend on the suite's OpenSearch node, in an index of its own.
    pub fn suite_elasticsearch() -> Target {
        let node = OpenSearchServer::shared();
        let index = format!("contract-{}", next_namespace());
        // Made here, as dlock makes it on first use: a scenario's first run then costs what any
        // run costs, not a change of the cluster's state on a loaded node.
        let settings = r#"{"settings": {"number_of_shards": 1, "auto_expand_replicas": "0-1"},
            "mappings": {"dynamic": false, "properties": {"name": {"type": "keyword"}}}}"#;
        let (status, json) = node.json("PUT", &format!("/{index}"), Some(settings));
        assert_eq!(status, 200, "make index {index}: {json}");
        Target {
            args: backend_at(
                "elasticsearch",
                format!("elasticsearch://127.0.0.1:{}/{index}", node.port()),
            ),
            store: &STORE,
            ports: vec![node.port()],
            servers: vec![],
            scratch: LockDir::new(),
        }
    }

    /// dlock on a private OpenSearch node, in its default index, for faults.
    pub fn elasticsearch_backend() -> Target {
        let node = OpenSearchServer::start();
        Target::on_private_sql(&STORE, node.port(), node)
    }
}
