//! Hostile input on every backend: holder records that other clients forged (out of range, with
//! control characters), output into a closed pipe, and names outside the Basic Multilingual
//! Plane. dlock must never panic, never admit anyone on a record it cannot read, and never let a
//! terminal escape through.

use std::process::Stdio;

use super::{Holding, T};
use crate::support::target::Target;
use crate::support::*;

/// `status`, `status --json`, `list`, `list --json`, `run -n` and `release --force` on a lock whose
/// only holder's record is forged: each exits as it would for any holder (held, listed, busy,
/// released) and shows the record as unreadable, `shown` being what it shows of it.
fn shows_unreadable(t: &Target, name: &str, shown: &str) {
    let out = output(t.dlock(&["status", name]));
    assert_eq!(code(&out), 0, "status: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("(unreadable record \"{shown}\")")),
        "{text}"
    );

    let out = output(t.dlock(&["status", "--json", name]));
    assert_eq!(code(&out), 0, "status --json: {}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    let holder = &json["holders"][0];
    assert_eq!(holder["unreadable"], shown, "{json}");
    assert_eq!(holder["mode"], "exclusive", "{json}");
    for unknown in ["since", "token", "pid", "host"] {
        assert!(holder[unknown].is_null(), "{unknown} in {json}");
    }

    let out = output(t.dlock(&["list"]));
    assert_eq!(code(&out), 0, "list: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{name}\texclusive (unreadable record")),
        "{}",
        stdout(&out)
    );

    let out = output(t.dlock(&["list", "--json"]));
    assert_eq!(code(&out), 0, "list --json: {}", stderr(&out));
    let all: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("list JSON");
    assert_eq!(all[0]["name"], name, "{all}");
    assert_eq!(all[0]["holders"][0]["unreadable"], shown, "{all}");

    // Never admitted on a record it cannot read: busy.
    let out = output(t.dlock(&["run", "-n", name, "--", "true"]));
    assert_eq!(code(&out), 75, "run -n: {}", stderr(&out));
    assert!(
        stderr(&out).contains("unreadable record"),
        "{}",
        stderr(&out)
    );

    let out = output(t.dlock(&["release", "--force", name]));
    assert_eq!(code(&out), 0, "release --force: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("released {name}\texclusive (unreadable record")),
        "{}",
        stdout(&out)
    );
    let out = output(t.dlock(&["status", name]));
    assert_eq!(code(&out), 1, "released: {}", stdout(&out));
}

/// Forges the only holder record of the lock "x" where the store keeps it, as anyone who can
/// write there could (the store's `ForeignHolder`): `record` (`MODE TOKEN SINCE PID
/// HOST[\tMESSAGE]`), or `json` where the store keeps a holder's JSON as it is; checks that dlock
/// shows it as unreadable, escaped as it shows stored text (quotes and backslashes as they are,
/// 120 characters at most); then lets go of a holder the store needed for it.
fn a_forged_x_is_unreadable(t: &Target, record: &str, json: &str) {
    let forged = (t.caps().foreign_holder.forge)(t, record, json);
    let mut shown = String::new();
    for c in forged.stored.chars().take(120) {
        match c {
            '"' | '\'' | '\\' => shown.push(c),
            _ => shown.extend(c.escape_debug()),
        }
    }
    if forged.stored.chars().count() > 120 {
        shown.push_str("...");
    }
    shows_unreadable(t, "x", &shown);
    if let Some(let_go) = forged.let_go {
        let_go();
    }
}

/// A record the store keeps and dlock cannot read (a time past the year 9999, where the store
/// holds one).
pub fn a_forged_record_is_unreadable_and_the_lock_stays_busy(t: &Target) {
    let json =
        r#"{"dlock":1,"mode":"exclusive","host":"h","pid":2,"owner":"ab","since":99999999999999}"#;
    a_forged_x_is_unreadable(t, t.caps().foreign_holder.unreadable, json);
}

/// A message no dlock writes (a terminal escape in it, or over the limit) makes its record
/// unreadable: shown escaped, never raw, and the lock stays busy.
pub fn a_forged_message_is_unreadable_and_never_reaches_a_terminal(t: &Target) {
    let long = "m".repeat(300);
    for message in ["deploy \u{1b}]0;owned\u{7}", long.as_str()] {
        let record = format!("exclusive 5 1700000000 2 host\t{message}");
        let data = serde_json::json!({
            "dlock": 1, "mode": "exclusive", "host": "h", "pid": 2, "owner": "ab",
            "since": 1_700_000_000, "message": message,
        })
        .to_string();
        a_forged_x_is_unreadable(t, &record, &data);
    }
}

/// Standard output (or error) whose reader has gone before dlock writes.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer
}

pub fn output_into_a_closed_pipe_ends_quietly_with_the_usual_status(t: &Target) {
    let quiet = |args: &[&str]| {
        let mut cmd = t.dlock(args);
        cmd.stdout(closed_pipe());
        output(cmd)
    };
    let out = quiet(&["status", "x"]);
    assert_eq!((code(&out), stderr(&out)), (1, String::new()), "free");
    let holder = Holding::start(t, &["--ttl", "3s", "x"]);
    for (args, status) in [
        (&["status", "x"][..], 0),
        (&["status", "--json", "x"], 0),
        (&["list"], 0),
        (&["list", "--json"], 0),
    ] {
        let out = quiet(args);
        assert_eq!(
            (code(&out), stderr(&out)),
            (status, String::new()),
            "{args:?}"
        );
    }
    // And a message into a closed stderr: lost, but the status stands.
    let mut busy = t.dlock(&["run", "-n", "x", "--", "true"]);
    busy.stderr(closed_pipe());
    assert_eq!(code(&output(busy)), 75);
    holder.let_go();
}

pub fn names_outside_the_basic_multilingual_plane_work(t: &Target) {
    for name in ["😀", "a/𝄞/b", "\u{10ffff}"] {
        let out = output(t.dlock(&["run", name, "--", "true"]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let mut holder = t
            .dlock(&["run", name, "--", "sleep", "30"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut listed = String::new();
        wait_until(&format!("{name} listed"), T, || {
            listed = stdout(&output(t.dlock(&["list"])));
            listed.contains(&format!("{name}\t"))
        });
        let out = output(t.dlock(&["release", "--force", name]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let _ = holder.kill();
        let _ = holder.wait();
    }
}
