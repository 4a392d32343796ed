//! dlock on PostgreSQL side by side with flock(1) and the psql idiom (an advisory lock held by a
//! psql session while it runs the command), all on this machine, in one run: uncontended latency
//! and 8-way contended acquisitions per second, reported as ratios.
//!
//! Run: `cargo bench --bench postgres`. It starts its own PostgreSQL server (tests/support) and
//! stops it at the end. Every loop is bounded by a count.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::pg_server::{PgServer, PASSWORD};

const UNCONTENDED_RUNS: usize = 40;
const CONTENDERS: usize = 8;
const ROUNDS_EACH: usize = 10;
/// How long a holder sits idle while its CPU is measured.
const IDLE: Duration = Duration::from_secs(60);

fn main() {
    println!(
        "{}",
        support::build::describe(std::path::Path::new(support::dlock_bin()))
    );
    let dlock = support::dlock_bin();
    let work = tempfile::tempdir().expect("temp dir");
    let server = PgServer::start();
    let url = server.url_with("");
    let port = server.port().to_string();
    let flock_file = work.path().join("flock.lock");
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let tools: Vec<(&str, String)> = vec![
        (
            "dlock postgres",
            format!(
                "{} --backend postgres --url {} run bench -- true",
                quote(dlock),
                quote(&url)
            ),
        ),
        (
            "psql pg_advisory_lock",
            format!(
                "psql -X -q -h 127.0.0.1 -p {port} -U postgres -d postgres \
                 -c 'SELECT pg_advisory_lock(1)' -c '\\! true' >/dev/null"
            ),
        ),
        (
            "flock(1)",
            format!("flock {} true", quote(&flock_file.display().to_string())),
        ),
    ];
    // Warm up (creates dlock's tables).
    for (_, line) in &tools {
        shell(line, 1);
    }
    println!("uncontended `run NAME -- true`, median of {UNCONTENDED_RUNS} (interleaved):");
    let mut samples: Vec<Vec<Duration>> = vec![vec![]; tools.len()];
    for _ in 0..UNCONTENDED_RUNS {
        for (i, (_, line)) in tools.iter().enumerate() {
            samples[i].push(shell(line, 1));
        }
    }
    let medians: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            s.sort();
            s[s.len() / 2].as_secs_f64() * 1000.0
        })
        .collect();
    for ((name, _), m) in tools.iter().zip(&medians) {
        println!("  {name:<24} {m:8.2} ms  ({:.2}x flock)", m / medians[2]);
    }
    println!(
        "  goal: within 3x of flock(1): {:.2}x; faster than psql: {:.2}x of psql",
        medians[0] / medians[2],
        medians[0] / medians[1]
    );
    println!("\n{CONTENDERS}-way contended, {ROUNDS_EACH} acquisitions each:");
    let mut rates = vec![];
    for (name, line) in &tools {
        let start = Instant::now();
        let children: Vec<_> = (0..CONTENDERS)
            .map(|_| {
                Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "i=0; while [ $i -lt {ROUNDS_EACH} ]; do {line}; i=$((i+1)); done"
                    ))
                    .env("PGPASSWORD", PASSWORD)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("sh")
            })
            .collect();
        for mut child in children {
            let _ = child.wait();
        }
        let rate = (CONTENDERS * ROUNDS_EACH) as f64 / start.elapsed().as_secs_f64();
        println!("  {name:<24} {rate:8.1} acquisitions/s");
        rates.push(rate);
    }
    println!(
        "  goal: at least the psql idiom: {:.2}x of psql; 0.5x flock(1): {:.2}x of flock",
        rates[0] / rates[1],
        rates[0] / rates[2]
    );
    support::idle::report_beside_flock(work.path(), dlock, "postgres", &url, IDLE);
    drop(server);
}

/// Runs `line` with sh `times` times; the time taken.
fn shell(line: &str, times: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..times {
        let status = Command::new("sh")
            .arg("-c")
            .arg(line)
            .env("PGPASSWORD", PASSWORD)
            .stdout(Stdio::null())
            .status()
            .expect("sh");
        assert!(status.success(), "{line}");
    }
    start.elapsed()
}
