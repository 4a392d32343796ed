//! A forced or frozen failover behind Sentinel with a lock held and a waiter, with and without
//! `--replicas`, on a real master, two replicas and three sentinels with Redis's default resync
//! delay (`repl-diskless-sync-delay 5`): when each event came, and never two holders. The
//! README's guarantee is a test (tests/redis/failover.rs), which looks only until the holder renewed on the new master; the
//! other cases are measured by `cargo bench --bench failover`, a minute a case.

// The benchmarks share this file, and use parts of it the tests do not.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use super::sentinel_set::{info, SentinelSet};
use crate::support::watched::Watched;
use crate::support::{wait_for_file, LockDir};

const T: Duration = Duration::from_secs(60);

/// How long a case watches after the failover: past the default ttl and the demoted master's
/// resync.
const WATCH: Duration = Duration::from_secs(50);

/// How the master goes.
#[derive(Clone, Copy, Debug)]
pub enum Failover {
    /// `SENTINEL FAILOVER`: the old master runs on, and is made a replica of the new one.
    Forced,
    /// The master is frozen (SIGSTOP) until the case ends: the sentinels call it down after 2 s.
    Frozen,
}

/// When each event came, counted from the failover's start.
#[derive(Debug, Default)]
pub struct Figures {
    /// The sentinels named the new master, and it had a replica online.
    pub promoted: Option<Duration>,
    /// The new master had both replicas online (the demoted master resynced).
    pub both_replicas: Option<Duration>,
    /// The holder said it lost the lock.
    pub holder_lost: Option<Duration>,
    /// The waiter's command started (while the holder's still ran, unless the holder lost).
    pub waiter_in: Option<Duration>,
    pub holder_status: i32,
    /// The waiter got the lock after the holder's run ended (within a minute).
    pub waiter_after_release: bool,
    pub tokens: (u64, u64),
}

/// `dlock -v run --replicas N NAME` whose command writes its token, then runs until `done`
/// exists (bounded).
fn run_until(set: &SentinelSet, options: &[&str], token: &Path, done: &Path) -> Watched {
    let script = format!(
        "echo $DLOCK_TOKEN > {t}.tmp; mv {t}.tmp {t}; i=0; \
         while [ ! -e {d} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done",
        t = token.display(),
        d = done.display()
    );
    let args = [
        &["-v", "run", "-w", "120"],
        options,
        &["job", "--", "sh", "-c", &script],
    ];
    Watched::start(set.dlock(&args.concat()))
}

fn token_in(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).expect("a token file");
    text.trim().parse().expect("a token")
}

/// How long a case looks after the failover.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Watch {
    /// `WATCH`, for every figure.
    Whole,
    /// Until the holder renewed its lease once the new master had both replicas online (from
    /// then on its lease is whole again on a master that has all its replicas), `WATCH` at most.
    UntilRenewedOnTheNewMaster,
}

/// A holder and a waiter with `options`, a failover, a `watch` of looking (then a frozen master
/// is let go).
pub fn failover_case(how: Failover, options: &[&str], watch: Watch) -> Figures {
    let set = SentinelSet::start();
    for node in &set.nodes {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-diskless-sync-delay")
            .arg("5")
            .query(&mut node.connection())
            .expect("CONFIG SET");
    }
    let dir = LockDir::new();
    let (a_token, a_done) = (dir.file("a.token"), dir.file("a.done"));
    let (b_token, b_done) = (dir.file("b.token"), dir.file("b.done"));
    let mut a = run_until(&set, options, &a_token, &a_done);
    wait_for_file(&a_token, T);
    let mut b = run_until(&set, options, &b_token, &b_done);
    b.wait_for("waiting for lock", T);

    let mut figures = Figures::default();
    let old = set.master_port();
    let began = Instant::now();
    let new = match how {
        Failover::Forced => set.fail_over(),
        Failover::Frozen => {
            set.master().pause();
            set.await_new_master(old)
        }
    };
    figures.promoted = Some(began.elapsed());
    let new_master = set.nodes.iter().find(|n| n.port() == new).expect("a node");
    // Renewals said by the holder when the new master had both replicas.
    let mut renewals_then = None;
    // Polled every 20 ms, bounded by WATCH.
    while began.elapsed() < WATCH {
        let at = began.elapsed();
        if figures.both_replicas.is_none()
            && info(new_master, "replication")
                .matches("state=online")
                .count()
                == 2
        {
            figures.both_replicas = Some(at);
            renewals_then = Some(a.times_said("renewed"));
        }
        if figures.holder_lost.is_none() && a.has_said("lost the lock") {
            figures.holder_lost = Some(at);
        }
        if figures.waiter_in.is_none() && b_token.exists() {
            figures.waiter_in = Some(at);
        }
        if watch == Watch::UntilRenewedOnTheNewMaster
            && figures.waiter_in.is_none()
            && renewals_then.is_some_and(|then| a.times_said("renewed") > then)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if figures.waiter_in.is_none() && b_token.exists() {
        figures.waiter_in = Some(began.elapsed());
    }
    assert_ne!(old, new);
    let old_master = set.nodes.iter().find(|n| n.port() == old).expect("a node");
    old_master.resume();
    std::fs::write(&a_done, "").expect("a.done");
    let (status, said) = a.finish(T);
    figures.holder_status = status;
    // Bounded: the waiter gives up after its -w 120 at the latest.
    let end = Instant::now() + T;
    while !b_token.exists() && Instant::now() < end && b.child.try_wait().is_ok_and(|s| s.is_none())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    figures.waiter_after_release = b_token.exists();
    std::fs::write(&b_done, "").expect("b.done");
    let (_, waiter_said) = b.finish(T);
    let second = if b_token.exists() {
        token_in(&b_token)
    } else {
        0
    };
    figures.tokens = (token_in(&a_token), second);
    eprintln!("{how:?} {options:?}: {figures:?}\nholder:\n{said}\nwaiter:\n{waiter_said}");
    // Whatever else happened, never two holders: a waiter got in only once the holder had lost.
    if let Some(waiter_in) = figures.waiter_in {
        assert!(
            figures.holder_lost.is_some_and(|lost| lost <= waiter_in),
            "{figures:?}\nholder:\n{said}\nwaiter:\n{waiter_said}"
        );
    }
    figures
}
