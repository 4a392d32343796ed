//! The file backend's record of a lock's runs, `NAME.runs` beside `NAME.lock`: not listed by
//! `list`; never in the way of a lock operation, whatever sits at its path (a FIFO, a symbolic
//! link, a directory, a hard link to another file, someone's data), which is left as it was;
//! shown escaped when it cannot be read; read as none once 400 days old. A lock file removed under
//! its holder makes a lost run, also when its command exits 0 before dlock notices (no success),
//! and a set of names given back before its command ran keeps none of them for `--min-hold`.
//! `list --runs` shows a forged record escaped and leaves out entries that name no lock.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn status_json(dir: &LockDir, name: &str) -> serde_json::Value {
    let out = output(dir.dlock(&["status", "--json", name]));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// What an entry is, to check that dlock left it as it was.
fn snapshot(path: &Path) -> (u64, u32, Option<Vec<u8>>) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let bytes = meta.is_file().then(|| std::fs::read(path).unwrap());
    (meta.ino(), meta.mode(), bytes)
}

#[test]
fn list_shows_locks_only_never_their_records() {
    let dir = LockDir::new();
    assert_eq!(code(&output(dir.dlock(&["run", "x", "--", "true"]))), 0);
    assert!(dir.file("x.runs").is_file(), "the run is recorded");
    let out = output(dir.dlock(&["list", "--json"]));
    assert_eq!(
        (stdout(&out).trim(), stderr(&out).as_str()),
        ("[]", ""),
        "nothing held, nothing skipped"
    );
    let mut holder = dir.hold_in_background("x");
    let out = output(dir.dlock(&["list"]));
    assert_eq!(stderr(&out), "");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("x\texclusive by "), "{lines:?}");
    let _ = holder.kill();
    let _ = holder.wait();
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

/// Puts something at a path.
type Make<'a> = dyn Fn(&Path) + 'a;

#[test]
fn whatever_sits_at_the_records_path_never_stops_a_run_and_is_left_as_it_is() {
    let dir = LockDir::new();
    let outside = dir.file("outside");
    std::fs::write(&outside, "someone's data\n").unwrap();
    let kinds: [(&str, &Make<'_>); 3] = [
        ("fifo", &|p| mkfifo(p)),
        ("link", &|p| {
            std::os::unix::fs::symlink(&outside, p).unwrap()
        }),
        ("dir", &|p| std::fs::create_dir(p).unwrap()),
    ];
    for (name, make) in kinds {
        let runs = dir.file(&format!("{name}.runs"));
        make(&runs);
        let before = snapshot(&runs);
        let out = output_within(dir.dlock(&["run", "-n", name, "--", "true"]), T);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{name}: a run says nothing of it");
        let out = output_within(dir.dlock(&["status", name]), T);
        assert_eq!(code(&out), 1, "{name}: free, as before");
        assert!(
            stderr(&out).contains("cannot read the last runs of lock"),
            "{name}: {}",
            stderr(&out)
        );
        assert!(!stdout(&out).contains("last run"), "{}", stdout(&out));
        assert_eq!(snapshot(&runs), before, "{name} left as it was");
    }
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "someone's data\n"
    );
}

#[test]
fn a_records_file_dlock_did_not_write_is_shown_escaped_and_left_as_it_is() {
    let dir = LockDir::new();
    let runs = dir.file("x.runs");
    std::fs::write(&runs, b"\x1b[2J\x07run1 forged\nlast run1 x\n").unwrap();
    let before = snapshot(&runs);
    let out = output(dir.dlock(&["status", "x"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("  last run: unreadable record \""), "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    let json = status_json(&dir, "x");
    assert!(json["last_run"]["unreadable"].is_string(), "{json:#}");
    let out = output(dir.dlock(&["status", "x", "--ran-within", "1h"]));
    assert_eq!(code(&out), 3, "UNKNOWN: {}", stdout(&out));
    assert_eq!(code(&output(dir.dlock(&["run", "x", "--", "true"]))), 0);
    assert_eq!(
        snapshot(&runs),
        before,
        "someone's data is never written over"
    );
}

/// Someone who may write the directory links another of the user's files at the records path:
/// dlock writes nothing into it, nor into a records file of dlock's own linked there.
/// `list --runs` in a directory anyone may write: a forged records file is shown escaped, one that
/// cannot be read (a FIFO) hides no other, entries that name no lock and records 400 days old
/// are left out, and a name too long for a file name (hashed) is shown by the name its lock file
/// says.
#[test]
fn list_runs_shows_forged_records_escaped_and_leaves_out_what_names_no_lock() {
    let dir = LockDir::new();
    let long = "h".repeat(250);
    for name in ["ok", "old", long.as_str()] {
        assert_eq!(code(&output(dir.dlock(&["run", name, "--", "true"]))), 0);
    }
    let aged = program("touch")
        .args(["-m", "-d", "401 days ago"])
        .arg(dir.file("old.runs"))
        .status()
        .expect("touch");
    assert!(aged.success());
    std::fs::write(dir.file("forged.runs"), b"\x1b[2J\x07forged").unwrap();
    mkfifo(&dir.file("fifo.runs"));
    for nameless in ["%zz.runs", "%%0123.runs", ".runs"] {
        std::fs::write(dir.file(nameless), b"dlock-runs1\n").unwrap();
    }
    let out = output(dir.dlock(&["list", "--runs"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    let names: Vec<&str> = text
        .lines()
        .filter_map(|line| line.split_once('\t').map(|(name, _)| name))
        .collect();
    assert_eq!(names, ["fifo", "forged", long.as_str(), "ok"], "{text}");
    assert!(
        text.contains("forged\tfree, last run unreadable record \"\\u{1b}[2J\\u{7}forged\""),
        "{text}"
    );
    assert!(
        text.contains("fifo\tfree, last run unreadable record \"")
            && text.contains("not a regular file"),
        "{text}"
    );
}

#[test]
fn a_records_path_linked_to_another_file_is_never_written() {
    let dir = LockDir::new();
    let outside = dir.file("outside");
    for (name, data) in [("x", &b"someone's data\n"[..]), ("y", b"dlock-runs1\n")] {
        std::fs::write(&outside, data).unwrap();
        let runs = dir.file(&format!("{name}.runs"));
        std::fs::hard_link(&outside, &runs).unwrap();
        assert_eq!(code(&output(dir.dlock(&["run", name, "--", "true"]))), 0);
        assert_eq!(std::fs::read(&outside).unwrap(), data, "{name}");
        std::fs::remove_file(&runs).unwrap();
    }
}

#[test]
fn records_not_written_for_400_days_read_as_none() {
    let dir = LockDir::new();
    assert_eq!(code(&output(dir.dlock(&["run", "x", "--", "true"]))), 0);
    let aged = program("touch")
        .args(["-m", "-d", "401 days ago"])
        .arg(dir.file("x.runs"))
        .status()
        .expect("touch");
    assert!(aged.success());
    let json = status_json(&dir, "x");
    assert!(
        json["last_run"].is_null() && json["last_success"].is_null(),
        "{json:#}"
    );
    let out = output(dir.dlock(&["status", "x", "--ran-within", "1y"]));
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    assert_eq!(code(&output(dir.dlock(&["run", "x", "--", "true"]))), 0);
    let json = status_json(&dir, "x");
    assert_eq!(json["last_run"]["token"], 2, "{json:#}");
    assert_eq!(json["last_success"]["token"], 2, "{json:#}");
}

#[test]
fn a_lock_file_removed_under_its_holder_is_a_lost_run() {
    let dir = LockDir::new();
    let ready = dir.file("ready");
    let script = format!("touch '{}'; sleep 30", ready.display());
    let mut holder = dir
        .dlock(&["run", "--ttl", "300ms", "x", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dlock");
    wait_for_file(&ready, T);
    std::fs::remove_file(dir.file("x.lock")).unwrap();
    let status = wait_exit(&mut holder, T);
    assert_eq!(status.code(), Some(79));
    let json = status_json(&dir, "x");
    assert_eq!(json["last_run"]["ending"], "lost", "{json:#}");
    assert!(json["last_success"].is_null(), "{json:#}");
}

/// The lock file is removed while dlock is stopped, and the command exits 0 before dlock runs
/// again: its release finds the lock lost (79), and the run ends `lost`, no success.
#[test]
fn a_command_that_succeeds_after_its_lock_file_was_removed_ends_lost_and_is_no_success() {
    let dir = LockDir::new();
    let lock = dir.file("x.lock");
    let run = dir.dlock(&["run", "x"]);
    let (status, said) =
        succeed_after_a_silent_loss(run, dir.path(), || std::fs::remove_file(&lock).unwrap());
    assert_eq!(status, 79, "{said}");
    assert!(
        said.contains("the lock was lost before the command ended"),
        "found by the release: {said}"
    );
    let json = status_json(&dir, "x");
    assert_eq!(json["last_run"]["ending"], "lost", "{json:#}");
    assert!(json["last_run"]["ended"].is_string(), "{json:#}");
    assert!(json["last_success"].is_null(), "{json:#}");
    let out = output(dir.dlock(&["status", "x", "--ran-within", "1h"]));
    assert_eq!(code(&out), 2, "never succeeded: {}", stdout(&out));

    // After a success, a later silent loss leaves that success the last one.
    assert_eq!(code(&output(dir.dlock(&["run", "x", "--", "true"]))), 0);
    let success = status_json(&dir, "x")["last_success"].clone();
    assert_eq!(success["ending"], "exit:0", "{success:#}");
    let run = dir.dlock(&["run", "x"]);
    let (status, said) =
        succeed_after_a_silent_loss(run, dir.path(), || std::fs::remove_file(&lock).unwrap());
    assert_eq!(status, 79, "{said}");
    let json = status_json(&dir, "x");
    assert_eq!(json["last_run"]["ending"], "lost", "{json:#}");
    assert_eq!(json["last_success"], success, "{json:#}");
}

#[test]
fn a_set_given_back_before_its_command_ran_keeps_no_min_hold() {
    let dir = LockDir::new();
    let mut b = dir.hold_in_background("b");
    let out = output(dir.dlock(&["run", "-n", "--min-hold", "1h", "a", "b", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let json = status_json(&dir, "a");
    assert_eq!(json["held"], false, "{json:#}");
    assert_eq!(json["last_run"]["ending"], "not-run", "{json:#}");
    let out = output(dir.dlock(&["run", "-n", "a", "--", "true"]));
    assert_eq!(code(&out), 0, "a is free: {}", stderr(&out));
    let _ = b.kill();
    let _ = b.wait();
}

#[test]
fn a_success_dated_after_this_hosts_time_is_unreadable_never_ok() {
    let dir = LockDir::new();
    // Written by a host whose clock is 30 days ahead.
    let mut ahead = with_clock("+30d");
    ahead
        .arg("--url")
        .arg(dir.path())
        .args(["run", "x", "--", "true"]);
    assert_eq!(code(&output(ahead)), 0);
    let out = output(dir.dlock(&["status", "x", "--ran-within", "1h"]));
    let line = stdout(&out);
    assert_eq!(code(&out), 3, "UNKNOWN: {line}");
    assert!(
        line.starts_with("UNKNOWN: x has an unreadable record of its last success")
            && line.contains("dated after"),
        "{line}"
    );
    assert!(
        status_json(&dir, "x")["last_run"]["unreadable"]
            .as_str()
            .is_some_and(|why| why.starts_with("dated after")),
        "status --json shows the run unreadable too"
    );
}

#[test]
fn list_runs_says_it_stopped_at_ten_thousand_names_and_exits_1() {
    let dir = LockDir::new();
    assert_eq!(code(&output(dir.dlock(&["run", "a", "--", "true"]))), 0);
    let record = std::fs::read(dir.file("a.runs")).unwrap();
    for i in 0..10_001 {
        std::fs::write(dir.file(&format!("n{i:05}.runs")), &record).unwrap();
    }
    let out = output(dir.dlock(&["list", "--runs", "n"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 10_000);
    assert!(
        text.lines().last().unwrap().starts_with("n09999\t"),
        "in order"
    );
    assert_eq!(
        stderr(&out),
        "dlock: list --runs stopped after the first 10000 names in order; give a longer prefix \
         to see the rest\n"
    );
    let out = output(dir.dlock(&["list", "--runs", "--json", "n"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let all: Vec<serde_json::Value> = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(all.len(), 10_000);
    let out = output(dir.dlock(&["list", "--runs", "n0999"]));
    assert_eq!((code(&out), stderr(&out).as_str()), (0, ""));
    assert_eq!(stdout(&out).lines().count(), 10);
}
