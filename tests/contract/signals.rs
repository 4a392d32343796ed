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
        let status = wait_exit_after(&format!("SIG{name} sent:"), &mut dlock, T);
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

/// The signals dlock waits for on its main thread (sigtimedwait): a thread of dlock's or of a
/// library's that could take one would lose it to dlock, which would then wait for ever for a
/// SIGTERM it should forward or a SIGCHLD that says its command ended.
const WAITED_FOR: [i32; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCHLD,
];

/// The threads of `pid` other than its main one, each with the signals of `WAITED_FOR` it does
/// not block.
fn threads_taking_signals(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the threads of dlock") {
        let task = task.expect("a thread").path();
        if task.file_name().and_then(|n| n.to_str()) == Some(&pid.to_string()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue; // ended meanwhile
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| u64::from_str_radix(v.trim(), 16).expect("a signal mask"))
                .expect("a signal mask field")
        };
        let blocked = field("SigBlk:");
        let open: Vec<i32> = WAITED_FOR
            .into_iter()
            .filter(|s| blocked & (1 << (s - 1)) == 0)
            .collect();
        if !open.is_empty() {
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            found.push(format!("{} takes {open:?}", name.trim()));
        }
    }
    found
}

/// Only dlock's main thread can take the signals it waits for, whatever threads the backend's
/// client starts, while holding and while waiting.
pub fn no_thread_but_the_main_one_takes_a_signal(t: &Target) {
    let holder = super::Holding::start(t, &["sig/threads"]);
    let waiter = waiting(t, &["run", "sig/threads", "--", "true"]);
    for (who, pid) in [("holder", holder.dlock.id()), ("waiter", waiter.child.id())] {
        let found = threads_taking_signals(pid);
        assert!(found.is_empty(), "the {who}'s threads: {found:?}");
    }
    assert!(holder.let_go().success());
    let (status, err) = waiter.finish(T);
    assert_eq!(status, 0, "{err}");
}
