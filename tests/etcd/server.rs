//! A private etcd on free loopback ports with its own data directory: one member for the tests and
//! the benchmarks that compare dlock with `etcdctl lock`, which can be killed, paused and started
//! again on the same address and data; stopped when dropped.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use crate::support::programs::program;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::target::ServerControl;
use crate::support::{free_port, on_a_free_port, says_port_taken, wait_until};

/// A single-member etcd on free loopback ports with a private data directory, killed on drop.
pub struct EtcdServer {
    endpoint: String,
    client_port: u16,
    peer_url: String,
    process: Option<Child>,
    dir: tempfile::TempDir,
    /// The member's name, and the whole cluster's `--initial-cluster` when it has other members.
    name: String,
    cluster: Option<String>,
    /// Serving clients over TLS with these (then `https://` endpoints, `etcds://` URLs).
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// More of etcd's flags (see `start_with`).
    flags: Vec<String>,
}

impl EtcdServer {
    /// Starts etcd and waits until `etcdctl endpoint health` says it serves. Panics (never skips)
    /// when etcd is missing: the tests and benchmarks need the Debian packages etcd-server and
    /// etcd-client (scripts/test installs them).
    pub fn start() -> EtcdServer {
        let mut etcd = EtcdServer::unstarted("test", None);
        etcd.launch_fresh(None);
        etcd
    }

    /// A member on fresh loopback ports and a fresh data directory, not started yet; clients over
    /// TLS with `tls` (certificate, key, CA).
    fn unstarted(name: &str, tls: Option<(PathBuf, PathBuf, PathBuf)>) -> EtcdServer {
        let mut etcd = EtcdServer {
            endpoint: String::new(),
            client_port: 0,
            peer_url: String::new(),
            process: None,
            dir: tempfile::tempdir().expect("etcd dir"),
            name: name.to_owned(),
            cluster: None,
            tls,
            flags: Vec::new(),
        };
        etcd.on_ports(free_port(), free_port());
        etcd
    }

    /// Its loopback ports for clients and peers.
    fn on_ports(&mut self, client: u16, peer: u16) {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.endpoint = format!("{scheme}://127.0.0.1:{client}");
        self.client_port = client;
        self.peer_url = format!("http://127.0.0.1:{peer}");
    }

    /// As `start`, with more of etcd's `flags`.
    pub fn start_with(flags: &[&str]) -> EtcdServer {
        let mut etcd = EtcdServer::unstarted("test", None);
        etcd.flags = flags.iter().map(|f| f.to_string()).collect();
        etcd.launch_fresh(None);
        etcd
    }

    /// A member serving clients over TLS only, with a certificate the test CA in `files` signed.
    pub fn start_tls(files: &crate::support::tls::TlsFiles) -> EtcdServer {
        let tls = (files.cert.clone(), files.key.clone(), files.ca.clone());
        let mut etcd = EtcdServer::unstarted("test", Some(tls));
        etcd.launch_fresh(None);
        etcd
    }

    /// The one etcd the tests of a run share (each test uses its own lock names), started on first
    /// use. Statics are never dropped, so it is started under a shell that kills it once this test
    /// process has gone, and then removes its directory.
    pub fn shared() -> &'static EtcdServer {
        static SHARED: std::sync::OnceLock<EtcdServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            let mut etcd = EtcdServer::unstarted("test", None);
            etcd.launch_fresh(Some(std::process::id()));
            etcd
        })
    }

    /// Starts a member that has served before again, on the same address and data.
    fn launch(&mut self) {
        if let Err(log) = self.launch_watched(None) {
            panic!("etcd exited before serving again: {log}");
        }
    }

    /// Starts a new member and waits until it serves. Its ports were free when probed, but another
    /// test may bind one first: a member that exits for that is started again on new ports and a
    /// new directory (up to five times). Any other exit before serving fails, with etcd's log.
    fn launch_fresh(&mut self, watcher: Option<u32>) {
        on_a_free_port("etcd", |client| {
            self.on_ports(client, free_port());
            match self.launch_watched(watcher) {
                Ok(()) => Some(()),
                Err(log) if says_port_taken(&log) => {
                    self.dir = tempfile::tempdir().expect("etcd dir");
                    None
                }
                Err(log) => panic!("etcd exited before serving: {log}"),
            }
        });
    }

    /// Starts etcd; with `watcher`, under a shell that kills it (by its pid) once that process is
    /// gone, checking twice a second. Waits until it serves: `Err` with its log if it exits first.
    fn launch_watched(&mut self, watcher: Option<u32>) -> Result<(), String> {
        self.spawn(watcher);
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            // Serving, and on its own port: another test's etcd may answer on a port it took first.
            if self.healthy() && self.owns_its_port() {
                return Ok(());
            }
            if let Some(Ok(Some(_))) = self.process.as_mut().map(Child::try_wait) {
                self.process = None;
                return Err(self.log());
            }
            assert!(
                Instant::now() < end,
                "etcd not serving after 60 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether our etcd (the process started, or the one its watching shell started) listens on
    /// the client port.
    fn owns_its_port(&self) -> bool {
        let Some(started) = &self.process else {
            return false;
        };
        let pid = started.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        std::iter::once(pid)
            .chain(children.split_whitespace().filter_map(|c| c.parse().ok()))
            .any(|pid| crate::support::listens_on(pid, self.client_port))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Starts etcd without waiting for it (a cluster member serves only once a majority is up).
    fn spawn(&mut self, watcher: Option<u32>) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd log");
        let mut command = match watcher {
            None => program("etcd"),
            // The shared server's directory is never dropped either: the shell removes it once
            // that process is gone (a directory etcd left early is `launch_fresh`'s to drop).
            Some(pid) => {
                let mut sh = program("sh");
                sh.arg("-c")
                    .arg(format!(
                        "etcd \"$@\" & e=$!; while kill -0 {pid} 2>/dev/null && kill -0 $e 2>/dev/null; \
                         do sleep 0.5; done; kill $e 2>/dev/null; wait $e; \
                         kill -0 {pid} 2>/dev/null || rm -rf -- {}",
                        shell_quote(&self.dir.path().display().to_string())
                    ))
                    .arg("etcd");
                sh
            }
        };
        let process = command
            // Its own group, like every test server (see sql_server::as_server_user).
            .process_group(0)
            .args(self.tls.iter().flat_map(|(cert, key, _)| {
                [
                    "--cert-file".to_owned(),
                    cert.display().to_string(),
                    "--key-file".to_owned(),
                    key.display().to_string(),
                ]
            }))
            .args(["--name", &self.name, "--data-dir"])
            .arg(self.data_dir())
            .args([
                "--listen-client-urls",
                &self.endpoint,
                "--advertise-client-urls",
                &self.endpoint,
            ])
            .args([
                "--listen-peer-urls",
                &self.peer_url,
                "--initial-advertise-peer-urls",
                &self.peer_url,
            ])
            .args([
                "--initial-cluster",
                &self
                    .cluster
                    .clone()
                    .unwrap_or_else(|| format!("{}={}", self.name, self.peer_url)),
            ])
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("etcd is installed (Debian package etcd-server)");
        crate::support::reaper::end_with_this_process(&process, self.dir.path());
        self.process = Some(process);
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn healthy(&self) -> bool {
        self.etcdctl(&["endpoint", "health"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `http://127.0.0.1:PORT`, for `etcdctl --endpoints`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// `etcd://127.0.0.1:PORT` (`etcds://` with TLS), for `dlock --url`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("etcd is running").id()
    }

    pub fn version(&self) -> String {
        let out = program("etcdctl").arg("version").output().expect("etcdctl");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("etcdctl version: ")
            .to_owned()
    }

    /// `etcd_debugging_mvcc_events_total`: the events the server has sent to watchers.
    pub fn events_sent(&self) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_events_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("the events metric") as u64
    }

    /// How many calls of the gRPC `method` (`Range`, `Txn`) the server has answered, by any client.
    pub fn calls_served(&self, method: &str) -> u64 {
        let label = format!("grpc_method=\"{method}\"");
        self.metrics()
            .lines()
            .filter(|l| l.starts_with("grpc_server_handled_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// The server's metrics, as text (over HTTP, so reading them is no gRPC call).
    fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text
    }

    /// `etcdctl --endpoints THIS ARGS...` (API v3).
    pub fn etcdctl(&self, args: &[&str]) -> Command {
        let mut cmd = program("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint]);
        if let Some((_, _, ca)) = &self.tls {
            cmd.arg("--cacert").arg(ca);
        }
        cmd.args(args).stdin(Stdio::null());
        cmd
    }

    /// `etcdctl lock NAME COMMAND...`
    pub fn lock(&self, name: &str, command: &[&str]) -> Command {
        let mut cmd = self.etcdctl(&["lock", name, "--"]);
        cmd.args(command);
        cmd
    }

    /// How many keys (holders and waiters) the lock NAME has.
    pub fn keys(&self, name: &str) -> usize {
        let out = self
            .etcdctl(&["get", "--prefix", "--keys-only", name])
            .output()
            .expect("etcdctl get");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .count()
    }

    /// Kills the server (SIGKILL: no clean shutdown), keeping its data for `start_again`.
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Starts a stopped server again on the same address and data.
    pub fn start_again(&mut self) {
        self.launch();
    }

    /// A crash and restart on the same address and data (etcd keeps its keys and leases).
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a fault driver may do to a test's etcd.
pub struct EtcdControl(pub std::sync::Mutex<EtcdServer>);

impl ServerControl for EtcdControl {
    fn pause(&self, pause: Duration) {
        let pid = self.0.lock().expect("server handle").pid();
        crate::support::stop_for(pid, pause);
    }

    /// A crash and restart that keeps the member's data directory: etcd's data is its durable log,
    /// and wiping it would also reset the revisions that fencing tokens are made of.
    fn restart(&self) {
        self.0.lock().expect("server handle").restart();
    }
}

/// A private three-member etcd cluster on loopback, for the fault checker: faults hit the leader
/// (killed and started again on its data, or frozen), and the other two elect a new one.
pub struct EtcdCluster {
    members: Vec<EtcdServer>,
}

impl EtcdCluster {
    pub fn start() -> EtcdCluster {
        let mut members: Vec<EtcdServer> = (0..3)
            .map(|i| EtcdServer::unstarted(&format!("m{i}"), None))
            .collect();
        let cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        for member in &mut members {
            member.cluster = Some(cluster.clone());
            member.spawn(None);
        }
        for member in &members {
            wait_until("etcd member to serve", Duration::from_secs(60), || {
                member.healthy()
            });
        }
        EtcdCluster { members }
    }

    pub fn ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.client_port).collect()
    }

    /// The member that leads now (by `etcdctl endpoint status`), or the first while none does.
    fn leader(&self) -> usize {
        let endpoints: Vec<&str> = self.members.iter().map(|m| m.endpoint()).collect();
        let out = program("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoints.join(","), "endpoint", "status"])
            .args(["-w", "json", "--command-timeout", "2s"])
            .stdin(Stdio::null())
            .output()
            .expect("etcdctl");
        let status: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        status
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| {
                let id = &s["Status"]["header"]["member_id"];
                !id.is_null() && *id == s["Status"]["leader"]
            })
            .and_then(|s| s["Endpoint"].as_str())
            .and_then(|e| endpoints.iter().position(|m| *m == e))
            .unwrap_or(0)
    }
}

/// What the fault driver does to a cluster: to its leader.
pub struct EtcdClusterControl(pub std::sync::Mutex<EtcdCluster>);

impl ServerControl for EtcdClusterControl {
    fn what(&self) -> &'static str {
        "leader"
    }

    fn pause(&self, pause: Duration) {
        let cluster = self.0.lock().expect("cluster handle");
        let pid = cluster.members[cluster.leader()].pid();
        crate::support::stop_for(pid, pause);
    }

    /// SIGKILL the leader and start it again on its data: the other two elect a leader meanwhile.
    fn restart(&self) {
        let mut cluster = self.0.lock().expect("cluster handle");
        let leader = cluster.leader();
        cluster.members[leader].restart();
    }
}

/// `text` as one word for sh.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
