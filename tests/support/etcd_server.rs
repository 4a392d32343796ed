//! A private single-member etcd for the benchmarks that compare dlock with `etcdctl lock`: free
//! loopback ports, its own data directory, stopped when dropped.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wait_until;

/// A single-member etcd on free loopback ports with a private data directory, killed on drop.
pub struct EtcdServer {
    endpoint: String,
    process: Child,
    _dir: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts etcd and waits until `etcdctl endpoint health` says it serves. Panics (never skips)
    /// when etcd is missing: the benchmarks need the Debian packages etcd-server and etcd-client.
    pub fn start() -> EtcdServer {
        let dir = tempfile::tempdir().expect("etcd dir");
        let (client, peer) = (free_port(), free_port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).expect("etcd log");
        let process = Command::new("etcd")
            .args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &endpoint,
                "--advertise-client-urls",
                &endpoint,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("bench={peer_url}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("etcd is installed (Debian package etcd-server)");
        let etcd = EtcdServer {
            endpoint,
            process,
            _dir: dir,
        };
        wait_until("etcd to serve", Duration::from_secs(60), || {
            Command::new("etcdctl")
                .args(["--endpoints", &etcd.endpoint, "endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        etcd
    }

    /// `http://127.0.0.1:PORT`, for `etcdctl --endpoints`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn version(&self) -> String {
        let out = Command::new("etcdctl")
            .arg("version")
            .output()
            .expect("etcdctl");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("etcdctl version: ")
            .to_owned()
    }

    /// `etcdctl lock NAME COMMAND...`
    pub fn lock(&self, name: &str, command: &[&str]) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.args(["--endpoints", &self.endpoint, "lock", name, "--"])
            .args(command);
        cmd
    }

    /// How many keys (holders and waiters) the lock NAME has.
    pub fn keys(&self, name: &str) -> usize {
        let out = Command::new("etcdctl")
            .args([
                "--endpoints",
                &self.endpoint,
                "get",
                "--prefix",
                "--keys-only",
                name,
            ])
            .output()
            .expect("etcdctl get");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .count()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
