//! dlock's ZooKeeper backend side by side with `etcdctl lock` and `flock(1)`, in one run:
//!
//! - uncontended `dlock --backend zk run NAME -- true` vs `flock FILE true` vs `etcdctl lock NAME
//!   true`: median wall time of whole processes;
//! - 8 processes contending, each acquiring 25 times with an empty critical section: acquisitions/s
//!   for dlock and etcdctl;
//! - handoff latency with 50 queued waiters: from the moment one holder's command ends to the moment
//!   the next holder's command starts (p50, p90), for dlock and etcdctl;
//! - with those 50 waiters, how many watchers each release notified (the server's own `mntr`
//!   figures: one per release means no herd) and ZooKeeper requests per acquisition.
//!
//! Run with `cargo bench --bench zk` (a release build). It starts its own ZooKeeper (the test
//! helper) and etcd on free loopback ports and stops both at the end. Every loop is bounded by a
//! count and every wait by a time limit.

#[path = "../tests/etcd/server.rs"]
mod etcd_server;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "../tests/zk/server.rs"]
mod zk_server;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::program;

use etcd_server::EtcdServer;
use support::figures::{middle, ms};
use support::{dlock_bin, wait_exit, wait_until};
use zk_server::ZkServer;

const UNCONTENDED_RUNS: usize = 40;
/// The JVM's optimising compiler needs a few hundred requests of each kind to kick in.
const WARM_UP_RUNS: usize = 300;
const WARM_UP_LIMIT: Duration = Duration::from_secs(15);
const CONTENDERS: usize = 8;
const ACQUISITIONS_EACH: usize = 25;
const WAITERS: usize = 50;
const LIMIT: Duration = Duration::from_secs(120);
/// Contended rounds, the tools taking turns: one short run on a shared machine is noisy, so the
/// goal is judged on the median of the rounds' ratios.
const CONTENDED_ROUNDS: usize = 5;

fn main() {
    println!(
        "{}",
        support::build::describe(std::path::Path::new(support::dlock_bin()))
    );
    let zk = ZkServer::start_for_benchmark();
    let etcd = EtcdServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let lock_file = dir.path().join("flock.lock");

    println!(
        "dlock {} vs etcdctl lock (etcd {}) vs flock",
        dlock_bin(),
        etcd.version()
    );
    println!();

    // Warm up (the JVM compiles ZooKeeper's hot paths; etcd and the page cache settle).
    let warming = Instant::now();
    for i in 0..WARM_UP_RUNS {
        if warming.elapsed() > WARM_UP_LIMIT {
            break;
        }
        time(zk.dlock(&["run", "warm-up", "--", "true"]));
        if i % 5 == 0 {
            time(etcd.lock("warm-up", &["true"]));
        }
    }

    // Uncontended, interleaved so that machine noise hits all three alike.
    let (mut d, mut f, mut e) = (Vec::new(), Vec::new(), Vec::new());
    let started = Instant::now();
    for _ in 0..UNCONTENDED_RUNS {
        if started.elapsed() > LIMIT {
            break;
        }
        d.push(time(zk.dlock(&["run", "uncontended", "--", "true"])));
        f.push(time(flock(&lock_file)));
        e.push(time(etcd.lock("uncontended", &["true"])));
    }
    let (d, f, e) = (median(&mut d), median(&mut f), median(&mut e));
    println!(
        "uncontended run, median of {} (whole processes):",
        UNCONTENDED_RUNS
    );
    println!("  dlock zk      {:>8.2} ms", ms(d));
    println!("  flock         {:>8.2} ms", ms(f));
    println!("  etcdctl lock  {:>8.2} ms", ms(e));
    println!(
        "  dlock/flock {:.2}   dlock/etcdctl {:.2}   (goal: dlock faster than etcdctl)",
        ratio(d, f),
        ratio(d, e)
    );
    println!();

    // Contended.
    let counter = dir.path().join("counter");
    let (mut dlock_rates, mut etcd_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CONTENDED_ROUNDS {
        let dlock_rate = contended(&counter, |script| {
            format!(
                "{} --backend zk --url {} run contended -- sh -c '{script}'",
                dlock_bin(),
                zk.url()
            )
        });
        let etcd_rate = contended(&counter, |script| {
            format!(
                "etcdctl --endpoints {} lock contended -- sh -c '{script}'",
                etcd.endpoint()
            )
        });
        dlock_rates.push(dlock_rate);
        etcd_rates.push(etcd_rate);
        ratios.push(dlock_rate / etcd_rate);
    }
    println!(
        "{CONTENDERS} processes x {ACQUISITIONS_EACH} acquisitions, read-modify-write critical section, \
         {CONTENDED_ROUNDS} rounds taking turns (medians):"
    );
    println!(
        "  dlock zk      {:>8.1} acquisitions/s",
        middle(dlock_rates)
    );
    println!("  etcdctl lock  {:>8.1} acquisitions/s", middle(etcd_rates));
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!("  dlock/etcdctl by round: {}", shown.join(" "));
    println!("  dlock/etcdctl {:.2}   (goal: >= 2)", middle(ratios));
    println!();

    // Handoffs through a queue of 50 waiters.
    let before = Mntr::read(&zk);
    let dlock_handoffs = handoffs(
        dir.path(),
        "dlock",
        |command| {
            let mut cmd = zk.dlock(&["run", "chain", "--"]);
            cmd.args(command);
            cmd
        },
        || {
            let mut status = zk.dlock(&["status", "-q", "chain"]);
            status.status().is_ok_and(|s| s.success())
        },
        // Every waiter has its node in the queue and a watch on the node ahead of it (the holder
        // watches its own node).
        || {
            zk.children("/dlock/chain").map_or(0, |c| c.len()) == WAITERS + 1
                && Mntr::read(&zk).get("zk_watch_count") > WAITERS as u64
        },
    );
    let after = Mntr::read(&zk);
    let etcd_handoffs = handoffs(
        dir.path(),
        "etcd",
        |command| etcd.lock("chain", command),
        || etcd.keys("chain") == 1,
        || etcd.keys("chain") == WAITERS + 1,
    );
    println!("handoff latency through {WAITERS} queued waiters (holder's command ends -> next one's starts):");
    for (who, mut h) in [
        ("dlock zk", dlock_handoffs),
        ("etcdctl lock", etcd_handoffs),
    ] {
        let p50 = percentile(&mut h, 50);
        let p90 = percentile(&mut h, 90);
        println!(
            "  {who:<12}  p50 {:>6.2} ms   p90 {:>6.2} ms   (goal: p50 <= 5 ms)",
            ms(p50),
            ms(p90)
        );
    }
    let delta = |key: &str| after.get(key).saturating_sub(before.get(key));
    let notified = delta("zk_sum_node_deleted_watch_count");
    let releases_noticed = delta("zk_cnt_node_deleted_watch_count");
    println!(
        "  dlock zk: {releases_noticed} releases that someone watched notified {notified} watchers in all \
         (max per release {}), {} children watches fired, {} data-change watches fired",
        after.get("zk_max_node_deleted_watch_count"),
        delta("zk_sum_node_children_watch_count"),
        delta("zk_sum_node_changed_watch_count")
    );
    println!(
        "  dlock zk: {:.1} ZooKeeper requests per acquisition (connect, queue, watch, release, close)",
        delta("zk_packets_received") as f64 / (WAITERS + 1) as f64
    );
    let herd_free = notified == releases_noticed && releases_noticed >= WAITERS as u64;
    println!(
        "  each release woke exactly one waiter: {}",
        if herd_free { "yes" } else { "NO" }
    );
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn median(v: &mut [Duration]) -> Duration {
    percentile(v, 50)
}

fn percentile(v: &mut [Duration], p: usize) -> Duration {
    assert!(!v.is_empty(), "no samples");
    v.sort();
    v[(v.len() - 1) * p / 100]
}

/// Wall time of one run, which must succeed.
fn time(mut cmd: Command) -> Duration {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn");
    let status = wait_exit(&mut child, LIMIT);
    assert!(status.success(), "{cmd:?}: {status}");
    started.elapsed()
}

fn flock(file: &Path) -> Command {
    let mut cmd = program("flock");
    cmd.arg(file).arg("true");
    cmd
}

/// Acquisitions per second of `CONTENDERS` shell loops running `command(script)`.
fn contended(counter: &Path, command: impl Fn(&str) -> String) -> f64 {
    std::fs::write(counter, "0").expect("counter");
    let rmw = format!("n=$(cat {c}); echo $((n + 1)) > {c}", c = counter.display());
    let one = command(&rmw);
    let started = Instant::now();
    let loops: Vec<Child> = (0..CONTENDERS)
        .map(|_| {
            program("sh")
                .arg("-c")
                .arg(format!(
                    "for i in $(seq {ACQUISITIONS_EACH}); do {one} || exit 1; done"
                ))
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn contender")
        })
        .collect();
    for mut l in loops {
        assert!(wait_exit(&mut l, LIMIT).success(), "a contender failed");
    }
    let elapsed = started.elapsed();
    let total = CONTENDERS * ACQUISITIONS_EACH;
    let counted: usize = std::fs::read_to_string(counter)
        .expect("counter")
        .trim()
        .parse()
        .expect("a number");
    assert_eq!(counted, total, "mutual exclusion lost updates");
    total as f64 / elapsed.as_secs_f64()
}

/// Queues `WAITERS` waiters behind a holder, lets the holder go, and returns the handoff times
/// taken from the commands' own clocks (bash's $EPOCHREALTIME: no extra process).
fn handoffs(
    dir: &Path,
    tag: &str,
    locked: impl Fn(&[&str]) -> Command,
    held: impl Fn() -> bool,
    queued: impl Fn() -> bool,
) -> Vec<Duration> {
    let log = dir.join(format!("{tag}.chain"));
    let go = dir.join(format!("{tag}.go"));
    let holder_script = format!(
        "i=0; while [ ! -e {go} ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; echo \"e $EPOCHREALTIME\" >> {log}",
        go = go.display(),
        log = log.display()
    );
    let waiter_script = format!(
        "echo \"s $EPOCHREALTIME\" >> {log}; echo \"e $EPOCHREALTIME\" >> {log}",
        log = log.display()
    );
    let mut holder = locked(&["bash", "-c", &holder_script])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn holder");
    // The holder first, so that it is the one at the head of the queue.
    wait_until(&format!("the {tag} holder to hold"), LIMIT, &held);
    let waiters: Vec<Child> = (0..WAITERS)
        .map(|_| {
            locked(&["bash", "-c", &waiter_script])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn waiter")
        })
        .collect();
    wait_until(&format!("{WAITERS} {tag} waiters to queue"), LIMIT, &queued);
    std::fs::write(&go, "").expect("go");
    assert!(wait_exit(&mut holder, LIMIT).success());
    for mut w in waiters {
        assert!(wait_exit(&mut w, LIMIT).success());
    }
    let text = std::fs::read_to_string(&log).expect("chain log");
    let events: Vec<(char, f64)> = text
        .lines()
        .filter_map(|l| {
            let (kind, t) = l.split_once(' ')?;
            Some((kind.chars().next()?, t.parse().ok()?))
        })
        .collect();
    assert_eq!(events.len(), 2 * WAITERS + 1, "{text}");
    events
        .windows(2)
        .filter(|w| w[0].0 == 'e' && w[1].0 == 's')
        .map(|w| Duration::from_secs_f64((w[1].1 - w[0].1).max(0.0)))
        .collect()
}

/// The figures of ZooKeeper's `mntr` four-letter word.
struct Mntr(Vec<(String, u64)>);

impl Mntr {
    fn read(zk: &ZkServer) -> Mntr {
        Mntr(
            zk.four_letter("mntr")
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once('\t')?;
                    Some((k.to_owned(), v.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> u64 {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {key} in mntr"))
    }
}
