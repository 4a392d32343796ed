//! Servers that lie or crawl, on the SQL backends, Redis and ZooKeeper: a MySQL greeting dripped a byte at a
//! time (one connect timeout bounds the whole connect, and SIGTERM ends it at once), and answers
//! whose length field is forged huge (dlock fails at once, in one line, without allocating for it:
//! it runs under an address-space limit far below the forged length).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::*;

/// How long a fake server keeps a connection at most.
pub(super) const SERVER_LIFE: Duration = Duration::from_secs(40);

/// dlock's address space under test: far below the gigabyte a forged length asks for.
const ADDRESS_SPACE: &str = "--as=536870912";

/// A loopback server whose connections (the first 10) `talk` handles, each on a thread of its
/// own (reads from it time out after `SERVER_LIFE`), with a channel on which `talk` reports.
pub(super) fn serve<F>(talk: F) -> (u16, mpsc::Receiver<()>)
where
    F: Fn(TcpStream, &mpsc::Sender<()>) + Clone + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(10) {
            let Ok(conn) = conn else { continue };
            let (talk, tx) = (talk.clone(), tx.clone());
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(SERVER_LIFE));
                talk(conn, &tx);
            });
        }
    });
    (port, rx)
}

/// A loopback server that, for each connection, reads what the client sends first (for
/// `first_read`: a client that speaks first), then writes `answer`, `pace` apart per byte (all at
/// once for zero), and keeps the connection open until the client closes it or `SERVER_LIFE` has
/// passed. Each connection is reported on the channel once its first byte went.
fn fake(first_read: bool, answer: Vec<u8>, pace: Duration) -> (u16, mpsc::Receiver<()>) {
    serve(move |conn, tx| talk(conn, first_read, &answer, pace, tx))
}

fn talk(
    mut conn: TcpStream,
    first_read: bool,
    answer: &[u8],
    pace: Duration,
    tx: &mpsc::Sender<()>,
) {
    let began = Instant::now();
    let mut buf = [0u8; 4096];
    if first_read && matches!(conn.read(&mut buf), Ok(0) | Err(_)) {
        return;
    }
    let chunks: Vec<&[u8]> = match pace.is_zero() {
        true => vec![answer],
        false => answer.chunks(1).collect(),
    };
    for (i, chunk) in chunks.iter().enumerate() {
        if conn.write_all(chunk).is_err() {
            return;
        }
        if i == 0 {
            let _ = tx.send(());
        }
        if began.elapsed() >= SERVER_LIFE {
            return;
        }
        std::thread::sleep(pace);
    }
    // Holds the connection: a client that waits for the rest waits until its own deadline.
    let _ = conn.set_read_timeout(Some(
        SERVER_LIFE
            .saturating_sub(began.elapsed())
            .max(Duration::from_millis(1)),
    ));
    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
}

/// A MySQL protocol-10 greeting, as a server sends it first (packet header included).
pub(super) fn mysql_greeting() -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(b"8.0.36\0");
    p.extend_from_slice(&7u32.to_le_bytes());
    p.extend_from_slice(b"abcdefgh\0");
    // CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH, low and high halves.
    p.extend_from_slice(&0xa200u16.to_le_bytes());
    p.push(33);
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&0x0008u16.to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(b"ijklmnopqrst\0");
    p.extend_from_slice(b"mysql_native_password\0");
    let mut packet = (p.len() as u32).to_le_bytes()[..3].to_vec();
    packet.push(0);
    packet.extend(p);
    packet
}

fn mysql_at(port: u16, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args([
        "--backend",
        "mysql",
        "--url",
        &format!("mysql://u:SECRET@127.0.0.1:{port}/db"),
    ])
    .args(args);
    cmd
}

/// `cmd` under an address-space limit, run to its end (within a minute).
pub(super) fn limited(cmd: Command) -> (std::process::Output, Duration) {
    let mut limited = program("prlimit");
    limited
        .arg(ADDRESS_SPACE)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) => limited.env(key, v),
            None => limited.env_remove(key),
        };
    }
    let started = Instant::now();
    let out = output_within(limited, Duration::from_secs(60));
    (out, started.elapsed())
}

#[test]
fn a_mysql_greeting_dripped_a_byte_at_a_time_ends_at_the_connect_timeout() {
    let (port, _connected) = fake(false, mysql_greeting(), Duration::from_millis(300));
    let started = Instant::now();
    let out = output_within(
        mysql_at(port, &["--connect-timeout", "2s", "run", "d", "--", "true"]),
        Duration::from_secs(60),
    );
    let took = started.elapsed();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("127.0.0.1:{port}")) && !stderr(&out).contains("SECRET"),
        "{}",
        stderr(&out)
    );
    assert!(
        took < Duration::from_secs(4),
        "took {took:?}: {}",
        stderr(&out)
    );
}

#[test]
fn sigterm_ends_a_connect_to_a_dripping_mysql_at_once() {
    let (port, connected) = fake(false, mysql_greeting(), Duration::from_millis(300));
    let mut child = mysql_at(
        port,
        &["--connect-timeout", "30s", "run", "d", "--", "true"],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The greeting has begun: dlock is reading it.
    connected
        .recv_timeout(Duration::from_secs(30))
        .expect("dlock connected");
    let sent = Instant::now();
    signal(child.id(), libc::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let took = sent.elapsed();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}: {err}");
}

#[test]
fn a_forged_postgres_message_length_fails_at_once_without_allocating_it() {
    // An authentication message that says it is a gigabyte long, then nothing.
    let mut answer = vec![b'R'];
    answer.extend_from_slice(&(1u32 << 30).to_be_bytes());
    answer.extend_from_slice(&[0, 0, 0, 0]);
    let (port, _) = fake(true, answer, Duration::ZERO);
    let mut cmd = dlock();
    cmd.args([
        "--backend",
        "postgres",
        "--url",
        &format!("postgres://u:SECRET@127.0.0.1:{port}/db"),
        "--connect-timeout",
        "20s",
        "run",
        "f",
        "--",
        "true",
    ]);
    let (out, took) = limited(cmd);
    refused_at_once(&out, took, port, "a message of 1073741824 bytes");
}

#[test]
fn a_forged_mysql_packet_length_fails_at_once_without_allocating_it() {
    // A greeting whose header says 16 MiB (the most three bytes tell), then nothing.
    let (port, _) = fake(false, vec![0xff, 0xff, 0xff, 0, 10, b'8'], Duration::ZERO);
    let (out, took) = limited(mysql_at(
        port,
        &["--connect-timeout", "20s", "run", "f", "--", "true"],
    ));
    refused_at_once(&out, took, port, "a packet of more than 4 MiB");
}

/// Redis's parser reads a bulk string or an array as its bytes arrive, allocating for what came:
/// a forged length only makes dlock wait for the rest, until its connect timeout.
#[test]
fn a_forged_redis_length_is_waited_for_without_allocating_it() {
    for answer in [&b"$1073741824\r\nab"[..], b"*1073741824\r\n:1\r\n"] {
        let (port, _) = fake(true, answer.to_vec(), Duration::ZERO);
        let mut cmd = dlock();
        cmd.args([
            "--backend",
            "redis",
            "--url",
            &format!("redis://127.0.0.1:{port}"),
            "--connect-timeout",
            "2s",
            "run",
            "f",
            "--",
            "true",
        ]);
        let (out, took) = limited(cmd);
        let shown = String::from_utf8_lossy(answer);
        assert_eq!(code(&out), 69, "{shown:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert!(took < Duration::from_secs(5), "{shown:?} took {took:?}");
    }
}

/// dlock gave up on the lying server at `port` with 69 and one line naming it and saying `why`,
/// within a few seconds (not at the end of a 20 s connect timeout).
fn refused_at_once(out: &std::process::Output, took: Duration, port: u16, why: &str) {
    let err = stderr(out);
    assert_eq!(code(out), 69, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.contains(why),
        "{err}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}: {err}");
}

/// A ZooKeeper server that lies in every list it returns: it takes the session, then answers each
/// listing of children with a count of 2^31 − 1 names and no names (and everything else with "no
/// node"). zookeeper-client would reserve room for that count before reading a name: dlock checks
/// each reply on its way to the client, gives up on the server at once and says why, in one line.
#[test]
fn a_forged_zookeeper_list_count_fails_at_once_without_allocating_it() {
    let (port, _) = serve(|conn, _| lying_zookeeper(conn));
    for args in [&["status", "f"][..], &["run", "f", "--", "true"], &["list"]] {
        let mut cmd = dlock();
        cmd.args([
            "--backend",
            "zk",
            "--url",
            &format!("zk://127.0.0.1:{port}"),
            "--connect-timeout",
            "20s",
        ]);
        cmd.args(args);
        let (out, took) = limited(cmd);
        refused_at_once(
            &out,
            took,
            port,
            "sent a list of 2147483647 names in 4 bytes; not using it",
        );
    }
}

/// A ZooKeeper server that takes the session, then answers each request with another xid (one
/// never sent): dlock gives up on it at once with 69, naming it, not with an internal error (70).
#[test]
fn a_zookeeper_reply_to_no_request_fails_at_once_in_one_line() {
    let (port, _) = serve(|conn, _| zookeeper(conn, Lie::Xid));
    for args in [
        &["status", "f"][..],
        &["run", "-n", "f", "--", "true"],
        &["list"],
    ] {
        let mut cmd = dlock();
        cmd.args([
            "--backend",
            "zk",
            "--url",
            &format!("zk://127.0.0.1:{port}"),
            "--connect-timeout",
            "20s",
        ]);
        cmd.args(args);
        let (out, took) = limited(cmd);
        refused_at_once(&out, took, port, "sent a reply to no request of dlock's");
    }
}

/// How the fake ZooKeeper server lies.
#[derive(Clone, Copy)]
enum Lie {
    /// A count of 2^31 - 1 names, and no names, in every listing of children.
    ListCount,
    /// Another xid than the request's (one higher by a thousand) in every reply.
    Xid,
}

/// One connection of the lying ZooKeeper server (see above).
fn lying_zookeeper(conn: TcpStream) {
    zookeeper(conn, Lie::ListCount);
}

/// One connection of a ZooKeeper server that lies as `lie` says.
fn zookeeper(mut conn: TcpStream, lie: Lie) {
    let _ = conn.set_read_timeout(Some(SERVER_LIFE));
    let frame = |conn: &mut TcpStream| -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        conn.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(len).min(1 << 20) as usize];
        conn.read_exact(&mut body).ok()?;
        Some(body)
    };
    let send = |conn: &mut TcpStream, body: &[u8]| {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        conn.write_all(&out).is_ok()
    };
    // The connect request; the answer: protocol 0, a 10 s session, its id and password.
    if frame(&mut conn).is_none() {
        return;
    }
    let mut session = vec![
        0, 0, 0, 0, 0, 0, 0x27, 0x10, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 16,
    ];
    session.extend_from_slice(&[7u8; 16]);
    session.push(0);
    if !send(&mut conn, &session) {
        return;
    }
    while let Some(request) = frame(&mut conn) {
        let Some(header) = request.get(..8) else {
            return;
        };
        let (xid, op) = (
            &header[..4],
            i32::from_be_bytes(header[4..8].try_into().unwrap()),
        );
        let mut answer = match lie {
            Lie::Xid if op != 11 => (i32::from_be_bytes(xid.try_into().unwrap()) + 1000)
                .to_be_bytes()
                .to_vec(),
            _ => xid.to_vec(),
        };
        answer.extend_from_slice(&[0; 8]);
        match op {
            // getChildren, getChildren2: a count with nothing behind it.
            8 | 12 if matches!(lie, Lie::ListCount) => {
                answer.extend_from_slice(&0i32.to_be_bytes());
                answer.extend_from_slice(&i32::MAX.to_be_bytes());
            }
            // A ping: answered as such.
            11 => answer.extend_from_slice(&0i32.to_be_bytes()),
            _ => answer.extend_from_slice(&(-101i32).to_be_bytes()),
        }
        if !send(&mut conn, &answer) {
            return;
        }
    }
}
