//! A private OpenSearch node for one test, and one the tests of a run share: a JVM running
//! tests/opensearch/node/OpenSearchNode.java (the server's own `Node`, from the jars of the pom
//! beside it, with Netty for HTTP and Painless) on a free loopback port, with its own directory,
//! in its own process group, listed for the reaper, ready when `start` returns (its cluster is
//! green) and killed when dropped. It can be paused (SIGSTOP) and restarted on the same port and
//! data, for fault tests. Talked to with `request`, plain HTTP/1.1 over a std TcpStream.
//!
//! scripts/test fetches the jars into Maven's repository (~/.m2); the tests take their classpath
//! from there with Maven offline, and compile the launcher once per test process.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use crate::support::programs::program;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The launcher's directory: its source and the pom of its jars.
const NODE_FILES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/opensearch/node");

/// How long a node may take to serve HTTP, and then again to turn green: a JVM that loads the whole
/// server, measured at 10 to 18 s on two loaded cores.
const START_LIMIT: Duration = Duration::from_secs(120);

/// The JVM's flags: the heap the issue asks for, and a start rather than a peak speed (the client
/// compiler only, the serial collector), as for ZooKeeper.
const JVM_FLAGS: &[&str] = &[
    "-Xms512m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Xshare:auto",
];

pub struct OpenSearchServer {
    process: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// What the launcher printed (its own lines, and the server's errors).
    out: Arc<Mutex<String>>,
    /// From the JVM's start to a green cluster, at the last (re)start.
    started_in: Duration,
}

/// How a start ended.
enum Launch {
    Serving,
    PortTaken,
}

impl OpenSearchServer {
    /// A node of the test's own; panics (never skips) when Java or the jars are missing.
    pub fn start() -> OpenSearchServer {
        crate::support::on_a_free_port("OpenSearch", |port| {
            let mut node = OpenSearchServer {
                process: None,
                port,
                dir: tempfile::tempdir().expect("the OpenSearch node's directory"),
                out: Arc::new(Mutex::new(String::new())),
                started_in: Duration::ZERO,
            };
            match node.launch() {
                Launch::Serving => Some(node),
                Launch::PortTaken => None,
            }
        })
    }

    /// The one node the tests of a run share (each test uses indices of its own), started on
    /// first use. Statics are never dropped: a reaper kills it once this test process has gone
    /// and removes its directory, and the node itself stops when its stdin, a pipe from this
    /// process, closes.
    pub fn shared() -> &'static OpenSearchServer {
        static SHARED: OnceLock<(OpenSearchServer, Child)> = OnceLock::new();
        &SHARED
            .get_or_init(|| {
                let node = OpenSearchServer::start();
                let reaper = crate::support::reaper::reaper(node.pid(), node.dir(), libc::SIGKILL);
                (node, reaper)
            })
            .0
    }

    /// Starts the JVM on `self.port` and `self.dir`, and waits until its cluster is green.
    fn launch(&mut self) -> Launch {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("node.log"))
            .expect("the OpenSearch node's log");
        let classpath = classpath();
        let started = Instant::now();
        let mut process = program("java")
            // Its own group, like every test server (see sql_server::as_server_user).
            .process_group(0)
            .args(JVM_FLAGS)
            .arg("-cp")
            .arg(classpath)
            .arg("OpenSearchNode")
            .arg(self.dir.path())
            .arg(self.port.to_string())
            // It stops when this pipe closes: this process's end, however it ends.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start java (scripts/test installs a JDK): {e}"));
        crate::support::reaper::end_with_this_process(&process, self.dir.path());
        let stdout = process.stdout.take().expect("piped stdout");
        let (said, hear) = mpsc::channel();
        let out = self.out.clone();
        // Drains the launcher's output for as long as it runs, and passes on its own lines.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("http ") || line == "port taken" || line == "start failed" {
                    let _ = said.send(line.clone());
                }
                if let Ok(mut out) = out.lock() {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        });
        let heard = hear.recv_timeout(START_LIMIT);
        self.process = Some(process);
        match heard {
            Ok(line) if line.starts_with("http ") => {}
            Ok(line) if line == "port taken" => {
                self.kill();
                return Launch::PortTaken;
            }
            Ok(_) => {
                self.kill();
                panic!("the OpenSearch node did not start:\n{}", self.log());
            }
            Err(e) => {
                // Whether the JVM was stopped, running or waiting, its CPU time, and the load.
                let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()));
                let load = std::fs::read_to_string("/proc/loadavg");
                self.kill();
                panic!(
                    "the OpenSearch node did not serve HTTP ({e:?} within {START_LIMIT:?}); its \
                     /proc stat: {stat:?}; load: {load:?}:\n{}",
                    self.log()
                );
            }
        }
        // Green within a limit of its own: a node that served HTTP late on a loaded machine still
        // gets its time to recover its shards.
        let serving = started.elapsed();
        let health = format!(
            "/_cluster/health?wait_for_status=green&timeout={}ms",
            START_LIMIT.as_millis()
        );
        let (status, body) = self.request("GET", &health, None).unwrap_or_else(|e| {
            panic!("GET {health}: {e}\n{}", self.log());
        });
        if !(status == 200 && body.contains(r#""status":"green""#)) {
            panic!(
                "the OpenSearch node served HTTP after {serving:?} but is not green {START_LIMIT:?} \
                 later: {status} {body}\n{}\n{}",
                self.not_green(),
                self.log()
            );
        }
        self.started_in = started.elapsed();
        Launch::Serving
    }

    /// Why the cluster is not green: the shards, their recoveries, what allocation says, what the
    /// node's threads are doing, and the load.
    fn not_green(&self) -> String {
        [
            "/_cat/shards?v",
            "/_cat/recovery?v&active_only=true",
            "/_cluster/allocation/explain",
            "/_nodes/hot_threads?threads=5",
        ]
        .iter()
        .map(|path| match self.request("GET", path, None) {
            Ok((status, body)) => format!("GET {path}: {status}\n{body}"),
            Err(e) => format!("GET {path}: {e}"),
        })
        .chain([format!(
            "load: {:?}",
            std::fs::read_to_string("/proc/loadavg")
        )])
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// `METHOD PATH` with a JSON `body`: the status and the body of the answer.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(START_LIMIT + Duration::from_secs(15)))?;
        let body = body.unwrap_or("");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, answer.clone());
        let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(bad)?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        Ok((status, body.to_owned()))
    }

    /// As `request`, the body as JSON; panics when the node cannot be reached or answers no JSON.
    pub fn json(&self, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
        let (status, text) = self
            .request(method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let json = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}: {status} {text}"));
        (status, json)
    }

    /// The launcher's output and the node's log.
    fn log(&self) -> String {
        let out = self.out.lock().map(|o| o.clone()).unwrap_or_default();
        let log = std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default();
        format!("{out}{log}")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("the node is running").id()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// From the JVM's start to a green cluster, at the last start.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// SIGSTOP: the node keeps its connections but answers nothing.
    pub fn pause(&self) {
        crate::support::signal(self.pid(), libc::SIGSTOP);
    }

    pub fn resume(&self) {
        crate::support::signal(self.pid(), libc::SIGCONT);
    }

    /// SIGKILL (which also ends a stopped JVM), and reap it.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Kills the node and starts it again on the same port and data: what it acknowledged it
    /// still has (OpenSearch's translog is synced at each request by default).
    pub fn restart_keeping_data(&mut self) {
        self.kill();
        assert!(
            matches!(self.launch(), Launch::Serving),
            "the OpenSearch node did not restart on port {}:\n{}",
            self.port,
            self.log()
        );
    }
}

impl Drop for OpenSearchServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The launcher's classpath (the launcher itself, then its jars), compiled once per test process
/// as the Curator program is.
fn classpath() -> &'static str {
    static CLASSPATH: OnceLock<String> = OnceLock::new();
    CLASSPATH.get_or_init(|| {
        let jars = jars();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("opensearch-node-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the OpenSearch launcher");
        let out = program("javac")
            .arg("-d")
            .arg(&dir)
            .args(["-cp", &jars])
            .arg(Path::new(NODE_FILES).join("OpenSearchNode.java"))
            .output()
            .expect("javac (a JDK) is installed: scripts/test installs one");
        assert!(
            out.status.success(),
            "javac OpenSearchNode.java: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        format!("{}:{jars}", dir.display())
    })
}

/// The jars of the pom, from Maven's repository: Maven, offline, writes their classpath once
/// (and again when the pom changes or a jar has gone), kept for later test processes.
fn jars() -> String {
    let pom = Path::new(NODE_FILES).join("pom.xml");
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("opensearch-jars.classpath");
    if let Some(jars) = still_good(&kept, &pom) {
        return jars;
    }
    // Written aside and renamed: another test process may read it meanwhile.
    let aside = PathBuf::from(format!("{}.{}", kept.display(), std::process::id()));
    let out = program("mvn")
        .args(["-B", "-q", "-o", "-f"])
        .arg(&pom)
        .arg("dependency:build-classpath")
        .arg(format!("-Dmdep.outputFile={}", aside.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run mvn (scripts/test installs maven): {e}"));
    assert!(
        out.status.success(),
        "the OpenSearch jars are not in Maven's repository: run scripts/test, which fetches \
         them (mvn offline said: {})",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::rename(&aside, &kept).expect("keep the OpenSearch classpath");
    still_good(&kept, &pom).expect("the classpath Maven wrote")
}

/// The classpath kept in `kept`, if it is newer than `pom` and every jar it names is there.
fn still_good(kept: &Path, pom: &Path) -> Option<String> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(kept)? < modified(pom)? {
        return None;
    }
    let jars = std::fs::read_to_string(kept).ok()?;
    let jars = jars.trim();
    (!jars.is_empty() && jars.split(':').all(|jar| Path::new(jar).is_file())).then(|| jars.into())
}

/// The fault checker pauses the node (SIGSTOP of the JVM) and crashes it (SIGKILL, then a start on
/// the same port and data).
impl crate::support::sql_server::Pausable for OpenSearchServer {
    fn pause(&self) {
        OpenSearchServer::pause(self);
    }

    fn resume(&self) {
        OpenSearchServer::resume(self);
    }

    fn restart(&mut self) {
        self.restart_keeping_data();
    }
}
