//! The last run and the last success as Redis keeps them, read raw from the servers: each
//! acquisition writes its run, by the server's clock, in the same script; each way a run ends
//! writes its ending into it while it is still its own; a success is also the last success;
//! `release --force` ends it "forced"; a holder killed with SIGKILL never ends it; another
//! client's key in their place stops nothing, and `list --runs` shows it escaped; Redlock writes
//! them on every server.

use std::process::Stdio;

use super::*;
use crate::redis::cluster_server::RedisCluster;
use crate::redis::sentinel_set::SentinelSet;

/// How long a record lasts after its last write: 400 days, in ms.
const KEPT_MS: i64 = 400 * 24 * 3600 * 1000;

/// A run record as the servers keep it: `run1 TOKEN ACQUIRED_MS ENDED_MS ENDING PID OWNER
/// HOST[\tMESSAGE]`.
#[derive(Clone, Debug, PartialEq)]
struct Record {
    token: u64,
    acquired: Option<u64>,
    ended: Option<u64>,
    ending: Option<String>,
    pid: u32,
    owner: String,
    host: String,
    message: Option<String>,
}

impl Record {
    /// Panics, showing `raw`, unless it is a record in the one form.
    fn parse(raw: &str) -> Record {
        fn fail(raw: &str) -> ! {
            panic!("not a run record: {raw:?}")
        }
        let fields: Vec<&str> = raw.splitn(8, ' ').collect();
        if fields.len() != 8 || fields[0] != "run1" {
            fail(raw);
        }
        let time = |field: &str| match field {
            "-" => None,
            ms => Some(ms.parse::<u64>().unwrap_or_else(|_| fail(raw))),
        };
        let (host, message) = match fields[7].split_once('\t') {
            Some((host, message)) => (host, Some(message.to_owned())),
            None => (fields[7], None),
        };
        let record = Record {
            token: fields[1].parse().unwrap_or_else(|_| fail(raw)),
            acquired: time(fields[2]),
            ended: time(fields[3]),
            ending: (fields[4] != "-").then(|| fields[4].to_owned()),
            pid: fields[5].parse().unwrap_or_else(|_| fail(raw)),
            owner: fields[6].to_owned(),
            host: host.to_owned(),
            message,
        };
        let owner_ok =
            record.owner.len() == 32 && record.owner.bytes().all(|b| b.is_ascii_hexdigit());
        if record.ended.is_some() != record.ending.is_some() || !owner_ok || host.is_empty() {
            fail(raw);
        }
        record
    }
}

/// The record in `key` on `server`, if there is one.
fn record(server: &RedisServer, key: &str) -> Option<Record> {
    redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(&mut server.connection())
        .unwrap_or_else(|e| panic!("GET {key}: {e}"))
        .map(|raw| Record::parse(&raw))
}

fn last_run(server: &RedisServer, name: &str) -> Option<Record> {
    record(server, &format!("dlock:{{{name}}}:last-run"))
}

fn last_success(server: &RedisServer, name: &str) -> Option<Record> {
    record(server, &format!("dlock:{{{name}}}:last-success"))
}

/// The server's clock, in ms.
fn server_ms(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.connection())
        .expect("TIME");
    secs * 1000 + micros / 1000
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.connection())
        .expect("PTTL")
}

/// Runs `dlock ARGS` to its end: its exit status, pid and stdout.
fn run_to_end(urls: &[String], args: &[&str]) -> (i32, u32, String) {
    let mut cmd = dlock_at(urls, args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("start dlock");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for dlock");
    (code(&out), pid, stdout(&out))
}

/// Asserts that `run` is the run of dlock `pid` with `token`, acquired and (if `ending`) ended
/// by the server's clock between `before` and `after`, ended as `ending` says.
fn assert_run(run: &Record, pid: u32, token: u64, ending: Option<&str>, clock: (u64, u64)) {
    let (before, after) = clock;
    assert_eq!((run.pid, run.token), (pid, token), "{run:?}");
    assert_eq!(run.ending.as_deref(), ending, "{run:?}");
    let acquired = run.acquired.expect("acquired");
    assert!(before <= acquired && acquired <= after, "{run:?} {clock:?}");
    if let Some(ended) = run.ended {
        assert!(acquired <= ended && ended <= after, "{run:?} {clock:?}");
    }
}

#[test]
fn each_ending_is_written_into_the_last_run_by_the_servers_clock() {
    let server = RedisServer::start();
    let url = [server.url()];
    let cases: [(&[&str], &str, i32, &str); 3] = [
        (&[], "exit 3", 3, "exit:3"),
        (&["--message", "nightly backup"], "true", 0, "exit:0"),
        (&[], "kill -TERM $$", 128 + libc::SIGTERM, "signal:15"),
    ];
    let mut success = None;
    for (options, command, status, ending) in cases {
        let script = format!("echo $DLOCK_TOKEN; {command}");
        let mut args = vec!["run"];
        args.extend_from_slice(options);
        args.extend_from_slice(&["job", "--", "sh", "-c", &script]);
        let before = server_ms(&server);
        let (code, pid, out) = run_to_end(&url, &args);
        let after = server_ms(&server);
        assert_eq!(code, status, "{args:?}");
        let token = out.trim().parse().expect("the command's token");
        let run = last_run(&server, "job").expect("a last run");
        assert_run(&run, pid, token, Some(ending), (before, after));
        assert_eq!(run.message.as_deref(), options.get(1).copied());
        if status == 0 {
            success = Some(run.clone());
        }
        // Only a zero exit is a success; a failure leaves the last success as it was.
        assert_eq!(last_success(&server, "job"), success, "after {ending}");
    }
    for key in ["last-run", "last-success"] {
        let left = pttl(&server, &format!("dlock:{{job}}:{key}"));
        assert!(
            KEPT_MS - 60_000 < left && left <= KEPT_MS,
            "{key}: {left}ms"
        );
    }
}

#[test]
fn a_run_that_loses_its_lock_ends_lost() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let before = server_ms(&server);
    let holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "gone",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    let pid = holder.child.id();
    let run = last_run(&server, "gone").expect("a last run");
    assert_run(&run, pid, 1, None, (before, server_ms(&server)));
    delete_holders_and_see_the_loss(&server, "gone", holder, child, Duration::from_secs(2));
    let run = last_run(&server, "gone").expect("a last run");
    assert_run(&run, pid, 1, Some("lost"), (before, server_ms(&server)));
    assert_eq!(last_success(&server, "gone"), None);
}

/// Whether `name` reads free on the servers `urls` (`status` exits 1).
fn free(urls: &[String], name: &str) -> bool {
    code(&output(dlock_at(urls, &["status", name]))) == 1
}

/// The lease passes while dlock is stopped, and the command exits 0 before dlock runs again: its
/// release finds the lock lost (79), and on each of `servers` (those that keep `name`) the run
/// ends `lost`, no success.
fn a_command_that_succeeds_after_its_lease_passed_ends_lost(
    urls: &[String],
    name: &str,
    servers: &[&RedisServer],
) {
    let dir = LockDir::new();
    let run = dlock_at(urls, &["run", "--ttl", "1s", name]);
    let (status, said) = succeed_after_a_silent_loss(run, dir.path(), || {
        wait_until("the stopped holder's lease to pass", T, || free(urls, name))
    });
    assert_eq!(status, 79, "{said}");
    assert!(
        said.contains("the lock was lost before the command ended"),
        "found by the release: {said}"
    );
    for server in servers {
        let run = last_run(server, name).expect("a last run");
        assert_eq!(run.ending.as_deref(), Some("lost"), "{run:?}");
        assert_eq!(last_success(server, name), None);
    }
    let out = output(dlock_at(urls, &["status", name, "--ran-within", "1h"]));
    assert_eq!(code(&out), 2, "never succeeded: {}", stdout(&out));
}

#[test]
fn a_command_that_succeeds_after_its_lease_passed_while_dlock_was_stopped_ends_lost() {
    let server = RedisServer::start();
    a_command_that_succeeds_after_its_lease_passed_ends_lost(&[server.url()], "late", &[&server]);
}

#[test]
fn redlock_a_command_that_succeeds_after_its_lease_passed_ends_lost_on_every_server() {
    let (servers, all) = three_servers();
    let servers: Vec<&RedisServer> = servers.iter().collect();
    a_command_that_succeeds_after_its_lease_passed_ends_lost(&all, "late", &servers);
}

#[test]
fn on_redis_cluster_a_command_that_succeeds_after_its_lease_passed_ends_lost() {
    let cluster = RedisCluster::start();
    let name = cluster.name_on("late/", 2);
    let master = &cluster.nodes[2];
    a_command_that_succeeds_after_its_lease_passed_ends_lost(&[cluster.url()], &name, &[master]);
}

#[test]
fn behind_sentinel_a_command_that_succeeds_after_its_lease_passed_ends_lost() {
    let set = SentinelSet::start();
    a_command_that_succeeds_after_its_lease_passed_ends_lost(&[set.url()], "late", &[set.master()]);
}

/// Redlock servers that disagree at the release: each writes its own view (`lost` where the
/// lease went, the command's ending and a success where it stayed), and `status` shows the
/// majority's, which is also how dlock exits.
#[test]
fn redlock_servers_that_disagree_at_the_release_each_keep_their_view_and_status_the_majoritys() {
    let (servers, all) = three_servers();
    let dir = LockDir::new();
    let drop_lease = |server: &RedisServer, name: &str| {
        let deleted: i64 = redis::cmd("DEL")
            .arg(format!("dlock:{{{name}}}:holders"))
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(deleted, 1);
    };
    // A majority lost the lease: 79, the run reads lost, and no success counts.
    let run = dlock_at(&all, &["run", "--ttl", "30s", "most"]);
    let (status, said) = succeed_after_a_silent_loss(run, dir.path(), || {
        drop_lease(&servers[1], "most");
        drop_lease(&servers[2], "most");
    });
    assert_eq!(status, 79, "{said}");
    let endings: Vec<_> = servers
        .iter()
        .map(|s| last_run(s, "most").and_then(|r| r.ending))
        .collect();
    assert_eq!(
        endings,
        [
            Some("exit:0".into()),
            Some("lost".into()),
            Some("lost".into())
        ]
    );
    assert!(last_success(&servers[0], "most").is_some());
    let out = output(dlock_at(&all, &["status", "--json", "most"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(json["last_run"]["ending"], "lost", "{json:#}");
    assert!(json["last_success"].is_null(), "{json:#}");
    let out = output(dlock_at(&all, &["status", "most", "--ran-within", "1h"]));
    assert_eq!(code(&out), 2, "{}", stdout(&out));

    // A minority lost it: the command's status, and the run is the last success.
    let run = dlock_at(&all, &["run", "--ttl", "30s", "few"]);
    let (status, said) =
        succeed_after_a_silent_loss(run, dir.path(), || drop_lease(&servers[0], "few"));
    assert_eq!(status, 0, "{said}");
    assert_eq!(
        last_run(&servers[0], "few")
            .and_then(|r| r.ending)
            .as_deref(),
        Some("lost")
    );
    let out = output(dlock_at(&all, &["status", "--json", "few"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(json["last_run"]["ending"], "exit:0", "{json:#}");
    assert_eq!(json["last_success"], json["last_run"], "{json:#}");
}

#[test]
fn release_force_ends_the_run_forced_and_its_holders_own_release_keeps_it_so() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let before = server_ms(&server);
    let holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "broken",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    let pid = holder.child.id();
    let out = output(dlock_at(&url, &["release", "--force", "broken"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let forced = last_run(&server, "broken").expect("a last run");
    assert_run(
        &forced,
        pid,
        1,
        Some("forced"),
        (before, server_ms(&server)),
    );
    // The holder notices at its next renewal, loses the lock, and releases: the record stays.
    assert_lost_after(
        holder,
        child,
        Instant::now(),
        Duration::from_secs(2),
        &["no longer ours"],
    );
    assert_eq!(last_run(&server, "broken"), Some(forced));
    assert_eq!(last_success(&server, "broken"), None);
}

#[test]
fn a_holder_killed_with_sigkill_never_ends_its_run() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let before = server_ms(&server);
    let mut holder = start_holder(&url, &["--ttl", "1s"], "crash", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let pid = holder.child.id();
    holder.child.kill().unwrap();
    let _ = holder.child.wait();
    // Its lease passes: the lock is free, and its run still reads "not ended".
    wait_until("the dead holder's lease to pass", T, || {
        let out = output(dlock_at(&url, &["status", "--json", "crash"]));
        let status: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        status["holders"].as_array().is_some_and(|h| h.is_empty())
    });
    let run = last_run(&server, "crash").expect("a last run");
    assert_run(&run, pid, 1, None, (before, server_ms(&server)));
    assert_eq!(run.ended, None);
    assert_eq!(last_success(&server, "crash"), None);
}

#[test]
fn a_shared_holders_release_leaves_the_later_acquisitions_record_alone() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    // Each holder's command says it started, then waits for its own go.
    let start = |n: &str| {
        let script = format!(
            "touch {i}; k=0; while [ ! -e {g} ] && [ $k -lt 1200 ]; do sleep 0.05; k=$((k+1)); done",
            i = dir.file(&format!("in{n}")).display(),
            g = dir.file(&format!("go{n}")).display(),
        );
        let mut cmd = dlock_at(&url, &["run", "--shared", "s", "--", "sh", "-c", &script]);
        cmd.stderr(Stdio::null());
        let child = cmd.spawn().unwrap();
        wait_for_file(&dir.file(&format!("in{n}")), T);
        child
    };
    let before = server_ms(&server);
    let mut first = start("1");
    let first_run = last_run(&server, "s").expect("the first run");
    let mut second = start("2");
    let second_run = last_run(&server, "s").expect("the second run");
    assert_eq!((first_run.token, second_run.token), (1, 2));

    std::fs::write(dir.file("go1"), "").unwrap();
    assert_eq!(wait_exit(&mut first, T).code(), Some(0));
    let after = server_ms(&server);
    assert_eq!(last_run(&server, "s"), Some(second_run.clone()));
    // Its success is the last success, all the same: when it began, to the second (its holder
    // record's), as the last run is another's.
    let success = last_success(&server, "s").expect("the first run's success");
    assert_eq!(
        (success.token, success.pid, &success.owner, &success.ending),
        (1, first.id(), &first_run.owner, &Some("exit:0".to_owned()))
    );
    let acquired = success.acquired.expect("acquired");
    assert_eq!(acquired, first_run.acquired.unwrap() / 1000 * 1000);
    let ended = success.ended.expect("ended");
    assert!(before <= ended && ended <= after, "{success:?}");

    std::fs::write(dir.file("go2"), "").unwrap();
    assert_eq!(wait_exit(&mut second, T).code(), Some(0));
    let ended = last_run(&server, "s").expect("the second run");
    assert_run(
        &ended,
        second.id(),
        2,
        Some("exit:0"),
        (before, server_ms(&server)),
    );
    assert_eq!(last_success(&server, "s"), Some(ended));
}

#[test]
fn a_lock_given_back_before_its_command_ran_ends_not_run_and_min_hold_keeps_nothing() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "b", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    // "a" is taken, then given back as "b" is busy: its min-hold keeps nothing.
    let before = server_ms(&server);
    let (status, pid, _) = run_to_end(
        &url,
        &["run", "-n", "--min-hold", "1h", "a", "b", "--", "true"],
    );
    assert_eq!(status, 75);
    let run = last_run(&server, "a").expect("a's last run");
    assert_run(&run, pid, 1, Some("not-run"), (before, server_ms(&server)));
    let out = output(dlock_at(&url, &["run", "-n", "a", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
    // A run that ended keeps the lock to its min-hold's end, as before.
    let out = output(dlock_at(
        &url,
        &["run", "--min-hold", "1h", "a", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(dlock_at(&url, &["run", "-n", "a", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
}

#[test]
fn keys_of_another_type_or_garbage_in_the_record_keys_stop_nothing() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let mut conn = server.connection();
    // Garbage where the last run goes: overwritten by the next run.
    redis::cmd("SET")
        .arg("dlock:{g}:last-run")
        .arg("run1 9 \x1b[31m garbage")
        .query::<()>(&mut conn)
        .unwrap();
    let (status, pid, _) = run_to_end(&url, &["run", "g", "--", "true"]);
    assert_eq!(status, 0);
    assert_eq!(last_run(&server, "g").expect("a record").pid, pid);

    // Another client's list and hash where the records go: left as they are.
    redis::cmd("RPUSH")
        .arg("dlock:{w}:last-run")
        .arg("theirs")
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("HSET")
        .arg("dlock:{w}:last-success")
        .arg("theirs")
        .arg("too")
        .query::<()>(&mut conn)
        .unwrap();
    for (command, status) in [("true", 0), ("false", 1)] {
        let out = output(dlock_at(&url, &["run", "w", "--", command]));
        assert_eq!(code(&out), status, "{}", stderr(&out));
        assert_eq!(stderr(&out), "");
    }
    let holder = start_holder(&url, &["--ttl", "1s"], "w", &dir.file("pid"));
    let child = read_pid(&dir.file("pid"));
    let out = output(dlock_at(&url, &["release", "--force", "w"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_lost_after(
        holder,
        child,
        Instant::now(),
        Duration::from_secs(2),
        &["no longer ours"],
    );
    let list: Vec<String> = redis::cmd("LRANGE")
        .arg("dlock:{w}:last-run")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    let hash: Option<String> = redis::cmd("HGET")
        .arg("dlock:{w}:last-success")
        .arg("theirs")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        (list, hash.as_deref()),
        (vec!["theirs".to_owned()], Some("too"))
    );
}

/// `list --runs` finds the names by their record keys: another client's value there is shown
/// escaped, a key of another type as unreadable, and keys dlock would not name so are left out.
#[test]
fn list_runs_shows_foreign_records_escaped_and_leaves_out_keys_no_lock_has() {
    let server = RedisServer::start();
    let url = [server.url()];
    let mut conn = server.connection();
    assert_eq!(run_to_end(&url, &["run", "ok", "--", "true"]).0, 0);
    for (command, key, value) in [
        ("SET", "dlock:{esc}:last-run", "run1 \x1b[2J"),
        ("RPUSH", "dlock:{wrong}:last-success", "theirs"),
        ("SET", "dlock:{%61}:last-run", "not a's"),
        ("SET", "dlock:{x}:last-runs", "no such key"),
        ("SET", "dlock:{y}:holders:last-run", "nor this"),
    ] {
        redis::cmd(command)
            .arg(key)
            .arg(value)
            .query::<()>(&mut conn)
            .unwrap_or_else(|e| panic!("{command} {key}: {e}"));
    }
    let out = output(dlock_at(&url, &["list", "--runs"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains('\x1b'), "{text:?}");
    let names: Vec<&str> = text
        .lines()
        .filter_map(|line| line.split_once('\t').map(|(name, _)| name))
        .collect();
    assert_eq!(names, ["esc", "ok", "wrong"], "{text}");
    assert!(
        text.contains("esc\tfree, last run unreadable record \"run1 \\u{1b}[2J\"")
            && text.contains("wrong\tfree, last success unreadable record \""),
        "{text}"
    );
}

#[test]
fn a_release_that_hands_the_lock_on_writes_the_next_holders_run() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "next", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let script = format!(
        "touch {i}; k=0; while [ ! -e {g} ] && [ $k -lt 1200 ]; do sleep 0.05; k=$((k+1)); done",
        i = dir.file("in").display(),
        g = dir.file("go").display(),
    );
    let args = [
        "run",
        "--message",
        "next in line",
        "next",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let mut waiter = dlock_at(&url, &args).stderr(Stdio::null()).spawn().unwrap();
    wait_until("the waiter to queue", T, || queued(&server, "next") == 1);
    let before = server_ms(&server);
    // The holder's release ends its run, then grants the lock to the waiter, whose run it writes
    // from the waiter's place in the queue.
    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
    wait_for_file(&dir.file("in"), T);
    let run = last_run(&server, "next").expect("the waiter's run");
    assert_run(&run, waiter.id(), 2, None, (before, server_ms(&server)));
    assert_eq!(run.message.as_deref(), Some("next in line"));
    std::fs::write(dir.file("go"), "").unwrap();
    assert_eq!(wait_exit(&mut waiter, T).code(), Some(0));
    let ended = last_run(&server, "next").expect("the waiter's run");
    assert_eq!(
        (ended.acquired, ended.ending.as_deref()),
        (run.acquired, Some("exit:0"))
    );
    assert_eq!(last_success(&server, "next"), Some(ended));
}

#[test]
fn on_redis_cluster_the_records_are_on_the_locks_master() {
    let cluster = RedisCluster::start();
    let dir = LockDir::new();
    let url = [cluster.url()];
    let name = cluster.name_on("runs/", 1);
    let (status, pid, _) = run_to_end(&url, &["run", &name, "--", "sh", "-c", "exit 3"]);
    assert_eq!(status, 3);
    let master = &cluster.nodes[1];
    let run = last_run(master, &name).expect("a record on the lock's master");
    assert_eq!((run.pid, run.ending.as_deref()), (pid, Some("exit:3")));
    let holder = start_holder(&url, &["--ttl", "1s"], &name, &dir.file("pid"));
    let child = read_pid(&dir.file("pid"));
    let out = output(dlock_at(&url, &["release", "--force", &name]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_lost_after(
        holder,
        child,
        Instant::now(),
        Duration::from_secs(2),
        &["no longer ours"],
    );
    let run = last_run(master, &name).expect("a record on the lock's master");
    assert_eq!((run.token, run.ending.as_deref()), (2, Some("forced")));
    assert_eq!(last_success(master, &name), None);
    for other in [0, 2] {
        assert!(cluster.nodes[other].keys().is_empty());
    }
}

#[test]
fn behind_sentinel_the_records_reach_the_replicas_and_an_unreplicated_grant_ends_not_run() {
    let set = SentinelSet::start();
    let (status, pid, _) = run_to_end(
        &[set.url()],
        &["run", "--replicas", "2", "job", "--", "sh", "-c", "exit 3"],
    );
    assert_eq!(status, 3);
    let run = last_run(set.master(), "job").expect("a record on the master");
    assert_eq!((run.pid, run.ending.as_deref()), (pid, Some("exit:3")));
    for replica in set.replicas() {
        wait_until("the replica to have the ended run", T, || {
            last_run(replica, "job").as_ref() == Some(&run)
        });
    }
    // Granted, then given back as no replica acknowledged it: the run never ran.
    let replicas = set.replicas();
    for r in &replicas {
        r.pause();
    }
    let args = [
        "--connect-timeout",
        "1s",
        "run",
        "--replicas",
        "1",
        "job",
        "--",
        "true",
    ];
    let (status, pid, _) = run_to_end(&[set.url()], &args);
    for r in &replicas {
        r.resume();
    }
    assert_eq!(status, 69);
    let run = last_run(set.master(), "job").expect("a record on the master");
    assert_eq!(
        (run.pid, run.token, run.ending.as_deref()),
        (pid, 2, Some("not-run"))
    );
}

#[test]
fn a_hold_ends_released_or_when_its_shell_exits() {
    let server = RedisServer::start();
    let dlock = format!("{} --backend redis --url {}", dlock_bin(), server.url());
    for (then, ending, succeeded) in [
        (format!("{dlock} release h"), "released", true),
        (String::new(), "shell-exited", false),
    ] {
        let script = format!("v=$({dlock} hold --print-env h) || exit $?; eval \"$v\"; {then}");
        let mut sh = program("sh");
        for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("DLOCK_")) {
            sh.env_remove(key);
        }
        sh.args(["-c", &script])
            .env("DLOCK_CONFIG", "")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let out = sh.output().expect("run sh");
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        // The hold's keeper writes the ending as it lets go, once the shell is gone.
        wait_until("the hold's run to end", T, || {
            last_run(&server, "h").is_some_and(|r| r.ended.is_some())
        });
        let run = last_run(&server, "h").unwrap();
        assert_eq!(run.ending.as_deref(), Some(ending), "{run:?}");
        assert_eq!(last_success(&server, "h") == Some(run), succeeded);
    }
}

/// Three servers with Redlock: (the servers, their URLs).
fn three_servers() -> (Vec<RedisServer>, Vec<String>) {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let all = urls(&servers.iter().collect::<Vec<_>>());
    (servers, all)
}

#[test]
fn redlock_writes_the_run_with_the_token_its_command_got_on_every_server() {
    let (servers, all) = three_servers();
    let dir = LockDir::new();
    // One server's counter is ahead: the token is above it, and every record says so, from the
    // acquisition on.
    redis::cmd("SET")
        .arg("dlock:{r}:token")
        .arg(41)
        .query::<()>(&mut servers[1].connection())
        .unwrap();
    let script = format!(
        "echo $DLOCK_TOKEN > {}; exec sleep 60",
        dir.file("token").display()
    );
    let mut args = vec!["run", "r", "--", "sh", "-c", &script];
    let holder = Watched::start(dlock_at(&all, &args));
    let token = u64::from(read_pid(&dir.file("token")));
    assert_eq!(token, 42);
    let pid = holder.child.id();
    for server in &servers {
        let run = last_run(server, "r").expect("a record on every server");
        assert_eq!(
            (run.pid, run.token, run.ended),
            (pid, token, None),
            "{run:?}"
        );
    }
    signal(pid, libc::SIGTERM);
    let (status, stderr) = holder.finish(T);
    assert_eq!(status, 128 + libc::SIGTERM, "{stderr}");
    args.truncate(2);
    args.extend(["--", "true"]);
    let (status, pid, _) = run_to_end(&all, &args);
    assert_eq!(status, 0);
    for server in &servers {
        let run = last_run(server, "r").expect("a record on every server");
        assert_eq!((run.pid, run.token), (pid, token + 1), "{run:?}");
        assert_eq!(run.ending.as_deref(), Some("exit:0"));
        assert_eq!(last_success(server, "r"), Some(run));
    }
}

#[test]
fn redlock_servers_that_missed_an_acquisition_or_a_release_keep_older_records() {
    let mut servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start_durable(),
    ];
    let all = urls(&servers.iter().collect::<Vec<_>>());
    let dir = LockDir::new();
    // Server 2 is held by a dlock of its own: a Redlock run gets servers 0 and 1 only.
    let single = start_holder(&all[2..], &[], "d", &dir.file("single"));
    read_pid(&dir.file("single"));
    let (status, pid, out) = run_to_end(&all, &["run", "d", "--", "sh", "-c", "echo $DLOCK_TOKEN"]);
    assert_eq!(status, 0);
    let token: u64 = out.trim().parse().unwrap();
    // Above server 2's counter, which it saw busy.
    assert_eq!(token, 2);
    for server in &servers[..2] {
        let run = last_run(server, "d").expect("a record");
        assert_eq!((run.pid, run.token), (pid, token));
    }
    let other = last_run(&servers[2], "d").expect("the other dlock's record");
    assert_eq!(
        (other.pid, other.token, other.ended),
        (single.child.id(), 1, None)
    );

    // A Redlock acquisition that only server 0 grants does not count: it leaves no record there.
    let mut on_one = start_holder(&all[1..2], &[], "d", &dir.file("one"));
    read_pid(&dir.file("one"));
    let (status, _, _) = run_to_end(&all, &["run", "-n", "d", "--", "true"]);
    assert_eq!(status, 75);
    assert_eq!(last_run(&servers[0], "d"), None);
    signal(single.child.id(), libc::SIGTERM);
    single.finish(T);
    signal(on_one.child.id(), libc::SIGTERM);
    on_one.wait_for("released", T);
    on_one.finish(T);

    // A server that misses the release (down meanwhile) keeps the run not ended, with the same
    // token.
    let holder = start_holder(&all, &["--ttl", "2s"], "m", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    servers[2].kill();
    signal(holder.child.id(), libc::SIGTERM);
    let (status, stderr) = holder.finish(T);
    assert_eq!(status, 128 + libc::SIGTERM, "{stderr}");
    servers[2].restart_keeping_data();
    let ended: Vec<Record> = servers[..2]
        .iter()
        .map(|s| last_run(s, "m").expect("a record"))
        .collect();
    let missed = last_run(&servers[2], "m").expect("a record");
    assert_eq!(ended[0].ending.as_deref(), Some("signal:15"));
    assert_eq!(ended[1].ending.as_deref(), Some("signal:15"));
    assert_eq!((missed.token, missed.ended), (ended[0].token, None));
}

/// `status NAME --ran-within 1h` on `urls`: its exit status and its line.
fn ran_within_1h(urls: &[String], name: &str) -> (i32, String) {
    let out = output(dlock_at(urls, &["status", name, "--ran-within", "1h"]));
    (code(&out), stdout(&out))
}

#[test]
fn a_success_dated_after_the_servers_time_is_unreadable_never_ok() {
    let server = RedisServer::start();
    let url = [server.url()];
    assert_eq!(run_to_end(&url, &["run", "future", "--", "true"]).0, 0);
    assert_eq!(ran_within_1h(&url, "future").0, 0, "a success just now");
    let mut conn = server.connection();
    for key in ["last-run", "last-success"] {
        let key = format!("dlock:{{future}}:{key}");
        let raw: String = redis::cmd("GET").arg(&key).query(&mut conn).expect("GET");
        let later = run_records::dated_later(&raw, run_records::THIRTY_DAYS_MS);
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(&later)
            .query(&mut conn)
            .expect("SET");
    }
    let (status, line) = ran_within_1h(&url, "future");
    assert_eq!(status, 3, "UNKNOWN: {line}");
    assert!(
        line.starts_with("UNKNOWN: future has an unreadable record of its last success")
            && line.contains("dated after"),
        "{line}"
    );
}

/// The bytes the server has sent its clients so far (`INFO stats`).
fn sent_bytes(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.connection())
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_net_output_bytes in {info}"))
}

#[test]
fn a_huge_value_in_place_of_a_record_is_unreadable_and_read_only_in_part() {
    let server = RedisServer::start();
    let url = [server.url()];
    let huge = format!("run1 1 1 - - 1 {} {}", "0".repeat(32), "h".repeat(32 << 20));
    let () = redis::cmd("SET")
        .arg("dlock:{big}:last-run")
        .arg(&huge)
        .query(&mut server.connection())
        .expect("SET");
    let before = sent_bytes(&server);
    let out = output(dlock_at(&url, &["status", "big"]));
    let sent = sent_bytes(&server) - before;
    assert_eq!(code(&out), 1, "free: {}", stderr(&out));
    assert!(
        stdout(&out).contains("last run: unreadable record \"run1 1 1 - - 1 "),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).len() < 1024,
        "shown cut short: {}",
        stdout(&out).len()
    );
    assert!(sent < 64 << 10, "the server sent {sent} bytes");
    let (status, line) = ran_within_1h(&url, "big");
    assert_eq!(status, 3, "UNKNOWN: {line}");
}
