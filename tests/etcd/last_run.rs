//! What etcd keeps of a lock's runs: the last run and the last success, one key each beside the
//! lock's prefix (`/dlock/NAME:last-run`, `/dlock/NAME:last-success`), read raw with etcdctl and
//! checked against the record's text form.

use crate::support::run_records::{now_ms, RunRecord};

use super::*;

/// A record key as etcdctl reads it: its value and mod revision.
#[derive(Debug)]
struct Raw {
    value: String,
    mod_revision: u64,
}

fn raw(server: &EtcdServer, key: &str) -> Option<Raw> {
    let out = server
        .etcdctl(&["get", key, "-w", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mod_revision = json["kvs"][0]["mod_revision"].as_u64()?;
    let out = server
        .etcdctl(&["get", key, "--print-value-only"])
        .output()
        .unwrap();
    let value = stdout(&out);
    let value = value.strip_suffix('\n').unwrap_or(&value).to_owned();
    Some(Raw {
        value,
        mod_revision,
    })
}

/// The last-run and last-success keys of the lock `name` (no escapes needed).
fn records(server: &EtcdServer, name: &str) -> (Option<Raw>, Option<Raw>) {
    (
        raw(server, &format!("/dlock/{name}:last-run")),
        raw(server, &format!("/dlock/{name}:last-success")),
    )
}

fn last_run(server: &EtcdServer, name: &str) -> RunRecord {
    RunRecord::parse(&records(server, name).0.expect("a last run").value)
}

/// `dlock run FLAGS NAME -- sh -c 'echo $DLOCK_TOKEN $PPID > TAG.in; SCRIPT'`: its exit code, its
/// token and dlock's pid (the shell's parent).
fn run_noting(
    server: &EtcdServer,
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
    let out = output(on(server, &args));
    let text = std::fs::read_to_string(&noted).expect("the command ran");
    let mut words = text.split_whitespace();
    let token = words.next().and_then(|w| w.parse().ok()).expect("a token");
    let pid = words.next().and_then(|w| w.parse().ok()).expect("a pid");
    (code(&out), token, pid)
}

#[test]
fn runs_are_recorded_as_their_commands_ended() {
    let server = shared();
    let dir = LockDir::new();
    let before = now_ms();
    let flags = ["--message", "nightly job"];
    let (exit, token, pid) = run_noting(server, &dir, &flags, "lr-ends", "a", "exit 3");
    assert_eq!(exit, 3);
    let (run, success) = records(server, "lr-ends");
    let rec = RunRecord::parse(&run.expect("a last run").value);
    assert_eq!((rec.token, rec.pid), (token, pid), "{rec:?}");
    assert_eq!(rec.ending.as_deref(), Some("exit:3"));
    assert_eq!(rec.message.as_deref(), Some("nightly job"));
    // etcd tells no time: the host's clock.
    assert!(
        rec.acquired_ms >= before && rec.ended_ms.unwrap() <= now_ms(),
        "{rec:?}"
    );
    assert!(success.is_none(), "no success yet");

    let (exit, token, _) = run_noting(server, &dir, &[], "lr-ends", "b", "true");
    assert_eq!(exit, 0);
    let (run, success) = records(server, "lr-ends");
    let (run, success) = (run.unwrap().value, success.unwrap().value);
    let rec = RunRecord::parse(&run);
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("exit:0")));
    assert_eq!(success, run, "a success is the last success too");

    let (exit, token, _) = run_noting(server, &dir, &[], "lr-ends", "c", "kill -TERM $$");
    assert_eq!(exit, 128 + libc::SIGTERM);
    let rec = last_run(server, "lr-ends");
    assert_eq!(
        (rec.token, rec.ending.as_deref()),
        (token, Some("signal:15"))
    );
    let (_, success) = records(server, "lr-ends");
    assert_eq!(success.unwrap().value, run, "the last success stays");
}

/// An uncontended exclusive acquisition writes its run in the transaction that makes its key:
/// the record key's mod revision is the token, which the record says as 0 until the run ends.
#[test]
fn an_exclusive_run_that_owns_at_once_is_recorded_in_its_own_transaction() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &[], "lr-once", "h");
    let token = token_of(&dir, "h");
    let running = records(server, "lr-once").0.expect("a last run");
    let rec = RunRecord::parse(&running.value);
    assert_eq!((rec.token, running.mod_revision), (0, token), "{rec:?}");
    assert_eq!((rec.ended_ms, rec.pid), (None, holder.id()));
    let_go(&dir, "h");
    assert_eq!(exit_code(&mut holder), 0);
    let rec = last_run(server, "lr-once");
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("exit:0")));
    // The records are no lock's keys: etcdctl takes the lock at once.
    let out = output(server.lock("/dlock/lr-once", &["true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(server.keys("/dlock/lr-once/"), 0);
}

#[test]
fn a_lost_lock_and_a_forced_one_are_recorded_so_and_forced_stays_forced() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &["--ttl", "3s"], "lr-lost", "l");
    let token = token_of(&dir, "l");
    let out = server
        .etcdctl(&["lease", "revoke", &lease_of(server, "lr-lost")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(exit_code(&mut holder), 79);
    let rec = last_run(server, "lr-lost");
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("lost")));
    assert!(records(server, "lr-lost").1.is_none());

    let mut holder = start_holder(server, &dir, &["--ttl", "3s"], "lr-forced", "f");
    let token = token_of(&dir, "f");
    let out = output(on(server, &["release", "--force", "lr-forced"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rec = last_run(server, "lr-forced");
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("forced")));
    assert_eq!(exit_code(&mut holder), 79);
    let rec = last_run(server, "lr-forced");
    assert_eq!((rec.token, rec.ending.as_deref()), (token, Some("forced")));
}

#[test]
fn a_holder_killed_with_sigkill_leaves_its_run_never_ended_until_the_next() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &["--ttl", "2s"], "lr-killed", "k");
    let token = token_of(&dir, "k");
    signal(holder.id(), libc::SIGKILL);
    wait_exit(&mut holder, T);
    let killed = records(server, "lr-killed").0.expect("a last run");
    let rec = RunRecord::parse(&killed.value);
    assert_eq!(
        (rec.pid, rec.ended_ms, rec.ending),
        (holder.id(), None, None)
    );
    assert_eq!(killed.mod_revision, token, "its own run");
    let (exit, next, _) = run_noting(server, &dir, &["-w", "30"], "lr-killed", "n", "true");
    assert_eq!(exit, 0);
    let rec = last_run(server, "lr-killed");
    assert!(next > token);
    assert_eq!((rec.token, rec.ending.as_deref()), (next, Some("exit:0")));
}

#[test]
fn an_earlier_shared_holders_release_leaves_the_later_run_alone() {
    let server = shared();
    let dir = LockDir::new();
    let mut a = start_holder(server, &dir, &["--shared"], "lr-readers", "a");
    let mut b = start_holder(server, &dir, &["--shared"], "lr-readers", "b");
    let (ta, tb) = (token_of(&dir, "a"), token_of(&dir, "b"));
    let_go(&dir, "a");
    assert_eq!(exit_code(&mut a), 0);
    let (run, success) = records(server, "lr-readers");
    let run = RunRecord::parse(&run.unwrap().value);
    assert_eq!((run.token, run.ending), (tb, None), "b's run, not ended");
    let success = RunRecord::parse(&success.unwrap().value);
    assert_eq!(
        (success.token, success.ending.as_deref()),
        (ta, Some("exit:0"))
    );
    let_go(&dir, "b");
    assert_eq!(exit_code(&mut b), 0);
    let rec = last_run(server, "lr-readers");
    assert_eq!((rec.token, rec.ending.as_deref()), (tb, Some("exit:0")));
}

#[test]
fn garbage_in_a_records_place_never_stops_a_run_nor_shows_as_a_lock() {
    let server = shared();
    for key in ["/dlock/lr-junk:last-run", "/dlock/lr-junk:last-success"] {
        let out = server
            .etcdctl(&["put", key, "\u{1b}[2Jrun1 x y"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = output(on(server, &["list", "lr-"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("lr-junk"), "{}", stderr(&out));
    let out = output(on(server, &["run", "-n", "lr-junk", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (run, success) = records(server, "lr-junk");
    let run = RunRecord::parse(&run.unwrap().value);
    assert_eq!(run.ending.as_deref(), Some("exit:0"));
    assert_eq!(RunRecord::parse(&success.unwrap().value), run);
}

#[test]
fn a_min_hold_gives_the_lock_up_at_once_when_no_command_ran() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &[], "lr-second", "h");
    // The first name is taken, the second is busy: the first is given back before any command,
    // and its min-hold does not keep it.
    let out = output(on(
        server,
        &[
            "run",
            "-n",
            "--min-hold",
            "60s",
            "lr-first",
            "lr-second",
            "--",
            "true",
        ],
    ));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = output(on(server, &["run", "-n", "lr-first", "--", "true"]));
    assert_eq!(code(&out), 0, "lr-first is free: {}", stderr(&out));
    let_go(&dir, "h");
    assert_eq!(exit_code(&mut holder), 0);
    let out = output(on(
        server,
        &["run", "--min-hold", "60s", "lr-first", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(on(server, &["run", "-n", "lr-first", "--", "true"]));
    assert_eq!(code(&out), 75, "kept: {}", stderr(&out));
}

#[test]
fn list_reads_a_prefix_of_many_megabytes_a_page_at_a_time() {
    let server = EtcdServer::start();
    let dir = LockDir::new();
    assert_eq!(
        code(&output(on(&server, &["run", "small", "--", "true"]))),
        0
    );
    // Eight values of 800 KB: 6.4 MB under /dlock/, more than one answer dlock reads may hold.
    let value = dir.file("value");
    std::fs::write(&value, "x".repeat(800_000)).unwrap();
    for i in 0..8 {
        let out = server
            .etcdctl(&["put", &format!("/dlock/fat{i}:last-run")])
            .stdin(std::fs::File::open(&value).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "put: {}", stderr(&out));
    }
    let mut holder = start_holder(&server, &dir, &[], "held", "held");
    let out = output(on(&server, &["list"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("held\texclusive by "),
        "{}",
        stdout(&out)
    );
    let out = output(on(&server, &["list", "--runs"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let names: Vec<&str> = text
        .lines()
        .map(|line| line.split('\t').next().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        ["fat0", "fat1", "fat2", "fat3", "fat4", "fat5", "fat6", "fat7", "held", "small"]
    );
    let_go(&dir, "held");
    let _ = holder.wait();
}
