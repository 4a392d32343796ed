//! Re-entrancy is proven, never trusted: a nested `dlock run` skips a lock only when a living
//! ancestor dlock still holds it, in the backend, in a mode that covers the request. A copied,
//! stale or typed `DLOCK_HELD`, a daemon that outlived its dlock, or an exclusive request inside
//! the run's own shared hold must never let a command run beside another holder.

use std::fs::File;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::redis_server::RedisServer;
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// `dlock --url DIR ARGS` as a shell command, for a nested run inside a holder's command.
fn nested(dir: &LockDir, args: &str) -> String {
    format!("{} --url '{}' {args}", dlock_bin(), dir.path().display())
}

/// Shell that runs `command` and writes its exit status to `file` (whole, by a rename).
fn record_status(command: &str, file: &std::path::Path) -> String {
    let f = file.display();
    format!("{command}; echo $? > '{f}.tmp'; mv '{f}.tmp' '{f}'")
}

/// The status a command recorded with `record_status`.
fn recorded_status(file: &std::path::Path) -> i32 {
    wait_for_file(file, T);
    let text = std::fs::read_to_string(file).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("status {text:?}"))
}

/// Runs `cmd` to completion within `limit` (a deadlock fails the test instead of hanging it),
/// with its output kept in files named after `label`.
fn finish_within(dir: &LockDir, label: &str, mut cmd: Command, limit: Duration) -> Output {
    let (out, err) = (
        dir.file(&format!("{label}.out")),
        dir.file(&format!("{label}.err")),
    );
    cmd.stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap());
    let mut child = cmd.spawn().expect("start dlock");
    let status = wait_exit(&mut child, limit);
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

/// A `dlock` holding a lock in the background until dropped (or `finish`ed).
struct Background(Option<Child>);

impl Background {
    /// `cmd` is a `dlock ... run ARGS` still missing its command: the command announces that the
    /// lock is held by creating `marker`, then sleeps.
    fn hold(mut cmd: Command, marker: &std::path::Path) -> Background {
        let script = format!("touch '{}'; exec sleep 60", marker.display());
        let child = cmd
            .args(["--", "sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_file(marker, T);
        Background(Some(child))
    }

    /// `dlock run ARGS -- SCRIPT` in the background, not waiting for anything.
    fn start(mut cmd: Command, script: &str) -> Background {
        cmd.args(["--", "sh", "-c", script]).stderr(Stdio::null());
        Background(Some(cmd.spawn().unwrap()))
    }

    fn finish(mut self) {
        if let Some(mut child) = self.0.take() {
            if child.try_wait().unwrap().is_none() {
                signal(child.id(), libc::SIGTERM);
            }
            wait_exit(&mut child, T);
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `DLOCK_HELD` a finished `dlock run ARGS` gave its command.
fn held_variable_of(mut cmd: Command) -> String {
    cmd.args(["--", "sh", "-c", "printf %s \"$DLOCK_HELD\""]);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let held = stdout(&out);
    assert!(!held.is_empty());
    held
}

#[test]
fn a_held_variable_copied_from_a_finished_holder_does_not_skip_the_lock() {
    let dir = LockDir::new();
    let held = held_variable_of(dir.dlock(&["run", "n"]));
    let other = Background::hold(dir.dlock(&["run", "n"]), &dir.file("in"));
    let ran = dir.file("ran");
    let mut nested = dir.dlock(&["run", "-n", "n", "--", "touch", ran.to_str().unwrap()]);
    nested.env("DLOCK_HELD", &held);
    let out = output(nested);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("is busy"), "{}", stderr(&out));
    assert!(!ran.exists(), "ran beside the real holder");
    other.finish();
}

#[test]
fn a_typed_variable_naming_the_real_holder_does_not_skip_the_lock() {
    let dir = LockDir::new();
    // The real holder's own claim, as anyone who reads its environment could copy it, beside the
    // bare `LOCATION<TAB>NAME` line earlier versions trusted.
    let claim = dir.file("claim");
    let script = format!(
        "printf %s \"$DLOCK_HELD\" > '{c}.tmp'; mv '{c}.tmp' '{c}'; exec sleep 60",
        c = claim.display()
    );
    let holder = Background::start(dir.dlock(&["run", "n"]), &script);
    wait_for_file(&claim, T);
    let claim = std::fs::read_to_string(&claim).unwrap();
    let location = claim.split('\t').next().unwrap();
    let typed = format!("{claim}\n{location}\tn\n");
    let ran = dir.file("ran");
    let mut nested = dir.dlock(&["run", "-n", "n", "--", "touch", ran.to_str().unwrap()]);
    nested.env("DLOCK_HELD", &typed);
    let out = output(nested);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(!ran.exists(), "ran beside the real holder");
    holder.finish();
}

#[test]
fn a_daemon_left_behind_by_its_dlock_acquires_normally() {
    let dir = LockDir::new();
    let (go, ran, status) = (dir.file("go"), dir.file("ran"), dir.file("status"));
    // The command leaves a background job behind and exits at once; the job runs a nested dlock
    // of the same lock once the test says go, long after its dlock released the lock.
    let job = record_status(
        &nested(&dir, &format!("run -n n -- touch '{}'", ran.display())),
        &status,
    );
    let script = format!(
        "( i=0; while [ ! -e '{go}' ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done; {job} ) \
         >/dev/null 2>&1 &",
        go = go.display()
    );
    let out = output(dir.dlock(&["run", "n", "--", "sh", "-c", &script]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let other = Background::hold(dir.dlock(&["run", "n"]), &dir.file("in"));
    File::create(&go).unwrap();
    assert_eq!(recorded_status(&status), 75);
    assert!(!ran.exists(), "the daemon ran beside the real holder");
    other.finish();
}

#[test]
fn a_parent_that_lost_its_lock_no_longer_covers_a_nested_run() {
    let dir = LockDir::new();
    let (inside, go, ran, status) = (
        dir.file("inside"),
        dir.file("go"),
        dir.file("ran"),
        dir.file("status"),
    );
    let job = record_status(
        &nested(&dir, &format!("run -n n -- touch '{}'", ran.display())),
        &status,
    );
    // A long lease: the parent checks its lock only every 20s, well after the nested run.
    let script = format!(
        "touch '{inside}'; i=0; while [ ! -e '{go}' ] && [ $i -lt 1500 ]; do sleep 0.02; \
         i=$((i+1)); done; {job}",
        inside = inside.display(),
        go = go.display()
    );
    let parent = Background::start(dir.dlock(&["run", "--ttl", "60s", "n"]), &script);
    wait_for_file(&inside, T);
    let out = output(dir.dlock(&["release", "--force", "n"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let other = Background::hold(dir.dlock(&["run", "n"]), &dir.file("in"));
    File::create(&go).unwrap();
    assert_eq!(recorded_status(&status), 75);
    assert!(!ran.exists(), "ran beside the new holder");
    other.finish();
    parent.finish();
}

#[test]
fn nested_exclusive_inside_shared_is_refused() {
    for (mode, held) in [(&["-s"][..], "shared"), (&["--limit", "2"][..], "limit 2")] {
        let dir = LockDir::new();
        // Another holder beside the parent: an exclusive nested run must never join them.
        let other = Background::hold(
            dir.dlock(&[&["run"], mode, &["n"]].concat()),
            &dir.file("in"),
        );
        let ran = dir.file("ran");
        let script = nested(&dir, &format!("run -x n -- touch '{}'", ran.display()));
        let started = Instant::now();
        let out = finish_within(
            &dir,
            "parent",
            dir.dlock(&[&["run"], mode, &["n", "--", "sh", "-c", &script]].concat()),
            T,
        );
        assert_eq!(code(&out), 64, "{held}: {}", stderr(&out));
        let message = stderr(&out);
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(
            message.starts_with(&format!(
                "dlock: lock \"n\" is held {held} by a parent dlock"
            )),
            "{message}"
        );
        assert!(message.contains("nested exclusive request"), "{message}");
        assert!(
            !ran.exists(),
            "{held}: ran exclusively beside another holder"
        );
        assert!(started.elapsed() < T / 2, "not refused at once");
        other.finish();
    }
}

#[test]
fn a_tree_ancestor_held_shared_does_not_cover_an_exclusive_nested_run() {
    let dir = LockDir::new();
    let other = Background::hold(dir.dlock(&["run", "--tree", "/p/a"]), &dir.file("in"));
    for (i, inner) in ["run /p", "run --tree /p", "run --tree p/"]
        .iter()
        .enumerate()
    {
        let status = dir.file(&format!("status{i}"));
        let ran = dir.file(&format!("ran{i}"));
        let script = record_status(
            &nested(&dir, &format!("{inner} -- touch '{}'", ran.display())),
            &status,
        );
        let out = finish_within(
            &dir,
            &format!("parent{i}"),
            dir.dlock(&["run", "--tree", "/p/b", "--", "sh", "-c", &script]),
            T,
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(recorded_status(&status), 64, "{inner}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("lock \"/p\" is held shared by a parent dlock"),
            "{}",
            stderr(&out)
        );
        assert!(!ran.exists(), "{inner} ran beside the holder of /p/a");
    }
    other.finish();
}

#[test]
fn a_deeper_tree_path_inside_a_held_one_runs_beside_other_subtrees() {
    let dir = LockDir::new();
    let other = Background::hold(dir.dlock(&["run", "--tree", "/p/a"]), &dir.file("in"));
    let script = nested(&dir, "run -n --tree /p/b/c -- sh -c 'echo $DLOCK_NAME'");
    let out = finish_within(
        &dir,
        "parent",
        dir.dlock(&["run", "--tree", "/p/b", "--", "sh", "-c", &script]),
        T,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "/p/b/c");
    other.finish();
}

#[test]
fn a_limit_seat_covers_a_nested_limit_and_shared_run() {
    let dir = LockDir::new();
    // One seat, taken by the parent: a nested seat could only be had by skipping.
    let script = format!(
        "{} && {}",
        nested(&dir, "run -n --limit 1 n -- echo seat"),
        nested(&dir, "run -n -s n -- echo shared")
    );
    let out = finish_within(
        &dir,
        "parent",
        dir.dlock(&["run", "--limit", "1", "n", "--", "sh", "-c", &script]),
        T,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "seat\nshared\n");
}

#[test]
fn a_mixed_set_skips_the_covered_locks_and_takes_the_others() {
    let dir = LockDir::new();
    let script = nested(
        &dir,
        "run -n a b -- sh -c 'echo $DLOCK_NAME; printf \"%s\\n\" \"$DLOCK_HELD\"'",
    );
    let out = finish_within(
        &dir,
        "parent",
        dir.dlock(&["run", "a", "--", "sh", "-c", &script]),
        T,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "b", "only b was taken by the nested run");
    // The parent's claim to a, then the nested run's own claim to b, each by its own dlock.
    let fields = |line: &str| line.split('\t').map(str::to_owned).collect::<Vec<_>>();
    let (a, b) = (fields(lines[1]), fields(lines[2]));
    assert_eq!((a.len(), b.len()), (5, 5), "{text}");
    assert_eq!((a[1].as_str(), b[1].as_str()), ("a", "b"), "{text}");
    assert_ne!(a[3], b[3], "{text}");
}

#[test]
fn an_impossible_lock_fails_the_whole_set_before_anything_is_taken() {
    let dir = LockDir::new();
    let ran = dir.file("ran");
    let script = nested(&dir, &format!("run a b -- touch '{}'", ran.display()));
    let out = finish_within(
        &dir,
        "parent",
        dir.dlock(&["run", "-s", "a", "--", "sh", "-c", &script]),
        T,
    );
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(!ran.exists());
    // b was never acquired: its first acquisition now gets the first token.
    let out = output(dir.dlock(&["run", "b", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(stdout(&out).trim(), "1", "b was taken: {}", stderr(&out));
}

#[test]
fn a_malformed_or_oversized_held_variable_is_ignored() {
    let dir = LockDir::new();
    let held = held_variable_of(dir.dlock(&["run", "n"]));
    let location = held.split('\t').next().unwrap().to_owned();
    let garbage = format!(
        "\t\t\t\t\n{location}\tn\t\n{location}\tn\tzz\t1\t2\n{location}\tn\t00\t99999999999\t1\n\
         {location}\tn\n\u{1}\u{7f}ünïcode\n"
    );
    let oversized = format!("{location}\tn\n").repeat(100 * 1024 / (location.len() + 3));
    let other = Background::hold(dir.dlock(&["run", "n"]), &dir.file("in"));
    for value in [garbage.as_str(), oversized.as_str()] {
        let mut nested = dir.dlock(&["run", "-n", "n", "--", "true"]);
        nested.env("DLOCK_HELD", value);
        let out = output(nested);
        assert_eq!(code(&out), 75, "{}", stderr(&out));
    }
    other.finish();
    let mut alone = dir.dlock(&["run", "-n", "n", "--", "true"]);
    alone.env("DLOCK_HELD", &garbage);
    assert_eq!(code(&output(alone)), 0);
}

/// `dlock --backend redis --url URL ARGS`.
fn redis_dlock(server: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "redis", "--url", &server.url()])
        .args(args);
    cmd
}

#[test]
fn on_redis_a_copied_variable_does_not_skip_a_lock_held_elsewhere() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let held = held_variable_of(redis_dlock(&server, &["run", "n"]));
    let other = Background::hold(redis_dlock(&server, &["run", "n"]), &dir.file("in"));
    let ran = dir.file("ran");
    let mut nested = redis_dlock(
        &server,
        &["run", "-n", "n", "--", "touch", ran.to_str().unwrap()],
    );
    nested.env("DLOCK_HELD", &held);
    let out = output(nested);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(!ran.exists(), "ran beside the real holder");
    other.finish();
}

#[test]
fn on_redis_the_mode_in_the_servers_record_decides() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let dlock = format!("{} --backend redis --url {}", dlock_bin(), server.url());
    // Shared inside shared is covered; exclusive inside shared is refused.
    let script = format!(
        "{dlock} run -n -s n -- echo shared; {}",
        record_status(
            &format!("{dlock} run -n n -- echo exclusive"),
            &dir.file("status")
        )
    );
    let out = finish_within(
        &dir,
        "parent",
        redis_dlock(&server, &["run", "-s", "n", "--", "sh", "-c", &script]),
        T,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "shared\n");
    assert_eq!(recorded_status(&dir.file("status")), 64, "{}", stderr(&out));
}
