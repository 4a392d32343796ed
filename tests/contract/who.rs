//! Who holds a lock and who waits for it, as `status`, `list` and a waiter tell it: the holder's
//! `--message`, when its lease expires, and the waiters in line.

use std::time::{Duration, SystemTime};

use super::{waiting, Holding, T};
use crate::support::target::Target;
use crate::support::*;

/// A message as a CI job would give it: quotes, a URL, text beyond ASCII.
const MESSAGE: &str = "deploy \"v1.4\" by https://ci.example/job/7 ✓";

/// How dlock shows `MESSAGE` in a line for people: quoted as lock names are.
fn shown() -> String {
    format!(", message {MESSAGE:?}")
}

pub fn a_message_is_shown_by_status_list_their_json_and_waiters(t: &Target) {
    let holder = Holding::start(t, &["--message", MESSAGE, "deploy"]);

    let out = output(t.dlock(&["status", "deploy"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // `status` sets it on a line of its own below the holder's.
    let below = format!("\n    message {MESSAGE:?}\n");
    assert!(stdout(&out).contains(&below), "{}", stdout(&out));
    let out = output(t.dlock(&["list"]));
    assert!(
        stdout(&out).starts_with("deploy\texclusive by ") && stdout(&out).contains(&shown()),
        "{}",
        stdout(&out)
    );
    let out = output(t.dlock(&["status", "--json", "deploy"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(json["holders"][0]["message"], MESSAGE, "{json}");
    let out = output(t.dlock(&["list", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("list JSON");
    assert_eq!(json[0]["holders"][0]["message"], MESSAGE, "{json}");

    // What a waiter says of the holder: busy, waiting, gave up.
    let out = output(t.dlock(&["run", "-n", "deploy", "--", "true"]));
    assert_eq!(code(&out), 75);
    assert!(
        stderr(&out).contains("is busy: held exclusive by ") && stderr(&out).contains(&shown()),
        "{}",
        stderr(&out)
    );
    let out = output(t.dlock(&["-v", "run", "-w", "300ms", "deploy", "--", "true"]));
    assert_eq!(code(&out), 75);
    let err = stderr(&out);
    for needle in [
        "waiting for lock \"deploy\": held",
        "gave up on lock \"deploy\"",
    ] {
        let line = err.lines().find(|l| l.contains(needle));
        assert!(
            line.is_some_and(|l| l.contains(&shown())),
            "{needle:?} without the message in {err}"
        );
    }
    assert_eq!(holder.let_go().code(), Some(0));

    // The environment gives it too; without one, JSON says null.
    let mut cmd = t.dlock(&[
        "run",
        "plain",
        "--",
        "sh",
        "-c",
        &t.shell_words(&["status", "--json", "plain"]),
    ]);
    cmd.env("DLOCK_MESSAGE", "from the environment");
    let out = output(cmd);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(
        json["holders"][0]["message"], "from the environment",
        "{json}"
    );
    let out = output(t.dlock(&[
        "run",
        "plain",
        "--",
        "sh",
        "-c",
        &t.shell_words(&["status", "--json", "plain"]),
    ]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    let holder = &json["holders"][0];
    assert!(holder.get("message").is_some_and(|m| m.is_null()), "{json}");
}

/// Other users read the message on their terminals: control characters are refused, not escaped,
/// as is text over the limit, with 64 and a line naming the option (or variable) and the limit,
/// before anything is taken.
pub fn a_message_with_control_characters_or_over_256_bytes_is_a_usage_error(t: &Target) {
    let long = "x".repeat(257);
    for (option, value) in [
        ("--message", "a\u{1b}]0;owned\u{7}b"),
        ("--message", "two\nlines"),
        ("--message", "a\tb"),
        ("--message", "right\u{202e}to left"),
        ("--message", long.as_str()),
        ("DLOCK_MESSAGE", "a\rb"),
    ] {
        let mut cmd = if option == "DLOCK_MESSAGE" {
            let mut cmd = t.dlock(&["run", "m", "--", "true"]);
            cmd.env(option, value);
            cmd
        } else {
            t.dlock(&["run", option, value, "m", "--", "true"])
        };
        cmd.env_remove("DLOCK_WAIT");
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{value:?}: {err}");
        assert!(
            err.starts_with(&format!("dlock: {option}: ")) && err.contains("256 bytes"),
            "{value:?}: {err}"
        );
        assert!(
            !err.chars().any(|c| c.is_control() && c != '\n') && err.lines().count() == 1,
            "{value:?}: the refused text reached the terminal: {err:?}"
        );
    }
    assert_eq!(code(&output(t.dlock(&["status", "m"]))), 1, "nothing taken");
    let limit = "é".repeat(128);
    let out = output(t.dlock(&["run", "--message", &limit, "m", "--", "true"]));
    assert_eq!(code(&out), 0, "256 bytes are accepted: {}", stderr(&out));
}

/// `status` and `list` give each holder's lease end where the backend keeps a lease others can see
/// (Redis, PostgreSQL, MySQL: by the server's clock; etcd: the seconds the server says the lease
/// has left; within the ttl), null where it does not (a lock file; a ZooKeeper session's end, which
/// only its own client sees); and the waiters in line, first first, where the backend keeps a line
/// (all but the file backend, whose waiters block in the kernel), empty there.
pub fn status_and_list_show_the_lease_end_and_the_waiters_in_order(t: &Target) {
    let holder = Holding::start(t, &["--ttl", "10s", "q"]);
    let first = waiting(t, &["run", "--message", "first", "q", "--", "true"]);
    let second = waiting(t, &["run", "-s", "q", "--", "true"]);
    let started = SystemTime::now();

    let out = output(t.dlock(&["status", "--json", "q"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    let expires = &status["holders"][0]["expires_at"];
    let waiters = &status["waiters"];
    let leased = t.caps().shows_lease_end;
    if leased {
        let at = humantime::parse_rfc3339(expires.as_str().expect("an RFC 3339 time"))
            .expect("RFC 3339");
        // Renewed every third of the ttl, so between a third of it and all of it from now.
        assert!(
            at > started + Duration::from_secs(2) && at < started + Duration::from_secs(12),
            "{status}"
        );
    } else {
        assert!(expires.is_null(), "{status}");
    }
    // The file backend keeps no queue: an empty list, never a wrong one.
    if !t.caps().keeps_a_line {
        assert_eq!(waiters, &serde_json::json!([]), "{status}");
    } else {
        let pids: Vec<_> = waiters
            .as_array()
            .expect("a list of waiters")
            .iter()
            .map(|w| w["pid"].clone())
            .collect();
        assert_eq!(pids, [first.child.id(), second.child.id()], "{status}");
        assert_eq!(waiters[0]["mode"], "exclusive", "{status}");
        assert_eq!(waiters[0]["message"], "first", "{status}");
        assert_eq!(waiters[1]["mode"], "shared", "{status}");
        for w in waiters.as_array().unwrap() {
            assert!(w["host"].is_string() && w["owner"].is_string(), "{status}");
            let since = humantime::parse_rfc3339(w["since"].as_str().expect("since")).unwrap();
            assert!(
                since <= SystemTime::now() + Duration::from_secs(2),
                "{status}"
            );
        }
        let out = output(t.dlock(&["status", "q"]));
        let text = stdout(&out);
        // The holder and its waiters (a message on a line below its own); the last run's lines
        // after them are last_run.rs's.
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("  last ") && !l.starts_with("    "))
            .collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[2].starts_with("  waiting: exclusive by "), "{text}");
        assert!(names_pid(lines[2], first.child.id()), "{text}");
        assert!(lines[3].starts_with("  waiting: shared by "), "{text}");
    }
    if leased {
        let text = stdout(&output(t.dlock(&["status", "q"])));
        assert!(text.contains(", lease ends in "), "{text}");
    }
    let out = output(t.dlock(&["list", "--json", "q"]));
    let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("list JSON");
    assert_eq!(listed[0]["waiters"], status["waiters"], "{listed}");

    assert_eq!(holder.let_go().code(), Some(0));
    assert_eq!(first.finish(T).0, 0);
    assert_eq!(second.finish(T).0, 0);
}
