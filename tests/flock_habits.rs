//! What users of flock(1) type out of habit (plain seconds, `-c`, `dlock NAME -- cmd`, flock's
//! spellings), and options from the environment: the command line beats them, and an error a
//! variable causes names it.

use std::os::unix::ffi::OsStrExt;
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
        // flock reads its number with strtod(3): an exponent and a `+` are seconds too.
        (&[][..], &["-w", "3e-1"][..]),
        (&[("DLOCK_WAIT", "+.3")][..], &[][..]),
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
            &[][..],
            &["--ttl", "3E1", "--kill-after", "+2", "-w", "1e3"][..],
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
            &["run", "-w", "5M", "n", "--", "true"],
            "M is months: write 5m for minutes",
        ),
        (
            &[("DLOCK_WAIT", "1h 30M")],
            &["run", "n", "--", "true"],
            "write 1h 30m for minutes",
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
            &["run", "--ttl", "366d", "n", "--", "true"],
            "the ttl must be at most 1 year",
        ),
        // ZooKeeper's own limit, named once the backend is known, before any connection.
        (
            &[],
            &[
                "-b",
                "zk",
                "-u",
                "zk://127.0.0.1:1",
                "run",
                "--ttl",
                "25d",
                "n",
                "--",
                "true",
            ],
            "--ttl 25d is too long for the zk backend: at most 24d",
        ),
        (
            &[("DLOCK_TTL", "30d")],
            &[
                "-b",
                "zk",
                "-u",
                "zk://127.0.0.1:1",
                "run",
                "n",
                "--",
                "true",
            ],
            "DLOCK_TTL 30d is too long for the zk backend: at most 24d",
        ),
        (
            &[],
            &["run", "--ttl", "0.05", "n", "--", "true"],
            "at least 100ms",
        ),
        (
            &[("DLOCK_WAIT", "-1")],
            &["run", "n", "--", "true"],
            "invalid DLOCK_WAIT '-1': a duration cannot be negative",
        ),
        (
            &[("DLOCK_CONNECT_TIMEOUT", "2y")],
            &["status", "n"],
            "invalid DLOCK_CONNECT_TIMEOUT '2y': too long: at most 1 year",
        ),
    ];
    for (vars, args, needle) in cases {
        // A case that names its own URL is not given the directory's too (two backends' URLs
        // on one level are a usage error of their own).
        let out = if args.contains(&"-u") {
            let mut cmd = dlock();
            cmd.envs(vars.iter().copied()).args(args.iter());
            output_within(cmd, T)
        } else {
            with_env(&dir, vars, args)
        };
        assert_usage_error(&out, needle, &format!("{vars:?} {args:?}"));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `--connect-timeout 0` (or anything below 100ms) would fail at once on some backends and
/// connect without a limit on others: it is refused, naming the least value, and nothing runs.
#[test]
fn a_connect_timeout_below_the_least_is_refused_naming_it() {
    let dir = LockDir::new();
    let ran = dir.file("ran");
    let touch = format!("touch {}", ran.display());
    let run = ["run", "n", "--", "sh", "-c", touch.as_str()];
    for value in ["0", "0s", "0.05", "99ms"] {
        let mut args = vec!["--connect-timeout", value];
        args.extend_from_slice(&run);
        let out = with_env(&dir, &[], &args);
        assert_usage_error(&out, "at least 100ms", value);
        let out = with_env(&dir, &[("DLOCK_CONNECT_TIMEOUT", value)], &run);
        assert_usage_error(&out, "at least 100ms", value);
    }
    assert!(!ran.exists(), "the command ran");
    let mut args = vec!["--connect-timeout", "100ms"];
    args.extend_from_slice(&run);
    assert_eq!(code(&with_env(&dir, &[], &args)), 0);
    assert!(ran.exists(), "the least value is accepted");
}

#[test]
fn an_error_from_the_environment_names_the_variable() {
    let dir = LockDir::new();
    let run = ["run", "n", "--", "true"];
    for (var, value, why) in [
        ("DLOCK_WAIT", "abc", "expected number"),
        ("DLOCK_NO_WAIT", "maybe", "use 1 or 0"),
        (
            "DLOCK_BACKEND",
            "consul",
            "file, redis, zk, etcd, postgres, mysql",
        ),
        ("DLOCK_CONFLICT_EXIT_CODE", "300", "0..=255"),
        ("DLOCK_TTL", "1ms", "at least 100ms"),
        ("DLOCK_KILL_AFTER", "x", "expected number"),
        ("DLOCK_CONNECT_TIMEOUT", "", "empty"),
    ] {
        let out = with_env(&dir, &[(var, value)], &run);
        let said = format!("dlock: invalid {var} '{value}'");
        assert_usage_error(&out, &said, var);
        assert!(stderr(&out).contains(why), "{var}: {}", stderr(&out));
    }
    let mut cmd = dlock();
    cmd.env("DLOCK_URL", std::ffi::OsStr::from_bytes(b"/tmp/\xff"))
        .args(["status", "n"]);
    assert_usage_error(&output(cmd), "DLOCK_URL is not valid UTF-8", "DLOCK_URL");
    // The same value on the command line is named by its option.
    let out = with_env(&dir, &[], &["run", "--wait", "abc", "n", "--", "true"]);
    assert_usage_error(&out, "invalid value 'abc' for '--wait", "--wait abc");
    // A command-line error is reported as such, also with a bad variable beside it.
    let out = with_env(
        &dir,
        &[("DLOCK_WAIT", "abc")],
        &["run", "--ttl", "zz", "n", "--", "true"],
    );
    assert_usage_error(&out, "'--ttl", "--ttl zz");
    // Both of two variables that exclude each other: both named.
    let out = with_env(&dir, &[("DLOCK_NO_WAIT", "1"), ("DLOCK_WAIT", "1s")], &run);
    assert_usage_error(&out, "DLOCK_NO_WAIT and DLOCK_WAIT", "both variables");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn wait_or_not_on_the_command_line_beats_the_environment() {
    let dir = LockDir::new();
    let _held = Held::new(&dir);
    // -n over a fleet-wide DLOCK_WAIT: fails at once.
    let (out, took) = try_held(&dir, &[("DLOCK_WAIT", "10s")], &["-n"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(took < Duration::from_secs(5), "{took:?}");
    // A value the command line overrides is not even read.
    let (out, _) = try_held(&dir, &[("DLOCK_WAIT", "abc")], &["-w", "0.1"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // Nor one that -n overrides, nor a DLOCK_NO_WAIT that -w overrides, on run and hold alike.
    let (out, _) = try_held(&dir, &[("DLOCK_WAIT", "abc")], &["-n"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let (out, _) = try_held(&dir, &[("DLOCK_NO_WAIT", "abc")], &["-w", "0.1"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // (hold from a shell, its owner; busy, it holds nothing.)
    let mut hold = program("sh");
    hold.arg("-c")
        .arg(format!(
            "'{}' --url '{}' hold -n n; exit $?",
            dlock_bin(),
            dir.path().display()
        ))
        .env("DLOCK_WAIT", "abc");
    let out = output_within(hold, T);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // Not overridden, it is read, and refused.
    let (out, _) = try_held(&dir, &[("DLOCK_WAIT", "abc")], &[]);
    assert_usage_error(&out, "DLOCK_WAIT", "a bad DLOCK_WAIT");
    // DLOCK_NO_WAIT alone fails at once; -w on the command line waits anyway.
    let (out, took) = try_held(&dir, &[("DLOCK_NO_WAIT", "1")], &[]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (out, took) = try_held(&dir, &[("DLOCK_NO_WAIT", "yes")], &["-w", "0.3"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("after waiting 300ms"),
        "{}",
        stderr(&out)
    );
    assert!(took >= Duration::from_millis(300), "{took:?}");
    let (out, _) = try_held(&dir, &[("DLOCK_NO_WAIT", "0"), ("DLOCK_WAIT", "0.1")], &[]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // Both on the command line: the user's own contradiction.
    let (out, _) = try_held(&dir, &[], &["-n", "-w", "1s"]);
    assert_usage_error(&out, "--no-wait cannot be used with --wait", "-n -w");
}

#[test]
fn a_backend_and_url_on_the_command_line_beat_a_mismatched_environment() {
    let dir = LockDir::new();
    // --url DIR over DLOCK_BACKEND=redis (as a parent dlock on Redis sets it): the file backend.
    let out = with_env(
        &dir,
        &[("DLOCK_BACKEND", "redis")],
        &["run", "m", "--", "true"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(dir.file("m.lock").exists());
    // --backend file over a DLOCK_URL for another backend: the default directory, read only.
    let mut status = dlock();
    status.env("DLOCK_URL", "zk://127.0.0.1:1").args([
        "-b",
        "file",
        "-v",
        "status",
        "dlock-test-unheld-name",
    ]);
    let out = output_within(status, T);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("using file:"), "{}", stderr(&out));
    // A DLOCK_URL that fits the backend on the command line is kept.
    let mut run = dlock();
    run.env("DLOCK_URL", dir.path())
        .args(["-b", "file", "run", "k", "--", "true"]);
    let out = output_within(run, T);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(dir.file("k.lock").exists());
    // A DLOCK_BACKEND and a DLOCK_URL that contradict each other are refused, naming both,
    // whatever the command line says: one level holds one backend and its URL.
    let mut run = dlock();
    run.env("DLOCK_URL", dir.path())
        .env("DLOCK_BACKEND", "zk")
        .args(["-b", "file", "run", "k", "--", "true"]);
    let out = output_within(run, T);
    assert_usage_error(&out, "DLOCK_BACKEND zk does not fit DLOCK_URL", "env pair");
}

#[test]
fn dash_c_runs_one_shell_command_as_flock_does() {
    let dir = LockDir::new();
    let out_file = dir.file("out");
    let script = format!(
        "echo \"$0|$#|$DLOCK_NAME|${{BASH_VERSION:+bash}}\" > {}; exit 3",
        out_file.display()
    );
    // flock(1) runs `$SHELL -c COMMAND`, /bin/sh when SHELL is unset or empty: $0 is the shell.
    for (shell, flag, want) in [
        (Some("/bin/sh"), "-c", "/bin/sh|0|n|"),
        (None, "-c", "/bin/sh|0|n|"),
        (Some(""), "--command", "/bin/sh|0|n|"),
        (Some("/bin/bash"), "--command", "/bin/bash|0|n|bash"),
    ] {
        let mut cmd = dir.dlock(&["run", "n", flag, &script]);
        match shell {
            Some(shell) => cmd.env("SHELL", shell),
            None => cmd.env_remove("SHELL"),
        };
        let out = output_within(cmd, T);
        assert_eq!(code(&out), 3, "{shell:?}: {}", stderr(&out));
        let got = std::fs::read_to_string(&out_file).unwrap();
        assert_eq!(got.trim_end(), want, "SHELL={shell:?}");
    }
    // Lock names may come after -c when -c comes first.
    let script = format!("echo $DLOCK_LOCKS > {}", out_file.display());
    let out = output_within(dir.dlock(&["run", "-c", &script, "a", "b"]), T);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&out_file).unwrap().trim_end(), "2");
}

#[test]
fn dash_c_misused_is_refused_before_anything_is_taken() {
    let dir = LockDir::new();
    // flock(1) says "-c requires exactly one command argument" to `flock LOCK -c echo hi`.
    let out = output(dir.dlock(&["run", "n", "-c", "echo", "hi"]));
    assert_usage_error(
        &out,
        "quote the whole shell command, as in `-c 'echo hi'`",
        "-c echo hi",
    );
    let out = output(dir.dlock(&["run", "n", "-c", "echo", "--", "true"]));
    assert_usage_error(
        &out,
        "-c runs one shell command instead of the COMMAND after `--`",
        "-c and --",
    );
    // A SHELL that cannot run is named as SHELL, with the status of a command not found.
    let mut cmd = dir.dlock(&["run", "n", "-c", "true"]);
    cmd.env("SHELL", "/nonexistent/shell");
    let out = output(cmd);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("/nonexistent/shell"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("from SHELL"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_lock_name_where_the_command_should_be_suggests_dlock_run() {
    let dir = LockDir::new();
    for (args, want) in [
        (&["nightly", "--", "true"][..], "dlock run nightly -- true"),
        (
            &["-n", "nightly", "--", "echo", "a b"][..],
            "dlock run -n nightly -- echo 'a b'",
        ),
        (
            &["-q", "nightly", "-c", "echo hi"][..],
            "dlock -q run nightly -c 'echo hi'",
        ),
    ] {
        let out = output(dlock_with(args));
        assert_usage_error(&out, want, &format!("{args:?}"));
    }
    // Not a run: no suggestion.
    let out = output(dlock_with(&["frobnicate"]));
    assert_usage_error(&out, "frobnicate", "frobnicate");
    assert!(!stderr(&out).contains("dlock run"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

fn dlock_with(args: &[&str]) -> std::process::Command {
    let mut cmd = dlock();
    cmd.args(args);
    cmd
}

#[test]
fn flock_spellings_of_the_options_work() {
    let dir = LockDir::new();
    let _held = Held::new(&dir);
    for args in [
        &["--nonblock"][..],
        &["--nb"],
        &["--timeout", "0.1"],
        &["-e", "-n"],
    ] {
        let (out, _) = try_held(&dir, &[], args);
        assert_eq!(code(&out), 75, "{args:?}: {}", stderr(&out));
    }
}

/// flock's `-o`/`--close` is accepted and changes nothing (the command never gets the lock's
/// descriptor), and `-n` may be given twice, as flock takes it: busy is still 75, free runs.
#[test]
fn close_and_a_repeated_no_wait_are_taken_as_flock_takes_them() {
    let dir = LockDir::new();
    for args in [
        &["-o"][..],
        &["--close"][..],
        &["-n", "-n"][..],
        &["-o", "-n", "-n"][..],
    ] {
        let (out, _) = try_held(&dir, &[], args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    }
    let _held = Held::new(&dir);
    let (out, took) = try_held(&dir, &[], &["-n", "-n", "-o"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(took < Duration::from_secs(5), "{took:?}");
}
