//! A private ZooKeeper server for one test: standalone `ZooKeeperServerMain` from the Debian package
//! on a free loopback port with its own data directory, a short tick so sessions can expire within
//! a test, and the four-letter words enabled to ask it whether it serves. Dropping it kills it.
//! A test that neither stops nor asks the server itself takes a node of the suite's server
//! instead (`under`): a JVM's start costs more CPU than most such tests.
//!
//! Also a raw client (the same Rust crate dlock uses) for looking at the nodes dlock leaves behind
//! and for acting as another ZooKeeper identity.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use crate::support::programs::program;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::support::free_port;

const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// Longest a JVM may take to start serving on a busy two-core machine.
const START_LIMIT: Duration = Duration::from_secs(60);

pub struct ZkServer {
    port: u16,
    dir: tempfile::TempDir,
    process: Option<Child>,
    jvm_flags: &'static [&'static str],
    /// In an ensemble: this server's id and the `server.N=` lines of every member.
    peer: Option<(usize, String)>,
    /// The longest session the server grants (maxSessionTimeout), in milliseconds.
    max_session_ms: u64,
    /// How many connections one host may have open at once (maxClientCnxns; 0: any number).
    max_client_cnxns: u32,
    /// The node every path of this handle is under (`""`: the root). A handle made by `under` on
    /// another server's port shares that server and starts nothing.
    chroot: String,
}

/// Tests want a server up fast: the quick compiler only, a small heap.
const QUICK_START: &[&str] = &["-Xms16m", "-Xmx128m", "-XX:TieredStopAtLevel=1"];
/// The benchmark wants a server at full speed: the optimising compiler too.
const FULL_SPEED: &[&str] = &["-Xms256m", "-Xmx256m"];

impl ZkServer {
    /// Starts a server and waits until it answers `ruok`. Panics (never skips) if ZooKeeper or Java
    /// is missing: `scripts/test` installs them.
    pub fn start() -> ZkServer {
        ZkServer::start_with(QUICK_START)
    }

    /// A server for measuring: slower to start, faster once warm.
    pub fn start_for_benchmark() -> ZkServer {
        ZkServer::start_with(FULL_SPEED)
    }

    /// A server that grants sessions of at most `max_session` (maxSessionTimeout), however long
    /// a client asks for.
    pub fn start_with_max_session(max_session: Duration) -> ZkServer {
        ZkServer::start_with_config(QUICK_START, max_session.as_millis() as u64, 0)
    }

    /// A server that takes at most `cap` connections from one host at once (maxClientCnxns):
    /// one past it is accepted and closed at once.
    pub fn start_with_cap(cap: u32) -> ZkServer {
        ZkServer::start_with_config(QUICK_START, 60_000, cap)
    }

    fn start_with(jvm_flags: &'static [&'static str]) -> ZkServer {
        ZkServer::start_with_config(jvm_flags, 60_000, 0)
    }

    fn start_with_config(
        jvm_flags: &'static [&'static str],
        max_session_ms: u64,
        max_client_cnxns: u32,
    ) -> ZkServer {
        assert!(
            Path::new(ZOOKEEPER_JAR).exists(),
            "ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): run scripts/test, which \
             installs the Debian packages zookeeper and libcurator-recipes-java"
        );
        // Ports race with other tests between probing and binding: retry with a new one.
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir for ZooKeeper");
            std::fs::create_dir(dir.path().join("data")).expect("ZooKeeper data dir");
            let mut server = ZkServer {
                port: free_port(),
                dir,
                process: None,
                jvm_flags,
                peer: None,
                max_session_ms,
                max_client_cnxns,
                chroot: String::new(),
            };
            server.write_config();
            if server.launch() {
                return server;
            }
        }
        panic!("ZooKeeper could not start on any of 5 free ports");
    }

    /// A handle on this server's node `chroot` (created here, with its parents): dlock, the
    /// raw client and the peers given its `url` or `hosts` see only what is under it. For a test
    /// that neither stops nor asks the server itself (`pid`, `four_letter`): on the suite's
    /// server it saves a JVM's start.
    pub fn under(&self, chroot: &str) -> ZkServer {
        create_with_parents(&self.hosts(), chroot, &[]);
        ZkServer {
            port: self.port,
            dir: tempfile::tempdir().expect("temp dir for a ZooKeeper handle"),
            process: None,
            jvm_flags: self.jvm_flags,
            peer: None,
            max_session_ms: self.max_session_ms,
            max_client_cnxns: self.max_client_cnxns,
            chroot: format!("{}{chroot}", self.chroot),
        }
    }

    pub fn url(&self) -> String {
        format!("zk://127.0.0.1:{}{}", self.port, self.chroot)
    }

    /// `zk://user:password@127.0.0.1:PORT`
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "zk://{user}:{password}@127.0.0.1:{}{}",
            self.port, self.chroot
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, and the chroot of a handle made by `under`: a connect string for
    /// ZooKeeper's clients (the raw client, Curator, kazoo).
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}{}", self.port, self.chroot)
    }

    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("server running").id()
    }

    /// The server's own directory: its configuration, data and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `dlock --backend zk --url URL ARGS...`
    pub fn dlock(&self, args: &[&str]) -> Command {
        self.dlock_at(&self.url(), args)
    }

    pub fn dlock_at(&self, url: &str, args: &[&str]) -> Command {
        let mut cmd = crate::support::dlock();
        cmd.args(["--backend", "zk", "--url", url]).args(args);
        // A server that just started answers its first sessions slowly on a loaded 2-core machine
        // (CI saw dlock give up after the default 5 s). How long dlock waits is not what these
        // tests are about; those that are pass --connect-timeout, which wins over this.
        cmd.env("DLOCK_CONNECT_TIMEOUT", "30s");
        cmd
    }

    /// Kills the server (SIGKILL: no clean shutdown) and starts it again on the same port and data,
    /// as after a crash. Sessions and their ephemeral nodes survive in the data directory.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.launch(),
            "ZooKeeper did not restart on port {}",
            self.port
        );
    }

    /// Kills the server (SIGKILL), keeping its data for `start_again`.
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Starts a stopped server again on the same port and data.
    pub fn start_again(&mut self) {
        assert!(
            self.launch(),
            "ZooKeeper did not start again on port {}",
            self.port
        );
    }

    /// Sends a four-letter word (`ruok`, `srvr`, `mntr`, `wchs`, `cons`) and returns the answer.
    pub fn four_letter(&self, word: &str) -> String {
        four_letter(self.port, word).unwrap_or_default()
    }

    /// The children of `path` as the raw client sees them; `None` when the node does not exist.
    pub fn children(&self, path: &str) -> Option<Vec<String>> {
        self.with_client(None, |client| async move {
            match client.list_children(path).await {
                Ok(mut children) => {
                    children.sort();
                    Some(children)
                }
                Err(zk::Error::NoNode) => None,
                Err(e) => panic!("cannot list {path}: {e}"),
            }
        })
    }

    /// The places in line among the children of `path`: a dlock holder's pair (its
    /// `_c_<uuid>-lock-N` node and the `_c_<uuid>-__WRIT__N+1` made with it, a seat's
    /// `__SEAT__N` and `__READ__N+1`, or a `--min-hold` kept pair `_k_<uuid>-...`) counts once.
    pub fn queue(&self, path: &str) -> Option<Vec<String>> {
        let children = self.children(path)?;
        let paired = |n: &String| {
            [("__WRIT__", "lock-"), ("__READ__", "__SEAT__")]
                .iter()
                .any(|(companion, first)| {
                    n.split_once(companion).is_some_and(|(prefix, _)| {
                        (prefix.starts_with("_c_") || prefix.starts_with("_k_"))
                            && children
                                .iter()
                                .any(|o| o.starts_with(&format!("{prefix}{first}")))
                    })
                })
        };
        Some(children.iter().filter(|n| !paired(n)).cloned().collect())
    }

    /// Deletes `path` as a client with the given digest credentials (or none).
    pub fn delete_as(
        &self,
        credentials: Option<(&str, &str)>,
        path: &str,
    ) -> Result<(), zk::Error> {
        self.with_client(credentials, |client| async move {
            client.delete(path, None).await
        })
    }

    /// Creates `path` and its missing parents as an open-ACL client would, with `data` in the
    /// last one: what any client of the ensemble can write (a forged holder node, say).
    pub fn create_with_parents(&self, path: &str, data: &[u8]) {
        create_with_parents(&self.hosts(), path, data);
    }

    fn with_client<T, F, Fut>(&self, credentials: Option<(&str, &str)>, f: F) -> T
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        with_client(&self.hosts(), credentials, f)
    }

    fn write_config(&self) {
        let data = self.dir.path().join("data");
        let mut config = format!(
            "tickTime=100\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress=127.0.0.1\n\
             maxClientCnxns={}\n\
             minSessionTimeout=400\n\
             maxSessionTimeout={}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n",
            data.display(),
            self.port,
            self.max_client_cnxns,
            self.max_session_ms
        );
        if let Some((id, members)) = &self.peer {
            // Ticks of 100ms: followers sync within 5s of starting, and one that hears nothing
            // from its leader for 1s drops it and votes again.
            config.push_str("initLimit=50\nsyncLimit=10\n");
            config.push_str(members);
            std::fs::write(data.join("myid"), format!("{id}\n")).expect("write myid");
        }
        std::fs::write(self.config_path(), config).expect("write zoo.cfg");
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("zoo.cfg")
    }

    /// Starts the JVM and waits until it serves; false if it died first (port taken).
    fn launch(&mut self) -> bool {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("server log");
        let mut classpath = ZOOKEEPER_JAR.to_owned();
        // The jar's manifest names its other dependencies; a logging backend is optional.
        if Path::new("/usr/share/java/slf4j-nop.jar").exists() {
            classpath.push_str(":/usr/share/java/slf4j-nop.jar");
        }
        let process = program("java")
            // Its own group, like every test server (see sql_server::as_server_user).
            .process_group(0)
            .args(self.jvm_flags)
            .args([
                "-XX:+UseSerialGC",
                "-XX:-UsePerfData",
                "-Xshare:auto",
                // Empty lock directories (container nodes) go within 100ms, not the default minute.
                "-Dznode.container.checkIntervalMs=100",
                "-cp",
                &classpath,
                if self.peer.is_some() {
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain"
                } else {
                    "org.apache.zookeeper.server.ZooKeeperServerMain"
                },
            ])
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start java for ZooKeeper (is a JRE installed?): {e}")
            });
        let java = process.id();
        crate::support::reaper::end_with_this_process(&process, self.dir.path());
        self.process = Some(process);
        let end = Instant::now() + START_LIMIT;
        while Instant::now() < end {
            // Serving, and on its own port: another test's ZooKeeper may answer on a port it took
            // first.
            if four_letter(self.port, "ruok").as_deref() == Some("imok")
                && crate::support::listens_on(java, self.port)
            {
                return true;
            }
            if let Some(status) = self
                .process
                .as_mut()
                .and_then(|p| p.try_wait().ok().flatten())
            {
                self.process = None;
                eprintln!(
                    "ZooKeeper exited with {status} on port {}: {}",
                    self.port,
                    std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
                );
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        panic!(
            "ZooKeeper did not serve on port {} within {START_LIMIT:?}",
            self.port
        );
    }

    fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            // SIGKILL works on a SIGSTOPped process too.
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn four_letter(port: u16, word: &str) -> Option<String> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500))
            .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// `ZkServer::create_with_parents` on the servers at `hosts` (`127.0.0.1:PORT,...`).
pub fn create_with_parents(hosts: &str, path: &str, data: &[u8]) {
    with_client(hosts, None, |client| async move {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let mut at = String::new();
        let parts: Vec<&str> = path[1..].split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            at.push('/');
            at.push_str(part);
            let bytes: &[u8] = if i + 1 == parts.len() { data } else { &[] };
            match client.create(&at, bytes, &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => panic!("cannot create {at}: {e}"),
            }
        }
    })
}

/// Runs `f` with a raw client of the servers at `hosts`, authenticated with the given digest
/// credentials (or none).
fn with_client<T, F, Fut>(hosts: &str, credentials: Option<(&str, &str)>, f: F) -> T
where
    F: FnOnce(zk::Client) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(5));
        if let Some((user, password)) = credentials {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let client = connector.connect(hosts).await.expect("raw client connects");
        f(client).await
    })
}

/// The fault checker's handle on a ZooKeeper server.
pub struct ZkControl(pub std::sync::Mutex<ZkServer>);

impl crate::support::target::ServerControl for ZkControl {
    fn pause(&self, pause: Duration) {
        let pid = self.0.lock().expect("server handle").pid();
        crate::support::stop_for(pid, pause);
    }

    /// A crash and restart that keeps the server's data directory: a ZooKeeper server's data is its
    /// durable transaction log, and wiping it (unlike restarting a Redis without persistence) would
    /// also reset the zxids that fencing tokens are made of.
    fn restart(&self) {
        self.0.lock().expect("server handle").restart();
    }
}

/// Members of a test ensemble: three, so that it survives the loss of any one.
const ENSEMBLE: usize = 3;

/// Three ZooKeeper servers on loopback forming one ensemble (`QuorumPeerMain`), each with its own
/// data directory. Dropping it kills them all.
pub struct ZkEnsemble {
    pub servers: Vec<ZkServer>,
}

impl ZkEnsemble {
    /// Starts the three members and waits until each one says it is the leader or a follower.
    pub fn start() -> ZkEnsemble {
        assert!(
            Path::new(ZOOKEEPER_JAR).exists(),
            "ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): run scripts/test"
        );
        // Ports race with other tests between probing and binding: retry with new ones.
        for _ in 0..3 {
            let ports: Vec<[u16; 3]> = (0..ENSEMBLE)
                .map(|_| [free_port(), free_port(), free_port()])
                .collect();
            let members: String = ports
                .iter()
                .enumerate()
                .map(|(i, [_, quorum, election])| {
                    format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1)
                })
                .collect();
            let mut servers = Vec::new();
            for (i, [client, ..]) in ports.iter().enumerate() {
                let dir = tempfile::tempdir().expect("temp dir for ZooKeeper");
                std::fs::create_dir(dir.path().join("data")).expect("ZooKeeper data dir");
                let server = ZkServer {
                    port: *client,
                    dir,
                    process: None,
                    jvm_flags: QUICK_START,
                    peer: Some((i + 1, members.clone())),
                    max_session_ms: 60_000,
                    max_client_cnxns: 0,
                    chroot: String::new(),
                };
                server.write_config();
                servers.push(server);
            }
            if servers.iter_mut().all(|s| s.launch()) {
                let ensemble = ZkEnsemble { servers };
                if ensemble.wait_for_quorum(START_LIMIT) {
                    return ensemble;
                }
            }
        }
        panic!("a ZooKeeper ensemble could not start on any of 3 sets of free ports");
    }

    /// `zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.servers.iter().map(ZkServer::hosts).collect();
        format!("zk://{}", hosts.join(","))
    }

    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.port).collect()
    }

    /// The member that says it leads (`srvr`), if one does now.
    pub fn leader(&self) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.four_letter("srvr").contains("Mode: leader"))
    }

    /// Waits until every member serves as leader or follower; false after `limit`.
    fn wait_for_quorum(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            let serving = self.servers.iter().all(|s| {
                let answer = s.four_letter("srvr");
                answer.contains("Mode: leader") || answer.contains("Mode: follower")
            });
            if serving {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The leader, waiting (bounded) for an election under way to end.
    fn current_leader(&self) -> usize {
        let end = Instant::now() + START_LIMIT;
        while Instant::now() < end {
            if let Some(leader) = self.leader() {
                return leader;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the ZooKeeper ensemble elected no leader within {START_LIMIT:?}");
    }
}

/// The fault checker's handle on an ensemble: its faults hit the leader.
pub struct ZkEnsembleControl(pub std::sync::Mutex<ZkEnsemble>);

impl crate::support::target::ServerControl for ZkEnsembleControl {
    fn what(&self) -> &'static str {
        "leader"
    }

    fn pause(&self, pause: Duration) {
        let ensemble = self.0.lock().expect("ensemble handle");
        let pid = ensemble.servers[ensemble.current_leader()].pid();
        crate::support::stop_for(pid, pause);
    }

    /// SIGKILL the leader and start it again on its data: the others elect a new leader meanwhile.
    fn restart(&self) {
        let mut ensemble = self.0.lock().expect("ensemble handle");
        let leader = ensemble.current_leader();
        ensemble.servers[leader].restart();
    }
}
