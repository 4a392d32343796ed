//! The elasticsearch backend's own mechanism on a real node: the plain `_create` idiom and the
//! `process_id` document lock each exclude dlock, and dlock them, on the same index and id; and a
//! node restart is an outage (the holder past its lease exits 79, a waiter waits and then gets
//! the lock with a larger token).

use crate::contract::{waiting, Holding, T};
use crate::opensearch::server::OpenSearchServer;
use crate::opensearch::store::STORE;
use crate::support::target::Target;
use crate::support::*;

/// The index in `t`'s URL.
fn index_of(t: &Target) -> String {
    t.urls()[0].rsplit('/').next().expect("an index").to_owned()
}

#[test]
fn the_plain_create_idiom_and_dlock_exclude_each_other() {
    let t = Target::suite_elasticsearch();
    let node = OpenSearchServer::shared();
    let index = index_of(&t);
    let create = format!("/{index}/_create/deploy");
    // The idiom first: dlock finds a holder it cannot read, and is busy.
    let (status, json) = node.json("PUT", &create, Some(r#"{"owner": "cron"}"#));
    assert_eq!(status, 201, "{json}");
    let out = output(t.dlock(&["run", "-n", "deploy", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unreadable record"),
        "{}",
        stderr(&out)
    );
    // The idiom's DELETE lets dlock in.
    let (status, json) = node.json("DELETE", &format!("/{index}/_doc/deploy"), None);
    assert_eq!(status, 200, "{json}");
    let holder = Holding::start(&t, &["deploy"]);
    // While dlock holds it, and after, the idiom's `_create` is refused.
    let (status, json) = node.json("PUT", &create, Some(r#"{"owner": "cron"}"#));
    assert_eq!(status, 409, "held: {json}");
    assert!(holder.let_go().success());
    let (status, json) = node.json("PUT", &create, Some(r#"{"owner": "cron"}"#));
    assert_eq!(status, 409, "released: {json}");
    // And the lock's tokens go on.
    let out = output(t.dlock(&["run", "deploy", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(
        (code(&out), stdout(&out).trim()),
        (0, "2"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_node_restart_is_an_outage_a_holder_past_its_lease_exits_79_and_a_waiter_waits() {
    let mut node = OpenSearchServer::start();
    let ports = vec![node.port()];
    let t = Target {
        args: (STORE.args)(&ports),
        store: &STORE,
        ports,
        servers: vec![],
        scratch: LockDir::new(),
    };
    let holder = Holding::start(&t, &["--ttl", "3s", "job"]);
    let first = holder.token();
    let mut waiter = waiting(&t, &["run", "-w", "600", "job", "--", "true"]);
    node.kill();
    let (status, err) = holder.finish();
    assert_eq!(status.code(), Some(79), "{err}");
    assert!(err.contains("lost the lock"), "{err}");
    waiter.wait_for("still waiting for lock", T);
    node.restart_keeping_data();
    let (status, said) = waiter.finish(T);
    assert_eq!(status, 0, "{said}");
    // `-v`: `acquired "job" after 24s with token 2`.
    let token: u64 = said
        .lines()
        .find_map(|l| l.split(" with token ").nth(1))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no token: {said}"));
    assert!(token > first, "token {token} after {first}: {said}");
}

/// The seeds' document lock (the Definitive Guide's): an update whose script refuses a document
/// of another `process_id`, with an upsert that makes it for this one. It and dlock exclude each
/// other on the same id.
#[test]
fn the_process_id_document_lock_and_dlock_exclude_each_other() {
    let t = Target::suite_elasticsearch();
    let node = OpenSearchServer::shared();
    let index = index_of(&t);
    let path = format!("/{index}/_update/doc-1");
    let lock = |process_id: u32| {
        let body = serde_json::json!({
            "script": {
                "source": "if (ctx._source.process_id != params.process_id) { \
                           throw new IllegalArgumentException('locked by another process'); } \
                           ctx.op = 'none';",
                "params": {"process_id": process_id},
            },
            "upsert": {"process_id": process_id},
        });
        node.json("POST", &path, Some(&body.to_string())).0
    };
    assert!(matches!(lock(123), 200 | 201), "the seed's lock is free");
    let out = output(t.dlock(&["run", "-n", "doc-1", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let (status, json) = node.json("DELETE", &format!("/{index}/_doc/doc-1"), None);
    assert_eq!(status, 200, "{json}");
    let holder = Holding::start(&t, &["doc-1"]);
    let refused = lock(123);
    assert!(
        refused >= 400,
        "the seed locked a document dlock holds: {refused}"
    );
    assert!(holder.let_go().success());
}
