//! Exit statuses a script can rely on: the command's own, 128+N for a signal, 75 (or the
//! conflict code) for a busy lock, 126 and 127 for a command that cannot run, 64 for a bad option.

use std::os::unix::fs::PermissionsExt;

use super::Holding;
use crate::support::target::Target;
use crate::support::*;

pub fn child_exit_status_passes_through(t: &Target) {
    for status in [0, 1, 7, 42, 255] {
        let out = output(t.dlock(&["run", "n", "--", "sh", "-c", &format!("exit {status}")]));
        assert_eq!(code(&out), status, "{}", stderr(&out));
    }
}

pub fn child_killed_by_signal_n_gives_128_plus_n(t: &Target) {
    let out = output(t.dlock(&["run", "n", "--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(code(&out), 128 + libc::SIGTERM);
    let out = output(t.dlock(&["run", "n", "--", "sh", "-c", "kill -KILL $$"]));
    assert_eq!(code(&out), 128 + libc::SIGKILL);
}

/// The token the next holder of `name` gets.
fn next_token(t: &Target, name: &str) -> u64 {
    let out = output(t.dlock(&["run", name, "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().parse().unwrap()
}

pub fn a_command_that_cannot_run_is_refused_before_the_lock_is_taken(t: &Target) {
    let not_executable = t.scratch.file("not-executable.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let no_interpreter = t.scratch.file("no-interpreter.sh");
    std::fs::write(&no_interpreter, "#!/nonexistent/interpreter -x\nexit 0\n").unwrap();
    std::fs::set_permissions(&no_interpreter, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (path, directory) = (
        not_executable.to_str().unwrap(),
        t.scratch.path().to_str().unwrap(),
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
    let before = next_token(t, "taken");
    for (i, (command, status, message)) in cases.iter().enumerate() {
        let fresh = format!("fresh{i}");
        let out = output(t.dlock(&["run", &fresh, "--", command]));
        assert_eq!(code(&out), *status, "{command}: {}", stderr(&out));
        assert_eq!(stderr(&out).trim(), format!("dlock: {message}"));
        if t.caps().locks_are_files {
            // Not even a lock file appears for a fresh name.
            let file = std::path::Path::new(t.urls()[0]).join(format!("{fresh}.lock"));
            assert!(!file.exists(), "{command}");
        }
        // A name used before: its next token is not spent.
        let out = output(t.dlock(&["run", "taken", "--", command]));
        assert_eq!(code(&out), *status, "{command}: {}", stderr(&out));
    }
    let after = next_token(t, "taken");
    if t.tokens_count_acquisitions() {
        assert_eq!(after, before + 1, "no token was spent");
    } else {
        assert!(after > before, "{after} after {before}");
    }
}

pub fn busy_lock_exits_75_or_the_conflict_code_without_running_the_child(t: &Target) {
    let holder = Holding::start(t, &["busy"]);
    let ran = t.scratch_file("ran");
    let touch = ["--", "touch", ran.as_str()];
    let out = output(t.dlock(&[&["run", "-n", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is busy: held exclusive by"),
        "{}",
        stderr(&out)
    );
    assert!(
        names_pid(&stderr(&out), holder.dlock.id()),
        "{}",
        stderr(&out)
    );
    let out = output(t.dlock(&[&["run", "-n", "-E", "9", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 9);
    let out = output(t.dlock(&[&["run", "-w", "200ms", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 75);
    assert!(
        stderr(&out).contains("after waiting 200ms"),
        "{}",
        stderr(&out)
    );
    let out = output(t.dlock(&[&["-q", "run", "-n", "busy"][..], &touch].concat()));
    assert_eq!(code(&out), 75);
    assert_eq!(stderr(&out), "", "quiet means quiet");
    assert!(!std::path::Path::new(&ran).exists());

    // status and list show the holder.
    let out = output(t.dlock(&["status", "--json", "busy"]));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(json["held"], true);
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    assert_eq!(holders[0]["mode"], "exclusive");
    assert_eq!(holders[0]["pid"], holder.dlock.id());
    assert_eq!(holders[0]["token"], holder.token());
    let list = output(t.dlock(&["list"]));
    assert!(
        stdout(&list).starts_with("busy\texclusive by"),
        "{}",
        stdout(&list)
    );
    assert!(holder.let_go().success());
}

/// A ttl longer than the store can count is refused before anything is taken (64), naming the
/// limit: a year on every backend (what `--ttl` takes at all), and ZooKeeper's own 24 days (a
/// session timeout is a 32-bit count of milliseconds), named with the backend. The longest each
/// keeps is a real lease: where the store shows it, `status` gives its end that far away.
pub fn a_ttl_longer_than_servers_count_is_a_usage_error(t: &Target) {
    let (longest, days, beyond, limit) = match t.caps().ttl_limit {
        Some(l) => (l.longest, l.days, l.beyond, l.refused),
        None => ("30days", 30, "366days", "at most 1 year"),
    };
    for ttl in ["5000000000y", beyond, "18446744073709551615s"] {
        let mut cmd = t.dlock(&["run", "--ttl", ttl, "n", "--", "true"]);
        let out = output({
            cmd.stdout(std::process::Stdio::null());
            cmd
        });
        assert_eq!(code(&out), 64, "{ttl}: {}", stderr(&out));
        let refused = if ttl == beyond {
            limit
        } else {
            "at most 1 year"
        };
        assert!(stderr(&out).contains(refused), "{ttl}: {}", stderr(&out));
    }
    let started = std::time::SystemTime::now();
    let holder = Holding::start(t, &["--ttl", longest, "n"]);
    let out = output(t.dlock(&["status", "--json", "n"]));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    let expires = &json["holders"][0]["expires_at"];
    // Where the store keeps a lease others can see (see who.rs): its end is the ttl away.
    if t.caps().shows_lease_end {
        let at = humantime::parse_rfc3339(expires.as_str().expect("an RFC 3339 time"))
            .expect("RFC 3339");
        let ttl = std::time::Duration::from_secs(days * 86_400);
        let slack = std::time::Duration::from_secs(120);
        assert!(
            at > started + ttl - slack && at < started + ttl + slack,
            "a lease of {longest}: {json}"
        );
    } else {
        assert!(expires.is_null(), "{json}");
    }
    assert!(holder.let_go().success());
    if t.caps().ttl_limit.is_none() {
        let out = output(t.dlock(&["run", "--ttl", "1y", "n", "--", "true"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
}
