//! dlock run by root uses a lock directory, the directories above it, a lock file and a records
//! file only when they belong to root (or to an owner named with `--trust-owner`) and no other
//! user may write them (a directory may, if sticky): another user could otherwise swap, reset or
//! hold root's locks. Users other than root are not checked, as before. `nobody` plays the other
//! user; these tests run as root (as in CI) and say so when they do not.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::*;

const NOBODY: u32 = 65534;

fn as_root() -> bool {
    if own_uid() != 0 {
        // CI runs as root: there, a run that cannot check this is a failure, not a skip.
        assert!(
            std::env::var_os("CI").is_none(),
            "these tests hand files to another user, which needs root, as CI runs them"
        );
        eprintln!("skipped: these tests hand files to another user, which needs root (as in CI)");
        return false;
    }
    true
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn give_to_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// `dlock --url DIR ARGS` as root.
fn root_in(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.arg("--url").arg(dir).args(args);
    cmd
}

/// `dlock --url DIR ARGS` as nobody.
fn nobody_in(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = without_callers_dlock_settings("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(dlock_bin())
        .arg("--url")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null());
    cmd
}

fn run(cmd: Command) -> Output {
    output_within(cmd, Duration::from_secs(30))
}

/// A refusal: 69 and one line that starts with `starts` and names `says`.
fn refused(cmd: Command, starts: &str, says: &str) {
    let out = run(cmd);
    let err = stderr(&out);
    assert_eq!(code(&out), 69, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("dlock: {starts}")), "{err}");
    assert!(err.contains(says), "expected {says:?}: {err}");
}

fn succeeds(cmd: Command) -> Output {
    let out = run(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    out
}

const NOT_TRUSTED: &str = "belongs to nobody (uid 65534)";
const OPT_IN: &str = "(--trust-owner nobody, or trust-owner in the configuration)";

#[test]
fn root_refuses_another_users_lock_directory_unless_told_to_trust_its_owner() {
    if !as_root() {
        return;
    }
    let scratch = LockDir::new();
    let theirs = scratch.file("theirs");
    std::fs::create_dir(&theirs).unwrap();
    chmod(&theirs, 0o700);
    give_to_nobody(&theirs);
    let shown = theirs.display().to_string();
    let starts = format!("refusing lock directory {shown}: it {NOT_TRUSTED}");
    for args in [
        &["run", "x", "--", "true"][..],
        &["release", "--force", "x"],
    ] {
        refused(root_in(&theirs, args), &starts, OPT_IN);
    }
    // A link of root's to it (as in /tmp) is the directory it leads to.
    let link = scratch.file("link");
    std::os::unix::fs::symlink(&theirs, &link).unwrap();
    refused(root_in(&link, &["run", "x", "--", "true"]), &starts, OPT_IN);
    // Root's own directory inside it: nobody could rename it and put another in its place.
    let inside = theirs.join("roots");
    std::fs::create_dir(&inside).unwrap();
    refused(
        root_in(&inside, &["run", "x", "--", "true"]),
        &format!(
            "refusing lock directory {}: the directory above it, {shown}, {NOT_TRUSTED}",
            inside.display()
        ),
        OPT_IN,
    );
    assert!(!theirs.join("x.lock").exists() && !inside.join("x.lock").exists());

    // Told to trust nobody, by name, by uid, in the environment or in the configuration: used.
    succeeds(root_in(
        &theirs,
        &["--trust-owner", "nobody", "run", "x", "--", "true"],
    ));
    succeeds(root_in(
        &inside,
        &["--trust-owner", "bin,65534", "run", "x", "--", "true"],
    ));
    // A dlock the command runs uses the same directory, trusted the same.
    let mut nested = root_in(
        &theirs,
        &["--trust-owner", "nobody", "run", "x", "--", "sh", "-c"],
    );
    nested.args(["exec \"$0\" run inner -- true", dlock_bin()]);
    succeeds(nested);
    assert!(theirs.join("inner.lock").exists());
    let mut from_env = root_in(&theirs, &["run", "x", "--", "true"]);
    from_env.env("DLOCK_TRUST_OWNER", NOBODY.to_string());
    succeeds(from_env);
    let config = scratch.file("config");
    std::fs::write(&config, "trust-owner = bin, nobody\n").unwrap();
    chmod(&config, 0o644);
    let mut from_config = root_in(&theirs, &["run", "x", "--", "true"]);
    from_config.env("DLOCK_CONFIG", &config);
    let out = succeeds(from_config);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    // Trusting someone else is not trusting nobody; a user with no account is a usage error.
    refused(
        root_in(&theirs, &["--trust-owner", "bin", "run", "x", "--", "true"]),
        &starts,
        OPT_IN,
    );
    let out = run(root_in(
        &theirs,
        &["--trust-owner", "no-such-user-here", "status", "x"],
    ));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
}

#[test]
fn root_refuses_a_directory_others_may_write_unless_sticky() {
    if !as_root() {
        return;
    }
    let scratch = LockDir::new();
    let shared = scratch.file("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o775);
    refused(
        root_in(&shared, &["run", "x", "--", "true"]),
        &format!("refusing lock directory {}: it may be written by other users (mode 775) and is not sticky", shared.display()),
        "chmod go-w or +t it",
    );
    assert!(!shared.join("x.lock").exists());
    // Sticky, as /tmp: only a file's owner may remove or rename it.
    chmod(&shared, 0o1777);
    succeeds(root_in(&shared, &["run", "x", "--", "true"]));
}

/// In a directory both may write (sticky, as /tmp), nobody made the lock and records files first;
/// their dlock works as before, and root's refuses them, untouched.
#[test]
fn root_refuses_a_lock_file_another_user_owns_or_may_write_and_leaves_it_untouched() {
    if !as_root() {
        return;
    }
    let shared = LockDir::new();
    chmod(shared.path(), 0o1777);
    let dir = shared.path();
    let out = succeeds(nobody_in(
        dir,
        &["run", "x", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(stdout(&out).trim(), "1");
    let lock = dir.join("x.lock");
    let runs = dir.join("x.runs");
    assert_eq!(std::fs::metadata(&lock).unwrap().uid(), NOBODY);
    assert_eq!(std::fs::metadata(&runs).unwrap().uid(), NOBODY);
    let before = (std::fs::read(&lock).unwrap(), std::fs::read(&runs).unwrap());

    let starts = format!("refusing lock file {}: it {NOT_TRUSTED}", lock.display());
    for args in [
        &["run", "x", "--", "true"][..],
        &["release", "--force", "x"],
    ] {
        refused(root_in(dir, args), &starts, OPT_IN);
    }
    // The records nobody wrote are not root's monitoring's: no success within the hour.
    let out = run(root_in(dir, &["status", "--ran-within", "1h", "x"]));
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stderr(&out).contains(NOT_TRUSTED) || stdout(&out).contains(NOT_TRUSTED),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        (std::fs::read(&lock).unwrap(), std::fs::read(&runs).unwrap()),
        before
    );
    // Nobody's own dlock goes on as before.
    let out = succeeds(nobody_in(
        dir,
        &["run", "x", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(stdout(&out).trim(), "2");
    // Root, told to trust nobody, takes the next token.
    let out = succeeds(root_in(
        dir,
        &[
            "--trust-owner",
            "nobody",
            "run",
            "x",
            "--",
            "sh",
            "-c",
            "echo $DLOCK_TOKEN",
        ],
    ));
    assert_eq!(stdout(&out).trim(), "3");

    // Root's own lock file that every user may write (made under umask 0): nobody could reset
    // its token. Trusting an owner does not make it safe.
    succeeds(root_in(dir, &["run", "y", "--", "true"]));
    let mine = dir.join("y.lock");
    chmod(&mine, 0o666);
    for trust in [&[][..], &["--trust-owner", "nobody"]] {
        let mut cmd = root_in(dir, trust);
        cmd.args(["run", "y", "--", "true"]);
        refused(
            cmd,
            &format!(
                "refusing lock file {}: other users may write to it (mode 666)",
                mine.display()
            ),
            "chmod go-w it",
        );
    }
    chmod(&mine, 0o644);
    succeeds(root_in(dir, &["run", "y", "--", "true"]));
}

/// A user other than root is not checked: a shared directory of another user's, with lock files
/// others may write, works as it always did, and `--trust-owner` changes nothing.
#[test]
fn users_other_than_root_use_shared_directories_as_before() {
    if !as_root() {
        return;
    }
    let scratch = LockDir::new();
    let shared = scratch.file("shared");
    std::fs::create_dir(&shared).unwrap();
    // Another user's (uid 4242), group nogroup may write, not sticky.
    std::os::unix::fs::chown(&shared, Some(4242), Some(NOBODY)).unwrap();
    chmod(&shared, 0o775);
    chmod(scratch.path(), 0o755);
    std::fs::write(shared.join("x.lock"), "").unwrap();
    std::os::unix::fs::chown(shared.join("x.lock"), Some(4242), Some(NOBODY)).unwrap();
    chmod(&shared.join("x.lock"), 0o666);
    succeeds(nobody_in(&shared, &["run", "x", "--", "true"]));
    succeeds(nobody_in(
        &shared,
        &["--trust-owner", "root", "run", "x", "--", "true"],
    ));
}

/// An empty lock file with another name is refused by root: someone could have linked any empty
/// file of root's into a directory they may write (where the kernel lets them), and root would
/// write a lock file's header into it. The file stays empty.
#[test]
fn root_refuses_an_empty_lock_file_with_other_names() {
    if !as_root() {
        return;
    }
    let scratch = LockDir::new();
    let locks = scratch.file("locks");
    std::fs::create_dir(&locks).unwrap();
    let elsewhere = scratch.file("roots-empty-file");
    std::fs::write(&elsewhere, "").unwrap();
    chmod(&elsewhere, 0o644);
    std::fs::hard_link(&elsewhere, locks.join("x.lock")).unwrap();
    refused(
        root_in(&locks, &["run", "x", "--", "true"]),
        &format!(
            "refusing lock file {}: it is empty and has 2 names (hard links)",
            locks.join("x.lock").display()
        ),
        "remove it if it is a lock file",
    );
    assert_eq!(std::fs::read(&elsewhere).unwrap(), b"");
    // With one name (as flock(1) makes it), it becomes a dlock lock file.
    std::fs::remove_file(&elsewhere).unwrap();
    succeeds(root_in(&locks, &["run", "x", "--", "true"]));
    assert!(!std::fs::read(locks.join("x.lock")).unwrap().is_empty());
}
