//! The file backend's default directory: one per user and host, `/run/lock/dlock-UID`, whatever
//! the session's environment, and refused when someone else made it first.
//!
//! Tests that create or spoil the default directory run dlock in a private mount namespace where
//! /run/lock (or /tmp) is a directory of the test's own, so they never touch the host's.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn assert_root() {
    assert_eq!(
        uid(),
        0,
        "these tests mount directories in a private namespace and hand some to another user, \
         which needs root (as in CI)"
    );
}

/// A directory that stands in for /run/lock (root's, sticky, writable by all, like the real one).
fn fake_base() -> LockDir {
    let base = LockDir::new();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    base
}

/// `dlock ARGS` in a private mount namespace where `base` is mounted at `at` (after `setup`, a
/// shell line run in the namespace first), with the environment of `dlock()`. The binary is opened
/// before anything is mounted and run through its descriptor, since the mounts may hide its path
/// (a checkout under /tmp).
fn dlock_in_namespace(setup: &str, base: &Path, at: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-ec"])
        .arg(format!(
            "exec 9<\"$1\"\n{setup}\nmount --bind \"$0\" {at}\nshift\nexec /proc/self/fd/9 \"$@\""
        ))
        .arg(base)
        .arg(dlock_bin())
        .args(args)
        .stdin(Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("DLOCK_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// `dlock ARGS` seeing `base` as /run/lock.
fn dlock_with_run_lock(base: &Path, args: &[&str]) -> Command {
    dlock_in_namespace("", base, "/run/lock", args)
}

fn default_in(base: &Path) -> PathBuf {
    base.join(format!("dlock-{}", uid()))
}

fn location(mut cmd: Command) -> String {
    let out = output({
        cmd.args(["status", "--json", "same-default-probe"]);
        cmd
    });
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    json["location"].as_str().unwrap().to_owned()
}

#[test]
fn the_default_directory_is_the_same_for_every_session() {
    // `status` creates nothing, so this looks at the host's real default safely.
    let elsewhere = LockDir::new();
    let bare = location({
        let mut c = dlock();
        c.env_remove("XDG_RUNTIME_DIR").env_remove("TMPDIR");
        c
    });
    let with_xdg = location({
        let mut c = dlock();
        c.env("XDG_RUNTIME_DIR", elsewhere.path())
            .env("TMPDIR", elsewhere.path());
        c
    });
    let with_tmpdir = location({
        let mut c = dlock();
        c.env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", elsewhere.path());
        c
    });
    let base = if Path::new("/run/lock").is_dir() {
        "/run/lock"
    } else if Path::new("/var/lock").is_dir() {
        "/var/lock"
    } else {
        "/tmp"
    };
    let expected = format!("{base}/dlock-{}/same-default-probe.lock", uid());
    assert_eq!(bare, expected);
    assert_eq!(
        with_xdg, expected,
        "XDG_RUNTIME_DIR must not move the default"
    );
    assert_eq!(with_tmpdir, expected, "TMPDIR must not move the default");

    // And `run` really locks there, with or without those variables, and -v says where.
    assert_root();
    let base = fake_base();
    for env in [
        vec![],
        vec![
            ("XDG_RUNTIME_DIR", elsewhere.path()),
            ("TMPDIR", elsewhere.path()),
        ],
    ] {
        let mut cmd =
            dlock_with_run_lock(base.path(), &["-v", "run", "same-default", "--", "true"]);
        cmd.env_remove("XDG_RUNTIME_DIR").env_remove("TMPDIR");
        for (key, value) in env {
            cmd.env(key, value);
        }
        let out = output(cmd);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let dir = format!("/run/lock/dlock-{}", uid());
        assert!(
            stderr(&out).contains(&format!("using file:{dir}\n")),
            "-v names the directory: {}",
            stderr(&out)
        );
    }
    let dir = default_in(base.path());
    assert!(dir.join("same-default.lock").is_file());
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o700, "created private");
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "nothing in XDG_RUNTIME_DIR or TMPDIR"
    );
}

#[test]
fn without_run_lock_the_default_falls_back_to_tmp() {
    assert_root();
    let tmp = fake_base();
    // An empty /run: no /run/lock, and /var/lock (a link to it on most systems) leads nowhere.
    let out = output(dlock_in_namespace(
        "mount -t tmpfs tmpfs /run\n[ ! -d /var/lock ]",
        tmp.path(),
        "/tmp",
        &["-v", "run", "fallback", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("using file:/tmp/dlock-{}\n", uid())),
        "{}",
        stderr(&out)
    );
    assert!(default_in(tmp.path()).join("fallback.lock").is_file());
}

#[test]
fn a_squatted_or_unsafe_default_directory_is_refused_with_69() {
    assert_root();
    // What the squatter left, how to make it, and the reason dlock gives.
    type Case<'a> = (&'a str, &'a dyn Fn(&Path), &'a str);
    let cases: [Case; 5] = [
        (
            "another user's",
            &|dir| {
                std::fs::create_dir(dir).unwrap();
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
                std::os::unix::fs::chown(dir, Some(4242), Some(4242)).unwrap();
            },
            "it belongs to uid 4242",
        ),
        (
            "a symbolic link",
            &|dir| std::os::unix::fs::symlink("/tmp", dir).unwrap(),
            "it is a symbolic link",
        ),
        (
            "a file",
            &|dir| std::fs::write(dir, "").unwrap(),
            "it is not a directory",
        ),
        (
            "ours but group-writable",
            &|dir| {
                std::fs::create_dir(dir).unwrap();
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o770)).unwrap();
            },
            "other users may write to it (mode 770)",
        ),
        (
            "ours but writable by all",
            &|dir| {
                std::fs::create_dir(dir).unwrap();
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
            },
            "other users may write to it (mode 1777)",
        ),
    ];
    for (what, make, why) in cases {
        let base = fake_base();
        let dir = default_in(base.path());
        make(&dir);
        let before = std::fs::symlink_metadata(&dir).unwrap();
        for args in [
            &["run", "squatted", "--", "true"][..],
            &["status", "squatted"],
            &["list"],
            &["release", "--force", "squatted"],
        ] {
            let out = output(dlock_with_run_lock(base.path(), args));
            assert_eq!(code(&out), 69, "{what}, {args:?}: {}", stderr(&out));
            let expected = format!(
                "dlock: refusing lock directory /run/lock/dlock-{}: {why}",
                uid()
            );
            assert!(
                stderr(&out).starts_with(&expected),
                "{what}, {args:?}: {}",
                stderr(&out)
            );
        }
        let after = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(
            (after.ino(), after.uid(), after.mode()),
            (before.ino(), before.uid(), before.mode()),
            "{what}: left as it was"
        );
        if after.is_dir() {
            assert_eq!(
                std::fs::read_dir(&dir).unwrap().count(),
                0,
                "{what}: nothing created in it"
            );
        }
    }
}

#[test]
fn only_run_creates_the_default_directory() {
    assert_root();
    let base = fake_base();
    for (args, expected) in [
        (&["status", "not-made"][..], 1),
        (&["list"], 0),
        (&["release", "--force", "not-made"], 1),
    ] {
        let out = output(dlock_with_run_lock(base.path(), args));
        assert_eq!(code(&out), expected, "{args:?}: {}", stderr(&out));
    }
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
}
