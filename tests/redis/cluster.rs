//! Redis Cluster's own mechanism on a real three-master cluster: a seed that serves other slots
//! redirects dlock to the lock's master, names on different masters are taken all or nothing,
//! `list` covers every master, a plain `redis://` URL naming a node is refused with the URL to
//! use, and a lock whose slot moves to another master while it is held and waited for stays held
//! and passes to its waiter with the next token; a forged sharded grant gives a waiter nothing.

use super::*;
use crate::redis::cluster_server::RedisCluster;

/// The size of the queue of `name` on node `node` of `cluster`.
fn queued_on(cluster: &RedisCluster, node: usize, name: &str) -> usize {
    queued(&cluster.nodes[node], name)
}

/// A `redis+cluster://` URL whose only seed is node `node`.
fn seeded_at(cluster: &RedisCluster, node: usize) -> [String; 1] {
    [format!(
        "redis+cluster://127.0.0.1:{}",
        cluster.nodes[node].port()
    )]
}

/// Names `PREFIX` on each of the three masters, held together by one run at `url` until the
/// returned child is killed; once they are held.
fn hold_one_per_master(
    cluster: &RedisCluster,
    url: &[String],
    prefix: &str,
    dir: &LockDir,
) -> (Vec<String>, std::process::Child) {
    let names: Vec<String> = (0..3).map(|n| cluster.name_on(prefix, n)).collect();
    let marker = dir.file("in");
    let script = format!("touch {}; exec sleep 60", marker.display());
    let mut args = vec!["run"];
    args.extend(names.iter().map(String::as_str));
    args.extend(["--", "sh", "-c", &script]);
    let holder = dlock_at(url, &args).spawn().unwrap();
    wait_for_file(&marker, T);
    (names, holder)
}

#[test]
fn a_seed_that_serves_other_slots_redirects_to_the_locks_master() {
    let cluster = RedisCluster::start();
    let name = cluster.name_on("elsewhere/", 2);
    let out = output(dlock_at(
        &seeded_at(&cluster, 0),
        &["run", &name, "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");
    // The lock's counter and run records are on its own master, and nowhere else.
    let kept = ["last-run", "last-success", "token"].map(|k| format!("dlock:{{{name}}}:{k}"));
    assert_eq!(cluster.nodes[2].keys(), kept);
    assert!(cluster.nodes[0].keys().is_empty());
}

#[test]
fn a_plain_url_naming_a_cluster_node_is_refused_with_the_cluster_url() {
    let cluster = RedisCluster::start();
    let name = cluster.name_on("plain/", 1);
    let url = [cluster.nodes[0].url()];
    let out = output(dlock_at(&url, &["run", &name, "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let want = format!(
        "--url redis+cluster://127.0.0.1:{}",
        cluster.nodes[0].port()
    );
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

#[test]
fn names_on_different_masters_are_taken_all_or_nothing() {
    let cluster = RedisCluster::start();
    let url = [cluster.url()];
    let dir = LockDir::new();
    let (free, busy) = (cluster.name_on("set/", 0), cluster.name_on("set/", 2));
    let _holder = start_holder(&url, &[], &busy, &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let out = output(dlock_at(&url, &["run", "-n", &free, &busy, "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // The name that was free is not left held, nor anyone left in its line.
    let status = output(dlock_at(&url, &["status", &free]));
    assert_eq!(code(&status), 1, "{}", stdout(&status));
    assert_eq!(queued_on(&cluster, 0, &free), 0);
}

#[test]
fn list_shows_the_locks_of_every_master() {
    let cluster = RedisCluster::start();
    let url = [cluster.url()];
    let dir = LockDir::new();
    let (names, mut holder) = hold_one_per_master(&cluster, &url, "every/", &dir);
    let out = output(dlock_at(&url, &["list"]));
    holder.kill().unwrap();
    let _ = holder.wait();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in &names {
        assert!(
            stdout(&out).contains(name.as_str()),
            "{name}:\n{}",
            stdout(&out)
        );
    }
}

#[test]
fn a_lock_whose_slot_moves_to_another_master_stays_held_and_passes_to_its_waiter() {
    let cluster = RedisCluster::start();
    let url = [cluster.url()];
    let dir = LockDir::new();
    let name = cluster.name_on("moving/", 0);
    let mut holder = start_holder(
        &url,
        &["--ttl", "1500ms", "--kill-after", "1s"],
        &name,
        &dir.file("pid"),
    );
    read_pid(&dir.file("pid"));
    let next = dir.file("next");
    let script = format!("echo $DLOCK_TOKEN > {}", next.display());
    let waiter = Watched::start(dlock_at(
        &url,
        &["run", "--ttl", "1500ms", &name, "--", "sh", "-c", &script],
    ));
    wait_until("the waiter to queue", T, || {
        queued_on(&cluster, 0, &name) == 1
    });
    holder.wait_for_more("renewed", 1, T);

    let slot = cluster.slot_of(&format!("dlock:{{{name}}}"));
    cluster.move_slot(slot, 0, 1);
    assert_eq!(cluster.node_of_lock(&name), 1);
    // The holder renews on the new master for longer than a lease, the waiter still waits.
    holder.wait_for_more("renewed", 4, T);
    assert!(!next.exists(), "the waiter got the lock while it was held");
    assert_eq!(queued_on(&cluster, 1, &name), 1, "the waiter's place moved");

    signal(holder.child.id(), libc::SIGTERM);
    holder.wait_for_more("released", 1, T);
    let (_, said) = holder.finish(T);
    assert!(!said.contains("lost"), "{said}");
    wait_for_file(&next, T);
    let (status, said) = waiter.finish(T);
    assert_eq!(status, 0, "{said}");
    let token: u64 = std::fs::read_to_string(&next)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(token, 2, "the waiter's token follows the holder's");
    // The counter moved with the slot: the next acquisition gets the token after.
    let out = output(dlock_at(
        &url,
        &["run", &name, "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(stdout(&out).trim(), "3", "{}", stderr(&out));
    assert!(
        cluster.nodes[0].keys().is_empty(),
        "keys left on the old master"
    );
}

#[test]
fn a_cluster_url_in_dlock_url_goes_with_backend_redis_on_the_command_line() {
    let cluster = RedisCluster::start();
    let out = output({
        let mut cmd = dlock();
        cmd.env("DLOCK_URL", cluster.url())
            .args(["--backend", "redis", "run", "from-env", "--"])
            .args(["sh", "-c", "echo $DLOCK_TOKEN"]);
        cmd
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");
}

#[test]
fn the_readmes_cluster_acl_works_on_every_master_and_a_weaker_one_is_refused() {
    let mut args = vec!["--user", "dlock", "on", ">pw"];
    args.extend_from_slice(crate::netfaults::redis::MINIMAL_ACL);
    args.extend_from_slice(&[
        "+asking",
        "+cluster|slots",
        "+spublish",
        "+ssubscribe",
        "&dlock:*",
    ]);
    args.extend_from_slice(&["--user", "weak", "on", ">pw", "~dlock:*", "&dlock:wake:*"]);
    args.extend(
        crate::netfaults::redis::MINIMAL_ACL
            .iter()
            .filter(|p| **p != "+publish"),
    );
    // And one whose key pattern is not dlock's: its permissions are checked on dlock's keys too.
    args.extend_from_slice(&["--user", "nokeys", "on", ">pw", "~other:*", "&dlock:wake:*"]);
    args.extend(crate::netfaults::redis::MINIMAL_ACL.iter().skip(2));
    // And one with what a single server needs, but not sharded pub/sub.
    args.extend_from_slice(&["--user", "unsharded", "on", ">pw"]);
    args.extend_from_slice(crate::netfaults::redis::MINIMAL_ACL);
    args.extend_from_slice(&["+asking", "+cluster|slots"]);
    let cluster = RedisCluster::start_with(&args);
    let seeds = cluster.url().replace("redis+cluster://", "");
    let minimal = [format!("redis+cluster://dlock:pw@{seeds}")];
    let weak = [format!("redis+cluster://weak:pw@{seeds}")];
    let dir = LockDir::new();
    let (names, mut holder) = hold_one_per_master(&cluster, &minimal, "acl/", &dir);
    let list = output(dlock_at(&minimal, &["list"]));
    let status = output(dlock_at(&minimal, &["status", &names[2]]));
    holder.kill().unwrap();
    let _ = holder.wait();
    assert_eq!(code(&list), 0, "{}", stderr(&list));
    for name in &names {
        assert!(stdout(&list).contains(name.as_str()), "{}", stdout(&list));
    }
    assert_eq!(code(&status), 0, "{}", stderr(&status));

    let nokeys = [format!("redis+cluster://nokeys:pw@{seeds}")];
    let unsharded = [format!("redis+cluster://unsharded:pw@{seeds}")];
    for (url, refusal) in [
        (&weak, "may not run PUBLISH on dlock:wake:*"),
        (&nokeys, "may not run EVALSHA"),
        (&unsharded, "may not run SPUBLISH on dlock:{NAME}:wake:*"),
    ] {
        let out = output(dlock_at(url, &["run", "x", "--", "true"]));
        assert_eq!(code(&out), 69, "{}", stderr(&out));
        assert!(stderr(&out).contains(refusal), "{}", stderr(&out));
    }
}

#[test]
fn a_call_on_a_half_moved_slot_is_tried_again_until_the_move_ends() {
    let cluster = RedisCluster::start();
    let url = [cluster.url()];
    let dir = LockDir::new();
    let name = cluster.name_on("half/", 0);
    let _holder = start_holder(&url, &[], &name, &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let slot = cluster.slot_of(&format!("dlock:{{{name}}}"));
    // Half moved: the lock's keys that exist are on node 0, the others nowhere, so every script
    // on the lock gets TRYAGAIN until the move ends.
    cluster.begin_move(slot, 0, 2);
    let mut status = dlock_at(&url, &["status", &name])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // More TRYAGAINs than a call follows redirects: the call goes on, within its time.
    wait_until("status to be told TRYAGAIN 8 times", T, || {
        cluster.try_agains(0) >= 8 || status.try_wait().unwrap().is_some()
    });
    cluster.finish_move(slot, 0, 2);
    let out = status.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("held"), "{}", stdout(&out));
}

/// The grant channels node `node` carries for `name`: sharded (`SHARDCHANNELS`) and classic.
fn channels_on(cluster: &RedisCluster, node: usize, name: &str) -> (Vec<String>, Vec<String>) {
    let mut conn = cluster.nodes[node].connection();
    let sharded: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .arg(format!("dlock:{{{name}}}:wake:*"))
        .query(&mut conn)
        .expect("PUBSUB SHARDCHANNELS");
    let classic: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("dlock:*")
        .query(&mut conn)
        .expect("PUBSUB CHANNELS");
    (sharded, classic)
}

/// A holder of `name` and a waiter in line behind it (on node `node`), both with a lease so long
/// (60 s) that the waiter looks again on its own only every 20 s: a grant within a few seconds
/// came by message. The waiter writes its token to the returned file.
fn holder_and_waiter(
    cluster: &RedisCluster,
    name: &str,
    node: usize,
    dir: &LockDir,
) -> (Watched, Watched, std::path::PathBuf) {
    let url = [cluster.url()];
    let ttl = ["--ttl", "60s"];
    let holder = start_holder(&url, &ttl, name, &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let next = dir.file("next");
    let script = format!("echo $DLOCK_TOKEN > {}", next.display());
    let waiter = Watched::start(dlock_at(
        &url,
        &["run", ttl[0], ttl[1], name, "--", "sh", "-c", &script],
    ));
    // It subscribes in the write that queues it, before the attempt.
    wait_until("the waiter to queue", T, || {
        queued_on(cluster, node, name) == 1
    });
    (holder, waiter, next)
}

/// Ends the holder's run and checks that the waiter got the lock by message, well before its own
/// re-check.
fn release_to_waiter(mut holder: Watched, waiter: Watched, next: &std::path::Path) {
    signal(holder.child.id(), libc::SIGTERM);
    holder.wait_for_more("released", 1, T);
    let released = Instant::now();
    wait_for_file(next, T);
    let took = released.elapsed();
    let (status, said) = waiter.finish(T);
    assert_eq!(status, 0, "{said}");
    assert!(
        took < Duration::from_secs(10),
        "the grant took {took:?}: it came by the waiter's re-check, not by message"
    );
    let (_, said) = holder.finish(T);
    assert!(!said.contains("lost"), "{said}");
}

#[test]
fn a_waiter_hears_its_grant_by_sharded_pub_sub_on_the_locks_master_also_after_its_slot_moved() {
    let cluster = RedisCluster::start();
    let dir = LockDir::new();
    let name = cluster.name_on("sharded/", 0);
    let (holder, waiter, next) = holder_and_waiter(&cluster, &name, 0, &dir);
    for node in 0..3 {
        let (sharded, classic) = channels_on(&cluster, node, &name);
        assert!(classic.is_empty(), "node {node} carries {classic:?}");
        // The holder's channel and the waiter's (the holder listened too, in case it waited).
        let expected = if node == 0 { 2 } else { 0 };
        assert_eq!(sharded.len(), expected, "node {node}: {sharded:?}");
    }

    // The slot moves: the old master drops the channel, the waiter listens on the new one.
    let slot = cluster.slot_of(&format!("dlock:{{{name}}}"));
    cluster.move_slot(slot, 0, 1);
    let moved = Instant::now();
    wait_until("the waiter to listen on the new master", T, || {
        channels_on(&cluster, 1, &name).0.len() == 1
    });
    assert!(
        moved.elapsed() < Duration::from_secs(10),
        "the waiter took {:?} to listen on the new master: at its re-check, not when the old \
         one dropped its channel",
        moved.elapsed()
    );
    assert!(channels_on(&cluster, 0, &name).0.is_empty());
    assert_eq!(queued_on(&cluster, 1, &name), 1, "the waiter's place moved");

    release_to_waiter(holder, waiter, &next);
}

#[test]
fn on_nodes_without_sharded_pub_sub_waiters_hear_their_grant_on_the_classic_channel() {
    // As before Redis 7: no SPUBLISH, no SSUBSCRIBE.
    let cluster = RedisCluster::start_with(&[
        "--rename-command",
        "SPUBLISH",
        "",
        "--rename-command",
        "SSUBSCRIBE",
        "",
    ]);
    let dir = LockDir::new();
    let name = cluster.name_on("classic/", 2);
    let (holder, waiter, next) = holder_and_waiter(&cluster, &name, 2, &dir);
    wait_until("the waiter to listen on the classic channel", T, || {
        channels_on(&cluster, 2, &name).1.len() == 2
    });
    release_to_waiter(holder, waiter, &next);
}

/// On a cluster the grant travels by SPUBLISH on the lock's shard channel, which any client of the
/// lock's master may send to: a forged one gives the waiter nothing (see
/// `a_forged_grant_message_gives_a_waiter_nothing`).
#[test]
fn a_forged_sharded_grant_gives_a_waiter_nothing() {
    let cluster = RedisCluster::start();
    let name = cluster.name_on("forged/", 0);
    let master = &cluster.nodes[0];
    super::waiting::forged_grant_gives_nothing(&[cluster.url()], &name, master, 1, |owner| {
        redis::cmd("SPUBLISH")
            .arg(format!("dlock:{{{name}}}:wake:{owner}"))
            .arg(format!("dlock:{{{name}}} 1000000"))
            .query(&mut master.connection())
            .expect("SPUBLISH on the lock's master")
    });
}

/// Seeds that cannot be reached, or that accept and never answer, are passed over at the start:
/// each is tried once with a share of the connect budget, and the run goes on from the first that
/// answers.
#[test]
fn a_dead_or_silent_first_seed_is_passed_over() {
    let target = crate::support::target::Target::suite_cluster();
    let (_dead, dead) = refusing_port();
    // Listening, never accepting: the kernel completes the handshake, and nothing ever answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a silent seed");
    let silent = listener.local_addr().expect("its address").port();
    let live = target.ports[0];
    for seeds in [
        format!("{dead},127.0.0.1:{live}"),
        format!("{silent},127.0.0.1:{live}"),
    ] {
        let url = format!("redis+cluster://127.0.0.1:{seeds}");
        let started = Instant::now();
        let out = output(dlock_at(
            std::slice::from_ref(&url),
            &[
                "--connect-timeout",
                "4s",
                "run",
                "-n",
                "seeds",
                "--",
                "true",
            ],
        ));
        assert_eq!(code(&out), 0, "{url}: {}", stderr(&out));
        assert!(started.elapsed() < Duration::from_secs(4), "{url}");
    }
}
