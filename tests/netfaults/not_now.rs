//! A server that answers "not now" while a waiter waits (PostgreSQL restarting: "the database system
//! is starting up"): an outage to wait through within `--wait`, not a refusal.

use super::T;
use crate::support::relay::Relay;
use crate::support::target::Target;
use crate::support::watched::Watched;
use crate::support::*;

/// PostgreSQL's ErrorResponse for a connection made while it starts up (SQLSTATE 57P03).
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
