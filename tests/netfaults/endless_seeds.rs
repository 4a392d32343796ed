//! A Redis Cluster seed or a sentinel that answers dlock's first question (`CLUSTER SLOTS` for
//! `list`, the acquire script for `run`, `SENTINEL GET-MASTER-ADDR-BY-NAME` before anything)
//! without end: an array of 2^31-1 integers or 2^40 bulks that keep coming, or a bulk of 1 TiB
//! whose bytes keep coming. dlock ends with 69 within its connect budget, in bounded memory (under
//! an address-space limit), and soon after a stop signal.

use std::time::Duration;

use super::endless_servers::{dlock_on, endless_reply, ends_promptly_on, gives_up, Pace};
use super::lying_servers::serve;

/// The endless answers: what announces them, and what then comes again and again.
const ANSWERS: [(&str, &[u8], &[u8]); 3] = [
    ("2^31-1 integers", b"*2147483647\r\n", b":1\r\n"),
    ("2^40 bulks", b"*1099511627776\r\n", b"$1\r\nx\r\n"),
    ("a 1 TiB bulk", b"$1099511627776\r\n", b"xxxxxxxx"),
];

/// A fake server giving `answer` at `pace` to each connection's first request.
fn endless(
    answer: (&'static [u8], &'static [u8]),
    pace: Pace,
) -> (u16, std::sync::mpsc::Receiver<()>) {
    serve(move |conn, tx| endless_reply(conn, answer.0, answer.1, pace, tx))
}

fn cluster_url(port: u16) -> String {
    format!("redis+cluster://127.0.0.1:{port}")
}

fn sentinel_url(port: u16) -> String {
    format!("redis+sentinel://127.0.0.1:{port}/mymaster")
}

/// What dlock runs against each fake: `list` asks a cluster seed for `CLUSTER SLOTS`.
const COMMANDS: [&[&str]; 2] = [&["list"], &["run", "-n", "e", "--", "true"]];

/// Every answer at every pace to every command, on `url`'s kind of server, each run on a fake
/// server of its own (which takes only its first 10 connections). The slow answers each take the
/// whole budget, so they run all at once; the floods, which cost CPU, one after another.
fn every_answer_fails_within_the_budget(url: fn(u16) -> String) {
    let one = |what: &str, header, unit, pace, args| {
        let (port, _) = endless((header, unit), pace);
        let cmd = dlock_on("redis", &url(port), "3s", args);
        let what = format!("{what} {pace:?} {args:?}");
        gives_up(&what, cmd, Duration::from_secs(6), &port.to_string());
    };
    std::thread::scope(|slow| {
        for (what, header, unit) in ANSWERS {
            for args in COMMANDS {
                let pace = Pace::Units(Duration::from_millis(5));
                slow.spawn(move || one(what, header, unit, pace, args));
            }
        }
        for (what, header, unit) in ANSWERS {
            for args in COMMANDS {
                one(what, header, unit, Pace::Flood, args);
            }
        }
    });
}

#[test]
fn a_cluster_seed_answering_without_end_fails_within_the_budget_in_bounded_memory() {
    every_answer_fails_within_the_budget(cluster_url);
}

#[test]
fn a_sentinel_answering_without_end_fails_within_the_budget_in_bounded_memory() {
    every_answer_fails_within_the_budget(sentinel_url);
}

/// A stop signal ends a run soon while a seed's or a sentinel's answer keeps coming (with a
/// connect budget of 30 s, far beyond).
#[test]
fn a_signal_ends_a_run_while_a_seed_or_a_sentinel_answers_without_end() {
    for url in [cluster_url, sentinel_url] {
        for (what, header, unit) in ANSWERS {
            let (port, began) = endless((header, unit), Pace::Flood);
            let cmd = dlock_on("redis", &url(port), "30s", &["run", "e", "--", "true"]);
            let what = format!("{} {what}", url(port));
            ends_promptly_on(&what, libc::SIGTERM, &began, cmd);
        }
    }
}
