//! An Elasticsearch node that answers without end: a chunked body streamed for ever, at once or a
//! byte at a time. dlock stops reading at the bound on one answer (4 MiB for a lock's document),
//! gives up at the end of its budget when the bytes drip, holds a bounded amount of memory, and
//! ends with 128+N soon after a stop signal.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use super::endless_servers::{dlock_on, ends_promptly_on, gives_up, without_end, Pace};
use super::lying_servers::serve;

/// Reads a request's head, then answers 200 with a chunked body that never ends.
fn http_talk(mut conn: TcpStream, pace: Pace, tx: &mpsc::Sender<()>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    let mut chunk = b"1000\r\n".to_vec();
    chunk.extend(std::iter::repeat_n(b' ', 4096));
    chunk.extend_from_slice(b"\r\n");
    without_end(&mut conn, &chunk, chunk.len(), pace, tx);
}

fn fake_node(pace: Pace) -> (u16, mpsc::Receiver<()>) {
    serve(move |conn, tx| http_talk(conn, pace, tx))
}

fn url(port: u16) -> String {
    format!("elasticsearch://u:SECRET@127.0.0.1:{port}")
}

#[test]
fn elasticsearch_a_body_without_end_is_refused_past_a_bound() {
    let (port, _) = fake_node(Pace::Flood);
    for args in [
        &["status", "e"][..],
        &["list"],
        &["run", "-n", "e", "--", "true"],
    ] {
        let cmd = dlock_on("elasticsearch", &url(port), "20s", args);
        gives_up(
            &format!("{args:?}"),
            cmd,
            Duration::from_secs(10),
            "an answer over 4194304 bytes",
        );
    }
}

#[test]
fn elasticsearch_a_body_dripped_without_end_ends_with_the_budget() {
    for pace in [
        Pace::Units(Duration::from_millis(50)),
        Pace::Bytes(Duration::from_millis(200)),
    ] {
        let (port, _) = fake_node(pace);
        for args in [&["status", "e"][..], &["run", "-n", "e", "--", "true"]] {
            let cmd = dlock_on("elasticsearch", &url(port), "3s", args);
            gives_up(
                &format!("{pace:?} {args:?}"),
                cmd,
                Duration::from_secs(5),
                &format!("127.0.0.1:{port}"),
            );
        }
    }
}

#[test]
fn elasticsearch_a_signal_ends_a_run_while_the_body_drips() {
    for (sig, args) in [
        (libc::SIGTERM, &["run", "-n", "e", "--", "true"][..]),
        (libc::SIGINT, &["run", "e", "--", "true"]),
    ] {
        let (port, began) = fake_node(Pace::Bytes(Duration::from_millis(50)));
        let cmd = dlock_on("elasticsearch", &url(port), "30s", args);
        ends_promptly_on(&format!("{sig} {args:?}"), sig, &began, cmd);
    }
}
