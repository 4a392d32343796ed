//! `dlock run` as a user sees it, on the file backend: the child's status passed through, the
//! environment it gets, signals forwarded, nothing left running when dlock dies.

use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

#[test]
fn child_exit_status_passes_through() {
    let dir = LockDir::new();
    for status in [0, 1, 7, 42, 255] {
        let out = output(dir.dlock(&["run", "n", "--", "sh", "-c", &format!("exit {status}")]));
        assert_eq!(code(&out), status, "{}", stderr(&out));
    }
}

#[test]
fn child_killed_by_signal_n_gives_128_plus_n() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["run", "n", "--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(code(&out), 128 + libc::SIGTERM);
    let out = output(dir.dlock(&["run", "n", "--", "sh", "-c", "kill -KILL $$"]));
    assert_eq!(code(&out), 128 + libc::SIGKILL);
}

/// The token the next holder of `name` gets.
fn next_token(dir: &LockDir, name: &str) -> u64 {
    let out = output(dir.dlock(&["run", name, "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().parse().unwrap()
}

#[test]
fn a_command_that_cannot_run_is_refused_before_the_lock_is_taken() {
    let dir = LockDir::new();
    let not_executable = dir.file("not-executable.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let no_interpreter = dir.file("no-interpreter.sh");
    std::fs::write(&no_interpreter, "#!/nonexistent/interpreter -x\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&no_interpreter, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (path, directory) = (
        not_executable.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    );
    let no_interpreter = no_interpreter.to_str().unwrap();
    let cases: [(&str, i32, String); 5] = [
        ("/nonexistent/command", 127, "command not found: /nonexistent/command".into()),
        ("no-such-command-on-path", 127, "command not found: no-such-command-on-path".into()),
        (path, 126, format!("cannot execute {path}: permission denied")),
        (directory, 126, format!("cannot execute {directory}: is a directory")),
        (
            no_interpreter,
            127,
            format!("cannot execute {no_interpreter}: its interpreter /nonexistent/interpreter was not found"),
        ),
    ];
    let before = next_token(&dir, "taken");
    for (i, (command, status, message)) in cases.iter().enumerate() {
        // A fresh name: no lock file may appear for it.
        let fresh = format!("fresh{i}");
        let out = output(dir.dlock(&["run", &fresh, "--", command]));
        assert_eq!(code(&out), *status, "{command}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim(), format!("dlock: {message}"));
        assert!(!dir.file(&format!("{fresh}.lock")).exists(), "{command}");
        // A name used before: its next token is not spent.
        let out = output(dir.dlock(&["run", "taken", "--", command]));
        assert_eq!(code(&out), *status, "{command}: {}", stderr(&out));
    }
    assert_eq!(next_token(&dir, "taken"), before + 1, "no token was spent");
}

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
fn tokens_keep_increasing_after_a_holder_is_killed() {
    let dir = LockDir::new();
    let first = output(dir.dlock(&["run", "n", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    let first: u64 = stdout(&first).trim().parse().unwrap();
    let marker = dir.file("in");
    let mut holder = dir
        .dlock(&[
            "run",
            "n",
            "--",
            "sh",
            "-c",
            &format!("echo $DLOCK_TOKEN > {}; sleep 30", marker.display()),
        ])
        .spawn()
        .unwrap();
    let second = read_pid(&marker) as u64; // the file holds the token, read like a number
    signal(holder.id(), libc::SIGKILL);
    wait_exit(&mut holder, T);
    let third = output(dir.dlock(&["run", "n", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    let third: u64 = stdout(&third).trim().parse().unwrap();
    assert!(first < second && second < third, "{first} {second} {third}");
}

#[test]
fn nested_run_of_a_held_lock_runs_directly_instead_of_deadlocking() {
    let dir = LockDir::new();
    let inner = format!(
        "{} --url {} run -n outer -- sh -c 'echo inner $DLOCK_TOKEN'",
        dlock_bin(),
        dir.path().display()
    );
    let out = output(dir.dlock(&[
        "run",
        "-n",
        "outer",
        "--",
        "sh",
        "-c",
        &format!("echo outer $DLOCK_TOKEN; {inner}"),
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let outer = lines[0].strip_prefix("outer ").unwrap();
    let inner = lines[1].strip_prefix("inner ").unwrap();
    assert_eq!(outer, inner, "the nested run sees the outer token");
}

/// Starts `dlock run n -- sh` with a child that traps every forwarded signal into a file and exits
/// 3 when it gets one, and records its pid once the traps are set.
fn start_trapping_child(dir: &LockDir) -> (std::process::Child, u32) {
    let script = format!(
        "for s in INT TERM HUP QUIT USR1 USR2; do trap \"echo $s > {got}; exit 3\" $s; done; \
         echo $$ > {pid}; while :; do sleep 0.05; done",
        pid = dir.file("child.pid").display(),
        got = dir.file("got").display()
    );
    let child = dir
        .dlock(&["run", "n", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let pid = read_pid(&dir.file("child.pid"));
    (child, pid)
}

#[test]
fn signals_are_forwarded_to_the_child_and_its_status_returned() {
    for (sig, name) in [
        (libc::SIGINT, "INT"),
        (libc::SIGTERM, "TERM"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGUSR2, "USR2"),
    ] {
        let dir = LockDir::new();
        let (mut dlock, child) = start_trapping_child(&dir);
        signal(dlock.id(), sig);
        let status = wait_exit(&mut dlock, T);
        assert_eq!(status.code(), Some(3), "{name}");
        assert_eq!(
            std::fs::read_to_string(dir.file("got")).unwrap().trim(),
            name
        );
        assert!(!alive(child));
        assert_eq!(
            code(&output(dir.dlock(&["status", "n"]))),
            1,
            "released after {name}"
        );
    }
}

#[test]
fn signal_while_waiting_ends_the_wait_with_128_plus_n_and_leaves_nothing() {
    let dir = LockDir::new();
    let (mut holder, _) = start_trapping_child(&dir);
    let mut waiter = dir
        .dlock(&[
            "-v",
            "run",
            "n",
            "--",
            "touch",
            dir.file("waiter-ran").to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Synchronise on the waiter saying it waits, then interrupt it.
    let mut err = waiter.stderr.take().unwrap();
    let mut seen = String::new();
    wait_until("the waiter to report waiting", T, || {
        use std::io::Read;
        let mut buf = [0u8; 512];
        let n = err.read(&mut buf).unwrap_or(0);
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        seen.contains("waiting for lock")
    });
    signal(waiter.id(), libc::SIGTERM);
    let status = wait_exit(&mut waiter, T);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(!dir.file("waiter-ran").exists());
    // The holder is untouched, and the only holder.
    let out = output(dir.dlock(&["status", "--json", "n"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["holders"].as_array().unwrap().len(), 1);
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, T);
}

#[test]
fn sigkill_of_dlock_kills_the_child_and_frees_the_lock_at_once() {
    let dir = LockDir::new();
    let (mut holder, child) = start_trapping_child(&dir);
    let marker = dir.file("next");
    let mut next = dir
        .dlock(&["run", "n", "--", "touch", marker.to_str().unwrap()])
        .spawn()
        .unwrap();
    signal(holder.id(), libc::SIGKILL);
    wait_exit(&mut holder, T);
    wait_until("the orphaned child to die", T, || !alive(child));
    let status = wait_exit(&mut next, T);
    assert_eq!(status.code(), Some(0));
    assert!(marker.exists());
}

#[test]
fn the_lock_file_descriptor_is_not_inherited_by_the_child() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["run", "fd-test", "--", "sh", "-c", "ls -l /proc/$$/fd"]));
    assert_eq!(code(&out), 0);
    assert!(!stdout(&out).contains("fd-test.lock"), "{}", stdout(&out));
}

/// Runs `shell_command` under script(1), which gives it a pseudo-terminal as stdin and stderr.
fn on_a_terminal(shell_command: &str) -> std::process::Child {
    std::process::Command::new("script")
        .args(["-qfec", shell_command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
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
fn on_a_terminal_the_waiting_line_shows_the_holder_and_is_erased() {
    let dir = LockDir::new();
    let (mut holder, _) = start_trapping_child(&dir);
    let cmd = format!(
        "{} --url {} run -w 1500ms n -- true",
        dlock_bin(),
        dir.path().display()
    );
    let child = on_a_terminal(&cmd);
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("\r\x1b[Kdlock: waiting 1s for lock \"n\", held by "),
        "{screen:?}"
    );
    assert!(
        screen.contains(&format!("pid {}", holder.id())),
        "{screen:?}"
    );
    assert!(
        screen.contains("\r\x1b[Kdlock: gave up on lock \"n\""),
        "line erased first: {screen:?}"
    );
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, T);
}

#[test]
fn verbose_reports_waiting_acquired_renewed_and_exited_with_timestamps() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&[
        "-v",
        "run",
        "--ttl",
        "300ms",
        "n",
        "--",
        "sh",
        "-c",
        "sleep 0.35; exit 3",
    ]));
    assert_eq!(code(&out), 3);
    let err = stderr(&out);
    for needle in [
        "acquired \"n\" after",
        "with token 1",
        "renewed \"n\"",
        "command exited: exit status: 3",
        "released \"n\"",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from {err}");
    }
    assert!(
        err.lines()
            .all(|l| l.starts_with("[20") && l.contains("Z] dlock: ")),
        "{err}"
    );
}

#[test]
fn options_can_come_from_the_environment() {
    let dir = LockDir::new();
    let (mut holder, _) = start_trapping_child(&dir);
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
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "survived");
}
