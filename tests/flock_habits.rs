//! What users of flock(1) type out of habit (plain seconds, `-c`, `dlock NAME -- cmd`, flock's
//! spellings), and options from the environment: the command line beats them, and an error a
//! variable causes names it.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use crate::support::*;

const T: Duration = Duration::from_secs(20);

/// The lock `n` in `dir`, held by a background dlock until dropped.
struct Held(Child);

impl Held {
    fn new(dir: &LockDir) -> Held {
        let pid = dir.file("holder.pid");
        let script = format!("echo $$ > {}; exec sleep 60", pid.display());
        let child = dir
            .dlock(&["run", "n", "--", "sh", "-c", &script])
            .spawn()
            .unwrap();
        read_pid(&pid);
        Held(child)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        signal(self.0.id(), libc::SIGTERM);
        wait_exit(&mut self.0, T);
    }
}

/// Environment variables to set: name and value.
type Vars<'a> = &'a [(&'a str, &'a str)];

/// `dlock --url DIR ARGS...` with these variables set, run to completion within `T`.
fn with_env(dir: &LockDir, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = dir.dlock(args);
    cmd.envs(vars.iter().copied());
    output_within(cmd, T)
}

/// Exit status 64 and one line starting `dlock: ` that says `needle`.
fn assert_usage_error(out: &Output, needle: &str, what: &str) {
    let err = stderr(out);
    assert_eq!(code(out), 64, "{what}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{what}: not one line: {err}"
    );
    assert!(err.starts_with("dlock: "), "{what}: {err}");
    assert!(err.contains(needle), "{what}: {err:?} lacks {needle:?}");
}

/// Runs `dlock ... run ARGS n -- true` on the held `n`; the output and how long it took.
fn try_held(dir: &LockDir, vars: &[(&str, &str)], args: &[&str]) -> (Output, Duration) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["n", "--", "true"]);
    let started = Instant::now();
    let out = with_env(dir, vars, &all);
    (out, started.elapsed())
}

#[test]
fn plain_seconds_are_durations_as_flock_takes_them() {
    let dir = LockDir::new();
    let _held = Held::new(&dir);
    for (vars, args) in [
        (&[][..], &["-w", "0.3"][..]),
        (&[("DLOCK_WAIT", "0.3")][..], &[][..]),
    ] {
        let (out, took) = try_held(&dir, vars, args);
        assert_eq!(code(&out), 75, "{vars:?} {args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("after waiting 300ms"),
            "{}",
            stderr(&out)
        );
        assert!(took >= Duration::from_millis(300), "{took:?}");
    }
    // 0 is flock's --nonblock.
    let (out, took) = try_held(&dir, &[], &["-w", "0"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Every option and variable taking a duration takes plain seconds, whole or decimal, and
    // humantime's units with decimals.
    let free = ["m", "--", "true"];
    for (vars, args) in [
        (
            &[][..],
            &[
                "--ttl",
                "30",
                "--kill-after",
                "2",
                "--connect-timeout",
                "1.5",
                "-w",
                "120",
            ][..],
        ),
        (
            &[][..],
            &["--ttl", ".5", "--kill-after", "0", "-w", "1.5s"][..],
        ),
        (
            &[
                ("DLOCK_TTL", "30"),
                ("DLOCK_KILL_AFTER", "0.5"),
                ("DLOCK_CONNECT_TIMEOUT", "2"),
                ("DLOCK_WAIT", "120"),
            ][..],
            &[][..],
        ),
    ] {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend_from_slice(&free);
        let out = with_env(&dir, vars, &all);
        assert_eq!(code(&out), 0, "{vars:?} {args:?}: {}", stderr(&out));
    }
}

#[test]
fn durations_out_of_range_exit_64_naming_the_limit() {
    let dir = LockDir::new();
    let cases: &[(Vars, &[&str], &str)] = &[
        (
            &[],
            &["run", "-w", "-1", "n", "--", "true"],
            "cannot be negative",
        ),
        (
            &[],
            &["run", "--wait=-5s", "n", "--", "true"],
            "cannot be negative",
        ),
        (
            &[],
            &["run", "--kill-after", "-0.5", "n", "--", "true"],
            "cannot be negative",
        ),
        (
            &[],
            &["run", "-w", "nan", "n", "--", "true"],
            "not a number",
        ),
        (
            &[],
            &["run", "-w", "inf", "n", "--", "true"],
            "not a number",
        ),
        (
            &[],
            &["run", "-w", "2y", "n", "--", "true"],
            "at most 1 year",
        ),
        (
            &[],
            &["run", "-w", "31557601", "n", "--", "true"],
            "at most 1 year",
        ),
        (
            &[],
            &[
                "run",
                "--kill-after",
                "18446744073709551615s",
                "n",
                "--",
                "true",
            ],
            "at most 1 year",
        ),
        (
            &[],
            &["--connect-timeout", "500000000000y", "status", "n"],
            "at most 1 year",
        ),
        // Before this was refused, ZooKeeper's connection deadline overflowed: a panic.
        (
            &[],
            &[
                "-b",
                "zk",
                "-u",
                "zk://127.0.0.1:1",
                "--connect-timeout",
                "500000000000y",
                "status",
                "n",
            ],
            "at most 1 year",
        ),
        (
            &[],
            &["run", "--ttl", "25d", "n", "--", "true"],
            "at most 24days",
        ),
        (
            &[],
            &["run", "--ttl", "0.05", "n", "--", "true"],
            "at least 100ms",
        ),
    ];
    for (vars, args, needle) in cases {
        let out = with_env(&dir, vars, args);
        assert_usage_error(&out, needle, &format!("{vars:?} {args:?}"));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
