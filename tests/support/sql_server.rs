//! What the PostgreSQL and MariaDB test servers share: running as `nobody` (they refuse root) in a
//! process group of their own, waiting until one answers, stopping the run's shared server when
//! the run ends, and the fault checker's pause and crash.

use super::programs::program;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::store::Store;
use super::target::{ServerControl, Target};
use super::LockDir;

/// Runs `cmd` as `nobody` when we are root (setpriv execs, so a child's pid is the program's), in a
/// process group of its own, like every test server: a signal meant for the tests' group (the
/// kernel's SIGHUP and SIGCONT to a group left orphaned with a stopped member among them) never
/// reaches a server, nor continues one a test has paused.
pub fn as_server_user(program: &str) -> Command {
    let mut cmd = as_user(program);
    cmd.process_group(0);
    cmd
}

fn as_user(server: &str) -> Command {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // setpriv runs it by name: the list must name it too.
        super::programs::entry(server);
        let mut cmd = program("setpriv");
        cmd.args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
            server,
        ]);
        cmd
    } else {
        program(server)
    }
}

pub fn give_to_server_user(path: &Path) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let status = program("chown")
            .args(["-R", "nobody:nogroup"])
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success(), "chown {}", path.display());
    }
}

/// A server that exited at its start because its port was taken: free when probed, another test
/// bound it first.
pub struct PortTaken;

/// Waits until `ready` says the server `name` (started as `child`) answers. `Err(PortTaken)` when it
/// exited first because its port was taken (its log, `log`, says so; the child is then gone);
/// fails with the log when it exits for anything else or is not ready `within`.
pub fn wait_ready(
    name: &str,
    child: &mut Option<Child>,
    within: Duration,
    log: &Path,
    ready: impl Fn() -> bool,
) -> Result<(), PortTaken> {
    let log = || std::fs::read_to_string(log).unwrap_or_default();
    let start = Instant::now();
    loop {
        if ready() {
            return Ok(());
        }
        if let Some(Ok(Some(status))) = child.as_mut().map(|c| c.try_wait()) {
            let said = log();
            if super::says_port_taken(&said) {
                *child = None;
                return Err(PortTaken);
            }
            panic!("{name} exited ({status}): {said}");
        }
        assert!(start.elapsed() < within, "{name} not ready: {}", log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `signal` (a paused server continued first) to our child `pid`, which has not been reaped
/// (a zombie at most), waits (bounded) until it has exited and is reaped, and SIGKILLs it if it
/// has not by then. Once reaped, its pid is never signalled again: by then it may be another
/// process's.
pub fn stop_pid(pid: u32, signal: i32) {
    // The child is not reaped yet.
    super::signal(pid, libc::SIGCONT);
    super::signal(pid, signal);
    let pid = pid as i32;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let mut status = 0;
        // SAFETY: waitpid on our own child; WNOHANG never blocks.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            // Still running.
            0 => std::thread::sleep(Duration::from_millis(10)),
            // Reaped now, or already (not our child any more): never signal it again.
            _ => return,
        }
    }
    // The child is still not reaped.
    super::signal(pid as u32, libc::SIGKILL);
    let mut status = 0;
    // SAFETY: waitpid on our own child, which SIGKILL ends.
    unsafe { libc::waitpid(pid, &mut status, 0) };
}

/// Where a SQL test server lives: its directory (which holds `server.log`), its port (0 until
/// `launch_fresh` picks one) and its process.
pub struct Place {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub child: Option<Child>,
}

impl Place {
    pub fn new(dir: tempfile::TempDir) -> Place {
        Place {
            dir,
            port: 0,
            child: None,
        }
    }
}

/// How a SQL test server starts: first on a port probed free (on another when another test took
/// it first), and after a crash again on its own port.
pub trait Launch {
    /// The server's program, for failures.
    const NAME: &'static str;
    fn place(&self) -> &Place;
    fn place_mut(&mut self) -> &mut Place;
    /// The server's command line, on its port, in its own process group (`as_server_user`);
    /// `launch_on_port` adds the log as its output.
    fn command(&self) -> Command;
    /// Whether the server, process `pid`, answers on its port (asked while it starts).
    fn answers(&self, pid: u32) -> Box<dyn Fn() -> bool>;
    /// How long it may take to answer.
    const READY_WITHIN: Duration;

    /// Starts the process on the server's port, lists it for the reaper of a killed test process,
    /// and waits until it answers (`wait_ready`).
    fn launch_on_port(&mut self) -> Result<(), PortTaken> {
        let log = self.log_file();
        let mut cmd = self.command();
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log, again"))
            .stderr(log);
        let server = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", Self::NAME));
        super::reaper::end_with_this_process(&server, self.place().dir.path());
        let (answers, log) = (self.answers(server.id()), self.log_path());
        // Held by the server while it starts: a start that fails stops it (`Drop`).
        let child = &mut self.place_mut().child;
        *child = Some(server);
        wait_ready(Self::NAME, child, Self::READY_WITHIN, &log, answers)
    }

    fn log_path(&self) -> PathBuf {
        self.place().dir.path().join("server.log")
    }

    /// The log, for the server's output: appended to, across restarts.
    fn log_file(&self) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("server log")
    }

    /// Starts a new server.
    fn launch_fresh(&mut self) {
        super::on_a_free_port(Self::NAME, |port| {
            self.place_mut().port = port;
            // This try's output only: a taken port is read from it.
            let _ = std::fs::remove_file(self.log_path());
            self.launch_on_port().ok()
        });
    }

    /// Starts the server again on its own port, after a crash.
    fn launch(&mut self) {
        if self.launch_on_port().is_err() {
            panic!("{}'s port was taken while it was down", Self::NAME);
        }
    }
}

/// What the fault checker does to a SQL test server.
pub trait Pausable {
    fn pause(&self);
    fn resume(&self);
    /// A crash and a start on the same port, keeping the data.
    fn restart(&mut self);
}

/// A server the fault checker pauses and crashes.
pub struct Faulty<S>(pub Mutex<S>);

impl<S: Pausable> ServerControl for Faulty<S> {
    fn pause(&self, pause: Duration) {
        if let Ok(server) = self.0.lock() {
            server.pause();
            std::thread::sleep(pause);
            server.resume();
        }
    }

    fn restart(&self) {
        if let Ok(mut server) = self.0.lock() {
            server.restart();
        }
    }
}

/// The table prefix of `t`, a target on the test run's shared SQL server (`?prefix=P` in its
/// URL), once dlock has made its tables (on first use: `status` makes them), for a test that
/// writes rows there as another client could.
pub fn tables_made(t: &Target) -> &str {
    let status = super::output(t.dlock(&["status", "x"]));
    assert_eq!(super::code(&status), 1, "x starts free");
    let url = t.urls()[0];
    url.rsplit("prefix=").next().expect("a prefix in the URL")
}

impl Target {
    /// dlock (on `store`) at `url` on the test run's shared SQL server (listening on `port`),
    /// with tables of its own (a prefix per test), for the contract suite.
    pub fn on_shared_sql(store: &'static Store, url: String, port: u16) -> Target {
        let mut target = Target {
            args: vec![],
            store,
            ports: vec![port],
            servers: vec![],
            scratch: LockDir::new(),
        };
        target.args = vec![
            "--backend".into(),
            target.backend().into(),
            "--url".into(),
            url,
        ];
        target
    }

    /// dlock (on `store`) on a private SQL server listening on `port`, which the fault checker
    /// pauses and crashes.
    pub fn on_private_sql<S: Pausable + Send + 'static>(
        store: &'static Store,
        port: u16,
        server: S,
    ) -> Target {
        Target::on_private(store, vec![port], Faulty(Mutex::new(server)))
    }
}
