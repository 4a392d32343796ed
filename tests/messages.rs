//! What dlock says, as people read it: durations as people write them, signals by name, no Rust or
//! library internals, `-q` silent but for errors, and `--help` ending with what a user needs.

use std::time::Duration;

use crate::support::*;

/// The word after `after ` in `line`: a duration as dlock shows it.
fn duration_after(text: &str, marker: &str) -> String {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in {text}"))
        + marker.len();
    text[at..]
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `3.7s`, `250ms`, `42s`: digits, at most one decimal, then a unit.
fn reads_as_people_write(duration: &str) -> bool {
    let number = duration.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &duration[number.len()..];
    let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
    ["ms", "s", "m", "h"].contains(&unit) && !number.is_empty() && decimals <= 1
}

#[test]
fn durations_read_as_people_write_them() {
    let locks = LockDir::new();
    let out = output(locks.dlock(&["-v", "run", "x", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown = duration_after(&stderr(&out), "acquired \"x\" after ");
    assert!(
        reads_as_people_write(&shown),
        "{shown:?} in {}",
        stderr(&out)
    );
}

#[test]
fn signals_are_named() {
    let locks = LockDir::new();
    let ready = locks.file("ready");
    let script = format!("touch '{}'; sleep 30", ready.display());
    let mut cmd = locks.dlock(&["-v", "run", "x", "--", "sh", "-c", &script]);
    let child = cmd
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn dlock");
    wait_for_file(&ready, Duration::from_secs(20));
    signal(child.id(), libc::SIGTERM);
    let out = child.wait_with_output().expect("dlock's output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("forwarding SIGTERM to the command"), "{err}");
}

#[test]
fn quiet_release_force_prints_nothing() {
    let locks = LockDir::new();
    let mut holder = locks.hold_in_background("x");
    let out = output(locks.dlock(&["-q", "release", "--force", "x"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert_eq!(stderr(&out), "");
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, Duration::from_secs(20));
}

#[test]
fn refusals_show_no_rust_or_library_internals() {
    let locks = LockDir::new();
    let missing = locks.file("no-such-file");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            ["run", "-l", "0", "x", "--", "true"]
                .map(String::from)
                .to_vec(),
            "a limit is at least 1 seat",
        ),
        (
            vec![
                "-b".into(),
                "redis".into(),
                "--password-file".into(),
                missing.display().to_string(),
                "status".into(),
                "x".into(),
            ],
            "cannot read the password file",
        ),
    ];
    for (args, says) in cases {
        let mut cmd = dlock();
        cmd.args(&args);
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        for internal in ["os error", "4294967295", "Error(", "Kind"] {
            assert!(!err.contains(internal), "{args:?}: {err}");
        }
    }
}

#[test]
fn two_redis_servers_are_refused_as_a_redlock() {
    let out = output({
        let mut cmd = dlock();
        cmd.args([
            "-b",
            "redis",
            "-u",
            "redis://127.0.0.1:1",
            "-u",
            "redis://127.0.0.1:2",
        ])
        .args(["run", "x", "--", "true"]);
        cmd
    });
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("a majority of 2 is 2"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_ends_with_exit_statuses_and_the_manual_and_run_help_sets_global_options_apart() {
    for args in [&["--help"][..], &["-h"], &["run", "--help"], &["run", "-h"]] {
        let out = output({
            let mut cmd = dlock();
            cmd.args(args);
            cmd
        });
        assert_eq!(code(&out), 0);
        let text = stdout(&out);
        assert!(text.contains("Exit status:"), "{args:?}: {text}");
        assert!(
            text.trim_end()
                .ends_with("man dlock, man dlock-run; the settings in force: dlock config."),
            "{args:?}: {text}"
        );
        assert!(!text.contains("Redis keys"), "{args:?}: {text}");
    }
    let text = stdout(&output({
        let mut cmd = dlock();
        cmd.args(["run", "-h"]);
        cmd
    }));
    let global = text
        .find("Global options:")
        .expect("a global options heading");
    let own = text.find("--wait").expect("run's --wait");
    assert!(own < global, "run's options come first: {text}");
    assert!(text[global..].contains("--backend"), "{text}");
    assert!(!text[..global].contains("--backend"), "{text}");
}

#[test]
fn a_redis_refusal_reads_without_the_client_s_names_for_errors() {
    let server = crate::redis::server::RedisServer::start();
    let mut conn = server.connection();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER", "weak", "on", ">pw", "~*", "+ping", "+hello", "+auth", "+client",
        ])
        .query::<()>(&mut conn)
        .expect("ACL SETUSER");
    let url = format!("redis://weak:pw@127.0.0.1:{}", server.port());
    let out = output({
        let mut cmd = dlock();
        cmd.args(["-b", "redis", "-u", &url, "run", "x", "--", "true"]);
        cmd
    });
    let err = stderr(&out);
    assert_eq!(code(&out), 69, "{err}");
    assert!(err.contains("no permissions to run"), "{err}");
    for internal in ["NoPerm", "ResponseError", "Server("] {
        assert!(!err.contains(internal), "{err}");
    }
}

#[test]
fn verbose_says_how_the_command_ended_in_words_and_status_sets_the_owner_apart() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["-v", "run", "m", "--", "sh", "-c", "exit 2"]));
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(err.contains("command exited with status 2"), "{err}");
    assert!(!err.contains("exit status:"), "std's wording: {err}");
    let out = output(dir.dlock(&["-v", "run", "m", "--", "sh", "-c", "kill -9 $$"]));
    assert_eq!(code(&out), 137);
    let err = stderr(&out);
    assert!(
        err.contains("command was killed by signal SIGKILL"),
        "{err}"
    );

    let mut holder = dir.hold_in_background("m");
    let out = output(dir.dlock(&["status", "m"]));
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, Duration::from_secs(20));
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    let line = text.lines().nth(1).expect("a holder line");
    assert!(line.contains(", owner "), "owner glued on: {line}");
}

#[test]
fn release_without_a_hold_points_to_force_only_where_someone_holds_the_lock() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["release", "free-one"]));
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.contains("nobody holds it"), "{err}");
    assert!(!err.contains("--force"), "--force for a free lock: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    let mut holder = dir.hold_in_background("taken");
    let out = output(dir.dlock(&["release", "taken"]));
    let status = output(dir.dlock(&["status", "taken"]));
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, Duration::from_secs(20));
    assert_eq!(code(&out), 1);
    assert_eq!(code(&status), 0, "release without --force broke the lock");
    let err = stderr(&out);
    assert!(err.contains("`dlock release --force taken`"), "{err}");
    assert!(err.contains("held (exclusive by "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn a_log_that_says_waiting_also_says_when_the_lock_came() {
    let dir = LockDir::new();
    // One name (waited for on dlock's own thread) and two, the second busy (on a helper thread).
    for (held, names) in [("w1", &["w1"][..]), ("w3", &["w2", "w3"])] {
        let mut holder = dir.hold_in_background(held);
        let log = dir.file(&format!("{held}.log"));
        let mut args = vec!["run"];
        args.extend_from_slice(names);
        args.extend_from_slice(&["--", "true"]);
        let mut waiter = dir
            .dlock(&args)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        wait_until("the waiting line", Duration::from_secs(20), || {
            read().contains("waiting for lock")
        });
        signal(holder.id(), libc::SIGTERM);
        wait_exit(&mut holder, Duration::from_secs(20));
        assert!(wait_exit(&mut waiter, Duration::from_secs(20)).success());
        let text = read();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.last().is_some_and(|l| {
                l.starts_with(&format!("dlock: acquired lock \"{held}\" after waiting "))
            }),
            "{text}"
        );
        assert_eq!(lines.len(), 2, "{text}");
    }
}

#[test]
fn ctrl_c_while_waiting_on_a_terminal_erases_the_status_line() {
    use std::io::{Read, Write};
    let dir = LockDir::new();
    let mut holder = dir.hold_in_background("cc");
    let mut child = on_a_terminal(&format!(
        "stty cols 100; '{}' --url '{}' run cc -- true; echo rc=$?",
        dlock_bin(),
        dir.path().display()
    ));
    let mut stdout = child.stdout.take().unwrap();
    let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let screen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let text = || String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    wait_until("the status line", Duration::from_secs(20), || {
        text().contains("dlock: waiting 1s")
    });
    // Ctrl-C, as the terminal sends it to its foreground process group.
    child.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
    child.stdin.as_mut().unwrap().flush().unwrap();
    wait_until("dlock to end", Duration::from_secs(20), || {
        text().contains("rc=")
    });
    drop(child.stdin.take());
    wait_exit(&mut child, Duration::from_secs(20));
    reader.join().unwrap();
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, Duration::from_secs(20));
    let screen = text();
    assert!(screen.contains("rc=130"), "{screen:?}");
    // After the last status line drawn: the line erased, then nothing but the shell's line.
    let last = screen.rfind("dlock: waiting").unwrap();
    let after = &screen[last..];
    let erased = after.find("\r\x1b[K").expect("the line erased");
    assert!(after[erased..].contains("rc=130"), "{screen:?}");
    assert!(!after[erased..].contains("waiting"), "{screen:?}");
}

/// A loopback Redis that answers every command of its first 20 connections with `reply`; its port.
fn redis_answering(reply: Vec<u8>) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reply = std::sync::Arc::new(reply);
    std::thread::spawn(move || {
        for conn in listener.incoming().take(20) {
            let Ok(mut conn) = conn else { continue };
            let reply = reply.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
                let mut buf = [0u8; 4096];
                // One answer per read, a hundred at most.
                for _ in 0..100 {
                    match conn.read(&mut buf) {
                        Ok(n) if n > 0 => {
                            if conn.write_all(&reply).is_err() {
                                return;
                            }
                        }
                        _ => return,
                    }
                }
            });
        }
    });
    port
}

/// A server's error text reaches the terminal escaped and cut short: no escape sequence, C1
/// control or line of its own ("FAKE: dlock: lock acquired OK"), never megabytes, on stderr and in
/// `--ran-within`'s line on stdout.
#[test]
fn a_servers_error_text_is_escaped_and_cut_short() {
    let mut reply = "-ERR evil \x1b[2J\u{9b}31m\rFAKE: dlock: lock acquired OK "
        .as_bytes()
        .to_vec();
    reply.extend(std::iter::repeat_n(b'x', 2 << 20));
    reply.extend_from_slice(b"\r\n");
    let port = redis_answering(reply);
    let url = format!("redis://127.0.0.1:{port}");
    let on = |args: &[&str]| {
        let mut cmd = dlock();
        cmd.args([
            "--backend",
            "redis",
            "--url",
            &url,
            "--connect-timeout",
            "5s",
        ])
        .args(args);
        output(cmd)
    };
    let safe = |text: &str, what: &str| {
        assert!(
            !text.contains('\x1b') && !text.contains('\u{9b}') && !text.contains('\r'),
            "{what}: {text:?}"
        );
        assert!(text.len() < 4096, "{what}: {} bytes", text.len());
        assert!(
            text.lines().all(|line| !line.starts_with("FAKE")),
            "{what}: {text:?}"
        );
    };
    let out = on(&["run", "-n", "x", "--", "true"]);
    assert_ne!(code(&out), 0);
    safe(&stderr(&out), "run's stderr");
    assert!(stderr(&out).contains("evil"), "{}", stderr(&out));
    let out = on(&["status", "x", "--ran-within", "1h"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    safe(&stdout(&out), "--ran-within's line");
    safe(&stderr(&out), "--ran-within's stderr");
}
