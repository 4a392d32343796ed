//! The Redis backend's own mechanism against real redis-servers (each test starts its own): every
//! way of losing a lease (key deleted, server stopped or restarted empty, holder killed), waiting
//! by events in arrival order that leaves nothing behind, one connection per run, Redlock over
//! three and five servers, passwords, TLS and bad addresses. What every backend owes is in the
//! contract suite.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::support::redis_server::{dlock_at, RedisServer, TlsFiles};
use crate::support::watched::Watched;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn urls(servers: &[&RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

/// A `dlock -v run OPTIONS NAME` whose command writes its pid to `pid_file` and then sleeps, with
/// stderr watched so a test can wait for events such as "renewed".
fn start_holder(
    urls: &[String],
    options: &[&str],
    name: &str,
    pid_file: &std::path::Path,
) -> Watched {
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut args = vec!["-v", "run"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    Watched::start(dlock_at(urls, &args))
}

/// Asserts that a holder loses its lock after `event`: dlock exits 79 within ttl + kill-after
/// (plus slack for a loaded machine), says why, and its command is gone.
fn assert_lost_after(
    holder: Watched,
    child_pid: u32,
    event: Instant,
    ttl_and_kill_after: Duration,
    reasons: &[&str],
) {
    let (status, stderr) = holder.finish(T);
    let took = event.elapsed();
    assert_eq!(status, 79, "{stderr}");
    assert!(
        stderr.contains("lost the lock") && reasons.iter().any(|r| stderr.contains(r)),
        "expected a loss because of {reasons:?}:\n{stderr}"
    );
    assert!(
        took < ttl_and_kill_after + Duration::from_secs(2),
        "took {took:?} to end after the lock was lost"
    );
    assert!(!alive(child_pid), "the command must not outlive the lock");
}

/// `count` shell loops each running `dlock run` `iterations` times on the lock "counter".
fn contenders(
    urls: &[String],
    count: usize,
    iterations: usize,
    mode: &[&str],
    script: &str,
) -> Vec<Child> {
    (0..count)
        .map(|_| {
            let mut words = vec!["--backend", "redis"];
            for url in urls {
                words.extend_from_slice(&["--url", url]);
            }
            words.push("run");
            words.extend_from_slice(mode);
            words.extend_from_slice(&["counter", "--", "sh", "-c", script]);
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            let looped = format!(
                "for i in $(seq {iterations}); do {} {} || exit 1; done",
                dlock_bin(),
                quoted.join(" ")
            );
            Command::new("sh")
                .arg("-c")
                .arg(looped)
                .env_remove("DLOCK_URL")
                .spawn()
                .expect("start contender")
        })
        .collect()
}

#[test]
fn redlock_contenders_on_three_servers_lose_no_update() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = LockDir::new();
    let counter = dir.file("counter");
    std::fs::write(&counter, "0").unwrap();
    let rmw = format!("n=$(cat {c}); echo $((n + 1)) > {c}", c = counter.display());
    let all = urls(&servers.iter().collect::<Vec<_>>());
    let started = Instant::now();
    // A long lease makes the fallback re-check slow (10s): every handoff must come by a message,
    // including after two waiters each got only part of the servers.
    for mut c in contenders(&all, 6, 8, &["--ttl", "30s"], &rmw) {
        assert!(wait_exit(&mut c, T).success());
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "48");
    let took = started.elapsed();
    // Each lost grant costs a 10s fallback: none may be lost (waiters arriving together used to
    // be ordered differently by each server, which then granted the lock to different waiters).
    assert!(
        took < Duration::from_secs(9),
        "48 acquisitions took {took:?}: a grant was lost"
    );
}

#[test]
fn deleting_the_key_by_hand_ends_the_holders_run_with_79() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "gone",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    delete_holders_and_see_the_loss(&server, "gone", holder, child, Duration::from_secs(2));
}

/// Deletes the holders key of `name` by hand: `holder` must then lose the lock (its command
/// `child` ended) within `ttl_and_kill_after`.
fn delete_holders_and_see_the_loss(
    server: &RedisServer,
    name: &str,
    holder: Watched,
    child: u32,
    ttl_and_kill_after: Duration,
) {
    let deleted: i64 = redis::cmd("DEL")
        .arg(format!("dlock:{{{name}}}:holders"))
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(deleted, 1);
    assert_lost_after(
        holder,
        child,
        Instant::now(),
        ttl_and_kill_after,
        &["no longer ours"],
    );
}

#[test]
fn a_server_stopped_past_the_deadline_ends_the_holders_run_with_79() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let mut holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "frozen",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    holder.wait_for_more("renewed", 1, T);
    server.pause();
    let stopped = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_lost_after(holder, child, stopped, Duration::from_secs(2), &["ran out"])
    }));
    server.resume();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_server_restarted_empty_ends_the_holders_run_with_79() {
    let mut server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let mut holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "amnesia",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    holder.wait_for_more("renewed", 1, T);
    server.restart_empty();
    let restarted = Instant::now();
    assert_lost_after(
        holder,
        child,
        restarted,
        Duration::from_secs(2),
        // "not ours" once it answers again; "ran out" if the restart took longer than the lease.
        &["no longer ours", "ran out"],
    );
}

#[test]
fn a_sigkilled_holder_frees_the_lock_within_its_ttl() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let mut holder = start_holder(&url, &["--ttl", "1s"], "crash", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let next = dir.file("next");
    let mut waiter = dlock_at(
        &url,
        &["run", "crash", "--", "touch", next.to_str().unwrap()],
    )
    .spawn()
    .unwrap();
    wait_until("the waiter to queue", T, || queued(&server, "crash") == 1);
    holder.child.kill().unwrap();
    let killed = Instant::now();
    let _ = holder.child.wait();
    wait_for_file(&next, T);
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "the next waiter waited {took:?} for a 1s lease"
    );
    assert!(wait_exit(&mut waiter, T).success());
}

/// EVALSHA calls the server has run so far.
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_release_hands_the_lock_over_with_no_command_from_the_waiter() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    // Load the scripts, so that no NOSCRIPT retry is counted below.
    assert_eq!(
        code(&output(dlock_at(&url, &["run", "warm", "--", "true"]))),
        0
    );
    let mut holder = start_holder(&url, &[], "over", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let started = dir.file("waiter-pid");
    let script = format!("echo $$ > {}; exec sleep 60", started.display());
    let mut waiter = Watched::start(dlock_at(
        &url,
        &[
            "-v", "run", "--ttl", "3s", "over", "--", "sh", "-c", &script,
        ],
    ));
    wait_until("the waiter to queue", T, || queued(&server, "over") == 1);
    let before = script_calls(&server);
    signal(holder.child.id(), libc::SIGTERM);
    holder.wait_for_more("released", 1, T);
    let child = read_pid(&started);
    // The holder's release granted the lock, and the waiter started without asking again (its
    // fallback re-check would come only a second after it queued).
    assert_eq!(
        script_calls(&server) - before,
        1,
        "only the holder's release ran"
    );
    holder.finish(T);

    // The lock it was handed is a lock like any other: renewed (every second), then lost when
    // its key goes.
    waiter.wait_for_more("renewed", 2, T);
    delete_holders_and_see_the_loss(&server, "over", waiter, child, Duration::from_secs(3));
}

#[test]
fn many_names_are_held_and_renewed_over_one_connection() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let names: Vec<String> = (0..200).map(|i| format!("many/{i:03}")).collect();
    let marker = dir.file("in");
    let mut args = vec!["-v", "run", "--ttl", "600ms"];
    args.extend(names.iter().map(String::as_str));
    let script = format!("touch {}; exec sleep 60", marker.display());
    args.extend(["--", "sh", "-c", &script]);
    let mut holder = Watched::start(dlock_at(&[server.url()], &args));
    wait_for_file(&marker, T);
    // Several rounds of renewals of all 200 (every 200ms), through the one connection.
    holder.wait_for_more("renewed", 3 * 200, T);
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(
        clients.lines().count(),
        2,
        "dlock's connection and ours:\n{clients}"
    );
    let out = output(dlock_at(&[server.url()], &["list", "many/"]));
    assert_eq!(stdout(&out).lines().count(), 200, "{}", stdout(&out));
    signal(holder.child.id(), libc::SIGTERM);
    let (status, stderr) = holder.finish(T);
    assert_eq!(status, 128 + libc::SIGTERM, "{stderr}");
    assert_eq!(server.keys().len(), 200, "only the token counters stay");
}

#[test]
fn runs_close_their_connections_without_leaving_time_wait_sockets() {
    let server = RedisServer::start();
    let before = time_wait_sockets(server.port());
    for _ in 0..3 {
        let out = output(dlock_at(&[server.url()], &["run", "tw", "--", "true"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    // A normal close leaves each run's socket in TIME_WAIT for a minute: at hundreds of runs per
    // second those would use up the local ports. dlock resets after its last answer instead.
    assert_eq!(time_wait_sockets(server.port()), before);
}

/// Loopback TCP sockets in TIME_WAIT with `port` at either end (/proc/net/tcp, state 06).
fn time_wait_sockets(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[3] == "06"
                && (fields[1].ends_with(&port) || fields[2].ends_with(&port))
        })
        .count()
}

/// How many waiters are queued for `name`.
fn queued(server: &RedisServer, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("dlock:{{{name}}}:queue"))
        .query(&mut server.connection())
        .unwrap()
}

#[test]
fn waiters_acquire_in_arrival_order() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "fifo", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let order = dir.file("order");
    let mut waiters = Vec::new();
    for i in 1..=5 {
        let append = format!("echo {i} >> {}", order.display());
        waiters.push(
            dlock_at(&url, &["run", "fifo", "--", "sh", "-c", &append])
                .spawn()
                .unwrap(),
        );
        wait_until(&format!("waiter {i} to queue"), T, || {
            queued(&server, "fifo") == i
        });
    }
    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
    for mut w in waiters {
        assert!(wait_exit(&mut w, T).success());
    }
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "1\n2\n3\n4\n5\n");
}

/// Any client can write the queue: a forged waiter entry (a terminal escape in its message, a mode
/// and pid dlock never writes) is shown as unreadable and escaped by `status`, never raw, and a
/// waiter with a message is shown with it.
#[test]
fn forged_waiter_entries_are_shown_unreadable_and_escaped() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "q", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let mut conn = server.connection();
    for (ticket, entry) in [
        (1u64, "ab exclusive 1000 2 h\tdeploy \u{1b}]0;owned\u{7}"),
        (2, "cd bogus 1000 -1 h"),
        (3, "ef shared 1000 7 box\tfine \"text\""),
    ] {
        redis::cmd("ZADD")
            .arg("dlock:{q}:queue")
            .arg(ticket * 1_000_000)
            .arg(entry)
            .query::<()>(&mut conn)
            .unwrap();
        redis::cmd("ZADD")
            .arg("dlock:{q}:alive")
            .arg(99_999_999_999_999u64)
            .arg(entry)
            .query::<()>(&mut conn)
            .unwrap();
    }
    let out = output(dlock_at(&url, &["status", "q"]));
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    let waiting: Vec<&str> = text.lines().filter(|l| l.contains("waiting:")).collect();
    assert_eq!(waiting.len(), 3, "{text}");
    assert!(
        waiting[0].contains("unreadable record") && waiting[0].contains("\\u{1b}"),
        "{text}"
    );
    assert!(waiting[1].contains("unreadable record"), "{text}");
    assert!(
        waiting[2].starts_with("  waiting: shared by box pid 7 since 1970-01-01T00:00:03Z")
            && waiting[2].contains(r#"message "fine \"text\"""#),
        "{text}"
    );
    let out = output(dlock_at(&url, &["status", "--json", "q"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert!(json["waiters"][0]["unreadable"].is_string(), "{json}");
    assert_eq!(json["waiters"][2]["message"], "fine \"text\"", "{json}");
    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
}

#[test]
fn a_waiter_that_gives_up_leaves_nothing_behind() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "tidy", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let held_keys = server.keys();
    assert_eq!(
        held_keys,
        [
            "dlock:{tidy}:holders",
            "dlock:{tidy}:owners",
            "dlock:{tidy}:token"
        ]
    );

    // Gives up at its deadline.
    let out = output(dlock_at(
        &url,
        &["run", "-w", "300ms", "tidy", "--", "true"],
    ));
    assert_eq!(code(&out), 75);
    assert_eq!(server.keys(), held_keys);

    // Gives up on a signal, while queued and subscribed (the holder listens on its own channel).
    let channels = || -> Vec<String> {
        redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("dlock:wake:*")
            .query(&mut server.connection())
            .unwrap()
    };
    let holders_channel = channels();
    assert_eq!(holders_channel.len(), 1, "{holders_channel:?}");
    let mut waiter = dlock_at(&url, &["run", "tidy", "--", "true"])
        .spawn()
        .unwrap();
    wait_until("the waiter to queue", T, || queued(&server, "tidy") == 1);
    assert_eq!(channels().len(), 2, "the waiter listens before it queues");
    signal(waiter.id(), libc::SIGTERM);
    assert_eq!(wait_exit(&mut waiter, T).code(), Some(128 + libc::SIGTERM));
    assert_eq!(server.keys(), held_keys);
    wait_until("the waiter's channel to go", T, || {
        channels() == holders_channel
    });

    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
    assert_eq!(
        server.keys(),
        ["dlock:{tidy}:token"],
        "only the token counter stays"
    );
}

#[test]
fn names_with_braces_and_spaces_stay_inside_one_hash_tag() {
    let server = RedisServer::start();
    let url = [server.url()];
    let name = "a}b{c d*";
    let out = output(dlock_at(
        &url,
        &["run", name, "--", "sh", "-c", "echo \"$DLOCK_NAME\""],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), name);
    assert_eq!(server.keys(), ["dlock:{a%7Db%7Bc%20d%2A}:token"]);
}

/// Five servers, one holder with a 1s lease renewing every ~333ms.
fn five_servers_and_a_holder(dir: &LockDir) -> (Vec<RedisServer>, Watched, u32) {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let all = urls(&servers.iter().collect::<Vec<_>>());
    let mut holder = start_holder(
        &all,
        &["--ttl", "1s", "--kill-after", "1s"],
        "quorum",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    holder.wait_for_more("renewed", 1, T);
    (servers, holder, child)
}

#[test]
fn redlock_keeps_the_lock_with_two_of_five_servers_killed() {
    let dir = LockDir::new();
    let (mut servers, mut holder, child) = five_servers_and_a_holder(&dir);
    servers[0].kill();
    servers[3].kill();
    // Renewals keep reaching the three left, well past the 1s lease: without them the lock would
    // be lost within 1s.
    holder.sees_no_line_with("lost the lock", Duration::from_millis(2500));
    assert!(alive(child));
    let all = urls(&servers.iter().collect::<Vec<_>>());
    let out = output(dlock_at(&all, &["run", "-n", "quorum", "--", "true"]));
    assert_eq!(code(&out), 75, "nobody else gets it: {}", stderr(&out));
    signal(holder.child.id(), libc::SIGTERM);
    let (status, stderr) = holder.finish(T);
    assert_eq!(status, 128 + libc::SIGTERM, "{stderr}");
    assert!(!stderr.contains("lost the lock"), "{stderr}");
}

#[test]
fn redlock_loses_the_lock_when_three_of_five_servers_die() {
    let dir = LockDir::new();
    let (mut servers, holder, child) = five_servers_and_a_holder(&dir);
    for i in [1, 2, 4] {
        servers[i].kill();
    }
    let killed = Instant::now();
    assert_lost_after(holder, child, killed, Duration::from_secs(2), &["ran out"]);
}

#[test]
fn redlock_tokens_keep_growing_while_a_minority_restarts_empty() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let all = urls(&servers.iter().collect::<Vec<_>>());
    let token = || -> u64 {
        let out = output(dlock_at(
            &all,
            &["run", "t", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
        ));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    };
    let mut last = token();
    // Each server in turn forgets everything; every acquisition's majority still includes a
    // server that remembers the last token, because each acquisition raised its majority to it.
    for round in 0..6 {
        servers[round % 3].restart_empty();
        let next = token();
        assert!(next > last, "token {next} after {last} (round {round})");
        last = next;
    }
}

#[test]
fn redlock_acquires_with_a_minority_down_and_refuses_without_a_majority() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let all = urls(&servers.iter().collect::<Vec<_>>());
    servers[2].kill();
    let out = output(dlock_at(&all, &["run", "m", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    servers[1].kill();
    let out = output(dlock_at(
        &all,
        &["--connect-timeout", "500ms", "run", "m", "--", "true"],
    ));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only 1 of 3 redis servers answered"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn passwords_and_acl_users_work_and_a_wrong_password_exits_69() {
    let server = RedisServer::start_with(&[
        "--requirepass",
        "s3cret",
        "--user",
        "alice",
        "on",
        ">p@ss",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = server.port();
    let out = output(dlock_at(&[server.url()], &["run", "p", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // An ACL user, with the URL (and its secret) in the environment rather than on the command line.
    let mut cmd = dlock();
    cmd.args(["--backend", "redis", "status", "p"]);
    cmd.env(
        "DLOCK_URL",
        format!("redis://alice:p%40ss@127.0.0.1:{port}"),
    );
    let out = output(cmd);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("redis://127.0.0.1:{port}")),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("p@ss"), "no secret in the output");

    for url in [
        format!("redis://:wrong@127.0.0.1:{port}"),
        format!("redis://alice:wrong@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let out = output(dlock_at(
            std::slice::from_ref(&url),
            &["run", "p", "--", "true"],
        ));
        assert_eq!(code(&out), 69, "{url}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("authentication failed"),
            "{}",
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("wrong"),
            "no secret in the message: {}",
            stderr(&out)
        );
    }
}

/// A CA and a server certificate for 127.0.0.1, made with the openssl command.
pub fn make_tls_files(dir: &LockDir) -> TlsFiles {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl is needed for the TLS test");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=dlock test CA",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(dir.file("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.cnf",
    ]);
    TlsFiles {
        cert: dir.file("server.crt"),
        key: dir.file("server.key"),
        ca: dir.file("ca.crt"),
    }
}

#[test]
fn tls_works_with_the_servers_ca_and_fails_69_without_it() {
    let dir = LockDir::new();
    let files = make_tls_files(&dir);
    let server = RedisServer::start_tls(&files);
    assert!(server.url().starts_with("rediss://"));
    let mut cmd = dlock_at(
        &[server.url()],
        &["run", "tls", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    );
    cmd.env("SSL_CERT_FILE", &files.ca)
        .env_remove("SSL_CERT_DIR");
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");

    let mut cmd = dlock_at(&[server.url()], &["run", "tls", "--", "true"]);
    cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    let out = output(cmd);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));
}

#[test]
fn an_unreachable_server_exits_69_within_the_connect_timeout_naming_it() {
    // Nobody listens: refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let out = output(dlock_at(&[url], &["run", "n", "--", "true"]));
    assert_eq!(code(&out), 69);
    assert_eq!(
        stderr(&out).trim(),
        format!("dlock: cannot reach redis at 127.0.0.1:{port}: connection refused")
    );

    // Something accepts connections but never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let out = output(dlock_at(
        &[format!("redis://127.0.0.1:{port}")],
        &["--connect-timeout", "500ms", "run", "n", "--", "true"],
    ));
    let took = started.elapsed();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "cannot reach redis at 127.0.0.1:{port}: no answer within 500ms"
        )),
        "{}",
        stderr(&out)
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn malformed_or_repeated_urls_exit_64() {
    for url in [
        "redis://127.0.0.1:notaport",
        "http://127.0.0.1:6379",
        "127.0.0.1:6379",
        "redis://",
    ] {
        let out = output(dlock_at(&[url.to_owned()], &["run", "n", "--", "true"]));
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    let same = "redis://127.0.0.1:6379".to_owned();
    let out = output(dlock_at(&[same.clone(), same], &["run", "n", "--", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}
