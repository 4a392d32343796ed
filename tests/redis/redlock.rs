//! Redlock over five servers: a minority down or restarted empty keeps the lock and the tokens
//! growing; a majority down loses it.

use super::*;

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

/// Redlock counts each server once, whatever it is called: one server under two spellings, or two
/// databases of one server, would let a minority pass for a majority. Refused before any
/// connection (64), naming both.
#[test]
fn redlock_refuses_one_server_named_twice() {
    let (_held, port) = refusing_port();
    let (_other, other) = refusing_port();
    for (a, b) in [
        (
            format!("redis://127.0.0.1:{port}"),
            format!("redis://localhost:{port}"),
        ),
        (
            format!("redis://127.0.0.1:{port}/0"),
            format!("redis://127.0.0.1:{port}/1"),
        ),
        (
            format!("redis://127.0.0.1:{port}"),
            format!("redis://127.0.0.1:{port}"),
        ),
    ] {
        let third = format!("redis://127.0.0.1:{other}");
        let out = output(dlock_at(
            &[a.clone(), b.clone(), third],
            &["run", "x", "--", "true"],
        ));
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{a} {b}: {err}");
        assert!(
            err.contains("one server") && err.contains("Redlock needs distinct servers"),
            "{a} {b}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// How many times `server` has run EVALSHA (every script dlock sends, after the first load).
fn evalsha_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .expect("INFO commandstats");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One of three servers restarted empty grants a waiter the lock each time it asks, while the two
/// others keep it for its holder: the waiter cannot win, and backs off instead of asking again
/// every few milliseconds. Each of those grants raised that server's fencing counter: the token
/// the waiter finally gets still rises, but not by hundreds.
#[test]
fn a_redlock_waiter_that_cannot_win_backs_off() {
    let dir = LockDir::new();
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let all = urls(&servers.iter().collect::<Vec<_>>());
    let holder = start_holder(&all, &["--ttl", "30s"], "backoff", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    servers[2].restart_empty();
    let token_file = dir.file("token");
    let script = format!("echo $DLOCK_TOKEN > {}", token_file.display());
    let mut waiter = Watched::start(dlock_at(
        &all,
        &["run", "-w", "60s", "backoff", "--", "sh", "-c", &script],
    ));
    waiter.wait_for("waiting for lock", T);
    let before = evalsha_calls(&servers[2]);
    // The fault itself: the holder keeps the lock this long while the waiter waits.
    std::thread::sleep(Duration::from_secs(3));
    let calls = evalsha_calls(&servers[2]) - before;
    signal(holder.child.id(), libc::SIGTERM);
    let (status, stderr) = holder.finish(T);
    assert_eq!(status, 128 + libc::SIGTERM, "{stderr}");
    let (status, stderr) = waiter.finish(T);
    assert_eq!(status, 0, "{stderr}");
    let token: u64 = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        calls <= 60,
        "{calls} EVALSHA in 3 s on the restarted server, token {token}"
    );
    assert!(token <= 30, "the waiter got token {token}");
}

/// Redlock's waiter listens on every server: a forged grant published on each of them (all that a
/// majority of messages could say) gives it nothing; the lock and its token come from the servers'
/// scripts (see `a_forged_grant_message_gives_a_waiter_nothing`).
#[test]
fn a_forged_grant_on_every_redlock_server_gives_a_waiter_nothing() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let all = urls(&servers.iter().collect::<Vec<_>>());
    super::waiting::forged_grant_gives_nothing(&all, "forged", &servers[0], 3, |owner| {
        servers
            .iter()
            .map(|server| {
                redis::cmd("PUBLISH")
                    .arg(format!("dlock:wake:{owner}"))
                    .arg("dlock:{forged} 1000000")
                    .query::<i64>(&mut server.connection())
                    .expect("PUBLISH on a Redlock server")
            })
            .sum()
    });
}
