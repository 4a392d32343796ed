//! A private redis-server for one test: on a free loopback port, with its own empty directory and
//! no persistence, ready when `start` returns (it has printed that it accepts connections), and
//! killed when dropped. Only the process this helper started is ever signalled.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use crate::support::programs::program;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::free_port;
use crate::support::target::ServerControl;

/// How long a server may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

pub use crate::support::tls::TlsFiles;

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    tls: bool,
    password: Option<String>,
    dir: tempfile::TempDir,
    log: Arc<Mutex<String>>,
}

impl RedisServer {
    /// A plain server.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server with extra configuration, e.g. `["--requirepass", "s3cret"]`.
    pub fn start_with(args: &[&str]) -> RedisServer {
        let password = args
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| args.get(i + 1))
            .map(|p| p.to_string());
        RedisServer::launch(args, false, password)
    }

    /// A server that speaks only TLS, with the given certificate, key and CA.
    pub fn start_tls(files: &TlsFiles) -> RedisServer {
        RedisServer::start_tls_with(files, &[])
    }

    /// A TLS server with extra configuration.
    pub fn start_tls_with(files: &TlsFiles, extra: &[&str]) -> RedisServer {
        let mut args = vec![
            "--tls-cert-file",
            path_str(&files.cert),
            "--tls-key-file",
            path_str(&files.key),
            "--tls-ca-cert-file",
            path_str(&files.ca),
            "--tls-auth-clients",
            "no",
        ];
        args.extend(extra);
        RedisServer::launch(&args, true, None)
    }

    fn launch(args: &[&str], tls: bool, password: Option<String>) -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: 0,
            args: args.iter().map(|a| a.to_string()).collect(),
            tls,
            password,
            dir: tempfile::tempdir().expect("temp dir for redis-server"),
            log: Arc::new(Mutex::new(String::new())),
        };
        // A free port can be taken by a parallel test between our probe and the server's bind:
        // then try another, a bounded number of times.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "redis-server did not start after 5 tries; its last output:\n{}",
            server.log()
        );
    }

    /// Starts the process on `self.port` and waits until it accepts connections. False when it
    /// exited first (its port was taken).
    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let mut command = program("redis-server");
        if self.tls {
            command.args(["--port", "0", "--tls-port", &port]);
        } else {
            command.args(["--port", &port]);
        }
        command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own group, like every test server (see sql_server::as_server_user).
            .process_group(0);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed; scripts/test installs it (apt-get install redis-server)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        crate::support::reaper::end_with_this_process(&child, self.dir.path());
        let stdout = child.stdout.take().expect("piped stdout");
        let (ready_tx, ready_rx) = mpsc::channel();
        let log = self.log.clone();
        // Drains the server's output for as long as it runs (a full pipe would stall it), and
        // reports the line that says it is ready.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("Ready to accept connections") {
                    let _ = ready_tx.send(());
                }
                if let Ok(mut log) = log.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        match ready_rx.recv_timeout(READY_WITHIN) {
            Ok(()) => {
                self.child = Some(child);
                true
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = child.wait();
                false
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "redis-server was not ready within {READY_WITHIN:?}:\n{}",
                    self.log()
                );
            }
        }
    }

    fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (with the password, when the server has one).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        match &self.password {
            Some(p) => format!("{scheme}://:{p}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// A client for the test's own connections; over TLS it trusts the test's CA.
    pub fn client(&self) -> redis::RedisResult<redis::Client> {
        let ca = self
            .args
            .windows(2)
            .find(|pair| pair[0] == "--tls-ca-cert-file")
            .map(|pair| pair[1].clone());
        match ca {
            Some(ca) => redis::Client::build_with_tls(
                self.url(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(std::fs::read(ca)?),
                },
            ),
            None => redis::Client::open(self.url()),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("redis-server is running").id()
    }

    /// SIGSTOP: the server keeps its connections but answers nothing.
    pub fn pause(&self) {
        crate::support::signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        crate::support::signal(self.pid(), libc::SIGCONT);
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a new, empty one on the same port.
    pub fn restart_empty(&mut self) {
        self.kill();
        self.dir = tempfile::tempdir().expect("temp dir for redis-server");
        self.start_again();
    }

    /// Kills the server and starts a new, empty one on the same port, as a replica of the master
    /// on `master` (instead of any it followed before).
    pub fn restart_empty_replicating(&mut self, master: u16) {
        if let Some(i) = self.args.iter().position(|a| a == "--replicaof") {
            self.args.drain(i..(i + 3).min(self.args.len()));
        }
        self.args
            .extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
        self.restart_empty();
    }

    /// A server that writes every change to its append-only file before it answers, so that
    /// `restart_keeping_data` loses nothing it acknowledged.
    pub fn start_durable() -> RedisServer {
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// Kills the server and starts it again on the same port and directory: it reloads its data.
    pub fn restart_keeping_data(&mut self) {
        self.kill();
        self.start_again();
    }

    fn start_again(&mut self) {
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}:\n{}",
            self.port,
            self.log()
        );
    }

    /// `dlock --backend redis --url <this server> ARGS`.
    pub fn dlock(&self, args: &[&str]) -> Command {
        dlock_at(&[self.url()], args)
    }

    /// A direct connection, for looking at (or tampering with) what dlock stored.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("cannot connect to the test redis at {}: {e}", self.url()))
    }

    /// Every key in the server, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut self.connection())
            .expect("KEYS");
        keys.sort();
        keys
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        self.kill();
    }
}

/// `dlock --backend redis --url URL... ARGS`: one URL, or several for Redlock.
pub fn dlock_at(urls: &[impl AsRef<str>], args: &[&str]) -> Command {
    let mut cmd = crate::support::dlock();
    cmd.args(["--backend", "redis"]);
    for url in urls {
        cmd.args(["--url", url.as_ref()]);
    }
    cmd.args(args);
    cmd
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

/// How a server under the fault checker comes back after a crash.
#[derive(Clone, Copy)]
pub enum Comeback {
    /// At once, with its append-only file (see `RedisServer::start_durable`).
    KeepingData,
    /// Empty, after this long: Redlock's delayed restart (a lease it held has run out by then).
    EmptyAfter(Duration),
}

/// A server the fault checker pauses and crashes. Behind a mutex because the checker shares it.
pub struct FaultyRedis {
    pub server: Mutex<RedisServer>,
    pub comeback: Comeback,
}

impl ServerControl for FaultyRedis {
    fn pause(&self, pause: Duration) {
        if let Ok(server) = self.server.lock() {
            server.pause();
            // The fault itself: the server stays stopped this long.
            std::thread::sleep(pause);
            server.resume();
        }
    }

    fn restart(&self) {
        if let Ok(mut server) = self.server.lock() {
            match self.comeback {
                Comeback::KeepingData => server.restart_keeping_data(),
                Comeback::EmptyAfter(down) => {
                    server.kill();
                    // The fault itself: the server stays down this long.
                    std::thread::sleep(down);
                    server.dir = tempfile::tempdir().expect("temp dir for redis-server");
                    server.start_again();
                }
            }
        }
    }
}
