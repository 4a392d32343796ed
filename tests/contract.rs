//! What every backend owes the user, written once and run on each backend: the child learns its
//! lock and an increasing token, 16 contenders x 20 runs lose no update, and each mode admits exactly as many
//! holders as it should.

use std::process::{Child, Command};
use std::time::Duration;

use crate::support::redis_server::{Comeback, RedisServer};
use crate::support::target::Target;
use crate::support::*;

const T: Duration = Duration::from_secs(120);

/// Three runs: the child sees NAME and the backend, and each token is above the last.
pub fn tokens_increase_and_the_child_learns_its_lock(t: &Target, backend: &str) {
    let mut last = 0u64;
    for _ in 0..3 {
        let out = output(t.dlock(&[
            "run",
            "env-test",
            "--",
            "sh",
            "-c",
            "echo \"$DLOCK_NAME|$DLOCK_BACKEND|$DLOCK_TOKEN\"",
        ]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let line = stdout(&out);
        let fields: Vec<&str> = line.trim().split('|').collect();
        assert_eq!(&fields[..2], &["env-test", backend]);
        let token: u64 = fields[2].parse().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
}

/// `count` shell loops, each running `dlock run ARGS counter -- sh -c SCRIPT` `iterations` times.
fn contenders(
    t: &Target,
    count: usize,
    iterations: usize,
    mode: &[&str],
    script: &str,
) -> Vec<Child> {
    let mut args = vec!["run"];
    args.extend_from_slice(mode);
    args.extend_from_slice(&["counter", "--", "sh", "-c", script]);
    let run = t.shell_words(&args);
    (0..count)
        .map(|_| {
            Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "for i in $(seq {iterations}); do {run} || exit 1; done"
                ))
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Read-modify-write of a counter file under the lock, by `count` x `iterations` runs.
pub fn contenders_lose_no_update(t: &Target, count: usize, iterations: usize) {
    let counter = t.scratch_file("counter");
    std::fs::write(&counter, "0").unwrap();
    let rmw = format!("n=$(cat {counter}); echo $((n + 1)) > {counter}");
    for mut c in contenders(t, count, iterations, &[], &rmw) {
        assert!(wait_exit(&mut c, T).success());
    }
    let total = std::fs::read_to_string(&counter).unwrap();
    assert_eq!(total.trim(), (count * iterations).to_string());
}

/// Contenders whose critical section records how many are inside at once; returns the peak.
fn peak_concurrency(t: &Target, mode: &[&str], count: usize) -> usize {
    let inside = t.scratch_file("inside");
    std::fs::create_dir_all(&inside).unwrap();
    // Each holder drops a file named by its pid, counts the files, and waits a little for company.
    let section = format!(
        "touch {inside}/$$; ls {inside} | wc -l >> {inside}.peaks; sleep 0.2; rm {inside}/$$"
    );
    for mut c in contenders(t, count, 3, mode, &section) {
        assert!(wait_exit(&mut c, T).success());
    }
    let peaks = std::fs::read_to_string(format!("{inside}.peaks")).unwrap();
    peaks
        .lines()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap()
}

pub fn shared_holders_run_together(t: &Target) {
    assert!(peak_concurrency(t, &["--shared"], 6) >= 2);
}

pub fn limit_3_never_has_more_than_3_and_does_reach_3(t: &Target) {
    assert_eq!(peak_concurrency(t, &["--limit", "3"], 8), 3);
}

pub fn exclusive_holders_never_overlap(t: &Target) {
    assert_eq!(peak_concurrency(t, &[], 6), 1);
}

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

fn redis() -> Target {
    Target::redis(vec![RedisServer::start()], Comeback::KeepingData)
}

macro_rules! on_every_backend {
    ($($scenario:ident($($arg:expr),*);)*) => {
        mod file {
            use super::*;
            $(#[test] fn $scenario() { super::$scenario(&Target::file_backend() $(, $arg)*); })*
        }
        mod redis {
            $(#[test] fn $scenario() { super::$scenario(&super::redis() $(, $arg)*); })*
        }
        mod zk {
            use super::*;
            $(#[test] fn $scenario() { super::$scenario(&Target::zk_backend() $(, $arg)*); })*
        }
    };
}

on_every_backend! {
    contenders_lose_no_update(16, 20);
    shared_holders_run_together();
    limit_3_never_has_more_than_3_and_does_reach_3();
    exclusive_holders_never_overlap();
    a_run_whose_lock_was_lost_before_the_command_ended_exits_79();
}

#[test]
fn file_tokens_increase_and_the_child_learns_its_lock() {
    tokens_increase_and_the_child_learns_its_lock(&Target::file_backend(), "file");
}

#[test]
fn redis_tokens_increase_and_the_child_learns_its_lock() {
    tokens_increase_and_the_child_learns_its_lock(&redis(), "redis");
}

#[test]
fn zk_tokens_increase_and_the_child_learns_its_lock() {
    tokens_increase_and_the_child_learns_its_lock(&Target::zk_backend(), "zk");
}
