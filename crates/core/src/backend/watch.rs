//! A watch over each call of a synchronous client (Redis, MySQL), from a thread of its own: a
//! server that answers without end (a Redis array of 2^40 elements that keep coming, MySQL rows
//! without end, either as fast as dlock reads or a byte every half second) must neither hold dlock
//! past the call's budget nor past a stop signal, nor grow its memory without bound.
//!
//! The redis client parses a reply as its bytes arrive, allocating for each element (about 14
//! times the bytes of a one-byte bulk), and takes no limit; the mysql client restarts its read
//! timeout with every byte and retries a read a signal interrupted. Under a flood reads never
//! block, so an alarm that interrupts a blocking read (`redis::server::ALARM_SLACK`) is not
//! enough either. A client owns its socket and shows no descriptor; after connecting, dlock finds the one new
//! TCP socket to the server's port among its descriptors (a socket not open before, by its inode
//! in /proc/self/fd) and keeps a duplicate of it
//! (`pidfd_getfd` on itself: no unsafe code). While a call runs, this thread looks at it
//! `FIRST_LOOK` after it began and every `LOOK_EVERY` after that; past its budget, after a stop
//! signal (one that came before the call began spares it: a release still gets through), or once
//! dlock's resident memory has grown by more than `MAX_GROWTH` since the first look, it shuts the
//! socket down: the client then reads what the kernel already holds and meets the end of the
//! stream. The call's fault says why (`Cut`). Without a duplicate (no pidfd, no unique socket)
//! only the alarm and the socket timeouts bound a call.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::backend::stop::Stop;
use dlock_sys::blocking;

/// How much dlock's resident memory may grow during one call (from the first look on).
pub const MAX_GROWTH: u64 = 64 << 20;

/// How long a call runs before the watch first looks at it (a call that ends sooner is never
/// looked at), and how often it looks after that.
const FIRST_LOOK: Duration = Duration::from_millis(20);
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// A duplicate of the socket under a connection of the redis client.
pub struct Socket(Arc<OwnedFd>);

impl Socket {
    /// The sockets open now (`socket:[INODE]`), before a connection is made.
    pub fn open_now() -> Vec<String> {
        Socket::sockets().into_iter().map(|(_, s)| s).collect()
    }

    /// Each socket's descriptor, and what it links to (`socket:[INODE]`).
    fn sockets() -> Vec<(i32, String)> {
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| {
                let fd = e.file_name().to_str()?.parse().ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                let target = target.to_str()?;
                target
                    .starts_with("socket:")
                    .then(|| (fd, target.to_owned()))
            })
            .collect()
    }

    /// The one TCP socket to `port` among the sockets opened since `before`; `None` when there is
    /// not exactly one, or no duplicate can be made.
    pub fn opened_since(before: &[String], port: u16) -> Option<Socket> {
        use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};
        let me = pidfd_open(getpid(), PidfdFlags::empty()).ok()?;
        let mut found = Socket::sockets()
            .into_iter()
            .filter(|(_, socket)| !before.contains(socket))
            .filter_map(|(fd, _)| pidfd_getfd(&me, fd, PidfdGetfdFlags::empty()).ok())
            .filter(|dup| {
                let stream = rustix::net::sockopt::socket_type(dup)
                    .is_ok_and(|t| t == rustix::net::SocketType::STREAM);
                let peer = rustix::net::getpeername(dup).ok().flatten();
                let peer_port = peer.and_then(|p| std::net::SocketAddr::try_from(p).ok());
                stream && peer_port.is_some_and(|p| p.port() == port)
            });
        let socket = found.next()?;
        match found.next() {
            Some(_) => None,
            None => Some(Socket(Arc::new(socket))),
        }
    }
}

/// Why the watch cut a call short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Its budget was spent.
    Late,
    /// A stop signal came.
    Stopped,
    /// dlock's memory grew by more than `MAX_GROWTH`.
    Memory,
}

/// A call being watched.
struct Call {
    socket: Arc<OwnedFd>,
    /// The thread that makes the call.
    thread: std::thread::ThreadId,
    began: Instant,
    until: Instant,
    /// The stop, unless it had come before the call began.
    stop: Option<Stop>,
    /// dlock's resident memory at the first look.
    resident_at: Option<u64>,
    cut: Option<Cut>,
}

struct Watch {
    calls: Mutex<HashMap<u64, Call>>,
    changed: Condvar,
    next: std::sync::atomic::AtomicU64,
}

/// The watch, its thread started on first use; `None` when the thread cannot start.
fn the_watch() -> Option<&'static Watch> {
    static WATCH: OnceLock<Option<&'static Watch>> = OnceLock::new();
    *WATCH.get_or_init(|| {
        let watch: &'static Watch = Box::leak(Box::new(Watch {
            calls: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            next: std::sync::atomic::AtomicU64::new(0),
        }));
        blocking::thread("dlock-redis-watch", move || look(watch))
            .ok()
            .map(|_| watch)
    })
}

/// The watch's thread: looks at the calls under way until the process ends.
fn look(watch: &Watch) {
    let mut calls = dlock_sys::sync::lock(&watch.calls);
    loop {
        if calls.is_empty() {
            calls = watch.changed.wait(calls).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let now = Instant::now();
        let mut resident_now = None;
        for call in calls.values_mut() {
            if call.cut.is_some() || now < call.began + FIRST_LOOK {
                continue;
            }
            let resident = *resident_now.get_or_insert_with(resident);
            let at = *call.resident_at.get_or_insert(resident);
            let cut = if call.stop.as_ref().is_some_and(Stop::requested) {
                Some(Cut::Stopped)
            } else if now >= call.until {
                Some(Cut::Late)
            } else if resident.saturating_sub(at) > MAX_GROWTH {
                Some(Cut::Memory)
            } else {
                None
            };
            if cut.is_some() {
                shut(&call.socket);
                call.cut = cut;
            }
        }
        calls = watch
            .changed
            .wait_timeout(calls, LOOK_EVERY)
            .map_or_else(|e| e.into_inner().0, |(c, _)| c);
    }
}

/// Ends the connection on `socket`: the client reads what the kernel holds, then the end.
fn shut(socket: &OwnedFd) {
    let _ = rustix::net::shutdown(socket, rustix::net::Shutdown::Both);
}

/// Cuts the call this thread has under watch at once (the caller stops reading and its client
/// must not read on); false when there is none.
pub fn cut_this_threads_call() -> bool {
    let Some(watch) = the_watch() else {
        return false;
    };
    let me = std::thread::current().id();
    let calls = dlock_sys::sync::lock(&watch.calls);
    let mine = calls.values().filter(|c| c.thread == me);
    mine.map(|c| shut(&c.socket)).count() > 0
}

/// dlock's resident memory in bytes (0 when it cannot be read: nothing is then cut for memory).
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * rustix::param::page_size() as u64
}

/// A call under watch, until dropped.
pub struct Watched {
    watch: &'static Watch,
    id: u64,
}

impl Watched {
    /// Watches a call on `socket` whose budget ends at `until`.
    pub fn start(socket: &Socket, until: Instant, stop: &Stop) -> Option<Watched> {
        let watch = the_watch()?;
        let id = watch
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let call = Call {
            socket: socket.0.clone(),
            thread: std::thread::current().id(),
            began: Instant::now(),
            until,
            stop: (!stop.requested()).then(|| stop.clone()),
            resident_at: None,
            cut: None,
        };
        dlock_sys::sync::lock(&watch.calls).insert(id, call);
        watch.changed.notify_one();
        Some(Watched { watch, id })
    }

    /// Why the watch cut the call short, if it did.
    pub fn cut(&self) -> Option<Cut> {
        dlock_sys::sync::lock(&self.watch.calls)
            .get(&self.id)
            .and_then(|c| c.cut)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        dlock_sys::sync::lock(&self.watch.calls).remove(&self.id);
    }
}
