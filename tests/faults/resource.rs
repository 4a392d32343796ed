//! The fenced resource: a storage service that every critical section writes to, served from the
//! checker's own process on a loopback port. It accepts a write only when its fencing token is at
//! least the highest it has accepted, as a service protected by dlock's tokens would, and keeps
//! the log the checker judges afterwards.
//!
//! It is also how the fault driver catches a holder at the right moment: armed with a set of
//! clients, it holds back its answer to the next of them that begins a critical section and hands
//! that holder (the victim) to the driver, which faults it and then lets it go on.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections served at once: one per client and some lingering stale holders.
const MAX_CONNECTIONS: usize = 128;
const POLL: Duration = Duration::from_millis(5);

/// The critical section, run by bash (its `/dev/tcp` needs no extra process): begin, then two
/// fenced writes. After a refused write it waits, bounded, to be stopped by its dlock: a command
/// that ended on its own would make its dlock exit with the command's status, and the checker
/// could not tell a lost lock from two holders.
pub const SECTION: &str = r#"exec 3<>"/dev/tcp/127.0.0.1/$FAULTS_PORT" || exit 0
echo "begin $DLOCK_TOKEN $$ $FAULTS_RUN" >&3
read -r -t 60 reply <&3 && [ "$reply" = go ] || exit 0
for what in start end; do
  echo "write $DLOCK_TOKEN $what" >&3
  read -r -t 60 reply <&3 || exit 0
  [ "$reply" = ok ] || { read -r -t "$FAULTS_LINGER" reply <&3; exit 0; }
done"#;

/// One write as the resource judged it.
#[derive(Clone)]
pub struct Entry {
    pub run: String,
    pub accepted: bool,
}

/// A critical section's first message: its token and its command (pid and start time, since
/// pids are reused within a run).
#[derive(Clone)]
pub struct Begin {
    pub token: u64,
    pub pid: u32,
    pub start: String,
    pub at: Instant,
}

#[derive(Default)]
pub struct Log {
    high: u64,
    pub writes: Vec<Entry>,
    pub begins: HashMap<String, Begin>,
    pub completed: usize,
    trap: Option<(Vec<usize>, Sender<Victim>)>,
}

/// A holder caught at the start of its critical section, waiting for the answer to its begin.
pub struct Victim {
    pub run: String,
    pub client: usize,
    pub token: u64,
    pub pid: u32,
    stream: TcpStream,
}

impl Victim {
    /// Lets the critical section go on (if its command still runs).
    pub fn go(mut self) {
        let _ = self.stream.write_all(b"go\n");
    }
}

pub struct Resource {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    log: Mutex<Log>,
    /// Signalled on every write.
    written: Condvar,
    stop: AtomicBool,
    connections: AtomicUsize,
}

impl Resource {
    pub fn start() -> Resource {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the resource");
        let port = listener.local_addr().expect("resource address").port();
        listener
            .set_nonblocking(true)
            .expect("non-blocking resource listener");
        let shared = Arc::new(Shared {
            log: Mutex::new(Log::default()),
            written: Condvar::new(),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::spawn(move || accept(listener, &shared))
        };
        Resource {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn begins(&self) -> Begins {
        Begins(self.shared.clone())
    }

    pub fn log(&self) -> MutexGuard<'_, Log> {
        self.shared.log.lock().expect("resource log")
    }

    /// The next critical section one of `clients` begins is held back and handed over.
    pub fn arm(&self, clients: Vec<usize>) -> Receiver<Victim> {
        let (tx, rx) = mpsc::channel();
        self.log().trap = Some((clients, tx));
        rx
    }

    pub fn disarm(&self) {
        self.log().trap = None;
    }

    /// Waits until a write with a token above `token` was accepted (another holder took over);
    /// false after `limit`.
    pub fn wait_for_token_above(&self, token: u64, limit: Duration) -> bool {
        self.wait(limit, |log| log.high > token)
    }

    /// Waits until `run` has made more than `before` writes; false after `limit`.
    pub fn wait_for_write_by(&self, run: &str, before: usize, limit: Duration) -> bool {
        self.wait(limit, |log| log.writes_by(run) > before)
    }

    /// Waits until `done` holds of the log; false after `limit`.
    pub fn wait(&self, limit: Duration, done: impl Fn(&Log) -> bool) -> bool {
        let end = Instant::now() + limit;
        let mut log = self.log();
        loop {
            if done(&log) {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            log = self
                .shared
                .written
                .wait_timeout(log, left)
                .expect("resource log")
                .0;
        }
    }
}

/// Which command each run started, for the clients.
pub struct Begins(Arc<Shared>);

impl Begins {
    /// The pid and start time of the command of `run`, once it has begun.
    pub fn command_of(&self, run: &str) -> Option<(u32, String)> {
        let log = self.0.log.lock().ok()?;
        log.begins.get(run).map(|b| (b.pid, b.start.clone()))
    }
}

impl Log {
    pub fn writes_by(&self, run: &str) -> usize {
        self.writes.iter().rev().filter(|w| w.run == run).count()
    }

    fn write(&mut self, token: u64, run: &str, end: bool) -> bool {
        let accepted = token >= self.high;
        if accepted {
            self.high = token;
            self.completed += usize::from(end);
        }
        self.writes.push(Entry {
            run: run.to_owned(),
            accepted,
        });
        accepted
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept(listener: TcpListener, shared: &Arc<Shared>) {
    let mut served: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        served.retain(|s| !s.is_finished());
        match listener.accept() {
            Ok((stream, _)) if shared.connections.load(Ordering::SeqCst) < MAX_CONNECTIONS => {
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let shared = shared.clone();
                served.push(std::thread::spawn(move || {
                    serve(stream, &shared);
                    shared.connections.fetch_sub(1, Ordering::SeqCst);
                }));
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => {}
        }
    }
    for s in served {
        let _ = s.join();
    }
}

/// One critical section's connection: `begin TOKEN PID RUN`, then `write TOKEN start|end`.
fn serve(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(POLL * 20));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut lines = BufReader::new(stream);
    let mut run = String::new();
    let mut line = String::new();
    while !shared.stop.load(Ordering::SeqCst) {
        match lines.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) if line.ends_with('\n') => {}
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["begin", token, pid, id] => {
                let (Ok(token), Ok(pid)) = (token.parse(), pid.parse()) else {
                    return;
                };
                run = id.to_string();
                let mut log = shared.log.lock().expect("resource log");
                let begin = Begin {
                    token,
                    pid,
                    start: start_time(pid).unwrap_or_default(),
                    at: Instant::now(),
                };
                log.begins.insert(run.clone(), begin);
                let client: Option<usize> = run.split('.').next().and_then(|c| c.parse().ok());
                let caught = matches!(&log.trap, Some((clients, _)) if client.is_some_and(|c| clients.contains(&c)));
                if caught {
                    let (_, to_driver) = log.trap.take().expect("armed");
                    let Ok(stream) = out.try_clone() else {
                        return;
                    };
                    let _ = to_driver.send(Victim {
                        run: run.clone(),
                        client: client.unwrap_or_default(),
                        token,
                        pid,
                        stream,
                    });
                    None
                } else {
                    Some("go\n")
                }
            }
            ["write", token, what @ ("start" | "end")] if !run.is_empty() => {
                let Ok(token) = token.parse() else {
                    return;
                };
                let accepted = {
                    let mut log = shared.log.lock().expect("resource log");
                    log.write(token, &run, *what == "end")
                };
                shared.written.notify_all();
                Some(if accepted { "ok\n" } else { "no\n" })
            }
            _ => return,
        };
        line.clear();
        if let Some(answer) = answer {
            if out.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// A process's start time (field 22 of /proc/PID/stat), which tells it from a later process with
/// the same pid.
pub fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name: state is field 3, start time field 22.
    let after_name = stat.rsplit(") ").next()?;
    after_name.split(' ').nth(19).map(str::to_owned)
}
