//! What the ensemble keeps of a lock's runs: the last run and the last success, one record node
//! each under `/dlock/.last-run/` and `/dlock/.last-success/`, read raw with kazoo and checked
//! against the record's text form and the node's mtime.

use crate::support::run_records::{now_ms, RunRecord};

use super::*;

/// A record node as kazoo reads it.
#[derive(Debug)]
struct Node {
    data: String,
    mtime: u64,
}

/// Reads the paths with kazoo (Debian's python3-kazoo), a client that is not dlock's.
fn kazoo_read(server: &ZkServer, paths: &[String]) -> Vec<Option<Node>> {
    let script = r#"
import json, logging, sys
logging.disable(logging.CRITICAL)
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1], timeout=10)
client.start(timeout=30)
out = []
for path in sys.argv[2:]:
    if client.exists(path) is None:
        out.append(None)
    else:
        data, stat = client.get(path)
        out.append({"data": data.decode("utf-8", "replace"), "mtime": stat.mtime})
client.stop()
print(json.dumps(out))
"#;
    let out = program("/usr/bin/python3")
        .args(["-c", script, &server.hosts()])
        .args(paths)
        .output()
        .expect("python3 with kazoo (run scripts/test)");
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json.as_array()
        .expect("a list")
        .iter()
        .map(|node| {
            Some(Node {
                data: node.get("data")?.as_str()?.to_owned(),
                mtime: node.get("mtime")?.as_u64()?,
            })
        })
        .collect()
}

/// The last-run and last-success nodes of the lock whose node is `node`.
fn records(server: &ZkServer, node: &str) -> (Option<Node>, Option<Node>) {
    let mut read = kazoo_read(
        server,
        &[
            format!("/dlock/.last-run/{node}"),
            format!("/dlock/.last-success/{node}"),
        ],
    )
    .into_iter();
    (read.next().flatten(), read.next().flatten())
}

fn last_run(server: &ZkServer, node: &str) -> RunRecord {
    let node = records(server, node).0.expect("a last-run node");
    RunRecord::parse(&node.data)
}

/// Creates `path` as mallory, with an ACL that lets everyone read it and nobody else write it
/// (kazoo).
fn create_walled(server: &ZkServer, path: &str, data: &str) {
    let script = r#"
import logging, sys
logging.disable(logging.CRITICAL)
from kazoo.client import KazooClient
from kazoo.security import make_acl, make_digest_acl
client = KazooClient(hosts=sys.argv[1], timeout=10, auth_data=[("digest", "mallory:pw")])
client.start(timeout=30)
acl = [make_digest_acl("mallory", "pw", all=True), make_acl("world", "anyone", read=True)]
client.create(sys.argv[2], sys.argv[3].encode(), acl=acl, makepath=True)
client.stop()
"#;
    let out = program("/usr/bin/python3")
        .args(["-c", script, &server.hosts(), path, data])
        .output()
        .expect("python3 with kazoo");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `dlock run FLAGS NAME -- sh -c 'echo $DLOCK_TOKEN $PPID > TAG.in; SCRIPT'`: its exit code, its
/// token and dlock's pid (the shell's parent).
fn run_noting(
    server: &ZkServer,
    dir: &LockDir,
    flags: &[&str],
    name: &str,
    tag: &str,
    script: &str,
) -> (i32, u64, u32) {
    let noted = dir.file(&format!("{tag}.in"));
    let script = format!("echo $DLOCK_TOKEN $PPID > {}; {script}", noted.display());
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let out = output(server.dlock(&args));
    let text = std::fs::read_to_string(&noted).expect("the command ran");
    let mut words = text.split_whitespace();
    let token = words.next().and_then(|w| w.parse().ok()).expect("a token");
    let pid = words.next().and_then(|w| w.parse().ok()).expect("a pid");
    (code(&out), token, pid)
}

#[test]
fn runs_are_recorded_as_their_commands_ended_with_the_ensembles_time() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let before = now_ms();
    let flags = ["--message", "nightly job"];
    let (exit, token, pid) = run_noting(&server, &dir, &flags, "ends", "a", "exit 3");
    assert_eq!(exit, 3);
    let (run, success) = records(&server, "ends");
    let run = run.expect("a last run");
    let rec = RunRecord::parse(&run.data);
    assert_eq!((rec.token, rec.pid), (token, pid), "{rec:?}");
    assert_eq!(rec.ending.as_deref(), Some("exit:3"));
    assert_eq!(rec.message.as_deref(), Some("nightly job"));
    // The end is the ensemble's time (the node's mtime), by dlock's reckoning from its own node's.
    let ended = rec.ended_ms.expect("ended");
    assert!(
        ended.abs_diff(run.mtime) < 2000,
        "{ended} vs mtime {}",
        run.mtime
    );
    assert!(rec.acquired_ms + 2000 >= before, "{rec:?}");
    // No success yet: its node is there, empty, for the release to write into.
    assert_eq!(success.map(|s| s.data), Some(String::new()));

    let (exit, token, _) = run_noting(&server, &dir, &[], "ends", "b", "true");
    assert_eq!(exit, 0);
    let (run, success) = records(&server, "ends");
    let (run, success) = (run.unwrap().data, success.unwrap().data);
    let rec = RunRecord::parse(&run);
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("exit:0")));
    assert_eq!(rec.message, None);
    assert_eq!(success, run, "a success is the last success too");

    let (exit, token, _) = run_noting(&server, &dir, &[], "ends", "c", "kill -TERM $$");
    assert_eq!(exit, 128 + libc::SIGTERM);
    let rec = last_run(&server, "ends");
    assert_eq!(
        (rec.token, rec.ending.as_deref()),
        (token, Some("signal:15"))
    );
    let (_, success) = records(&server, "ends");
    assert_eq!(success.unwrap().data, run, "the last success stays");
}

#[test]
fn a_lost_lock_and_a_forced_one_are_recorded_so_and_forced_stays_forced() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    // Lost: its node deleted by another client (not dlock, which would say forced).
    let mut holder = start_holder(&server, &dir, &[], "lost", "l");
    let token = token_of(&dir, "l");
    let err = Stderr::of(&mut holder);
    let node = lock_nodes(&server, "lost")
        .pop()
        .expect("the holder's node");
    server
        .delete_as(None, &format!("/dlock/lost/{node}"))
        .expect("delete the holder's node");
    assert_eq!(wait_exit(&mut holder, T).code(), Some(79), "{}", err.text());
    let rec = last_run(&server, "lost");
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("lost")));
    let (_, success) = records(&server, "lost");
    assert_eq!(success.map(|s| s.data), Some(String::new()));

    // Forced, and its holder's own release (which finds the lock lost) leaves it forced.
    let mut holder = start_holder(&server, &dir, &[], "forced", "f");
    let token = token_of(&dir, "f");
    let out = output(server.dlock(&["release", "--force", "forced"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = Stderr::of(&mut holder);
    let rec = last_run(&server, "forced");
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("forced")));
    assert_eq!(wait_exit(&mut holder, T).code(), Some(79), "{}", err.text());
    let rec = last_run(&server, "forced");
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("forced")));
}

#[test]
fn a_holder_killed_with_sigkill_leaves_its_run_never_ended_until_the_next() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &["--ttl", "2s"], "killed", "k");
    let token = token_of(&dir, "k");
    signal(holder.id(), libc::SIGKILL);
    wait_exit(&mut holder, T);
    let rec = last_run(&server, "killed");
    assert_eq!((rec.token, rec.pid), (token, holder.id()));
    assert_eq!((rec.ended_ms, rec.ending), (None, None), "never ended");
    // The next run, once the session has expired, is the last run.
    let (exit, next, _) = run_noting(&server, &dir, &["-w", "30"], "killed", "n", "true");
    assert_eq!(exit, 0);
    let rec = last_run(&server, "killed");
    assert!(next > token);
    assert_eq!((rec.token, rec.ending.as_deref()), (next, Some("exit:0")));
}

#[test]
fn an_earlier_shared_holders_release_leaves_the_later_run_alone() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut a = start_holder(&server, &dir, &["--shared"], "readers", "a");
    let mut b = start_holder(&server, &dir, &["--shared"], "readers", "b");
    let (ta, tb) = (token_of(&dir, "a"), token_of(&dir, "b"));
    let_go(&dir, "a");
    assert!(wait_exit(&mut a, T).success());
    let (run, success) = records(&server, "readers");
    let run = RunRecord::parse(&run.unwrap().data);
    assert_eq!((run.token, run.ending), (tb, None), "b's run, not ended");
    let success = RunRecord::parse(&success.unwrap().data);
    assert_eq!(
        (success.token, success.ending.as_deref()),
        (ta, Some("exit:0"))
    );
    let_go(&dir, "b");
    assert!(wait_exit(&mut b, T).success());
    let rec = last_run(&server, "readers");
    assert_eq!((rec.token, rec.ending.as_deref()), (tb, Some("exit:0")));
}

#[test]
fn garbage_or_a_walled_node_in_a_records_place_never_stops_a_run() {
    let server = on_the_suites_server();
    server.create_with_parents("/dlock/.last-run/junk", b"\x1b[2Jrun1 x y");
    server.create_with_parents("/dlock/.last-success/junk", b"\xff\xfe");
    let out = output(server.dlock(&["run", "junk", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (run, success) = records(&server, "junk");
    let run = RunRecord::parse(&run.unwrap().data);
    assert_eq!(run.ending.as_deref(), Some("exit:0"));
    assert_eq!(RunRecord::parse(&success.unwrap().data), run);

    // Nodes dlock may not write: the runs go on without records.
    create_walled(&server, "/dlock/.last-run/walled", "mallory's");
    create_walled(&server, "/dlock/.last-success/walled", "mallory's");
    for _ in 0..2 {
        let out = output(server.dlock(&["run", "-n", "walled", "--", "true"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let (run, success) = records(&server, "walled");
    assert_eq!(run.unwrap().data, "mallory's");
    assert_eq!(success.unwrap().data, "mallory's");
    let out = output(server.dlock(&["list"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "nothing held, and records are no locks");
}

#[test]
fn a_min_hold_gives_the_lock_up_at_once_when_no_command_ran() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &[], "second", "h");
    // The first name is taken, the second is busy: the first is given back before any command,
    // and its min-hold does not keep it.
    let out = output(server.dlock(&[
        "run",
        "-n",
        "--min-hold",
        "60s",
        "first",
        "second",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = output(server.dlock(&["run", "-n", "first", "--", "true"]));
    assert_eq!(code(&out), 0, "first is free: {}", stderr(&out));
    let_go(&dir, "h");
    assert!(wait_exit(&mut holder, T).success());
    // With a command run, the min-hold keeps the lock as before.
    let out = output(server.dlock(&["run", "--min-hold", "60s", "first", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(server.dlock(&["run", "-n", "first", "--", "true"]));
    assert_eq!(code(&out), 75, "kept: {}", stderr(&out));
}
