//! Signals: forwarded to the command, whose status dlock returns; while waiting they end the wait
//! with 128+N and leave nothing held; SIGKILL of dlock takes its command with it.

use std::process::Child;

use super::{waiting, T};
use crate::support::target::Target;
use crate::support::*;

/// Starts `dlock run RUN n -- sh` with a child that traps every forwarded signal into the file
/// `got-TAG` and exits 3 when it gets one, and records its pid once the traps are set.
fn start_trapping_child(t: &Target, tag: &str, run: &[&str]) -> (Child, u32) {
    let pid = t.scratch.file(&format!("child-{tag}.pid"));
    let script = format!(
        "for s in INT TERM HUP QUIT USR1 USR2; do trap \"echo $s > {got}; exit 3\" $s; done; \
         echo $$ > {pid}; while :; do sleep 0.05; done",
        pid = pid.display(),
        got = t.scratch.file(&format!("got-{tag}")).display()
    );
    let mut args = vec!["run"];
    args.extend_from_slice(run);
    args.extend_from_slice(&["n", "--", "sh", "-c", &script]);
    let child = t.dlock(&args).spawn().unwrap();
    let pid = read_pid(&pid);
    (child, pid)
}

pub fn signals_are_forwarded_to_the_child_and_its_status_returned(t: &Target) {
    for (sig, name) in [
        (libc::SIGINT, "INT"),
        (libc::SIGTERM, "TERM"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGUSR2, "USR2"),
    ] {
        let (mut dlock, child) = start_trapping_child(t, name, &[]);
        signal(dlock.id(), sig);
        let status = wait_exit(&mut dlock, T);
        assert_eq!(status.code(), Some(3), "{name}");
        assert_eq!(
            std::fs::read_to_string(t.scratch.file(&format!("got-{name}")))
                .unwrap()
                .trim(),
            name
        );
        assert!(!alive(child));
        assert_eq!(
            code(&output(t.dlock(&["status", "n"]))),
            1,
            "released after {name}"
        );
    }
}

pub fn signal_while_waiting_ends_the_wait_with_128_plus_n_and_leaves_nothing(t: &Target) {
    let (mut holder, _) = start_trapping_child(t, "holder", &[]);
    let ran = t.scratch.file("waiter-ran");
    let waiter = waiting(t, &["run", "n", "--", "touch", ran.to_str().unwrap()]);
    signal(waiter.child.id(), libc::SIGTERM);
    let (status, err) = waiter.finish(T);
    assert_eq!(status, 128 + libc::SIGTERM, "{err}");
    assert!(!ran.exists());
    // The holder is untouched, and the only holder.
    let out = output(t.dlock(&["status", "--json", "n"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["holders"].as_array().unwrap().len(), 1);
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, T);
}

pub fn sigkill_of_dlock_kills_the_child_and_frees_the_lock(t: &Target) {
    // A short lease, so that a backend with leases frees the lock soon (the file backend at once).
    let (mut holder, child) = start_trapping_child(t, "holder", &["--ttl", "1s"]);
    let marker = t.scratch.file("next");
    let mut next = t
        .dlock(&["run", "n", "--", "touch", marker.to_str().unwrap()])
        .spawn()
        .unwrap();
    signal(holder.id(), libc::SIGKILL);
    wait_exit(&mut holder, T);
    wait_until("the orphaned child to die", T, || !alive(child));
    let status = wait_exit(&mut next, T);
    assert_eq!(status.code(), Some(0));
    assert!(marker.exists());
}
