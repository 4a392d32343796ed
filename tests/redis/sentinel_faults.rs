//! A private Sentinel set (a master, two replicas, three sentinels) under the fault checker:
//! faults hit whichever node is the master now (paused, or killed so that the sentinels fail over
//! and then started again, empty, as a replica of the new master), and relayed clients reach the
//! data nodes through their own relays.
//!
//! dlock connects wherever the sentinels name, so a relayed client asks a sentinel front of its
//! own: a small server that answers `SENTINEL GET-MASTER-ADDR-BY-NAME` from the real sentinels,
//! with the client's relay to that node in place of the node's port. Cutting a client off the
//! data nodes then cuts it off the master before and after a failover, while the sentinels stay
//! reachable, as a client whose link to the data nodes' network broke.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::sentinel_set::{master_named, master_port_at, SentinelSet, MASTER};
use super::store::STORE;
use crate::support::target::{ServerControl, Target};
use crate::support::LockDir;

/// How often the front's acceptor looks at its stop flag.
const POLL: Duration = Duration::from_millis(5);
/// How long a front's connection waits for a question (dlock asks at once, then closes).
const ASK_WITHIN: Duration = Duration::from_secs(30);
/// Arguments in a question, at most.
const MAX_ARGS: usize = 8;

impl Target {
    /// dlock with `--replicas replicas` on a private Sentinel set whose sentinels call a master
    /// down after `down_after` without an answer.
    pub fn sentinel_set(replicas: u32, down_after: Duration) -> Target {
        let set = SentinelSet::start_watching(&[], down_after);
        let ports: Vec<u16> = set.nodes.iter().map(|n| n.port()).collect();
        let control = SentinelControl {
            sentinels: set.sentinel_ports(),
            nodes: ports.clone(),
            replicas,
            set: Mutex::new(set),
            fronts: Mutex::new(Vec::new()),
        };
        let url = control.set.lock().expect("sentinel set").url();
        Target {
            args: control.args(url),
            store: &STORE,
            ports,
            servers: vec![Box::new(control)],
            scratch: LockDir::new(),
        }
    }
}

/// What the fault checker may do to a Sentinel set.
pub struct SentinelControl {
    set: Mutex<SentinelSet>,
    sentinels: Vec<u16>,
    /// The data nodes' ports, in the order of the target's `ports`.
    nodes: Vec<u16>,
    replicas: u32,
    fronts: Mutex<Vec<Front>>,
}

impl SentinelControl {
    fn args(&self, url: String) -> Vec<String> {
        let replicas = self.replicas.to_string();
        ["--backend", "redis", "--replicas", &replicas, "--url", &url]
            .map(str::to_owned)
            .to_vec()
    }
}

impl ServerControl for SentinelControl {
    fn what(&self) -> &'static str {
        "master"
    }

    /// SIGSTOP the master: past the sentinels' down-after, they fail over meanwhile, and it comes
    /// back a master with clients until they demote it.
    fn pause(&self, pause: Duration) {
        let set = self.set.lock().expect("sentinel set");
        let master = set.master();
        master.pause();
        std::thread::sleep(pause);
        master.resume();
    }

    /// SIGKILL the master, wait until the sentinels promote a replica, and start it again (empty:
    /// no persistence) as a replica of the new master.
    fn restart(&self) {
        let mut set = self.set.lock().expect("sentinel set");
        let old = set.master_port();
        let Some(i) = set.nodes.iter().position(|n| n.port() == old) else {
            panic!("the sentinels name a master on port {old}, which is none of the set's");
        };
        set.nodes[i].kill();
        let new = set.await_new_master(old);
        set.nodes[i].restart_empty_replicating(new);
    }

    fn args_through(&self, ports: &[u16]) -> Option<Vec<String>> {
        let routes = self.nodes.iter().copied().zip(ports.iter().copied());
        let front = Front::start(self.sentinels.clone(), routes.collect());
        let url = format!("redis+sentinel://127.0.0.1:{}/{MASTER}", front.port);
        self.fronts.lock().expect("fronts").push(front);
        Some(self.args(url))
    }
}

/// A sentinel front for one relayed client (see the module's comment).
struct Front {
    port: u16,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Front {
    /// `routes`: each data node's port, and the port the client reaches it at.
    fn start(sentinels: Vec<u16>, routes: Vec<(u16, u16)>) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for a front");
        let port = listener.local_addr().expect("front address").port();
        listener
            .set_nonblocking(true)
            .expect("non-blocking front listener");
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (sentinels, routes) = (Arc::new(sentinels), Arc::new(routes));
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let (sentinels, routes) = (sentinels.clone(), routes.clone());
                            // Ends when dlock closes the connection, or after `ASK_WITHIN`.
                            std::thread::spawn(move || answer(conn, &sentinels, &routes));
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                        Err(_) => std::thread::sleep(POLL),
                    }
                }
            })
        };
        Front {
            port,
            stop,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Answers one connection's questions (RESP arrays of bulk strings) until it closes.
fn answer(conn: TcpStream, sentinels: &[u16], routes: &[(u16, u16)]) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(ASK_WITHIN));
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut lines = BufReader::new(conn);
    while let Some(question) = read_array(&mut lines) {
        let words: Vec<String> = question.iter().map(|w| w.to_ascii_uppercase()).collect();
        let reply = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", _] => master_through(sentinels, routes),
            ["PING"] => "+PONG\r\n".to_owned(),
            _ => "-ERR this front answers only GET-MASTER-ADDR-BY-NAME\r\n".to_owned(),
        };
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// The master a quorum of the sentinels names (else the first that answers), at the client's
/// relay to it.
fn master_through(sentinels: &[u16], routes: &[(u16, u16)]) -> String {
    let named: Vec<_> = sentinels.iter().map(|s| master_port_at(*s)).collect();
    let Some(master) = master_named(&named) else {
        return "-ERR no sentinel answered\r\n".to_owned();
    };
    let port = routes
        .iter()
        .find(|(node, _)| *node == master)
        .map_or(master, |(_, relay)| *relay)
        .to_string();
    format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len())
}

/// `*N` then N times `$LEN` and the bytes: the words, or `None` at the end or on anything else.
fn read_array(lines: &mut impl BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    let mut next = |line: &mut String| {
        line.clear();
        lines.read_line(line).ok().filter(|n| *n > 0)?;
        Some(line.trim_end().to_owned())
    };
    let count: usize = next(&mut line)?.strip_prefix('*')?.parse().ok()?;
    (count <= MAX_ARGS).then_some(())?;
    (0..count)
        .map(|_| {
            next(&mut line)?.strip_prefix('$')?;
            next(&mut line)
        })
        .collect()
}
