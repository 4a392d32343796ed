//! A private MariaDB server for the tests: mariadb-install-db into a temporary directory, listening
//! on a free loopback port (root with a password) and a socket in that directory (root without
//! one, for `mariadb` set-up). As root (mariadbd refuses root) it runs as `nobody`. One shared
//! server per test run (`MyServer::shared`), each test with its own table prefix; tests that
//! crash, pause or reconfigure the server start their own.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use crate::support::programs::program;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::support::reaper::reaper;
use crate::support::sql_server::{as_server_user, give_to_server_user};
use crate::support::sql_server::{stop_pid, Launch, Pausable, Place};

/// root's password on the TCP port.
pub const PASSWORD: &str = "my-test-secret";
/// The database dlock's tables go in.
pub const DATABASE: &str = "dlock";
pub struct MyServer {
    place: Place,
    /// `mariadbd` options beyond the usual ones (TLS).
    extra: Vec<String>,
    /// Environment beyond the inherited one (a clock shifted by libfaketime).
    env: Vec<(String, String)>,
}

impl MyServer {
    pub fn start() -> MyServer {
        let mut server = MyServer::init();
        server.launch_fresh();
        server.setup();
        server
    }

    /// A server started with `options` beyond the usual ones (a later option wins, e.g.
    /// `--max-connections=N`).
    pub fn start_with(options: Vec<String>) -> MyServer {
        let mut server = MyServer::init();
        server.extra = options;
        server.launch_fresh();
        server.setup();
        server
    }

    /// A server that also speaks TLS with `cert`, `key` (copied into its directory).
    pub fn start_tls(cert: &Path, key: &Path) -> MyServer {
        let mut server = MyServer::init();
        let (c, k) = (
            server.place.dir.path().join("server.crt"),
            server.place.dir.path().join("server.key"),
        );
        std::fs::copy(cert, &c).expect("copy cert");
        std::fs::copy(key, &k).expect("copy key");
        give_to_server_user(&c);
        give_to_server_user(&k);
        server.extra = vec![
            format!("--ssl-cert={}", c.display()),
            format!("--ssl-key={}", k.display()),
        ];
        server.launch_fresh();
        server.setup();
        server
    }

    fn init() -> MyServer {
        assert!(
            Path::new("/usr/sbin/mariadbd").exists(),
            "MariaDB is not installed (/usr/sbin/mariadbd is missing): run scripts/test, which \
             installs it"
        );
        let dir = tempfile::tempdir().expect("temp dir for mariadb");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        // Its temporary tables in a directory of its own, not in /tmp beside every other server's
        // and the bootstrap's (a parallel run once saw a bootstrap's temporary table vanish there).
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        give_to_server_user(dir.path());
        let out = as_server_user("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .arg(format!("--tmpdir={}", dir.path().join("tmp").display()))
            .args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ])
            .output()
            .expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        MyServer {
            place: Place::new(dir),
            extra: vec![],
            env: vec![],
        }
    }

    /// A server whose clock runs `shift` behind (`-`) or ahead of the machine's, through
    /// libfaketime (Debian's `faketime`).
    pub fn start_with_clock(shift: &str) -> MyServer {
        let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
        assert!(
            Path::new(lib).exists(),
            "libfaketime is not installed ({lib} is missing): run scripts/test, which installs it"
        );
        let mut server = MyServer::init();
        server.env = vec![
            ("LD_PRELOAD".into(), lib.into()),
            ("FAKETIME".into(), shift.into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ];
        server.launch_fresh();
        server.setup();
        server
    }

    /// root's password on TCP, and dlock's database.
    fn setup(&self) {
        self.sql_in(
            "mysql",
            &format!(
                "SET PASSWORD FOR root@'127.0.0.1' = PASSWORD('{PASSWORD}'); \
             CREATE DATABASE IF NOT EXISTS {DATABASE};"
            ),
        );
    }

    /// The server shared by the tests of this run, stopped when the run ends.
    pub fn shared() -> &'static Mutex<MyServer> {
        static SHARED: OnceLock<Mutex<MyServer>> = OnceLock::new();
        SHARED.get_or_init(|| {
            let server = MyServer::start();
            // Kept for as long as this process runs (see reaper.rs).
            std::mem::forget(reaper(server.pid(), server.place.dir.path(), libc::SIGKILL));
            Mutex::new(server)
        })
    }

    /// A URL for the shared server with a table prefix of the test's own.
    pub fn shared_url(prefix: &str) -> String {
        let server = MyServer::shared().lock().unwrap_or_else(|p| p.into_inner());
        server.url_with(&format!("prefix={prefix}"))
    }

    pub fn port(&self) -> u16 {
        self.place.port
    }

    /// The server's process (not 0 once it is gone: that pid would be this test's own group).
    pub fn pid(&self) -> u32 {
        self.place
            .child
            .as_ref()
            .map(Child::id)
            .expect("the server's process is running")
    }

    pub fn socket(&self) -> PathBuf {
        self.place.dir.path().join("sock")
    }

    /// `mysql://root:PASSWORD@127.0.0.1:PORT/dlock?QUERY`
    pub fn url_with(&self, query: &str) -> String {
        let mut url = format!(
            "mysql://root:{PASSWORD}@127.0.0.1:{}/{DATABASE}",
            self.place.port
        );
        if !query.is_empty() {
            url.push('?');
            url.push_str(query);
        }
        url
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A `mariadb` client as root through the socket, in `database`, tab-separated output.
    pub fn client(&self, database: &str) -> Command {
        let mut cmd = program("mariadb");
        cmd.arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-N", "-B", database]);
        cmd
    }

    /// Runs `sql` as root through the socket in dlock's database; its output, tab-separated
    /// without column names.
    pub fn sql(&self, sql: &str) -> String {
        self.sql_in(DATABASE, sql)
    }

    fn sql_in(&self, database: &str, sql: &str) -> String {
        let out = self
            .client(database)
            .args(["-e", sql])
            .output()
            .expect("run mariadb (mariadb-client)");
        assert!(
            out.status.success(),
            "mariadb {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Logs every statement from now on (the general log, as a table), for `dlock_statements`.
    pub fn log_statements(&self) {
        self.sql("SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 'ON'");
    }

    /// The statements dlock's sessions ran since `log_statements` (they come over TCP; the
    /// tests' own through the socket).
    pub fn dlock_statements(&self) -> usize {
        self.dlock_statements_like("%")
    }

    /// Those of `dlock_statements` whose text is `LIKE` the pattern `like`.
    pub fn dlock_statements_like(&self, like: &str) -> usize {
        self.sql(&format!(
            "SELECT count(*) FROM mysql.general_log \
             WHERE command_type IN ('Query', 'Execute') AND user_host LIKE '%127.0.0.1%' \
               AND argument LIKE '{like}'"
        ))
        .parse()
        .expect("a count")
    }

    /// How many sessions dlock has open (over TCP; the tests' own come through the socket).
    pub fn dlock_sessions(&self) -> usize {
        self.sql(
            "SELECT count(*) FROM information_schema.processlist WHERE host LIKE '127.0.0.1:%'",
        )
        .parse()
        .expect("a count")
    }

    /// Kills the server as a crash would (SIGKILL: InnoDB recovers at the next start).
    pub fn crash(&mut self) {
        if let Some(mut child) = self.place.child.take() {
            // Never a process already reaped (`wait_ready` reaps one that exited early): its pid
            // may be another's by now.
            if let Ok(None) = child.try_wait() {
                stop_pid(child.id(), libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }
}

impl Launch for MyServer {
    const NAME: &'static str = "mariadbd";

    fn place(&self) -> &Place {
        &self.place
    }

    fn place_mut(&mut self) -> &mut Place {
        &mut self.place
    }

    fn command(&self) -> Command {
        let dir = self.place.dir.path();
        // The environment through `env`, after setpriv: preloaded into setpriv itself, libfaketime
        // would make its semaphore as root, which mariadbd as nobody then cannot open.
        let mut cmd = as_server_user("/usr/bin/env");
        cmd.args(self.env.iter().map(|(k, v)| format!("{k}={v}")))
            .arg("/usr/sbin/mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .arg(format!("--port={}", self.place.port))
            .args([
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-buffer-pool-size=32M",
                "--max-connections=300",
                "--skip-log-bin",
            ])
            .args(&self.extra);
        cmd
    }

    /// Answers on its own socket (in its directory: no other server's).
    fn answers(&self, _pid: u32) -> Box<dyn Fn() -> bool> {
        let socket = self.socket();
        Box::new(move || {
            program("mariadb-admin")
                .arg("--no-defaults")
                .arg(format!("--socket={}", socket.display()))
                .args(["-uroot", "--connect-timeout=2", "ping"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    const READY_WITHIN: Duration = Duration::from_secs(60);
}

impl Pausable for MyServer {
    fn pause(&self) {
        if let Some(server) = &self.place.child {
            crate::support::signal(server.id(), libc::SIGSTOP);
        }
    }

    fn resume(&self) {
        if let Some(server) = &self.place.child {
            crate::support::signal(server.id(), libc::SIGCONT);
        }
    }

    /// A SIGKILL and a start on the same port, keeping the data.
    fn restart(&mut self) {
        self.crash();
        self.launch();
    }
}

impl Drop for MyServer {
    fn drop(&mut self) {
        self.crash();
    }
}
