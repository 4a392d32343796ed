//! A server that answers "not now" while a waiter waits (PostgreSQL restarting: "the database system
//! is starting up"; a replica the sentinels name as the master; a cluster slot being moved): an
//! outage to wait through within `--wait`, not a refusal.

use std::time::{Duration, Instant};

use super::T;
use crate::redis::cluster_server::RedisCluster;
use crate::redis::server::dlock_at;
#[cfg(feature = "postgres")]
use crate::support::relay::Relay;
use crate::support::target::Target;
use crate::support::watched::Watched;
use crate::support::*;

/// PostgreSQL's ErrorResponse for a connection made while it starts up (SQLSTATE 57P03).
#[cfg(feature = "postgres")]
fn postgres_starting_up() -> Vec<u8> {
    let fields = b"SFATAL\0VFATAL\0C57P03\0Mthe database system is starting up\0\0";
    let mut reply = vec![b'E'];
    reply.extend_from_slice(&(fields.len() as i32 + 4).to_be_bytes());
    reply.extend_from_slice(fields);
    reply
}

/// A waiter whose server restarts (its connection ends, then each new one is told the server is
/// starting up) waits through it and gets the lock once the holder is done.
#[cfg(feature = "postgres")]
#[test]
fn a_postgres_waiter_waits_through_a_restart() {
    let t = Target::suite_postgres();
    let relay = Relay::start(([127, 0, 0, 1], t.ports[0]).into());
    let server = format!("127.0.0.1:{}", t.ports[0]);
    let relayed = format!("127.0.0.1:{}", relay.port());
    let through: Vec<String> = t
        .args
        .iter()
        .map(|a| a.replace(&server, &relayed))
        .collect();
    let (inside, go) = (t.scratch.file("in"), t.scratch.file("go"));
    let script = format!(
        "touch '{}'; i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        inside.display(),
        go.display()
    );
    let mut holder = t
        .dlock(&["run", "--ttl", "30s", "restart", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for_file(&inside, T);
    let mut waiter = dlock();
    waiter
        .args(&through)
        .args(["-v", "run", "-w", "60s", "restart", "--", "true"]);
    let mut waiter = Watched::start(waiter);
    waiter.wait_for("waiting for lock", T);
    relay.restart_answering(&postgres_starting_up());
    // Told "starting up" three times, or gone: before the fix it exited 69 at the first.
    wait_until("the waiter to be told three times", T, || {
        relay.answered_restarting() >= 3 || waiter.child.try_wait().ok().flatten().is_some()
    });
    relay.serve();
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut holder, T).success());
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 0, "the waiter waits through the restart:\n{stderr}");
    assert!(
        stderr.contains("the database system is starting up"),
        "the outage is told:\n{stderr}"
    );
}

/// The sentinels name a replica as the master (as they do for a moment in a failover; here a
/// sentinel front names a replica for good): it answers READONLY, which is "not now". `-n` exits 75
/// (busy for now), not 69, and a waiter waits its whole `--wait`, saying why.
#[test]
fn a_replica_named_as_the_master_is_not_now() {
    let t = Target::sentinel_set(0, Duration::from_secs(60));
    let replica = t.ports[1];
    let args = t.args_through(&[replica, replica, t.ports[2]]);
    let at = |more: &[&str]| {
        let mut cmd = dlock();
        cmd.args(&args).args(more);
        cmd
    };
    let out = output(at(&["run", "-n", "named-replica", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let started = Instant::now();
    let out = output(at(&["run", "-w", "3s", "named-replica", "--", "true"]));
    let waited = started.elapsed();
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        waited >= Duration::from_millis(2500),
        "{waited:?}: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("read only replica"),
        "{}",
        stderr(&out)
    );
}

/// A lock whose slot is half moved between two cluster nodes (its keys that exist on the source,
/// the others nowhere): every script on it is told TRYAGAIN until the move ends. "Not now": `-n`
/// exits 75, and a waiter gets the lock once the move ends.
#[test]
fn a_slot_being_moved_is_not_now() {
    let cluster = RedisCluster::start();
    let url = [cluster.url()];
    let name = cluster.name_on("moving", 0);
    // A run first, so the lock has keys (its counter, its last run) on node 0.
    let out = output(dlock_at(&url, &["run", &name, "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let slot = cluster.slot_of(&format!("dlock:{{{name}}}"));
    cluster.begin_move(slot, 0, 2);
    let out = output(dlock_at(&url, &["run", "-n", &name, "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let mut waiter = Watched::start(dlock_at(&url, &["run", "-w", "60s", &name, "--", "true"]));
    waiter.wait_for("cannot serve the lock now", T);
    cluster.finish_move(slot, 0, 2);
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 0, "{stderr}");
}
