//! Servers that accept and never answer, answer a byte at a time, speak another protocol, or
//! redirect for ever as a cluster node.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{redis_at, T};
use crate::redis::server::RedisServer;
use crate::support::*;

/// A listener that accepts connections and never answers; kept open while the value lives.
fn silent_server() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Starts `cmd`, sends `signal` once it has connected to `listener`, and checks it ends at once
/// with 128+N.
fn ends_at_once_on(signal: i32, listener: &TcpListener, mut cmd: Command) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let (_conn, _) = accept_within(listener, T);
    // Connected: now in the middle of the exchange with a server that never answers.
    std::thread::sleep(Duration::from_millis(200));
    let sent = Instant::now();
    signal_pid(child.id(), signal);
    let status = wait_exit(&mut child, T);
    let took = sent.elapsed();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert_eq!(status.code(), Some(128 + signal), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}: {err}");
}

/// The next connection to `listener`, waiting `most` at most (a dlock that never connects fails
/// the test rather than hanging it).
fn accept_within(listener: &TcpListener, most: Duration) -> (TcpStream, std::net::SocketAddr) {
    listener.set_nonblocking(true).unwrap();
    let end = Instant::now() + most;
    loop {
        match listener.accept() {
            Ok((conn, peer)) => {
                conn.set_nonblocking(false).unwrap();
                return (conn, peer);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("no connection within {most:?}: {e}"),
        }
    }
}

fn signal_pid(pid: u32, sig: i32) {
    signal(pid, sig);
}

/// SIGTERM and SIGINT end a dlock that is connecting to a server that accepts and never answers at
/// once, with 128+N, on every network backend, whether it would wait for the lock or not (`-n`),
/// not at the end of `--connect-timeout`. The file backend connects to nothing.
#[test]
fn signals_end_a_connection_to_a_silent_server_at_once_on_every_backend() {
    for (backend, scheme, path) in [
        ("redis", "redis", ""),
        ("zk", "zk", ""),
        ("postgres", "postgres", "/dlock"),
        ("mysql", "mysql", "/dlock"),
        ("etcd", "etcd", ""),
        ("elasticsearch", "elasticsearch", ""),
    ] {
        for (sig, wait) in [(libc::SIGTERM, &[][..]), (libc::SIGINT, &["-n"][..])] {
            // A listener of its own each time: nothing a former run left in its backlog.
            let (listener, port) = silent_server();
            let mut cmd = dlock();
            cmd.args(["--backend", backend, "--url"])
                .arg(format!("{scheme}://127.0.0.1:{port}{path}"))
                .args(["--connect-timeout", "20s", "run"])
                .args(wait)
                .args(["s", "--", "true"]);
            eprintln!("{backend} {sig} {wait:?}");
            ends_at_once_on(sig, &listener, cmd);
        }
    }
}

/// A loopback server whose connections (the first 20) `talk` handles, each on a thread of its
/// own, given the server's port.
fn fake(
    talk: fn(TcpStream, u16, &'static [u8], Duration),
    answer: &'static [u8],
    pace: Duration,
) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(20) {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || talk(conn, port, answer, pace));
        }
    });
    port
}

/// A server that answers every connection with `answer`, `pace` apart per byte.
fn fake_server(answer: &'static [u8], pace: Duration) -> u16 {
    fake(
        |mut conn, _, answer, pace| {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            for b in answer.iter().cycle().take(4000) {
                if conn.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(pace);
            }
        },
        answer,
        pace,
    )
}

#[test]
fn one_connect_timeout_bounds_connecting_and_the_first_answer() {
    let (_listener, silent) = silent_server();
    // Valid RESP, one byte every 300ms: each read is quick, the whole answer is not.
    let drip = fake_server(b"*2\r\n:0\r\n$1\r\nx\r\n", Duration::from_millis(300));
    let redis = RedisServer::start();
    let tls_to_plain = format!("rediss://127.0.0.1:{}", redis.port());
    for url in [
        format!("redis://127.0.0.1:{silent}"),
        format!("redis://127.0.0.1:{drip}"),
        tls_to_plain,
    ] {
        let started = Instant::now();
        let out = output(redis_at(
            &url,
            &["--connect-timeout", "2s", "run", "b", "--", "true"],
        ));
        let took = started.elapsed();
        assert_eq!(code(&out), 69, "{url}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert!(
            took < Duration::from_millis(3000),
            "{url} took {took:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_server_that_is_not_redis_is_named_in_one_line() {
    let port = fake_server(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        Duration::ZERO,
    );
    let out = output(redis_at(
        &format!("redis://127.0.0.1:{port}"),
        &["run", "h", "--", "true"],
    ));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        format!("dlock: the server at 127.0.0.1:{port} does not speak the Redis protocol")
    );
}

/// A "cluster node" that answers every command with a redirect to itself.
fn redirecting_server() -> u16 {
    fake(
        |mut conn, port, _, _| {
            let answer = format!("-MOVED 1 127.0.0.1:{port}\r\n");
            let mut buf = [0u8; 4096];
            for _ in 0..1000 {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if conn.write_all(answer.as_bytes()).is_err() {
                    return;
                }
            }
        },
        b"",
        Duration::ZERO,
    )
}

#[test]
fn a_cluster_that_redirects_for_ever_is_given_up_in_one_line() {
    let port = redirecting_server();
    let started = Instant::now();
    let out = output(redis_at(
        &format!("redis+cluster://127.0.0.1:{port}"),
        &["--connect-timeout", "2s", "run", "loop", "--", "true"],
    ));
    let took = started.elapsed();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("kept redirecting"),
        "{}",
        stderr(&out)
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
}
