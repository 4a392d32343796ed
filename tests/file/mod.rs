//! The file backend's own guarantees: flock(1) interop, names that never leave the lock directory,
//! refusal of unsafe lock directories, and no directory made by a mistyped `--url`. Exclusion,
//! modes, status/list/release and the rest every backend owes are in the contract suite.
//!
//! Beside them, what the rest of the suite knows of the file backend: store.rs (its description
//! and its target).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

// What the rest of the suite uses of this store, in every build.
pub mod store;

mod default_dir;
mod entries;
mod interop;
mod root_trust;
mod runs;
mod tokens;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

#[test]
fn flock_and_dlock_exclude_each_other() {
    let dir = LockDir::new();
    // Learn the lock file's path from status, as a user would.
    let out = output(dir.dlock(&["status", "--json", "interop"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let path = json["location"].as_str().unwrap().to_owned();

    // Each holder's command says it is in, then waits (half a minute at most) for its go file:
    // ended that way, no process of it keeps the lock file open after the test.
    let holding = |name: &str| {
        format!(
            "touch '{in_}'; i=0; while [ ! -e '{go}' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
            in_ = dir.file(&format!("{name}-in")).display(),
            go = dir.file(&format!("{name}-go")).display()
        )
    };
    let mut flock = program("flock")
        .args([&path, "sh", "-c", &holding("flock")])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("flock-in"), T);
    let out = output(dir.dlock(&["run", "-n", "interop", "--", "true"]));
    assert_eq!(code(&out), 75, "flock(1) holds it");
    let status = output(dir.dlock(&["status", "interop"]));
    assert_eq!(code(&status), 0, "status sees the flock(1) holder");
    std::fs::write(dir.file("flock-go"), "").unwrap();
    assert!(wait_exit(&mut flock, T).success());

    let mut holder = dir
        .dlock(&["run", "-n", "interop", "--", "sh", "-c", &holding("dlock")])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("dlock-in"), T);
    let out = program("flock")
        .args(["-n", &path, "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "dlock holds it");
    std::fs::write(dir.file("dlock-go"), "").unwrap();
    assert!(wait_exit(&mut holder, T).success());
}

#[test]
fn names_never_escape_the_lock_directory() {
    let dir = LockDir::new();
    let inner = dir.file("locks");
    std::fs::create_dir(&inner).unwrap();
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
    // A lock file each, and beside it the file of its last runs.
    let mut inside: Vec<String> = std::fs::read_dir(&inner)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    inside.sort();
    assert_eq!(inside.len(), 12, "{inside:?}");
    for pair in inside.chunks(2) {
        let stem = pair[0].strip_suffix(".lock").expect("a lock file");
        assert_eq!(pair[1], format!("{stem}.runs"), "{inside:?}");
    }
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
fn a_missing_lock_directory_given_by_the_user_is_an_error_and_never_created() {
    let dir = LockDir::new();
    let typo = dir.file("lokcs/jobs");
    let as_url = format!("file://{}", typo.display());
    // `hold` holds for a shell, or an owner named: this test process.
    let owner = std::process::id().to_string();
    for url in [typo.display().to_string(), as_url] {
        for args in [
            &["run", "n", "--", "true"][..],
            &["hold", "--owner", &owner, "n"],
            &["status", "n"],
            &["list"],
            &["release", "--force", "n"],
        ] {
            let out = output({
                let mut c = dlock();
                c.args(["--url", &url]).args(args);
                c
            });
            let err = stderr(&out);
            assert_eq!(code(&out), 69, "{url} {args:?}: {err}");
            assert_eq!(
                err,
                format!(
                    "dlock: lock directory {} does not exist: create it, or leave out --url for \
                     the default\n",
                    typo.display()
                ),
                "{url} {args:?}"
            );
            assert_eq!(stdout(&out), "", "{url} {args:?}");
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no directory made"
    );
}

/// A waiter behind a record `--min-hold` keeps names the one holder `status` shows: its own
/// flock(2) lock, taken before it found the record, is nobody else's.
#[test]
fn a_waiter_behind_a_min_hold_names_the_holders_status_shows() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["run", "--min-hold", "60s", "mw", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(dir.dlock(&["run", "-w", "1", "mw", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("its command ended")
            && !crate::contract::min_hold::counts_more_holders(&stderr(&out)),
        "{}",
        stderr(&out)
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&output(dir.dlock(&["status", "--json", "mw"])))).unwrap();
    assert_eq!(json["holders"].as_array().unwrap().len(), 1, "{json}");
}
