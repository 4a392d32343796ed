//! Loopback ports for the servers the tests start: free ones (below the range of outgoing
//! connections' local ports), a server started again on another while its port was taken, whether
//! a child listens on its port, and a port that refuses connections.

use std::process::Child;
use std::time::Duration;

use super::wait_until;

/// A loopback port free when asked. Another test may take it before the caller does: for a
/// server the caller then starts through `on_a_free_port`, never for "nothing there" (see
/// `refusing_port`). Chosen at random below the kernel's range for the local ports of outgoing
/// connections: a server restarted on its port (the fault tests do) must find it free, and a
/// port in that range can be taken meanwhile by a client's connection, even one that a client
/// retrying a connect to that very port makes to itself.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let first = 10_000.min(low / 2);
    for attempt in 0u64..200 {
        let mut random = std::collections::hash_map::RandomState::new().build_hasher();
        random.write_u64(attempt);
        let port = first + (random.finish() % u64::from(low - first)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// What `start` makes of a server on a port probed free (`start(port)`), started again on another
/// port while it answers `None`: the server exited because another test bound the port between
/// the probe and its start. Five tries.
pub fn on_a_free_port<T>(what: &str, mut start: impl FnMut(u16) -> Option<T>) -> T {
    for _ in 0..5 {
        if let Some(started) = start(free_port()) {
            return started;
        }
    }
    panic!("{what} found its port taken five times");
}

/// Whether a server's log says it could not bind its port (etcd, PostgreSQL, MariaDB).
pub fn says_port_taken(log: &str) -> bool {
    log.to_lowercase().contains("address already in use")
}

/// Waits until our child `server` listens on `port` (see `listens_on`): true then, false when it
/// exits first (its port taken, say); panics with `what` after `limit`.
pub fn until_listening(what: &str, server: &mut Child, port: u16, limit: Duration) -> bool {
    let mut exited = false;
    wait_until(what, limit, || {
        exited = matches!(server.try_wait(), Ok(Some(_)));
        exited || listens_on(server.id(), port)
    });
    !exited
}

/// Whether our child `pid` listens on `port` of 127.0.0.1 (or of every address): a server we
/// started is ready, and the port is its own, not another test's server that bound it between
/// our probe and its start (a connection would reach that one as well).
pub fn listens_on(pid: u32, port: u16) -> bool {
    // IPv4 sockets, and IPv6 ones on an IPv4-mapped address or on every address (Java's).
    let local = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
        format!("0000000000000000FFFF00000100007F:{port:04X}"),
        format!("00000000000000000000000000000000:{port:04X}"),
    ];
    // Each line: sl, local address, remote address, state (0A: LISTEN), ..., inode (the tenth).
    let listening: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let mine = fields
                        .get(1)
                        .is_some_and(|at| local.iter().any(|l| l == at));
                    (mine && fields.get(3) == Some(&"0A"))
                        .then(|| Some(format!("socket:[{}]", fields.get(9)?)))?
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| listening.iter().any(|l| target.as_os_str() == l.as_str()))
    })
}

/// A loopback port where a connection is refused, for as long as the returned socket lives: it
/// is bound, so no other test's server can take it, but not listening. (A free port, once
/// released, may become another test's server meanwhile, and a store meant to be down answers.)
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2) with constant arguments; its result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor this function alone owns.
    let socket = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_in is plain data; all zero is valid, and the fields set make 127.0.0.1:0.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let at = (&mut addr as *mut libc::sockaddr_in).cast::<libc::sockaddr>();
    // SAFETY: `at` points to `addr`, valid for `len` bytes, for both calls.
    let bound = unsafe { libc::bind(fd, at, len) == 0 && libc::getsockname(fd, at, &mut len) == 0 };
    assert!(bound, "bind: {}", std::io::Error::last_os_error());
    (socket, u16::from_be(addr.sin_port))
}
