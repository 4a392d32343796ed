//! A TCP relay on loopback that a test can freeze: a network partition between one client and one
//! server while every other client still reaches the server directly.
//!
//! Frozen, it forwards nothing in either direction and leaves every connection open, as a cut
//! cable does: what the client sends waits in the socket buffers, connects are accepted and then
//! hear nothing. Thawed, everything that waited flows on, as after a partition heals (TCP would
//! retransmit). Threads, two per connection, bounded by `MAX_CONNECTIONS`; dropping the relay ends
//! them all within `IDLE` or so.
//!
//! Restarting, it plays a server that restarts: every connection it carries ends, and each new one
//! gets the server's answer for "not now" (PostgreSQL's "the database system is starting up") and
//! is closed, until it relays again.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Connections one relay carries at once; more are closed at once (a client then reconnects).
const MAX_CONNECTIONS: usize = 64;
/// How often a frozen thread looks at the frozen and stop flags.
const POLL: Duration = Duration::from_millis(2);
/// How long a thread waits for a connection or for data before it looks at the flags: woken at
/// once by what it waits for. (The acceptor looked every 2 ms and each pump every 10 ms: a fault
/// checker's dozen relays kept the test process busy.)
const IDLE: Duration = Duration::from_millis(25);

pub struct Relay {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    frozen: AtomicBool,
    stop: AtomicBool,
    connections: AtomicUsize,
    /// Bytes the clients sent the server, over every connection.
    sent_up: AtomicUsize,
    /// While restarting, what each new connection is answered (then closed).
    restarting: Mutex<Option<Vec<u8>>>,
    /// Bumped by a restart: a connection of an older one ends.
    generation: AtomicUsize,
    /// How many connections were answered while restarting.
    answered: AtomicUsize,
}

impl Relay {
    /// A relay on a free loopback port to `upstream`.
    pub fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for a relay");
        let port = listener.local_addr().expect("relay address").port();
        listener
            .set_nonblocking(true)
            .expect("non-blocking relay listener");
        let shared = Arc::new(Shared {
            frozen: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            sent_up: AtomicUsize::new(0),
            restarting: Mutex::new(None),
            generation: AtomicUsize::new(0),
            answered: AtomicUsize::new(0),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::spawn(move || accept(listener, upstream, &shared))
        };
        Relay {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops forwarding both ways; connections stay open.
    pub fn freeze(&self) {
        self.shared.frozen.store(true, Ordering::SeqCst);
    }

    /// Forwards again, what waited first.
    pub fn thaw(&self) {
        self.shared.frozen.store(false, Ordering::SeqCst);
    }

    /// Ends every connection and answers each new one with `reply` until `serve`, as a server
    /// restarting does.
    pub fn restart_answering(&self, reply: &[u8]) {
        *self
            .shared
            .restarting
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(reply.to_vec());
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Relays new connections again after `restart_answering`.
    pub fn serve(&self) {
        *self
            .shared
            .restarting
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// How many connections were answered while restarting.
    pub fn answered_restarting(&self) -> usize {
        self.shared.answered.load(Ordering::SeqCst)
    }

    /// How many bytes the clients have sent the server through the relay.
    pub fn bytes_sent_up(&self) -> usize {
        self.shared.sent_up.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept(listener: TcpListener, upstream: SocketAddr, shared: &Arc<Shared>) {
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        pumps.retain(|p| !p.is_finished());
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                wait_for_a_connection(&listener);
                continue;
            }
            Err(_) => continue,
        };
        if shared.connections.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            continue;
        }
        let reply = shared
            .restarting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(reply) = reply {
            let shared = shared.clone();
            pumps.push(std::thread::spawn(move || answer(client, &reply, &shared)));
            continue;
        }
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(1)) else {
            // The server is down: so is the connection through the relay.
            continue;
        };
        let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let done = Arc::new(AtomicUsize::new(0));
        for (from, to, up) in [(client_in, server, true), (server_in, client, false)] {
            let shared = shared.clone();
            let done = done.clone();
            pumps.push(std::thread::spawn(move || {
                pump(from, to, up, &shared);
                // The second pump to finish gives the connection's place back.
                if done.fetch_add(1, Ordering::SeqCst) == 1 {
                    shared.connections.fetch_sub(1, Ordering::SeqCst);
                }
            }));
        }
    }
    for pump in pumps {
        let _ = pump.join();
    }
}

/// Copies `from` to `to` until either side closes or the relay stops, holding everything while
/// frozen; `up`: from a client to the server, counted. Closing one direction closes both, as a
/// reset would.
fn pump(mut from: TcpStream, mut to: TcpStream, up: bool, shared: &Shared) {
    let _ = from.set_read_timeout(Some(IDLE));
    let _ = to.set_write_timeout(Some(IDLE));
    let mut buf = [0u8; 16 * 1024];
    let generation = shared.generation.load(Ordering::SeqCst);
    'relay: while !shared.stop.load(Ordering::SeqCst)
        && shared.generation.load(Ordering::SeqCst) == generation
    {
        if shared.frozen.load(Ordering::SeqCst) {
            // Not even reading: the sender's data stays in the kernel's buffers.
            std::thread::sleep(POLL);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // Read just before a freeze: held until the thaw, like a packet caught on the wire.
        while shared.frozen.load(Ordering::SeqCst) {
            if shared.stop.load(Ordering::SeqCst) {
                break 'relay;
            }
            std::thread::sleep(POLL);
        }
        if !write_all(&mut to, &buf[..n], shared) {
            break;
        }
        if up {
            shared.sent_up.fetch_add(n, Ordering::SeqCst);
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Waits until `listener` has a connection to accept, `IDLE` at most.
fn wait_for_a_connection(listener: &TcpListener) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let idle = Timespec::try_from(IDLE).expect("IDLE fits a timespec");
    let _ = poll(&mut [PollFd::new(listener, PollFlags::IN)], Some(&idle));
}

/// Answers a connection made while restarting: reads what the client sends first (its startup
/// message, within a second), writes `reply` and closes, as the server does.
fn answer(mut client: TcpStream, reply: &[u8], shared: &Shared) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 16 * 1024];
    let _ = client.read(&mut buf);
    if write_all(&mut client, reply, shared) {
        shared.answered.fetch_add(1, Ordering::SeqCst);
    }
    let _ = client.shutdown(Shutdown::Write);
    // The client's close, or a second: a close with unread data would reset the connection
    // before the client read the answer.
    let _ = client.read(&mut buf);
}

/// `write_all` that gives up when the relay stops, even towards a peer that reads nothing (a
/// stopped process).
fn write_all(to: &mut TcpStream, mut data: &[u8], shared: &Shared) -> bool {
    while !data.is_empty() {
        if shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        match to.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}
