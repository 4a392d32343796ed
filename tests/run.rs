//! `dlock run` as a user sees it, where the backend plays no part (on the file backend): scripts
//! without a `#!` line, no descriptor of the lock for the command, the terminal's foreground,
//! options from the environment, signals the caller ignored. What every backend owes the user is
//! in the contract suite (`contract/`).

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

#[test]
fn a_script_without_a_shebang_line_runs_under_sh() {
    let dir = LockDir::new();
    let script = dir.file("plain-script");
    std::fs::write(&script, "echo \"ran with $# args: $1 $2\"\nexit 5\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = output(dir.dlock(&["run", "n", "--", script.to_str().unwrap(), "a", "b c"]));
    assert_eq!(code(&out), 5, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "ran with 2 args: a b c");
}

#[test]
fn the_lock_file_descriptor_is_not_inherited_by_the_child() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["run", "fd-test", "--", "sh", "-c", "ls -l /proc/$$/fd"]));
    assert_eq!(code(&out), 0);
    assert!(!stdout(&out).contains("fd-test.lock"), "{}", stdout(&out));
}

#[test]
fn on_a_terminal_the_command_runs_in_the_foreground() {
    let dir = LockDir::new();
    // `+` in ps's STAT column: the process is in the terminal's foreground process group.
    let cmd = format!(
        "{} --url {} run n -- sh -c 'ps -o stat= -p $$ > {}'",
        dlock_bin(),
        dir.path().display(),
        dir.file("stat").display()
    );
    let mut child = on_a_terminal(&cmd);
    assert!(wait_exit(&mut child, T).success());
    let stat = std::fs::read_to_string(dir.file("stat")).unwrap();
    assert!(stat.contains('+'), "not in the foreground: {stat:?}");
}

#[test]
fn options_can_come_from_the_environment() {
    let dir = LockDir::new();
    let held = dir.file("held");
    let mut holder = dir
        .dlock(&[
            "run",
            "n",
            "--",
            "sh",
            "-c",
            &format!("touch {}; exec sleep 60", held.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&held, T);
    let out = output({
        let mut c = dlock();
        c.env("DLOCK_URL", dir.path())
            .env("DLOCK_BACKEND", "file")
            .env("DLOCK_WAIT", "100ms")
            .env("DLOCK_CONFLICT_EXIT_CODE", "3")
            .args(["run", "n", "--", "true"]);
        c
    });
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("after waiting 100ms"),
        "{}",
        stderr(&out)
    );
    let out = output({
        let mut c = dlock();
        c.env("DLOCK_TTL", "soon").args(["run", "n", "--", "true"]);
        c
    });
    assert_eq!(code(&out), 64);
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, T);
}

#[test]
fn the_command_keeps_signals_its_caller_ignored() {
    // As under nohup: SIGHUP ignored by dlock's caller stays ignored in the command.
    let dir = LockDir::new();
    let script = format!(
        "trap '' HUP; exec {} --url {} run n -- sh -c 'kill -HUP $$; echo survived'",
        dlock_bin(),
        dir.path().display()
    );
    let out = program("sh").arg("-c").arg(script).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "survived");
}
