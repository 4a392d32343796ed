//! The OpenSearch node the tests start (server.rs), ahead of a backend on it:
//! what such a backend would build on answers as expected. A document is created once (`_create`
//! a second time is a conflict, 409), a Painless script reads the node's clock (`ctx._now`), and a
//! node of a test's own survives a SIGSTOP and a restart with what it acknowledged. Each test
//! prints what it measured (the node's start, the clock's lag) for `--nocapture`.
//!
//! Beside them, what the rest of the suite uses of the elasticsearch backend: the node (server.rs,
//! its launcher in node/) and the backend's description and targets (store.rs).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

// What the rest of the suite uses of this store, in every build.
pub mod server;
pub mod store;

#[cfg(feature = "elasticsearch")]
mod backend;
#[cfg(feature = "elasticsearch")]
mod secure;

use crate::opensearch::server::OpenSearchServer;

/// An index of one shard and no replica: a single node holds all of it, and its cluster stays
/// green.
fn create_index(node: &OpenSearchServer, index: &str) {
    let settings = r#"{"settings": {"number_of_shards": 1, "number_of_replicas": 0}}"#;
    let (status, json) = node.json("PUT", &format!("/{index}"), Some(settings));
    assert_eq!(status, 200, "create index {index}: {json}");
}

fn wall_clock_ms() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(now.as_millis()).expect("milliseconds since 1970 fit in an i64")
}

#[test]
fn a_document_is_created_once_the_second_create_is_a_conflict() {
    let node = OpenSearchServer::shared();
    create_index(node, "create-once");
    let path = "/create-once/_create/lock-a?refresh=true";
    let (status, json) = node.json("PUT", path, Some(r#"{"owner": "first"}"#));
    assert_eq!(status, 201, "{json}");
    assert_eq!(json["result"], "created", "{json}");

    let (status, json) = node.json("PUT", path, Some(r#"{"owner": "second"}"#));
    assert_eq!(status, 409, "{json}");
    assert_eq!(
        json["error"]["type"], "version_conflict_engine_exception",
        "{json}"
    );
    let (status, json) = node.json("GET", "/create-once/_doc/lock-a", None);
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["_source"]["owner"], "first", "{json}");
}

/// A scripted update sees the node's wall clock as `ctx._now`, in milliseconds since 1970: the
/// thread pool's cached time (`ThreadPool::absoluteTimeInMillis`, refreshed every
/// `thread_pool.estimated_time_interval`, 200 ms by default), so at most a little behind the time
/// of the request, never after its answer.
#[test]
fn a_painless_update_reads_the_node_s_clock() {
    let node = OpenSearchServer::shared();
    create_index(node, "clock");
    let (status, json) = node.json("PUT", "/clock/_create/lock-a", Some(r#"{"n": 0}"#));
    assert_eq!(status, 201, "{json}");
    let script = r#"{"script": {"lang": "painless",
        "source": "ctx._source.now = ctx._now; ctx._source.n += 1"}}"#;
    let mut lags = Vec::new();
    for n in 1..=10 {
        let before = wall_clock_ms();
        let (status, json) = node.json("POST", "/clock/_update/lock-a", Some(script));
        let after = wall_clock_ms();
        assert_eq!(status, 200, "{json}");
        let (status, json) = node.json("GET", "/clock/_doc/lock-a", None);
        assert_eq!(status, 200, "{json}");
        assert_eq!(json["_source"]["n"], n, "{json}");
        let now = json["_source"]["now"]
            .as_i64()
            .unwrap_or_else(|| panic!("ctx._now is a number of milliseconds: {json}"));
        assert!(
            now <= after && now > before - 5_000,
            "ctx._now {now} is not the node's clock between {before} and {after}"
        );
        lags.push(before - now);
    }
    lags.sort_unstable();
    println!(
        "ctx._now behind the request's start: {:?} ms (min, median, max of 10)",
        (lags[0], lags[5], lags[9])
    );
}

/// A node of the test's own: its start to a green cluster, a SIGSTOP during which it answers
/// nothing, and a restart after SIGKILL on the same port and data, which keeps a document it
/// acknowledged.
#[test]
fn a_private_node_survives_a_pause_and_a_restart() {
    let mut node = OpenSearchServer::start();
    let first_start = node.started_in();
    create_index(&node, "kept");
    let (status, json) = node.json("PUT", "/kept/_create/lock-a", Some(r#"{"owner": "x"}"#));
    assert_eq!(status, 201, "{json}");

    node.pause();
    let paused = std::thread::spawn({
        let port = node.port();
        move || {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
            stream.set_read_timeout(Some(Duration::from_secs(1)))?;
            std::io::Write::write_all(&mut stream, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")?;
            std::io::Read::read(&mut stream, &mut [0; 64])
        }
    })
    .join()
    .expect("the paused request's thread");
    let timed_out = paused.as_ref().is_err_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    });
    node.resume();
    assert!(timed_out, "a stopped node answered: {paused:?}");
    let (status, json) = node.json("GET", "/", None);
    assert_eq!(status, 200, "{json}");

    node.restart_keeping_data();
    let (status, json) = node.json("GET", "/kept/_doc/lock-a", None);
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["_source"]["owner"], "x", "{json}");
    let (status, json) = node.json("PUT", "/kept/_create/lock-a", Some(r#"{"owner": "y"}"#));
    assert_eq!(status, 409, "{json}");
    println!(
        "OpenSearch node green after {first_start:?}, after a restart {:?}; RSS {} kB",
        node.started_in(),
        rss_kb(node.pid())
    );
}

/// The resident memory of `pid` (VmRSS in /proc/PID/status), 0 if unknown.
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}
