//! A private PostgreSQL 15 server for the tests: initdb into a temporary directory, listening on a
//! free loopback port (password auth) and a socket in that directory (trust, for `psql` set-up),
//! every statement logged so tests can count what dlock sends. As root (initdb refuses root) it
//! runs as `nobody`. One shared server per test run (`PgServer::shared`), each test with its own
//! table prefix; tests that crash or pause the server start their own.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use crate::support::programs::program;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::support::reaper::reaper;
pub use crate::support::sql_server::{as_server_user, give_to_server_user};
use crate::support::sql_server::{stop_pid, Launch, Pausable, Place};

pub const BIN: &str = "/usr/lib/postgresql/15/bin";
/// The superuser's password on the TCP port.
pub const PASSWORD: &str = "pg-test-secret";
pub struct PgServer {
    place: Place,
    /// `postgres -c` settings beyond the usual ones (TLS).
    extra: Vec<String>,
}

impl PgServer {
    pub fn start() -> PgServer {
        PgServer::start_with(vec![])
    }

    /// A server that also speaks TLS with `cert`, `key` (copied into its directory).
    pub fn start_tls(cert: &Path, key: &Path) -> PgServer {
        let mut server = PgServer::init();
        let (c, k) = (
            server.place.dir.path().join("server.crt"),
            server.place.dir.path().join("server.key"),
        );
        std::fs::copy(cert, &c).expect("copy cert");
        std::fs::copy(key, &k).expect("copy key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
        give_to_server_user(&c);
        give_to_server_user(&k);
        server.extra = vec![
            "ssl=on".into(),
            format!("ssl_cert_file={}", c.display()),
            format!("ssl_key_file={}", k.display()),
        ];
        server.launch_fresh();
        server
    }

    /// A server with `postgres -c` settings beyond the usual ones (`max_connections=1100`).
    pub fn start_with(extra: Vec<String>) -> PgServer {
        let mut server = PgServer::init();
        server.extra = extra;
        server.launch_fresh();
        server
    }

    fn init() -> PgServer {
        assert!(
            Path::new(BIN).join("initdb").exists(),
            "PostgreSQL 15 is not installed ({BIN}/initdb is missing): run scripts/test, which \
             installs it"
        );
        let dir = tempfile::tempdir().expect("temp dir for postgres");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::create_dir(dir.path().join("sock")).unwrap();
        give_to_server_user(dir.path());
        let out = as_server_user(&format!("{BIN}/initdb"))
            .args(["-D"])
            .arg(dir.path().join("data"))
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
                "--no-instructions",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .env("LC_ALL", "C")
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PgServer {
            place: Place::new(dir),
            extra: vec![],
        }
    }

    /// The server shared by the tests of this run, stopped when the run ends.
    pub fn shared() -> &'static Mutex<PgServer> {
        static SHARED: OnceLock<Mutex<PgServer>> = OnceLock::new();
        SHARED.get_or_init(|| {
            let server = PgServer::start();
            // An immediate shutdown.
            // Kept for as long as this process runs (see reaper.rs).
            std::mem::forget(reaper(server.pid(), server.place.dir.path(), libc::SIGQUIT));
            Mutex::new(server)
        })
    }

    /// The shared server, for one test's use: a test that failed while holding it (a psql
    /// statement refused) leaves it as usable as before, so the others go on.
    pub fn use_shared() -> std::sync::MutexGuard<'static, PgServer> {
        PgServer::shared().lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A URL for the shared server with a table prefix of the test's own.
    pub fn shared_url(prefix: &str) -> String {
        let server = PgServer::use_shared();
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

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres?QUERY`
    pub fn url_with(&self, query: &str) -> String {
        let mut url = format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres",
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

    /// Runs `sql` as the superuser through the socket; its output, unaligned and tuples only.
    pub fn psql(&self, sql: &str) -> String {
        let out = self
            .psql_command("test-psql", sql)
            .output()
            .expect("run psql (postgresql-client)");
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Runs `sql` as the superuser in the background, as application `app` (to find it in
    /// `pg_stat_activity`), its output discarded.
    pub fn psql_in_background(&self, app: &str, sql: &str) -> Child {
        self.psql_command(app, sql)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run psql (postgresql-client)")
    }

    /// `psql` running `sql` as the superuser through the socket, as application `app`.
    fn psql_command(&self, app: &str, sql: &str) -> Command {
        let mut cmd = program("psql");
        cmd.args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(self.place.dir.path().join("sock"))
            .args([
                "-p",
                &self.place.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-c", sql])
            .env("PGAPPNAME", app);
        cmd
    }

    /// Signals the postmaster and every backend: its process group, which the backends it forks
    /// stay in (no scan of /proc, which could name a pid reused meanwhile). Nothing once the server
    /// is gone.
    fn signal_all(&self, signal: i32) {
        // The group is this server's: its postmaster is our child, not yet reaped, so the group
        // id cannot be reused.
        if let Some(postmaster) = &self.place.child {
            crate::support::signal_group(postmaster.id(), signal);
        }
    }

    /// Stops the server as a crash would (immediate shutdown: no checkpoint, recovery at the next
    /// start) and waits for it.
    pub fn crash(&mut self) {
        if let Some(mut child) = self.place.child.take() {
            // Never a process already reaped (`wait_ready` reaps one that exited early): its pid
            // may be another's by now.
            if let Ok(None) = child.try_wait() {
                // Its backends too: a paused one would hold the shutdown up.
                crate::support::signal_group(child.id(), libc::SIGCONT);
                stop_pid(child.id(), libc::SIGQUIT);
            }
            let _ = child.wait();
        }
    }
}

impl Launch for PgServer {
    const NAME: &'static str = "postgres";

    fn place(&self) -> &Place {
        &self.place
    }

    fn place_mut(&mut self) -> &mut Place {
        &mut self.place
    }

    fn command(&self) -> Command {
        let mut cmd = as_server_user(&format!("{BIN}/postgres"));
        cmd.arg("-D")
            .arg(self.place.dir.path().join("data"))
            .args(["-p", &self.place.port.to_string(), "-k"])
            .arg(self.place.dir.path().join("sock"));
        for setting in [
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "log_statement=all",
            "log_line_prefix=%a|%p| ",
            "max_connections=200",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(self.extra.iter().cloned())
        {
            cmd.args(["-c", &setting]);
        }
        cmd
    }

    /// Ready, and on its own port: another test's server may answer on a port it took first.
    fn answers(&self, pid: u32) -> Box<dyn Fn() -> bool> {
        let port = self.place.port;
        Box::new(move || {
            program(&format!("{BIN}/pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .status()
                .is_ok_and(|s| s.success())
                && crate::support::listens_on(pid, port)
        })
    }

    const READY_WITHIN: Duration = Duration::from_secs(30);
}

impl Pausable for PgServer {
    fn pause(&self) {
        self.signal_all(libc::SIGSTOP);
    }

    fn resume(&self) {
        self.signal_all(libc::SIGCONT);
    }

    /// An immediate shutdown and a start on the same port, keeping the data.
    fn restart(&mut self) {
        self.crash();
        self.launch();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.crash();
    }
}
