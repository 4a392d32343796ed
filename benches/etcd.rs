//! dlock on etcd side by side with `etcdctl lock` on the same server, in one run: uncontended
//! latency (`run NAME -- true`, the two tools interleaved) and 8-way contended acquisitions per
//! second (the tools taking turns, round by round), each reported as a ratio.
//!
//! Run: `cargo bench --bench etcd`. It starts its own etcd on free loopback ports (with a temporary
//! data directory) and stops it at the end. Every loop is bounded both by a count and by a time
//! budget.

#[path = "../tests/etcd/server.rs"]
mod etcd_server;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::program;

use etcd_server::EtcdServer;
use support::figures::{goal, middle, ms};

/// Uncontended runs of each tool (interleaved), and the time they may take together.
const UNCONTENDED_RUNS: usize = 200;
const UNCONTENDED_BUDGET: Duration = Duration::from_secs(60);
/// Contended: processes, acquisitions each, the time limit for one round of one tool, and how many
/// rounds the tools take turns for (the goal is judged on the median of the rounds' ratios).
const CONTENDERS: usize = 8;
const ROUNDS_EACH: usize = 25;
const CONTENDED_LIMIT: Duration = Duration::from_secs(120);
const CONTENDED_ROUNDS: usize = 5;

fn main() {
    println!(
        "{}",
        support::build::describe(std::path::Path::new(support::dlock_bin()))
    );
    let dlock = support::dlock_bin();
    let etcd = EtcdServer::start();
    let url = etcd.url();
    println!(
        "dlock {dlock}\netcd {} at {}\n",
        etcd.version(),
        etcd.endpoint()
    );

    let tools: [(&str, Vec<String>); 2] = [
        (
            "dlock etcd",
            [
                dlock,
                "--backend",
                "etcd",
                "--url",
                &url,
                "run",
                "bench-u",
                "--",
                "true",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "etcdctl lock",
            [
                "etcdctl",
                "--endpoints",
                etcd.endpoint(),
                "lock",
                "/dlock/bench-u",
                "true",
            ]
            .map(String::from)
            .to_vec(),
        ),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); tools.len()];
    let started = Instant::now();
    for _ in 0..UNCONTENDED_RUNS {
        if started.elapsed() > UNCONTENDED_BUDGET {
            break;
        }
        for (i, (name, argv)) in tools.iter().enumerate() {
            let t = Instant::now();
            let status = command(argv).status().expect("run tool");
            assert!(status.success(), "{name} failed: {status}");
            samples[i].push(t.elapsed());
        }
    }
    let medians: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
    println!("uncontended, median of {} runs each:", samples[0].len());
    for ((name, _), m) in tools.iter().zip(&medians) {
        println!("  {name:<14} {:>8.3} ms", ms(*m));
    }
    let ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
    goal("etcdctl lock / dlock etcd", ratio, ">= 2", ratio >= 2.0);

    let loops = [
        (
            "dlock etcd",
            // -q: like etcdctl, nothing but errors (no line for each wait).
            format!("{dlock} --backend etcd --url {url} -q run bench-c -- true"),
        ),
        (
            "etcdctl lock",
            format!(
                "etcdctl --endpoints {} lock /dlock/bench-c true",
                etcd.endpoint()
            ),
        ),
    ];
    println!(
        "\n{CONTENDERS}-way contended, {ROUNDS_EACH} acquisitions each, {CONTENDED_ROUNDS} rounds \
         taking turns (acquisitions per second):"
    );
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); loops.len()];
    let mut ratios = Vec::new();
    for _ in 0..CONTENDED_ROUNDS {
        for ((_, one), rates) in loops.iter().zip(&mut rates) {
            rates.push(contended(one));
        }
        let (d, e) = (rates[0].last(), rates[1].last());
        if let (Some(d), Some(e)) = (d, e) {
            ratios.push(d / e);
        }
    }
    for ((name, _), rates) in loops.iter().zip(&rates) {
        println!("  {name:<14} {:>8.1}/s", middle(rates.clone()));
    }
    let ratio = middle(ratios.clone());
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    println!("  rounds' ratios from {lo:.2} to {hi:.2}");
    goal("dlock etcd / etcdctl lock", ratio, ">= 2", ratio >= 2.0);
    // etcd stops when dropped, here.
}

fn command(argv: &[String]) -> Command {
    let mut cmd = support::programs::program_or_build(&argv[0]);
    cmd.args(&argv[1..])
        .env_remove("DLOCK_URL")
        .env_remove("DLOCK_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Acquisitions per second of `CONTENDERS` shell loops running `one` `ROUNDS_EACH` times.
fn contended(one: &str) -> f64 {
    let script = format!("for i in $(seq {ROUNDS_EACH}); do {one} || exit 1; done");
    let started = Instant::now();
    let mut loops: Vec<Child> = (0..CONTENDERS)
        .map(|_| {
            program("sh")
                .arg("-c")
                .arg(&script)
                .env_remove("DLOCK_URL")
                .stdout(Stdio::null())
                .spawn()
                .expect("start a contender")
        })
        .collect();
    for child in &mut loops {
        let status = support::wait_exit(child, CONTENDED_LIMIT);
        assert!(status.success(), "a contender failed: {one}");
    }
    (CONTENDERS * ROUNDS_EACH) as f64 / started.elapsed().as_secs_f64()
}
