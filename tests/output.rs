//! What `status` and `list` print for people (a holder a line that fits 100 columns, each time
//! once, relative to now, durations as people write them) and for jq (the same fields on every
//! backend, numbers where a script wants numbers).

use crate::redis::server::RedisServer;
use crate::support::*;

/// Whether `text` has an RFC 3339 time in it (`2026-01-01T00:00:00Z`).
fn has_utc_time(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes
        .windows(20)
        .any(|w| w[4] == b'-' && w[7] == b'-' && w[10] == b'T' && w[13] == b':' && w[19] == b'Z')
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stdout(out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

#[test]
fn json_waiters_are_always_an_array_and_an_ending_gives_its_numbers() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["run", "failed", "--", "sh", "-c", "exit 3"]));
    assert_eq!(code(&out), 3);
    let out = output(dir.dlock(&["run", "killed", "--", "sh", "-c", "kill -9 $$"]));
    assert_eq!(code(&out), 137);
    let mut holder = dir.hold_in_background("held");
    let status = output(dir.dlock(&["status", "--json", "failed"]));
    let killed = output(dir.dlock(&["status", "--json", "killed"]));
    let list = output(dir.dlock(&["list", "--json"]));
    let runs = output(dir.dlock(&["list", "--runs", "--json"]));
    let runs_text = output(dir.dlock(&["list", "--runs"]));
    let plain = output(dir.dlock(&["list"]));
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, std::time::Duration::from_secs(20));

    let status = json_of(&status);
    assert_eq!(status["waiters"], serde_json::json!([]), "{status}");
    let last = &status["last_run"];
    assert_eq!(last["ending"], "exit:3", "{last}");
    assert_eq!(last["exit_code"], 3, "{last}");
    assert!(last["signal"].is_null(), "{last}");
    let last = &json_of(&killed)["last_run"];
    assert_eq!(last["signal"], 9, "{last}");
    assert!(last["exit_code"].is_null(), "{last}");
    for lock in json_of(&list).as_array().expect("an array") {
        assert!(lock["waiters"].is_array(), "{lock}");
    }
    // list --runs: held or free, in JSON and in text, NAME and a tab first as `list` has it.
    let runs = json_of(&runs);
    let held_of = |name: &str| {
        runs.as_array()
            .and_then(|all| all.iter().find(|l| l["name"] == name))
            .map(|l| l["held"].clone())
    };
    assert_eq!(held_of("failed"), Some(serde_json::json!(false)), "{runs}");
    assert_eq!(held_of("held"), Some(serde_json::json!(true)), "{runs}");
    let text = stdout(&runs_text);
    assert!(
        text.lines()
            .any(|l| l.starts_with("failed\tfree, last run ")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("held\theld, last run ")),
        "{text}"
    );
    assert!(
        stdout(&plain).starts_with("held\texclusive by "),
        "{}",
        stdout(&plain)
    );
}

/// Every line of `text` fits 100 columns with a host name of 10 characters (a host name may be
/// 64), and shows no time in UTC; a holder's says since when from now.
fn assert_fits_for_people(text: &str) {
    let host = hostname();
    for line in text.lines() {
        let width = line.chars().count() - line.matches(&host).count() * host.chars().count();
        assert!(
            width + 10 <= 100,
            "{width} + a 10-character host name: {line}\n{text}"
        );
        assert!(!has_utc_time(line), "a time in UTC: {line}");
    }
    for line in text.lines().filter(|l| l.contains(" since ")) {
        assert!(
            line.contains(" ago,") || line.contains(" since just now,"),
            "{line}"
        );
    }
}

fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("the host name");
    name.trim().to_owned()
}

#[test]
fn a_holder_s_lines_fit_100_columns_and_say_each_time_once() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&[
        "run",
        "--min-hold",
        "24h",
        "--message",
        "deploy v1.4",
        "nightly",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = stdout(&output(dir.dlock(&["status", "nightly"])));
    assert_fits_for_people(&status);
    assert!(
        status.contains(" more by --min-hold 24h; its command ended\n"),
        "{status}"
    );
    assert!(
        status.contains("\n    message \"deploy v1.4\"\n"),
        "{status}"
    );
    assert!(!status.contains("1day"), "{status}");

    // On Redis a lock kept by --min-hold ends with its lease: one time, not the same one twice.
    let server = RedisServer::start();
    let out = output(server.dlock(&["run", "--min-hold", "1h", "kept", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = stdout(&output(server.dlock(&["status", "kept"])));
    assert_fits_for_people(&status);
    assert_eq!(holder_lines_of(&status), 1, "{status}");
    assert!(!status.contains("lease"), "the same time twice: {status}");
    assert!(status.contains(" more by --min-hold 1h;"), "{status}");
}

fn holder_lines_of(text: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("  exclusive "))
        .count()
}
