//! What every integration test shares: the real dlock binary with an isolated environment, and
//! waiting on events (a file appearing, a line printed) instead of sleeping; the targets the
//! contract runs on, and what it asks of a store (`store`, `caps`). The benchmarks share it too.
//! A store's own servers and description are in its test folder (`tests/NAME/`).

#![allow(dead_code)]

pub mod build;
pub mod caps;
pub mod figures;
pub mod gate;
pub mod idle;
pub mod ports;
pub mod programs;
pub mod reaper;
pub mod relay;
pub mod run_records;
pub mod sql_server;
pub mod stderr;
pub mod store;
pub mod suite_servers;
pub mod target;
pub mod tls;
pub mod watched;

pub use ports::*;
pub use programs::program;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The dlock binary under test.
/// How many times a load loop goes round: `light` in the README's test command, `full` with
/// `DLOCK_LOAD=1` (the soak). Both counts make the same test, which fails the same way.
pub fn load(light: usize, full: usize) -> usize {
    if std::env::var("DLOCK_LOAD").is_ok_and(|v| v == "1") {
        full
    } else {
        light
    }
}

pub fn dlock_bin() -> &'static str {
    signals_as_a_foreground_job();
    env!("CARGO_BIN_EXE_dlock")
}

/// The tests send SIGINT, SIGQUIT and SIGHUP to the dlocks they start, which must not inherit them
/// ignored: a shell starts a background job (`cargo test &`) with the first two ignored, `nohup`
/// ignores the third, and dlock, as a shell's job would, leaves a signal ignored at its start
/// ignored. So the test process takes them back to their defaults, once, before its first dlock.
fn signals_as_a_foreground_job() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP] {
            // SAFETY: setting a signal's disposition to its default, no handler involved.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    });
}

/// `program` (dlock, or a shell or terminal that runs it) with the environment cleared of DLOCK_*
/// variables from the caller, so tests see only what they set, and reading no configuration file
/// (the machine's /etc/dlock/config).
pub fn without_callers_dlock_settings(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let program = program.as_ref().to_string_lossy();
    let mut cmd = programs::program_or_build(&program);
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("DLOCK_")) {
        cmd.env_remove(key);
    }
    cmd.env("DLOCK_CONFIG", "");
    cmd
}

/// A `dlock` command as `without_callers_dlock_settings` makes it, with no input.
pub fn dlock() -> Command {
    let mut cmd = without_callers_dlock_settings(dlock_bin());
    cmd.stdin(Stdio::null());
    cmd
}

/// A private lock directory for one test, removed when dropped.
pub struct LockDir {
    pub dir: tempfile::TempDir,
}

impl LockDir {
    pub fn new() -> LockDir {
        LockDir {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `dlock --url <this dir> ARGS...`
    pub fn dlock(&self, args: &[&str]) -> Command {
        let mut cmd = dlock();
        cmd.arg("--url").arg(self.path()).args(args);
        cmd
    }

    /// `dlock run NAME` holding the lock in this directory with a command that sleeps, returned
    /// once the command has started (so the lock is held). Its stderr is discarded.
    pub fn hold_in_background(&self, name: &str) -> Child {
        let ready = self.file(&format!("{name}.ready"));
        let script = format!("touch '{}'; exec sleep 30", ready.display());
        let child = self
            .dlock(&["run", name, "--", "sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dlock");
        wait_for_file(&ready, Duration::from_secs(20));
        child
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }
}

/// This process's user id.
pub fn own_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// Where dlock keeps this user's default directories (`dlock-UID`, `dlock-holds-UID`): /run for
/// root when only root may write there, else /run/lock, /var/lock or /tmp, the first that exists.
pub fn default_base() -> &'static str {
    use std::os::unix::fs::MetadataExt;
    let run_is_roots = std::fs::symlink_metadata("/run")
        .is_ok_and(|m| m.is_dir() && m.uid() == 0 && m.mode() & 0o022 == 0);
    if own_uid() == 0 && run_is_roots {
        "/run"
    } else if Path::new("/run/lock").is_dir() {
        "/run/lock"
    } else if Path::new("/var/lock").is_dir() {
        "/var/lock"
    } else {
        "/tmp"
    }
}

/// Writes a password file as a user would have to: mode 0600 (dlock refuses one every user may
/// read).
pub fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write a password file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .expect("chmod a password file");
}

/// Runs to completion and returns the output.
pub fn output(mut cmd: Command) -> Output {
    cmd.output().expect("run dlock")
}

pub fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("no exit code: {:?}", out.status))
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `text` names process `pid` ("pid 123", not the start of "pid 1234").
pub fn names_pid(text: &str, pid: u32) -> bool {
    let named = format!("pid {pid}");
    text.match_indices(&named)
        .any(|(at, _)| !text[at + named.len()..].starts_with(|c: char| c.is_ascii_digit()))
}

/// Runs one whole wait `wait_once(flags, tag)` with `-q` and one without, and checks what `reads`
/// (the server's count of reads of who holds a lock) grew by: nothing under `-q`, where nobody
/// sees the holders; something without, for the waiting line.
pub fn assert_only_loud_waiters_read_holders(
    reads: impl Fn() -> u64,
    mut wait_once: impl FnMut(&[&str], &str),
) {
    for (flags, tag) in [(&["-q"][..], "quiet"), (&[][..], "loud")] {
        let before = reads();
        wait_once(flags, tag);
        let grew = reads() - before;
        if flags.is_empty() {
            assert!(grew > 0, "the waiter read the holders for its line");
        } else {
            assert_eq!(grew, 0, "a -q waiter read the holders");
        }
    }
}

/// Polls `cond`, paced by `look_again_after`, until it holds or `limit` passes; panics with `what`.
pub fn wait_until(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    if !holds_within(limit, cond) {
        panic!("timed out after {limit:?} waiting for {what}");
    }
}

/// Polls `cond`, paced by `look_again_after`, until it holds (true) or `limit` passes (false).
pub fn holds_within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        let asked = Instant::now();
        if cond() {
            return true;
        }
        std::thread::sleep(look_again_after(asked.elapsed()));
    }
    false
}

/// The pause between two looks of a wait, given how long the last look took: 5 ms after a
/// cheap one (a file, a process's state), four times its time after a costly one (a client such
/// as psql or etcdctl started, a server's log read), so that a wait spends at most a fifth of its
/// time looking, whatever a look costs on a loaded machine; a second at most. Looking back to back
/// with a client that takes 15 ms kept a core busy for the whole wait.
fn look_again_after(look: Duration) -> Duration {
    (look * 4).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

/// Waits until a file exists (a child's "I am in" marker).
pub fn wait_for_file(path: &Path, limit: Duration) {
    wait_until(&format!("{} to appear", path.display()), limit, || {
        path.exists()
    });
}

/// dlock with its clock shifted by libfaketime (`FAKETIME`, as `faketime -f` takes it: "-1h",
/// "+0 x20"). Preloaded directly, not through the `faketime` wrapper, whose shared memory and
/// semaphore a killed run leaves in /dev/shm, and which then refuses a later run given the same
/// pid ("sem_open: File exists").
pub fn with_clock(faketime: &str) -> Command {
    let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    assert!(
        Path::new(lib).exists(),
        "libfaketime is not installed ({lib} is missing): run scripts/test, which installs it"
    );
    let mut cmd = dlock();
    cmd.env("LD_PRELOAD", lib).env("FAKETIME", faketime);
    cmd
}

/// Waits, within `limit`, until no `dlock hold` keeper of the shell `shell` runs (a keeper's
/// environment names its shell: `DLOCK_KEEPER_OF=PID.START`): a keeper releases its lock once it
/// sees its shell gone, and a test that ends before that would remove the lock directory under a
/// keeper still writing its last run into it. Never panics (a test's drop calls it): false when
/// one still runs at the limit.
pub fn wait_for_keepers_of(shell: u32, limit: Duration) -> bool {
    let needle = format!("DLOCK_KEEPER_OF={shell}.");
    let keepers = || -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|b| *b == 0)
                        .any(|var| var.starts_with(needle.as_bytes()))
                })
            })
            .collect()
    };
    let end = Instant::now() + limit;
    loop {
        if keepers().is_empty() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a spawned process to exit within `limit`, killing it (and failing) if it does not.
pub fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    wait_exit_after("", child, limit)
}

/// As `wait_exit`, its failure starting with what came before (`after`: "SIGINT sent").
pub fn wait_exit_after(
    after: &str,
    child: &mut Child,
    limit: Duration,
) -> std::process::ExitStatus {
    exit_within(child, limit).unwrap_or_else(|| {
        let state = signal_state(child.id());
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{after} process {} did not exit within {limit:?}: {state}",
            child.id()
        );
    })
}

/// A process's state and signal masks, and its children's, and what each of its threads waits in,
/// from /proc: what a hang report needs (a signal blocked or ignored where it should not be, a
/// child stopped or still running, a thread blocked in a call).
pub fn signal_state(pid: u32) -> String {
    let lines = |pid: &str| -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kept: Vec<&str> = status
            .lines()
            .filter(|l| {
                ["Name", "State", "SigBlk", "SigIgn", "SigCgt"]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .collect();
        format!("[pid {pid} {}]", kept.join(", "))
    };
    // Each thread of the process: its name, state, what it waits in, and its system call.
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|task| {
            let read = |file: &str| {
                std::fs::read_to_string(task.path().join(file))
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            };
            let stat = read("stat");
            let state = stat
                .rsplit(") ")
                .next()
                .and_then(|rest| rest.split(' ').next());
            let syscall: Vec<String> = read("syscall")
                .split(' ')
                .take(3)
                .map(str::to_owned)
                .collect();
            format!(
                "{{thread {} {:?} {} in {} syscall {}}}",
                task.file_name().to_string_lossy(),
                read("comm"),
                state.unwrap_or("?"),
                read("wchan"),
                syscall.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let processes = std::iter::once(pid.to_string())
        .chain(children.split_whitespace().map(str::to_owned))
        .map(|p| lines(&p))
        .collect::<Vec<_>>()
        .join(" ");
    format!("{processes} threads of {pid}: {threads}")
}

/// A spawned process's exit status, if it exits within `limit` (left running otherwise). Woken
/// by the exit itself (its pidfd turns readable), not by looking every few milliseconds: the
/// suite waits on thousands of processes, many of them at once.
pub fn exit_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::process::{pidfd_open, Pid, PidfdFlags};
    let end = Instant::now() + limit;
    // None once reaped (try_wait answers then), or on a kernel without pidfds.
    let pidfd = pidfd_open(Pid::from_child(child), PidfdFlags::empty()).ok();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match (&pidfd, Timespec::try_from(left)) {
            (Some(fd), Ok(left)) => {
                let _ = poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&left));
            }
            _ => std::thread::sleep(left.min(Duration::from_millis(5))),
        }
    }
}

/// Sends a signal to a process we started.
pub fn signal(pid: u32, sig: i32) {
    assert!(send(pid, sig, false), "kill({pid}, {sig})");
}

/// Sends a signal to the process group `pgid`, which a process we started leads: whether it
/// still had a member.
pub fn signal_group(pgid: u32, sig: i32) -> bool {
    send(pgid, sig, true)
}

/// The one `kill` of the tests. A pid of 0 (a server whose process is gone, say) would make it
/// signal this test process's whole group, every other test's dlocks and shells with it (a
/// SIGCONT there once woke another test's stopped holder), and -1 every process we may signal:
/// never sent.
fn send(target: u32, sig: i32, group: bool) -> bool {
    let target = libc::pid_t::try_from(target).unwrap_or(0);
    assert!(
        target > 1,
        "no process to send signal {sig} to (pid {target})"
    );
    let target = if group { -target } else { target };
    // SAFETY: kill has no memory effects; the target is a process or group of ours, above 1.
    unsafe { libc::kill(target, sig) == 0 }
}

/// Stops a process we started (SIGSTOP) for `pause`, then lets it go on: a fault driver's pause.
pub fn stop_for(pid: u32, pause: Duration) {
    signal(pid, libc::SIGSTOP);
    // The fault itself: the process stays stopped this long.
    std::thread::sleep(pause);
    signal(pid, libc::SIGCONT);
}

/// Is a process with this pid alive (and not a zombie)?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
            !matches!(state, Some('Z') | Some('X') | None)
        }
        Err(_) => false,
    }
}

/// Reads a pid a test child wrote to a file.
pub fn read_pid(path: &Path) -> u32 {
    let mut pid = None;
    wait_until(
        &format!("a pid in {}", path.display()),
        Duration::from_secs(10),
        || {
            pid = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        },
    );
    pid.expect("pid")
}

/// Runs to completion within `limit` and returns the output; a command still running then is
/// killed and the test fails (for commands that must never block).
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dlock");
    wait_exit(&mut child, limit);
    child.wait_with_output().expect("collect output")
}

/// The header of a file-backend lock file, as its module doc lays it out: magic, last token,
/// name length, name.
pub fn dlock_header(name: &str, token: u64) -> Vec<u8> {
    let mut h = b"dlock-v1".to_vec();
    h.extend_from_slice(&token.to_le_bytes());
    h.extend_from_slice(&(name.len() as u32).to_le_bytes());
    h.extend_from_slice(name.as_bytes());
    h
}

/// Runs `shell_command` under script(1), which gives it a pseudo-terminal as stdin and stderr.
pub fn on_a_terminal(shell_command: &str) -> std::process::Child {
    program("script")
        .args(["-qfec", shell_command, "/dev/null"])
        // script(1) runs the command with $SHELL: pinned, so that a Ctrl-C means the same
        // whatever shell the test run was started from (dash ends on it, bash waits for its
        // foreground command and goes on).
        .env("SHELL", "/bin/bash")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A run that loses its lock without dlock noticing in time, and whose command then succeeds:
/// `run` is `dlock run [OPTIONS] NAME` (the command is added: it writes its pid, waits for a go,
/// and exits 0). Once the command runs, dlock is stopped (SIGSTOP), `lose` takes the lock away
/// (returning once it is gone), the command exits 0, and only once it has does dlock go on
/// (SIGCONT): it sees the command's end before any renewal, and learns of the loss from its
/// release. `scratch`: a directory for the files. Returns dlock's exit status and what it said.
pub fn succeed_after_a_silent_loss(
    mut run: Command,
    scratch: &Path,
    lose: impl FnOnce(),
) -> (i32, String) {
    let (pid, go, err) = (
        scratch.join("silent.pid"),
        scratch.join("silent.go"),
        scratch.join("silent.err"),
    );
    for stale in [&pid, &go] {
        let _ = std::fs::remove_file(stale);
    }
    let script = format!(
        "echo $$ > '{p}.tmp'; mv '{p}.tmp' '{p}'; i=0; \
         while [ ! -e '{g}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; exit 0",
        p = pid.display(),
        g = go.display()
    );
    let mut dlock = run
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("dlock's stderr file"))
        .spawn()
        .expect("start dlock");
    let command = read_pid(&pid);
    signal(dlock.id(), libc::SIGSTOP);
    lose();
    std::fs::write(&go, "").expect("write the go file");
    // Reaped by nobody while dlock is stopped: a zombie once it has exited.
    wait_until("the command to exit", Duration::from_secs(60), || {
        !alive(command)
    });
    signal(dlock.id(), libc::SIGCONT);
    let status = wait_exit(&mut dlock, Duration::from_secs(60));
    let said = std::fs::read_to_string(&err).unwrap_or_default();
    (status.code().unwrap_or(-1), said)
}

#[cfg(test)]
mod tests {
    /// A pid is named whole: "pid 123" is not named by "pid 1234", and is by "pid 123," or at
    /// the end.
    #[test]
    fn names_pid_matches_a_whole_pid_only() {
        assert!(!super::names_pid("held by vm pid 1234, owner x", 123));
        assert!(super::names_pid("pid 1234, then pid 123, owner x", 123));
        assert!(super::names_pid("held by vm pid 123", 123));
        assert!(!super::names_pid("held by vm pid 12", 123));
    }

    /// A server counts as started only on its own listening socket: not on a port another
    /// process listens on (the one `listens_on` exists for), nor on one bound and not listening.
    #[test]
    fn listens_on_sees_only_a_process_own_listening_socket() {
        let me = std::process::id();
        let address =
            |listener: &std::net::TcpListener| listener.local_addr().expect("its address");
        let ipv4 = std::net::TcpListener::bind("127.0.0.1:0").expect("an IPv4 listener");
        // Java's: an IPv6 socket on every address.
        let ipv6 = std::net::TcpListener::bind("[::]:0").expect("an IPv6 listener");
        let (v4, v6) = (address(&ipv4).port(), address(&ipv6).port());
        assert!(super::listens_on(me, v4) && super::listens_on(me, v6));
        let mut other = super::program("sleep").arg("60").spawn().expect("sleep");
        let others = super::listens_on(other.id(), v4) || super::listens_on(other.id(), v6);
        let _ = other.kill();
        let _ = other.wait();
        assert!(!others, "another process's listener counted as its own");
        let (_held, refused) = super::refusing_port();
        assert!(
            !super::listens_on(me, refused),
            "a bound socket counted as listening"
        );
    }

    /// A pid of 0 names this test process's own group: never signalled.
    #[test]
    #[should_panic(expected = "no process to send signal")]
    fn no_signal_goes_to_pid_0() {
        super::signal_group(0, libc::SIGCONT);
    }
}
