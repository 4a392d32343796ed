//! dlock on the file backend side by side with util-linux flock(1), in one run, reported as ratios:
//! uncontended latency, 8-way contended throughput, and dlock's peak memory.
//!
//! Run: `cargo bench --bench file` (the plain release build), or `scripts/static bench --bench
//! file` for the static build the reference figures come from; the report says which it measured.
//! With `DLOCK_BENCH_BEFORE=PATH`, an older dlock is run interleaved with this one and compared.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/support/build.rs"]
mod build;
#[path = "../tests/support/programs.rs"]
mod programs;
use programs::program;

const UNCONTENDED_RUNS: usize = 300;
const CONTENDERS: usize = 8;
/// Contended runs alternate between the two tools in slices, so load drift hits both alike.
const CONTENDED_SLICE: Duration = Duration::from_secs(1);
const CONTENDED_SLICES: usize = 4;

/// The release build cargo made for this benchmark.
fn dlock_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dlock"))
}

fn run_quiet(cmd: &mut Command) {
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn");
    assert!(status.success(), "{cmd:?} failed: {status}");
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// Acquisitions per second when `CONTENDERS` threads each run `make()` back to back for a slice.
fn contended_slice(make: &(impl Fn() -> Command + Sync)) -> (u64, Duration) {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..CONTENDERS {
            let done = done.clone();
            s.spawn(move || {
                // Bounded by time and by count.
                for _ in 0..100_000 {
                    if start.elapsed() >= CONTENDED_SLICE {
                        break;
                    }
                    run_quiet(&mut make());
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    (done.load(Ordering::Relaxed), start.elapsed())
}

/// Acquisitions per second of each tool, measured in alternating slices.
fn contended(a: impl Fn() -> Command + Sync, b: impl Fn() -> Command + Sync) -> (f64, f64) {
    let (mut a_total, mut b_total) = ((0, Duration::ZERO), (0, Duration::ZERO));
    for _ in 0..CONTENDED_SLICES {
        for (make, total) in [
            (&a as &(dyn Fn() -> Command + Sync), &mut a_total),
            (&b, &mut b_total),
        ] {
            let (n, t) = contended_slice(&make);
            total.0 += n;
            total.1 += t;
        }
    }
    let rate = |(n, t): (u64, Duration)| n as f64 / t.as_secs_f64();
    (rate(a_total), rate(b_total))
}

/// Peak resident set of one process, from wait4's rusage, in KiB. (wait4 reaps it; std's Child
/// cannot report rusage, hence the allow.)
#[allow(clippy::zombie_processes)]
fn peak_rss_kib(cmd: &mut Command) -> i64 {
    let child = cmd.stdout(Stdio::null()).spawn().expect("spawn");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(rc, child.id() as i32);
    usage.ru_maxrss
}

fn main() {
    let dlock = dlock_bin();
    println!("{}", build::describe(&dlock));
    let dir = tempfile::tempdir().expect("temp dir");
    let lock_file = dir.path().join("bench.lock");
    let dlock_cmd = || {
        let mut c = programs::build(&dlock);
        c.arg("--url")
            .arg(dir.path())
            .args(["run", "bench", "--", "true"]);
        c
    };
    let flock_cmd = || {
        let mut c = program("flock");
        c.arg(&lock_file).arg("true");
        c
    };

    // Warm up both (page cache, lock file creation).
    for _ in 0..20 {
        run_quiet(&mut dlock_cmd());
        run_quiet(&mut flock_cmd());
    }

    // Interleaved, so drift in machine load hits both alike.
    let (mut d, mut f) = (Vec::new(), Vec::new());
    for _ in 0..UNCONTENDED_RUNS {
        let t = Instant::now();
        run_quiet(&mut dlock_cmd());
        d.push(t.elapsed());
        let t = Instant::now();
        run_quiet(&mut flock_cmd());
        f.push(t.elapsed());
    }
    let (d, f) = (median(d), median(f));
    let latency_ratio = d.as_secs_f64() / f.as_secs_f64();

    // DLOCK_BENCH_BEFORE=PATH: an older dlock, interleaved with this one, so that what a change
    // costs is read as a ratio of one run.
    let before = std::env::var_os("DLOCK_BENCH_BEFORE").map(|before| {
        let before_cmd = || {
            let mut c = programs::build(&before);
            c.arg("--url")
                .arg(dir.path())
                .args(["run", "bench-before", "--", "true"]);
            c
        };
        let (mut now, mut then) = (Vec::new(), Vec::new());
        for _ in 0..UNCONTENDED_RUNS {
            let t = Instant::now();
            run_quiet(&mut dlock_cmd());
            now.push(t.elapsed());
            let t = Instant::now();
            run_quiet(&mut before_cmd());
            then.push(t.elapsed());
        }
        (median(now), median(then))
    });

    let (dlock_rate, flock_rate) = contended(dlock_cmd, flock_cmd);
    let rate_ratio = dlock_rate / flock_rate;

    let rss = (0..5)
        .map(|_| peak_rss_kib(&mut dlock_cmd()))
        .max()
        .unwrap_or(0);

    println!(
        "dlock file backend vs flock(1), one run ({} cores)",
        num_cpus()
    );
    println!("uncontended median: dlock {:.3} ms, flock {:.3} ms, dlock/flock = {latency_ratio:.2} (goal <= 1.10)",
        d.as_secs_f64() * 1e3, f.as_secs_f64() * 1e3);
    println!("{CONTENDERS}-way contended: dlock {dlock_rate:.0}/s, flock {flock_rate:.0}/s, dlock/flock = {rate_ratio:.2} (goal >= 0.90)");
    println!(
        "dlock peak RSS: {:.2} MiB (goal <= 8 MiB)",
        rss as f64 / 1024.0
    );
    if let Some((now, then)) = before {
        println!(
            "uncontended median: this dlock {:.3} ms, the one before {:.3} ms, this/before = {:.2}",
            now.as_secs_f64() * 1e3,
            then.as_secs_f64() * 1e3,
            now.as_secs_f64() / then.as_secs_f64()
        );
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
