//! Servers that answer without end: rows, elements or bytes streamed for ever, at once or slowly,
//! and rows of the wrong shape. Whatever they send, dlock ends with 69 within its budget, holds a
//! bounded amount of memory (it runs under an address-space limit), and ends with 128+N soon after
//! a stop signal.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::lying_servers::{limited, mysql_greeting, serve, SERVER_LIFE};
use crate::support::*;

/// How soon after a stop signal dlock must have ended (it takes well under this: see SPEED).
pub(super) const PROMPT: Duration = Duration::from_secs(2);

/// How a server sends what has no end.
#[derive(Clone, Copy, Debug)]
pub(super) enum Pace {
    /// As fast as the client reads, in batches.
    Flood,
    /// One unit (a row, an element) each time.
    Units(Duration),
    /// One byte each time.
    Bytes(Duration),
}

/// Sends `stream` again and again at `pace` (`Units`: `unit` bytes of it each time), until the
/// client goes or `SERVER_LIFE` has passed.
pub(super) fn without_end(
    conn: &mut TcpStream,
    stream: &[u8],
    unit: usize,
    pace: Pace,
    tx: &mpsc::Sender<()>,
) {
    let began = Instant::now();
    let _ = tx.send(());
    let (step, pause) = match pace {
        Pace::Flood => (stream.len() * ((64 << 10) / stream.len().max(1) + 1), None),
        Pace::Units(pause) => (unit, Some(pause)),
        Pace::Bytes(pause) => (1, Some(pause)),
    };
    let mut cycle = stream.iter().copied().cycle();
    while began.elapsed() < SERVER_LIFE {
        if let Some(pause) = pause {
            std::thread::sleep(pause);
        }
        let piece: Vec<u8> = cycle.by_ref().take(step).collect();
        if conn.write_all(&piece).is_err() {
            return;
        }
    }
}

/// `cmd` run under an address-space limit: it must end with 69 within `most`, in one line, which
/// contains `why`.
pub(super) fn gives_up(what: &str, cmd: Command, most: Duration, why: &str) {
    let (out, took) = limited(cmd);
    let err = stderr(&out);
    assert_eq!(code(&out), 69, "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(err.contains(why), "{what}: {err}");
    assert!(took < most, "{what} took {took:?}: {err}");
}

/// Starts `cmd`, sends `sig` once `began` says the server is sending without end, and checks that
/// dlock ends with 128+N within `PROMPT`.
pub(super) fn ends_promptly_on(what: &str, sig: i32, began: &mpsc::Receiver<()>, mut cmd: Command) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    if began.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what}: the server never began to answer");
    }
    // Well inside the answer.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    signal(child.id(), sig);
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let took = sent.elapsed();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert_eq!(status.code(), Some(128 + sig), "{what}: {err}");
    assert!(
        took < PROMPT,
        "{what}: took {took:?} after the signal: {err}"
    );
}

pub(super) fn dlock_on(backend: &str, url: &str, timeout: &str, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args([
        "--backend",
        backend,
        "--url",
        url,
        "--connect-timeout",
        timeout,
    ])
    .args(args);
    cmd
}

/// What a fake SQL server answers each statement with.
#[derive(Clone, Copy, Debug)]
enum Rows {
    /// One-column rows, without end.
    Endless(Pace),
    /// One one-column row, then the end of the answer.
    OneColumn,
}

// ---- PostgreSQL ----

fn pg_message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A row of one text column, "x".
fn pg_row() -> Vec<u8> {
    pg_message(b'D', &[0, 1, 0, 0, 0, 1, b'x'])
}

/// One connection of a fake PostgreSQL server: it lets anyone in, answers every simple query as
/// done, describes every statement as one text column, and answers each Execute as `rows` says.
fn pg_talk(mut conn: TcpStream, rows: Rows, tx: &mpsc::Sender<()>) {
    let read = |conn: &mut TcpStream, n: usize| -> Option<Vec<u8>> {
        let mut buf = vec![0; n.min(1 << 20)];
        conn.read_exact(&mut buf).ok().map(|()| buf)
    };
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    // The startup message (after an SSLRequest, refused, if one comes first).
    loop {
        let Some(len) = read(&mut conn, 4) else {
            return;
        };
        let Some(body) = read(&mut conn, be32(&len).saturating_sub(4)) else {
            return;
        };
        if body.starts_with(&80877103u32.to_be_bytes()) {
            if conn.write_all(b"N").is_err() {
                return;
            }
            continue;
        }
        break;
    }
    let ready = pg_message(b'Z', b"I");
    let mut hello = pg_message(b'R', &[0, 0, 0, 0]);
    hello.extend(&ready);
    if conn.write_all(&hello).is_err() {
        return;
    }
    let mut field = b"x\0".to_vec();
    field.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    field.extend_from_slice(&25u32.to_be_bytes());
    field.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0]);
    let mut described = pg_message(b't', &[0, 0]);
    described.extend(pg_message(b'T', &[[0, 1].as_slice(), &field].concat()));
    loop {
        let Some(head) = read(&mut conn, 5) else {
            return;
        };
        if read(&mut conn, be32(&head[1..]).saturating_sub(4)).is_none() {
            return;
        }
        let answer = match head[0] {
            b'Q' => [pg_message(b'C', b"BEGIN\0"), ready.clone()].concat(),
            b'P' => pg_message(b'1', b""),
            b'B' => pg_message(b'2', b""),
            b'D' => described.clone(),
            b'S' => ready.clone(),
            b'E' => match rows {
                Rows::OneColumn => [pg_row(), pg_message(b'C', b"SELECT 1\0")].concat(),
                Rows::Endless(pace) => {
                    let row = pg_row();
                    return without_end(&mut conn, &row, row.len(), pace, tx);
                }
            },
            _ => return,
        };
        if conn.write_all(&answer).is_err() {
            return;
        }
    }
}

fn fake_postgres(rows: Rows) -> (u16, mpsc::Receiver<()>) {
    serve(move |conn, tx| pg_talk(conn, rows, tx))
}

fn pg_url(port: u16) -> String {
    format!("postgres://u:SECRET@127.0.0.1:{port}/db")
}

/// Rows without end, as fast as dlock reads, from the server at `url`: `status`, `list` and `run
/// -n` stop reading at the bound on one answer (`bound`, as dlock words it), at once, without the
/// memory it would take to hold them all.
fn rows_without_end_are_refused_past_a_bound(backend: &str, url: &str, bound: &str) {
    // A run's calls wait a fifth of its ttl at most: 12 s here, so that the bound, reached in
    // about 0.3 s on an idle machine, is what ends it on a loaded one too.
    for args in [
        &["status", "e"][..],
        &["list"],
        &["run", "-n", "--ttl", "60s", "e", "--", "true"],
    ] {
        let cmd = dlock_on(backend, url, "20s", args);
        gives_up(&format!("{args:?}"), cmd, Duration::from_secs(15), bound);
    }
}

/// Rows dripped without end at `pace` by the server `serve` starts: dlock gives up at the end of
/// its budget, not when the server stops.
fn rows_dripped_without_end_end_with_the_budget(
    backend: &str,
    paces: [Pace; 2],
    serve: impl Fn(Pace) -> (u16, mpsc::Receiver<()>),
    url: impl Fn(u16) -> String,
) {
    for pace in paces {
        let (port, _) = serve(pace);
        for args in [&["status", "e"][..], &["run", "-n", "e", "--", "true"]] {
            let cmd = dlock_on(backend, &url(port), "3s", args);
            gives_up(
                &format!("{pace:?} {args:?}"),
                cmd,
                Duration::from_secs(5),
                &format!("127.0.0.1:{port}"),
            );
        }
    }
}

/// PostgreSQL's rows without end: refused past the bound on one answer.
#[test]
fn postgres_rows_without_end_are_refused_past_a_bound() {
    let (port, _) = fake_postgres(Rows::Endless(Pace::Flood));
    let bound = "more than 100000 messages or 64 MiB in one answer";
    rows_without_end_are_refused_past_a_bound("postgres", &pg_url(port), bound);
}

/// PostgreSQL's rows that never end, a row at a time or a byte at a time: dlock gives up at the
/// end of its budget.
#[test]
fn postgres_rows_dripped_without_end_end_with_the_budget() {
    let paces = [
        Pace::Units(Duration::from_millis(50)),
        Pace::Bytes(Duration::from_millis(200)),
    ];
    let serve = |pace| fake_postgres(Rows::Endless(pace));
    rows_dripped_without_end_end_with_the_budget("postgres", paces, serve, pg_url);
}

/// A stop signal ends `run` soon while rows drip from the server `serve` starts.
fn a_signal_ends_a_run_while_rows_drip(
    backend: &str,
    serve: impl Fn(Rows) -> (u16, mpsc::Receiver<()>),
    url: impl Fn(u16) -> String,
) {
    for (sig, args) in [
        (libc::SIGTERM, &["run", "-n", "e", "--", "true"][..]),
        (libc::SIGINT, &["run", "e", "--", "true"]),
    ] {
        let (port, began) = serve(Rows::Endless(Pace::Units(Duration::from_millis(50))));
        let cmd = dlock_on(backend, &url(port), "30s", args);
        ends_promptly_on(&format!("{sig} {args:?}"), sig, &began, cmd);
    }
}

/// Rows of one column from the server at `url` where dlock's statements select several: 69 and
/// one line, no panic.
fn rows_of_the_wrong_shape_fail_in_one_line(backend: &str, url: &str) {
    for args in [
        &["status", "e"][..],
        &["list"],
        &["run", "-n", "e", "--", "true"],
    ] {
        let cmd = dlock_on(backend, url, "20s", args);
        gives_up(
            &format!("{args:?}"),
            cmd,
            Duration::from_secs(10),
            "unexpected answer",
        );
    }
}

#[test]
fn postgres_a_signal_ends_a_run_while_rows_drip() {
    a_signal_ends_a_run_while_rows_drip("postgres", fake_postgres, pg_url);
}

/// Rows of one column where dlock's statements select several: 69 and one line, no panic.
#[test]
fn postgres_rows_of_the_wrong_shape_fail_in_one_line() {
    let (port, _) = fake_postgres(Rows::OneColumn);
    rows_of_the_wrong_shape_fail_in_one_line("postgres", &pg_url(port));
}

// ---- Redis ----

/// One connection of a fake Redis server: it answers the first request with an array that says
/// it has 2^40 elements, then sends one-byte bulks without end at `pace`.
fn redis_talk(conn: TcpStream, pace: Pace, tx: &mpsc::Sender<()>) {
    endless_reply(conn, b"*1099511627776\r\n", b"$1\r\nx\r\n", pace, tx);
}

/// One connection of a fake Redis server: it answers the first request, whatever it is, with
/// `header` (an array or a bulk of a length never reached), then `unit` again and again at `pace`.
pub(super) fn endless_reply(
    mut conn: TcpStream,
    header: &[u8],
    unit: &[u8],
    pace: Pace,
    tx: &mpsc::Sender<()>,
) {
    let mut buf = [0u8; 4096];
    if matches!(conn.read(&mut buf), Ok(0) | Err(_)) {
        return;
    }
    if conn.write_all(header).is_err() {
        return;
    }
    without_end(&mut conn, unit, unit.len(), pace, tx);
}

/// One connection of a fake Redis server that answers every request with `answer`.
fn redis_answering(mut conn: TcpStream, answer: &[u8]) {
    let mut buf = [0u8; 4096];
    while !matches!(conn.read(&mut buf), Ok(0) | Err(_)) {
        if conn.write_all(answer).is_err() {
            return;
        }
    }
}

fn redis_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// An array of 2^40 elements that keep coming, as fast as dlock reads, a few at a time, or a byte
/// at a time: dlock ends with 69 within its connect timeout, within the memory stated in SPEED.
#[test]
fn redis_elements_without_end_end_with_the_budget_in_bounded_memory() {
    for pace in [
        Pace::Flood,
        Pace::Units(Duration::from_millis(5)),
        Pace::Bytes(Duration::from_millis(200)),
    ] {
        let (port, _) = serve(move |conn, tx| redis_talk(conn, pace, tx));
        for args in [&["status", "e"][..], &["run", "-n", "e", "--", "true"]] {
            let cmd = dlock_on("redis", &redis_url(port), "3s", args);
            gives_up(
                &format!("{pace:?} {args:?}"),
                cmd,
                Duration::from_secs(5),
                &format!("127.0.0.1:{port}"),
            );
        }
    }
}

/// A stop signal ends `run` soon while elements keep coming.
#[test]
fn redis_a_signal_ends_a_run_while_elements_come() {
    for pace in [Pace::Flood, Pace::Units(Duration::from_millis(5))] {
        for (sig, args) in [
            (libc::SIGTERM, &["run", "-n", "e", "--", "true"][..]),
            (libc::SIGINT, &["run", "e", "--", "true"]),
        ] {
            let (port, began) = serve(move |conn, tx| redis_talk(conn, pace, tx));
            let cmd = dlock_on("redis", &redis_url(port), "30s", args);
            ends_promptly_on(&format!("{pace:?} {sig} {args:?}"), sig, &began, cmd);
        }
    }
}

/// Replies of the wrong shape (an array of one integer where a script returns more): 69, one
/// line, no panic.
#[test]
fn redis_replies_of_the_wrong_shape_fail_in_one_line() {
    let (port, _) = serve(|conn, _| redis_answering(conn, b"*1\r\n:1\r\n"));
    for args in [
        &["status", "e"][..],
        &["list"],
        &["run", "-n", "e", "--", "true"],
    ] {
        let cmd = dlock_on("redis", &redis_url(port), "20s", args);
        gives_up(
            &format!("{args:?}"),
            cmd,
            Duration::from_secs(10),
            &format!("127.0.0.1:{port}"),
        );
    }
}

// ---- MySQL ----

/// A MySQL packet: its length, its sequence number, its payload.
fn my_packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    p.push(seq);
    p.extend_from_slice(payload);
    p
}

/// One connection of a fake MySQL server: it greets, lets anyone in, and answers every query
/// with one text column as `rows` says.
fn my_talk(mut conn: TcpStream, rows: Rows, tx: &mpsc::Sender<()>) {
    let packet = |conn: &mut TcpStream| -> Option<Vec<u8>> {
        let mut head = [0u8; 4];
        conn.read_exact(&mut head).ok()?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], 0]) as usize;
        let mut body = vec![0; len.min(1 << 20)];
        conn.read_exact(&mut body).ok().map(|()| body)
    };
    if conn.write_all(&mysql_greeting()).is_err() || packet(&mut conn).is_none() {
        return;
    }
    // Authenticated.
    if conn
        .write_all(&my_packet(2, &[0, 0, 0, 2, 0, 0, 0]))
        .is_err()
    {
        return;
    }
    let mut column = vec![3];
    column.extend_from_slice(b"def");
    column.extend_from_slice(&[0, 0, 0, 1, b'x', 0, 0x0c, 33, 0]);
    column.extend_from_slice(&[0xff, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0]);
    let eof = [0xfe, 0, 0, 2, 0];
    while let Some(command) = packet(&mut conn) {
        if command.first() != Some(&3) {
            return;
        }
        let mut answer = my_packet(1, &[1]);
        answer.extend(my_packet(2, &column));
        answer.extend(my_packet(3, &eof));
        match rows {
            Rows::OneColumn => {
                answer.extend(my_packet(4, &[1, b'x']));
                answer.extend(my_packet(5, &eof));
                if conn.write_all(&answer).is_err() {
                    return;
                }
            }
            Rows::Endless(pace) => {
                if conn.write_all(&answer).is_err() {
                    return;
                }
                // 252 rows (sequence numbers 4 to 255), then on from 0: whole rounds of numbers.
                let round: Vec<u8> = (4..=255u8)
                    .chain(0..4)
                    .flat_map(|seq| my_packet(seq, &[1, b'x']))
                    .collect();
                // A row (a packet of 6 bytes) at a time.
                return without_end(&mut conn, &round, 6, pace, tx);
            }
        }
    }
}

fn fake_mysql(rows: Rows) -> (u16, mpsc::Receiver<()>) {
    serve(move |conn, tx| my_talk(conn, rows, tx))
}

fn my_url(port: u16) -> String {
    format!("mysql://u:SECRET@127.0.0.1:{port}/db")
}

/// MySQL's rows without end: refused past the bound on one answer.
#[test]
fn mysql_rows_without_end_are_refused_past_a_bound() {
    let (port, _) = fake_mysql(Rows::Endless(Pace::Flood));
    let bound = "more than 100000 rows or 64 MiB in one answer";
    rows_without_end_are_refused_past_a_bound("mysql", &my_url(port), bound);
}

/// MySQL's rows dripped without end (a row at a time, a byte at a time): dlock gives up at the
/// end of its budget.
#[test]
fn mysql_rows_dripped_without_end_end_with_the_budget() {
    let paces = [
        Pace::Units(Duration::from_millis(50)),
        Pace::Bytes(Duration::from_millis(500)),
    ];
    let serve = |pace| fake_mysql(Rows::Endless(pace));
    rows_dripped_without_end_end_with_the_budget("mysql", paces, serve, my_url);
}

#[test]
fn mysql_a_signal_ends_a_run_while_rows_drip() {
    a_signal_ends_a_run_while_rows_drip("mysql", fake_mysql, my_url);
}

/// A one-column row where dlock's statements select several (the definers' query first): 69, one
/// line, no panic.
#[test]
fn mysql_rows_of_the_wrong_shape_fail_in_one_line() {
    let (port, _) = fake_mysql(Rows::OneColumn);
    rows_of_the_wrong_shape_fail_in_one_line("mysql", &my_url(port));
}
