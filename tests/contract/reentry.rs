//! Re-entrancy is proven, never trusted: a nested `dlock run` skips a lock only when a living
//! ancestor dlock still holds it, in the backend, in a mode that covers the request. A copied,
//! stale or typed `DLOCK_HELD`, a daemon that outlived its dlock, or an exclusive request inside
//! the run's own shared hold must never let a command run beside another holder.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use super::{Holding, T};
use crate::support::target::Target;
use crate::support::*;

/// `dlock <the target's backend> ARGS` as a shell command, for a nested run inside a holder's
/// command.
fn nested(t: &Target, args: &str) -> String {
    format!("{} {args}", t.shell_words(&[]))
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

/// Runs `cmd` to completion within `T` (a deadlock fails the test instead of hanging it), with
/// its output kept in files named after `label`.
fn finish_within(t: &Target, label: &str, mut cmd: Command) -> Output {
    let (out, err) = (
        t.scratch.file(&format!("{label}.out")),
        t.scratch.file(&format!("{label}.err")),
    );
    cmd.stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap());
    let mut child = cmd.spawn().expect("start dlock");
    let status = wait_exit(&mut child, T);
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

/// `dlock run ARGS -- sh -c SCRIPT` in the background, not waiting for anything; killed if
/// dropped.
struct Background(Option<Child>);

impl Background {
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

pub fn nested_run_of_a_held_lock_runs_directly_instead_of_deadlocking(t: &Target) {
    // The same run, nested in itself.
    let run = ["run", "-n", "outer", "--", "sh", "-c"];
    let inner = t.shell_words(&[&run[..], &["echo inner $DLOCK_TOKEN"]].concat());
    let outer = format!("echo outer $DLOCK_TOKEN; {inner}");
    let out = output(t.dlock(&[&run[..], &[outer.as_str()]].concat()));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let outer = lines[0].strip_prefix("outer ").unwrap();
    let inner = lines[1].strip_prefix("inner ").unwrap();
    assert_eq!(outer, inner, "the nested run sees the outer token");
}

pub fn a_held_variable_copied_from_a_finished_holder_does_not_skip_the_lock(t: &Target) {
    let held = held_variable_of(t.dlock(&["run", "n"]));
    let other = Holding::start(t, &["n"]);
    let ran = t.scratch.file("ran");
    let mut nested = t.dlock(&["run", "-n", "n", "--", "touch", ran.to_str().unwrap()]);
    nested.env("DLOCK_HELD", &held);
    let out = output(nested);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("is busy"), "{}", stderr(&out));
    assert!(!ran.exists(), "ran beside the real holder");
    assert!(other.let_go().success());
}

pub fn a_typed_variable_naming_the_real_holder_does_not_skip_the_lock(t: &Target) {
    // The real holder's own claim, as anyone who reads its environment could copy it, beside the
    // bare `LOCATION<TAB>NAME` line earlier versions trusted.
    let claim = t.scratch.file("claim");
    let script = format!(
        "printf %s \"$DLOCK_HELD\" > '{c}.tmp'; mv '{c}.tmp' '{c}'; exec sleep 60",
        c = claim.display()
    );
    let holder = Background::start(t.dlock(&["run", "n"]), &script);
    wait_for_file(&claim, T);
    let claim = std::fs::read_to_string(&claim).unwrap();
    let location = claim.split('\t').next().unwrap();
    let typed = format!("{claim}\n{location}\tn\n");
    let ran = t.scratch.file("ran");
    let mut nested = t.dlock(&["run", "-n", "n", "--", "touch", ran.to_str().unwrap()]);
    nested.env("DLOCK_HELD", &typed);
    let out = output(nested);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(!ran.exists(), "ran beside the real holder");
    holder.finish();
}

/// A nested `dlock run -n n` that a holder's command starts once the test says go: the shell that
/// waits (30s at most) and runs it, and the files that say go and record what it did.
struct NestedOnGo {
    shell: String,
    go: PathBuf,
    ran: PathBuf,
    status: PathBuf,
}

impl NestedOnGo {
    fn new(t: &Target) -> NestedOnGo {
        let (go, ran, status) = (
            t.scratch.file("go"),
            t.scratch.file("ran"),
            t.scratch.file("status"),
        );
        let job = record_status(
            &nested(t, &format!("run -n n -- touch '{}'", ran.display())),
            &status,
        );
        let shell = format!(
            "i=0; while [ ! -e '{go}' ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done; {job}",
            go = go.display()
        );
        NestedOnGo {
            shell,
            go,
            ran,
            status,
        }
    }

    /// Lets it go; returns its exit status and whether its command ran.
    fn go(&self) -> (i32, bool) {
        File::create(&self.go).unwrap();
        (recorded_status(&self.status), self.ran.exists())
    }
}

pub fn a_daemon_left_behind_by_its_dlock_acquires_normally(t: &Target) {
    // The command leaves a background job behind and exits at once; the job runs a nested dlock
    // of the same lock once the test says go, long after its dlock released the lock.
    let daemon = NestedOnGo::new(t);
    let script = format!("( {} ) >/dev/null 2>&1 &", daemon.shell);
    let out = output(t.dlock(&["run", "n", "--", "sh", "-c", &script]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let other = Holding::start(t, &["n"]);
    let (status, ran) = daemon.go();
    assert_eq!(status, 75);
    assert!(!ran, "the daemon ran beside the real holder");
    assert!(other.let_go().success());
}

pub fn a_parent_that_lost_its_lock_no_longer_covers_a_nested_run(t: &Target) {
    let inside = t.scratch.file("inside");
    let job = NestedOnGo::new(t);
    let script = format!("touch '{}'; {}", inside.display(), job.shell);
    // A long lease: the parent checks its lock only every 20s, well after the nested run.
    let parent = Background::start(t.dlock(&["run", "--ttl", "60s", "n"]), &script);
    wait_for_file(&inside, T);
    // And stopped, so that it cannot end its command first where the backend tells it of the
    // loss at once (ZooKeeper watches the node). Its command runs on.
    let parent_dlock = parent.0.as_ref().expect("parent started").id();
    signal(parent_dlock, libc::SIGSTOP);
    let out = output(t.dlock(&["release", "--force", "n"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let other = Holding::start(t, &["n"]);
    let (status, ran) = job.go();
    signal(parent_dlock, libc::SIGCONT);
    assert_eq!(status, 75);
    assert!(!ran, "ran beside the new holder");
    assert!(other.let_go().success());
    parent.finish();
}

pub fn nested_exclusive_inside_shared_is_refused(t: &Target) {
    for (round, (mode, held)) in [(&["-s"][..], "shared"), (&["--limit", "2"][..], "limit 2")]
        .into_iter()
        .enumerate()
    {
        // Another holder beside the parent: an exclusive nested run must never join them.
        let other = Holding::start(t, &[mode, &["n"]].concat());
        let ran = t.scratch.file(&format!("ran{round}"));
        let script = nested(t, &format!("run -x n -- touch '{}'", ran.display()));
        let started = Instant::now();
        let out = finish_within(
            t,
            &format!("parent{round}"),
            t.dlock(&[&["run"], mode, &["n", "--", "sh", "-c", &script]].concat()),
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
        assert!(other.let_go().success());
    }
}

/// Shared inside shared is covered; exclusive inside shared is refused: the mode comes from the
/// holder's record in the backend.
pub fn the_mode_in_the_backends_record_decides(t: &Target) {
    let status = t.scratch.file("status");
    let script = format!(
        "{}; {}",
        nested(t, "run -n -s n -- echo shared"),
        record_status(&nested(t, "run -n n -- echo exclusive"), &status)
    );
    let out = finish_within(
        t,
        "parent",
        t.dlock(&["run", "-s", "n", "--", "sh", "-c", &script]),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "shared\n");
    assert_eq!(recorded_status(&status), 64, "{}", stderr(&out));
}

pub fn a_tree_ancestor_held_shared_does_not_cover_an_exclusive_nested_run(t: &Target) {
    let other = Holding::start(t, &["--tree", "/p/a"]);
    for (i, inner) in ["run /p", "run --tree /p", "run --tree p/"]
        .iter()
        .enumerate()
    {
        let status = t.scratch.file(&format!("status{i}"));
        let ran = t.scratch.file(&format!("ran{i}"));
        let script = record_status(
            &nested(t, &format!("{inner} -- touch '{}'", ran.display())),
            &status,
        );
        let out = finish_within(
            t,
            &format!("parent{i}"),
            t.dlock(&["run", "--tree", "/p/b", "--", "sh", "-c", &script]),
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
    assert!(other.let_go().success());
}

pub fn a_deeper_tree_path_inside_a_held_one_runs_beside_other_subtrees(t: &Target) {
    let other = Holding::start(t, &["--tree", "/p/a"]);
    let script = nested(t, "run -n --tree /p/b/c -- sh -c 'echo $DLOCK_NAME'");
    let out = finish_within(
        t,
        "parent",
        t.dlock(&["run", "--tree", "/p/b", "--", "sh", "-c", &script]),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "/p/b/c");
    assert!(other.let_go().success());
}

pub fn a_limit_seat_covers_a_nested_limit_and_shared_run(t: &Target) {
    // One seat, taken by the parent: a nested seat could only be had by skipping.
    let script = format!(
        "{} && {}",
        nested(t, "run -n --limit 1 n -- echo seat"),
        nested(t, "run -n -s n -- echo shared")
    );
    let out = finish_within(
        t,
        "parent",
        t.dlock(&["run", "--limit", "1", "n", "--", "sh", "-c", &script]),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "seat\nshared\n");
}

pub fn a_mixed_set_skips_the_covered_locks_and_takes_the_others(t: &Target) {
    let script = nested(
        t,
        "run -n a b -- sh -c 'echo $DLOCK_NAME; printf \"%s\\n\" \"$DLOCK_HELD\"'",
    );
    let out = finish_within(
        t,
        "parent",
        t.dlock(&["run", "a", "--", "sh", "-c", &script]),
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

pub fn an_impossible_lock_fails_the_whole_set_before_anything_is_taken(t: &Target) {
    let ran = t.scratch.file("ran");
    let script = nested(t, &format!("run a b -- touch '{}'", ran.display()));
    let out = finish_within(
        t,
        "parent",
        t.dlock(&["run", "-s", "a", "--", "sh", "-c", &script]),
    );
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(!ran.exists());
    let out = output(t.dlock(&["run", "b", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    if t.tokens_count_acquisitions() {
        // b was never acquired: its first acquisition now gets the first token.
        assert_eq!(stdout(&out).trim(), "1", "b was taken: {}", stderr(&out));
    }
}

pub fn a_malformed_or_oversized_held_variable_is_ignored(t: &Target) {
    let held = held_variable_of(t.dlock(&["run", "n"]));
    let location = held.split('\t').next().unwrap().to_owned();
    let garbage = format!(
        "\t\t\t\t\n{location}\tn\t\n{location}\tn\tzz\t1\t2\n{location}\tn\t00\t99999999999\t1\n\
         {location}\tn\n\u{1}\u{7f}ünïcode\n"
    );
    let oversized = format!("{location}\tn\n").repeat(100 * 1024 / (location.len() + 3));
    let other = Holding::start(t, &["n"]);
    for value in [garbage.as_str(), oversized.as_str()] {
        let mut nested = t.dlock(&["run", "-n", "n", "--", "true"]);
        nested.env("DLOCK_HELD", value);
        let out = output(nested);
        assert_eq!(code(&out), 75, "{}", stderr(&out));
    }
    assert!(other.let_go().success());
    let mut alone = t.dlock(&["run", "-n", "n", "--", "true"]);
    alone.env("DLOCK_HELD", &garbage);
    assert_eq!(code(&output(alone)), 0);
}
