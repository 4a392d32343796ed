//! Hostile input on every backend: holder records that other clients forged (out of range, with
//! control characters), output into a closed pipe, and names outside the Basic Multilingual
//! Plane. dlock must never panic, never admit anyone on a record it cannot read, and never let a
//! terminal escape through.

use std::os::unix::fs::FileExt;
use std::process::Stdio;

use super::{Holding, T};
use crate::support::caps::ForeignHolder;
use crate::support::target::Target;
use crate::support::*;

/// A holder record with a time humantime cannot print (past the year 9999).
const FAR_FUTURE: &str = "exclusive 5 99999999999999 2 host";

/// `status`, `status --json`, `list`, `list --json`, `run -n` and `release --force` on a lock whose
/// only holder's record is forged: each exits as it would for any holder (held, listed, busy,
/// released) and shows the record as unreadable, `shown` being what it shows of it.
fn shows_unreadable(t: &Target, name: &str, shown: &str) {
    let out = output(t.dlock(&["status", name]));
    assert_eq!(code(&out), 0, "status: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("(unreadable record \"{shown}\")")),
        "{text}"
    );

    let out = output(t.dlock(&["status", "--json", name]));
    assert_eq!(code(&out), 0, "status --json: {}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    let holder = &json["holders"][0];
    assert_eq!(holder["unreadable"], shown, "{json}");
    assert_eq!(holder["mode"], "exclusive", "{json}");
    for unknown in ["since", "token", "pid", "host"] {
        assert!(holder[unknown].is_null(), "{unknown} in {json}");
    }

    let out = output(t.dlock(&["list"]));
    assert_eq!(code(&out), 0, "list: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{name}\texclusive (unreadable record")),
        "{}",
        stdout(&out)
    );

    let out = output(t.dlock(&["list", "--json"]));
    assert_eq!(code(&out), 0, "list --json: {}", stderr(&out));
    let all: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("list JSON");
    assert_eq!(all[0]["name"], name, "{all}");
    assert_eq!(all[0]["holders"][0]["unreadable"], shown, "{all}");

    // Never admitted on a record it cannot read: busy.
    let out = output(t.dlock(&["run", "-n", name, "--", "true"]));
    assert_eq!(code(&out), 75, "run -n: {}", stderr(&out));
    assert!(
        stderr(&out).contains("unreadable record"),
        "{}",
        stderr(&out)
    );

    let out = output(t.dlock(&["release", "--force", name]));
    assert_eq!(code(&out), 0, "release --force: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("released {name}\texclusive (unreadable record")),
        "{}",
        stdout(&out)
    );
    let out = output(t.dlock(&["status", name]));
    assert_eq!(code(&out), 1, "released: {}", stdout(&out));
}

/// Forges the only holder record of the lock "x" where each backend keeps it, as anyone who can
/// write there could; returns what dlock shows of it, and the holder the file backend needs.
fn forge_record_of_x(t: &Target) -> (String, Option<Holding>) {
    // A terminal escape in the file backend's host for good measure.
    let data =
        r#"{"dlock":1,"mode":"exclusive","host":"h","pid":2,"owner":"ab","since":99999999999999}"#;
    let (record, shown) = match t.caps().foreign_holder {
        ForeignHolder::LockFileSlot => (
            format!("{FAR_FUTURE}\u{1b}[2J"),
            format!("{FAR_FUTURE}\\u{{1b}}[2J"),
        ),
        ForeignHolder::RedisHash => (FAR_FUTURE.to_owned(), FAR_FUTURE.to_owned()),
        ForeignHolder::ZkNode => (String::new(), data.to_owned()),
        // A row's columns, shown space-separated (its `since` past what a timestamptz holds).
        ForeignHolder::PostgresRow => (
            "exclusive 5 999999999999 2 host".to_owned(),
            "exclusive 5 999999999999 2 host".to_owned(),
        ),
        ForeignHolder::EtcdKey => (FAR_FUTURE.to_owned(), FAR_FUTURE.to_owned()),
        // An entry of the lock's document, as dlock reads it back (its `since` in milliseconds
        // past the year 9999).
        ForeignHolder::EsDocument => (FAR_FUTURE.to_owned(), es_entry(FAR_FUTURE).to_string()),
        // A DATETIME cannot be past the year 9999: a row's columns with a pid below zero instead.
        ForeignHolder::MysqlRow => {
            let record = "exclusive 5 1700000000 -2 host";
            (record.to_owned(), record.to_owned())
        }
    };
    (shown, forge_x(t, &record, data))
}

/// Writes `record` (file, Redis: `MODE TOKEN SINCE PID HOST[\tMESSAGE]`) or `zk_data` (a node's
/// JSON) as the only holder of "x" owned by `ab`; returns the holder the file backend needs.
fn forge_x(t: &Target, record: &str, zk_data: &str) -> Option<Holding> {
    match t.caps().foreign_holder {
        ForeignHolder::LockFileSlot => {
            // Overwrites a live holder's record slot (it keeps its OFD lock on it).
            let holder = Holding::start(t, &["--ttl", "3s", "x"]);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(std::path::Path::new(t.urls()[0]).join("x.lock"))
                .unwrap();
            let mut slot = format!("dlock1 ab {record}\n").into_bytes();
            slot.resize(512, 0);
            file.write_all_at(&slot, 4096).unwrap();
            Some(holder)
        }
        ForeignHolder::RedisHash => {
            // On every server, so that Redlock's majority sees it too (in a cluster, on the node
            // that serves the lock: the others answer MOVED).
            let clustered = t.urls()[0].starts_with("redis+cluster://");
            for url in t.redis_urls() {
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
            None
        }
        ForeignHolder::ZkNode => {
            let url = t.urls()[0].strip_prefix("zk://").expect("a zk:// URL");
            // `zk://HOSTS/CHROOT`: the chroot with its leading `/`, or nothing.
            let (hosts, chroot) = url.find('/').map_or((url, ""), |at| url.split_at(at));
            let node = format!("{chroot}/dlock/x/_c_forged-lock-0000000000");
            zk_server::create_with_parents(hosts, &node, zk_data.as_bytes());
            None
        }
        ForeignHolder::PostgresRow => {
            // A row in the target's own table (`?prefix=P`), as any client with INSERT could
            // write, once dlock has made its tables (on first use: `status` makes them). Its
            // `since` is past the year 9999, as FAR_FUTURE's is (whose own is past what a
            // timestamptz holds); dlock shows the row's fields, space-separated.
            assert_eq!(code(&output(t.dlock(&["status", "x"]))), 1, "x starts free");
            let url = t.urls()[0];
            let prefix = url.rsplit("prefix=").next().expect("a prefix in the URL");
            // A message goes in its own column, as dlock writes it.
            let (fields, message) = match record.split_once('\t') {
                Some((fields, message)) => (fields, format!("'{message}'")),
                None => (record, "NULL".to_owned()),
            };
            let since = fields.split(' ').nth(2).expect("a since field");
            crate::support::pg_server::PgServer::use_shared().psql(&format!(
                "INSERT INTO {prefix}locks (name, owner, mode, token, since, expires_at, pid, \
                     host, message) VALUES ('x', 'ab', 'exclusive', 5, \
                     to_timestamp({since}), now() + interval '1 hour', 2, 'host', {message})"
            ));
            None
        }
        ForeignHolder::MysqlRow => {
            // A row in the target's own table (`?prefix=P`), as any client with INSERT could
            // write, once dlock has made its tables (on first use: `status` makes them): the
            // record's fields as columns, the message after the tab.
            assert_eq!(code(&output(t.dlock(&["status", "x"]))), 1, "x starts free");
            let url = t.urls()[0];
            let prefix = url.rsplit("prefix=").next().expect("a prefix in the URL");
            let (fields, message) = record.split_once('\t').unwrap_or((record, ""));
            let f: Vec<&str> = fields.split(' ').collect();
            let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
            let message = if message.is_empty() {
                "NULL".to_owned()
            } else {
                format!("UNHEX('{}')", hex(message))
            };
            crate::support::mysql_server::MyServer::shared()
                .lock()
                .unwrap()
                .sql(&format!(
                    "REPLACE INTO {prefix}locks (name, owner, mode, token, since, expires_at, \
                     pid, host, message) VALUES ('x', 'ab', '{}', {}, \
                     '1970-01-01' + INTERVAL {} SECOND, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, {}, \
                     '{}', {message})",
                    f[0], f[1], f[2], f[3], f[4]
                ));
            None
        }
        ForeignHolder::EsDocument => {
            // The lock's document, as any client that can write the index could put it.
            let index = t.urls()[0].rsplit('/').next().expect("an index in the URL");
            let doc = serde_json::json!({
                "dlock": 1, "name": "x", "token": 5, "holders": [es_entry(record)], "waiters": [],
            });
            let node = crate::support::opensearch_server::OpenSearchServer::shared();
            let (status, json) = node.json(
                "PUT",
                &format!("/{index}/_doc/x?refresh=true"),
                Some(&doc.to_string()),
            );
            assert!(status == 200 || status == 201, "{json}");
            None
        }
        ForeignHolder::EtcdKey => {
            // A key under the lock's prefix, without a lease, as any etcd client could put: a
            // value of `OWNER RECORD`, the owner first as dlock writes it.
            let endpoint = t.urls()[0].replace("etcd://", "http://");
            let out = program("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &endpoint, "put", "/dlock/x/ab"])
                .arg(format!("ab {record}"))
                .output()
                .expect("etcdctl put");
            assert!(out.status.success(), "etcdctl put: {}", stderr(&out));
            None
        }
    }
}

/// The holder entry of an Elasticsearch lock document for `record` (`MODE TOKEN SINCE PID
/// HOST[\tMESSAGE]`), owned by `ab`, its lease far away; its `since` in milliseconds.
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

pub fn a_forged_record_is_unreadable_and_the_lock_stays_busy(t: &Target) {
    let (shown, holder) = forge_record_of_x(t);
    shows_unreadable(t, "x", &shown);
    if let Some(holder) = holder {
        // Its lock was broken: whatever it exits with, it is gone.
        holder.let_go();
    }
}

/// A message no dlock writes (a terminal escape in it, or over the limit) makes its record
/// unreadable: shown escaped, never raw, and the lock stays busy.
pub fn a_forged_message_is_unreadable_and_never_reaches_a_terminal(t: &Target) {
    let long = "m".repeat(300);
    for message in ["deploy \u{1b}]0;owned\u{7}", long.as_str()] {
        let record = format!("exclusive 5 1700000000 2 host\t{message}");
        let data = serde_json::json!({
            "dlock": 1, "mode": "exclusive", "host": "h", "pid": 2, "owner": "ab",
            "since": 1_700_000_000, "message": message,
        })
        .to_string();
        let holder = forge_x(t, &record, &data);
        let entry = es_entry(&record).to_string();
        let raw = match t.caps().foreign_holder {
            ForeignHolder::ZkNode => &data,
            ForeignHolder::EsDocument => &entry,
            ForeignHolder::LockFileSlot
            | ForeignHolder::RedisHash
            | ForeignHolder::PostgresRow
            | ForeignHolder::MysqlRow
            | ForeignHolder::EtcdKey => &record,
        };
        // Escaped as dlock shows stored text: quotes and backslashes as they are.
        let mut shown = String::new();
        for c in raw.chars().take(120) {
            match c {
                '"' | '\'' | '\\' => shown.push(c),
                _ => shown.extend(c.escape_debug()),
            }
        }
        if raw.chars().count() > 120 {
            shown.push_str("...");
        }
        shows_unreadable(t, "x", &shown);
        if let Some(holder) = holder {
            holder.let_go();
        }
    }
}

/// Standard output (or error) whose reader has gone before dlock writes.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer
}

pub fn output_into_a_closed_pipe_ends_quietly_with_the_usual_status(t: &Target) {
    let quiet = |args: &[&str]| {
        let mut cmd = t.dlock(args);
        cmd.stdout(closed_pipe());
        output(cmd)
    };
    let out = quiet(&["status", "x"]);
    assert_eq!((code(&out), stderr(&out)), (1, String::new()), "free");
    let holder = Holding::start(t, &["--ttl", "3s", "x"]);
    for (args, status) in [
        (&["status", "x"][..], 0),
        (&["status", "--json", "x"], 0),
        (&["list"], 0),
        (&["list", "--json"], 0),
    ] {
        let out = quiet(args);
        assert_eq!(
            (code(&out), stderr(&out)),
            (status, String::new()),
            "{args:?}"
        );
    }
    // And a message into a closed stderr: lost, but the status stands.
    let mut busy = t.dlock(&["run", "-n", "x", "--", "true"]);
    busy.stderr(closed_pipe());
    assert_eq!(code(&output(busy)), 75);
    holder.let_go();
}

pub fn names_outside_the_basic_multilingual_plane_work(t: &Target) {
    for name in ["😀", "a/𝄞/b", "\u{10ffff}"] {
        let out = output(t.dlock(&["run", name, "--", "true"]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let mut holder = t
            .dlock(&["run", name, "--", "sleep", "30"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut listed = String::new();
        wait_until(&format!("{name} listed"), T, || {
            listed = stdout(&output(t.dlock(&["list"])));
            listed.contains(&format!("{name}\t"))
        });
        let out = output(t.dlock(&["release", "--force", name]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let _ = holder.kill();
        let _ = holder.wait();
    }
}
