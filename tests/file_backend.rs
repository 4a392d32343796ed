//! The file backend's guarantees: mutual exclusion, shared and limited holders, flock(1) interop,
//! status/list/release, and refusal of unsafe lock directories.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

#[test]
fn a_shared_holder_excludes_an_exclusive_one() {
    let dir = LockDir::new();
    let marker = dir.file("in");
    let mut reader = dir
        .dlock(&[
            "run",
            "--shared",
            "rw",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", marker.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let out = output(dir.dlock(&["run", "-n", "rw", "--", "true"]));
    assert_eq!(code(&out), 75);
    let out = output(dir.dlock(&["run", "-n", "--shared", "rw", "--", "true"]));
    assert_eq!(code(&out), 0, "a second reader gets in");
    signal(reader.id(), libc::SIGTERM);
    wait_exit(&mut reader, T);
}

#[test]
fn busy_lock_exits_75_or_the_conflict_code_without_running_the_child() {
    let dir = LockDir::new();
    let marker = dir.file("in");
    let mut holder = dir
        .dlock(&[
            "run",
            "busy",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", marker.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let ran = dir.file("ran");
    let touch = ["--", "touch", ran.to_str().unwrap()];
    let out = output(dir.dlock(&[&["run", "-n", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 75);
    assert!(
        stderr(&out).contains("is busy: held exclusive by"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!("pid {}", holder.id())),
        "{}",
        stderr(&out)
    );
    let out = output(dir.dlock(&[&["run", "-n", "-E", "9", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 9);
    let out = output(dir.dlock(&[&["run", "-w", "200ms", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 75);
    assert!(
        stderr(&out).contains("after waiting 200ms"),
        "{}",
        stderr(&out)
    );
    let out = output(dir.dlock(&[&["-q", "run", "-n", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 75);
    assert_eq!(stderr(&out), "", "quiet means quiet");
    assert!(!ran.exists());
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, T);
}

#[test]
fn flock_and_dlock_exclude_each_other() {
    let dir = LockDir::new();
    // Learn the lock file's path from status, as a user would.
    let out = output(dir.dlock(&["status", "--json", "interop"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let path = json["location"].as_str().unwrap().to_owned();

    let marker = dir.file("flock-in");
    let mut flock = std::process::Command::new("flock")
        .args([
            &path,
            "sh",
            "-c",
            &format!("touch {}; sleep 30", marker.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let out = output(dir.dlock(&["run", "-n", "interop", "--", "true"]));
    assert_eq!(code(&out), 75, "flock(1) holds it");
    let status = output(dir.dlock(&["status", "interop"]));
    assert_eq!(code(&status), 0, "status sees the flock(1) holder");
    signal(flock.id(), libc::SIGKILL);
    wait_exit(&mut flock, T);

    let marker = dir.file("dlock-in");
    let mut holder = dir
        .dlock(&[
            "run",
            "interop",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", marker.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let out = std::process::Command::new("flock")
        .args(["-n", &path, "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "dlock holds it");
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, T);
}

#[test]
fn status_list_and_forced_release() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["status", "jobs/a"]));
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("jobs/a: free"));

    let marker = dir.file("in");
    let mut holder = dir
        .dlock(&[
            "run",
            "--ttl",
            "300ms",
            "--kill-after",
            "1s",
            "jobs/a",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", marker.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let out = output(dir.dlock(&["status", "jobs/a"]));
    assert_eq!(code(&out), 0);
    let quiet = output(dir.dlock(&["-q", "status", "jobs/a"]));
    assert_eq!(
        (code(&quiet), stdout(&quiet).as_str()),
        (0, ""),
        "`if dlock -q status NAME` works"
    );
    assert!(
        stdout(&out).contains(&format!("pid {}", holder.id())),
        "{}",
        stdout(&out)
    );
    let out = output(dir.dlock(&["list"]));
    assert!(
        stdout(&out).starts_with("jobs/a\texclusive by "),
        "{}",
        stdout(&out)
    );
    assert_eq!(stdout(&output(dir.dlock(&["list", "other"]))), "");
    let out = output(dir.dlock(&["list", "--json", "jobs/"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);

    let out = output(dir.dlock(&["release", "--force", "jobs/a"]));
    assert_eq!(code(&out), 0);
    assert!(
        stdout(&out).contains(&format!("pid {}", holder.id())),
        "{}",
        stdout(&out)
    );
    // The holder notices at its next check and stops its child with the lost code.
    let status = wait_exit(&mut holder, T);
    assert_eq!(status.code(), Some(79));
    assert_eq!(code(&output(dir.dlock(&["status", "jobs/a"]))), 1);
    assert_eq!(
        code(&output(dir.dlock(&["release", "--force", "jobs/a"]))),
        1
    );
    // Tokens keep growing across the replaced file.
    let out = output(dir.dlock(&["run", "jobs/a", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(stdout(&out).trim(), "2");
}

#[test]
fn names_never_escape_the_lock_directory() {
    let dir = LockDir::new();
    let inner = dir.file("locks");
    for name in [
        "../escape",
        "a/../../b",
        "/etc/passwd",
        ".",
        "..",
        "ünïcødé ✓",
    ] {
        let out = output({
            let mut c = dlock();
            c.arg("--url").arg(&inner).args(["run", name, "--", "true"]);
            c
        });
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
    }
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("locks")]);
    assert_eq!(std::fs::read_dir(&inner).unwrap().count(), 6);
}

#[test]
fn unsafe_or_unusable_lock_directories_are_refused_with_69() {
    let dir = LockDir::new();
    // World-writable without the sticky bit: anyone could swap the lock files.
    let open = dir.file("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = output({
        let mut c = dlock();
        c.arg("--url").arg(&open).args(["run", "n", "--", "true"]);
        c
    });
    assert_eq!(code(&out), 69);
    assert!(stderr(&out).contains("not sticky"), "{}", stderr(&out));

    // A symlinked lock file.
    let target = dir.file("target");
    std::fs::write(&target, "").unwrap();
    std::os::unix::fs::symlink(&target, dir.file("n.lock")).unwrap();
    let out = output(dir.dlock(&["run", "n", "--", "true"]));
    assert_eq!(code(&out), 69);
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));

    // A directory nobody may write, not even root (procfs).
    let out = output({
        let mut c = dlock();
        c.args(["--url", "/proc/self", "run", "n", "--", "true"]);
        c
    });
    assert_eq!(code(&out), 69);
    assert!(stderr(&out).contains("is not writable"), "{}", stderr(&out));

    // A file where the directory should be.
    let file = dir.file("plain-file");
    std::fs::write(&file, "").unwrap();
    let out = output({
        let mut c = dlock();
        c.arg("--url").arg(&file).args(["run", "n", "--", "true"]);
        c
    });
    assert_eq!(code(&out), 69);
    assert!(stderr(&out).contains("not a directory"), "{}", stderr(&out));
}

#[test]
fn status_list_and_release_never_create_a_mistyped_directory() {
    let dir = LockDir::new();
    let typo = dir.file("lokcs/jobs");
    let with_typo = |args: &[&str]| {
        let mut c = dlock();
        c.arg("--url").arg(&typo).args(args);
        output(c)
    };
    let out = with_typo(&["status", "n"]);
    assert_eq!(code(&out), 1, "free: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{}/n.lock", typo.display())),
        "status shows where it looked: {}",
        stdout(&out)
    );
    let out = with_typo(&["list"]);
    assert_eq!((code(&out), stdout(&out).as_str()), (0, ""));
    let out = with_typo(&["release", "--force", "n"]);
    assert_eq!(code(&out), 1, "nothing held: {}", stderr(&out));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no directory made"
    );
    // `run` is the one command that makes it.
    let out = with_typo(&["run", "n", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(typo.join("n.lock").is_file());
}
