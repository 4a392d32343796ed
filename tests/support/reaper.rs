//! A server that outlives every test of this process (a static, never dropped) is ended by a
//! reaper: a `sh` that waits on a pipe from this process, which the kernel closes when the process
//! ends, however it ends (tests done, a failed test, Ctrl-C, SIGTERM, SIGKILL); it then stops the
//! server and removes its directory.
//!
//! A test's own server is stopped by its `Drop`, which a killed test process never runs: every
//! one is also listed with `end_with_this_process`, for one reaper that ends, once this process
//! has ended, each listed server still running (its whole process group) and removes its
//! directory.

use super::programs::program;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, OnceLock};

/// The start of a reaper's script: it ignores the signals a terminal or a supervisor sends the
/// whole group, so that it outlives this process and does its job, and returns at this process's
/// end (its stdin, the pipe, closed); `gone PID` then waits (bounded) for a process to be gone,
/// before what it may still write is removed.
const WAIT_FOR_THIS_PROCESS_TO_END: &str = r#"trap '' INT HUP TERM QUIT
gone() { i=0; while kill -0 "$1" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done; }
read -r _"#;

/// A reaper that, once this process has ended, sends `signal` to `pid` (SIGKILL after 5 s if it
/// still runs) and then removes `dir`. Keep the returned child (its stdin is the pipe) for as long
/// as the server must run.
pub fn reaper(pid: u32, dir: &Path, signal: i32) -> Child {
    // `kill 0` would signal the reaper's own group: this test process's.
    assert!(pid > 1, "no server process to reap (pid {pid})");
    let script = r#"kill -CONT "$1" 2>/dev/null
kill -"$3" "$1" 2>/dev/null
gone "$1"
kill -KILL "$1" 2>/dev/null
gone "$1"
rm -rf -- "$2""#;
    let (pid, signal) = (pid.to_string(), signal.to_string());
    start_reaper(script, &[pid.as_ref(), dir.as_os_str(), signal.as_ref()])
}

/// A `sh` running `script` with `args` ($1...) once this process has ended.
fn start_reaper(script: &str, args: &[&std::ffi::OsStr]) -> Child {
    // The machine's PATH, not the tests' list of programs: the directory that list makes for
    // this process is removed by the next test process once this one is gone, and the reaper
    // runs after that.
    program("sh")
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("-c")
        .arg(format!("{WAIT_FOR_THIS_PROCESS_TO_END}\n{script}"))
        .arg("reaper")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a reaper")
}

/// Lists `server` (started in its own process group, as every test server is) and its directory
/// `dir` for the reaper of this process's own servers: once this process has ended, however it
/// ended, that reaper kills the server's group if the same process still runs (its pid with the
/// start time it has now, so a pid used again by another process is left alone) and removes
/// `dir` if it is still there. A server stopped and its directory removed before then are passed
/// over, so nothing is ever taken off the list.
pub fn end_with_this_process(server: &Child, dir: &Path) {
    let Some(started) = start_time(server.id()) else {
        return; // gone (and reaped) already
    };
    let mut listed = listed().lock().unwrap_or_else(|e| e.into_inner());
    // One write per line: a process killed mid-way leaves no half line.
    let line = format!("{} {started} {}\n", server.id(), dir.display());
    listed
        .file
        .write_all(line.as_bytes())
        .expect("list a server for its reaper");
}

/// The list of this process's own servers, and its reaper.
struct Listed {
    file: std::fs::File,
    path: PathBuf,
    _reaper: Child,
}

/// This process's list, made (with its reaper) at its first server.
fn listed() -> &'static Mutex<Listed> {
    static LISTED: OnceLock<Mutex<Listed>> = OnceLock::new();
    LISTED.get_or_init(|| {
        let (file, path) = tempfile::Builder::new()
            .prefix(".tmp-servers-")
            .tempfile()
            .and_then(|file| file.keep().map_err(|e| e.error))
            .expect("the list of this process's servers");
        let _reaper = reaper_of_listed(&path);
        Mutex::new(Listed {
            file,
            path,
            _reaper,
        })
    })
}

/// The process's start time (field 22 of /proc/PID/stat, after the name in parentheses).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(19)?.parse().ok()
}

/// The reaper of the servers listed in `list` (lines `PID START_TIME DIR`); it removes the list
/// last.
fn reaper_of_listed(list: &Path) -> Child {
    // The start time is read as `start_time` does.
    let script = r#"list=$1
while read -r pid started dir; do
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) && {
    set -- ${stat##*) }
    shift 19
    [ "$1" = "$started" ] && { kill -9 -"$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null; gone "$pid"; }
  }
  [ -d "$dir" ] && rm -rf -- "$dir"
done < "$list"
rm -f -- "$list""#;
    start_reaper(script, &[list.as_os_str()])
}

#[cfg(test)]
mod tests {
    // Imports go inside the tests: the benchmarks, which share this module, compile it without
    // them.

    /// Set by `a_killed_test_process_leaves_no_server_behind` for the test process it starts:
    /// the test below then says its server and waits to be killed.
    const THEN_WAIT_TO_BE_KILLED: &str = "DLOCK_TEST_THEN_WAIT_TO_BE_KILLED";
    const LISTS: &str = "support::reaper::tests::a_test_s_own_server_is_listed_for_its_reaper";

    /// A test's own server is listed for the reaper as it starts: its pid, its start time and its
    /// directory.
    #[test]
    fn a_test_s_own_server_is_listed_for_its_reaper() {
        let server = crate::redis::server::RedisServer::start();
        let started = super::start_time(server.pid()).expect("the server's start time");
        let line = format!("{} {started} {}", server.pid(), server.dir().display());
        let path = super::listed().lock().expect("the list").path.clone();
        let list = std::fs::read_to_string(&path).expect("the list");
        assert!(list.lines().any(|l| l == line), "{line:?} not in {list}");
        if std::env::var_os(THEN_WAIT_TO_BE_KILLED).is_some() {
            println!("server {} {}", server.pid(), server.dir().display());
            let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0]);
        }
    }

    /// A test process killed outright (no `Drop` runs) leaves no server of its own running and
    /// no server directory behind: its reaper ends them.
    #[test]
    fn a_killed_test_process_leaves_no_server_behind() {
        use crate::support::{alive, signal, wait_exit, wait_until};
        use std::io::{BufRead, BufReader};
        use std::path::PathBuf;
        use std::process::Stdio;
        use std::time::Duration;

        let mut tests =
            crate::support::programs::build(std::env::current_exe().expect("this test executable"))
                .args(["--exact", LISTS, "--nocapture"])
                .env(THEN_WAIT_TO_BE_KILLED, "1")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("start the test that starts a server");
        let mut lines = BufReader::new(tests.stdout.take().expect("piped stdout")).lines();
        let started = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("server ").map(str::to_owned))
            .expect("the test says its server");
        let (pid, dir) = started.split_once(' ').expect("PID DIR");
        let (pid, dir): (u32, PathBuf) = (pid.parse().expect("a pid"), dir.into());
        assert!(alive(pid) && dir.is_dir(), "{started}");
        signal(tests.id(), libc::SIGKILL);
        wait_exit(&mut tests, Duration::from_secs(10));
        wait_until(
            "the killed test process's server to end, and its directory to go",
            Duration::from_secs(30),
            || !alive(pid) && !dir.exists(),
        );
    }
}
