//! A lock lost while the command runs is never reported as the command's success: a run whose
//! lock was broken while dlock was stopped ends with 79 even when the command ended by itself.

use super::T;
use crate::support::target::Target;
use crate::support::*;

/// dlock is stopped (SIGSTOP) while its command runs, the lock is broken and taken by someone
/// else, and the command ends before dlock runs again: the run must not report the command's
/// success, since the command did not hold the lock to its end. Exit 79.
pub fn a_run_whose_lock_was_lost_before_the_command_ended_exits_79(t: &Target) {
    let started = t.scratch.file("lost-started");
    let go = t.scratch.file("lost-go");
    let script = format!(
        "echo $$ > {}; while [ ! -e {} ]; do sleep 0.02; done",
        started.display(),
        go.display()
    );
    let mut holder = t
        .dlock(&["run", "--ttl", "1s", "lost-end", "--", "sh", "-c", &script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let command = read_pid(&started);
    signal(holder.id(), libc::SIGSTOP);
    let out = output(t.dlock(&["release", "--force", "lost-end"]));
    assert_eq!(code(&out), 0, "release --force: {}", stderr(&out));
    let out = output(t.dlock(&["run", "-n", "lost-end", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "another run takes the lock: {}",
        stderr(&out)
    );
    std::fs::write(&go, "").unwrap();
    wait_until("the command to end", T, || !alive(command));
    signal(holder.id(), libc::SIGCONT);
    let status = wait_exit(&mut holder, T);
    let mut err = String::new();
    std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(79), "{err}");
    assert!(err.contains("lost"), "{err}");
}
