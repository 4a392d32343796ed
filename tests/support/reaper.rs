//! A server that outlives every test of this process (a static, never dropped) is ended by a
//! reaper: a `sh` that waits on a pipe from this process, which the kernel closes when the process
//! ends, however it ends (tests done, a failed test, Ctrl-C, SIGTERM, SIGKILL); it then stops the
//! server and removes its directory.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A reaper that, once this process has ended, sends `signal` to `pid` (SIGKILL after 5 s if it
/// still runs) and then removes `dir`. Keep the returned child (its stdin is the pipe) for as long
/// as the server must run.
pub fn reaper(pid: u32, dir: &Path, signal: i32) -> Child {
    // `kill 0` would signal the reaper's own group: this test process's.
    assert!(pid > 1, "no server process to reap (pid {pid})");
    // Ignores the signals a terminal or a supervisor sends the whole group, so that it outlives
    // this process and does its job; its loops wait (bounded) for the server to be gone before
    // removing what it may still write.
    let script = r#"trap '' INT HUP TERM QUIT
read -r _
gone() { i=0; while kill -0 "$1" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done; }
kill -CONT "$1" 2>/dev/null
kill -"$3" "$1" 2>/dev/null
gone "$1"
kill -KILL "$1" 2>/dev/null
gone "$1"
rm -rf -- "$2""#;
    Command::new("sh")
        .args(["-c", script, "reaper", &pid.to_string()])
        .arg(dir)
        .arg(signal.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the reaper of a shared server")
}
