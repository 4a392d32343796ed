//! Who holds a lock and who waits for it, as `status`, `list` and a waiter tell it: the holder's
//! `--message`, when its lease expires, and the waiters in line.

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
    assert!(stdout(&out).contains(&shown()), "{}", stdout(&out));
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
    let _ = T;
    let _ = waiting;
}
