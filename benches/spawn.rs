//! Whether dlock's own `clone(CLONE_VM|CLONE_VFORK)` start of the command (crates/sys/src/spawn.rs)
//! pays for itself against a plain `fork`: the same `dlock run` on the file backend, built both
//! ways, in one run, reported as ratios fork/clone of the wall time and of the CPU time per run
//! (what `fork` costs is CPU: copying dlock's page tables, then faulting them back in), uncontended
//! and 8-way contended.
//!
//! Run: `cargo bench --bench spawn`. It builds the `fork` variant itself (the `fork-spawn`
//! feature, in target/fork-spawn, so that it never replaces the build cargo made for this
//! benchmark).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/support/build.rs"]
mod build;
#[path = "../tests/support/programs.rs"]
mod programs;

const UNCONTENDED_PAIRS: usize = 300;
const WARM_UP: usize = 20;
const CONTENDERS: usize = 8;
/// Contended runs alternate between the two builds in slices, so load drift hits both alike.
const CONTENDED_SLICE: Duration = Duration::from_secs(1);
const CONTENDED_SLICES: usize = 4;

/// The release build cargo made for this benchmark: the `clone` one.
fn clone_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dlock"))
}

/// Builds the `fork` variant (feature `fork-spawn`) in a target directory of its own and returns
/// its executable.
fn fork_bin() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let args = [
        "build",
        "--release",
        "--features",
        "fork-spawn",
        "--target-dir",
        "target/fork-spawn",
    ];
    println!("building the fork variant: cargo {}", args.join(" "));
    let mut build = programs::program("cargo");
    build.args(args).current_dir(manifest);
    // Without what cargo set for this benchmark's own process (this package's name, version and
    // directory, ...): build scripts that watch those variables (ring's) would otherwise run again,
    // and their crates be rebuilt, whenever the same build is made from a shell.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || ["OUT_DIR", "CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR"].contains(&&*name)
        {
            build.env_remove(&*name);
        }
    }
    let status = build.status().expect("run cargo");
    assert!(
        status.success(),
        "building the fork variant failed: {status}"
    );
    manifest.join("target/fork-spawn/release/dlock")
}

/// One run of `dlock -b file -u DIR run spawn -- true`.
fn dlock_cmd(dlock: &Path, dir: &Path) -> Command {
    let mut c = programs::build(dlock);
    c.args(["-b", "file", "-u"])
        .arg(dir)
        .args(["run", "spawn", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn cpu(usage: &libc::rusage) -> Duration {
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One run, timed: its wall time, and its CPU time and minor page faults from wait4's rusage,
/// which include those of the children it reaped (the command). (wait4 reaps it; std's Child
/// cannot report rusage, hence the allow.)
#[allow(clippy::zombie_processes)]
fn timed_run(cmd: &mut Command) -> (Duration, Duration, i64) {
    let start = Instant::now();
    let child = cmd.spawn().expect("spawn");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(rc, child.id() as i32);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed: {status:#x}"
    );
    (wall, cpu(&usage), usage.ru_minflt)
}

/// What the runs of one build added up to.
#[derive(Default)]
struct Runs {
    wall: Vec<Duration>,
    cpu: Duration,
    minflt: i64,
}

impl Runs {
    fn add(&mut self, (wall, cpu, minflt): (Duration, Duration, i64)) {
        self.wall.push(wall);
        self.cpu += cpu;
        self.minflt += minflt;
    }

    fn median(&self) -> Duration {
        let mut xs = self.wall.clone();
        xs.sort();
        xs[xs.len() / 2]
    }

    fn cpu_per_run(&self) -> Duration {
        self.cpu / self.wall.len() as u32
    }

    fn minflt_per_run(&self) -> f64 {
        self.minflt as f64 / self.wall.len() as f64
    }
}

/// CPU time of this process's reaped children so far (getrusage RUSAGE_CHILDREN).
fn children_cpu() -> Duration {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0);
    cpu(&usage)
}

/// Runs of one build when `CONTENDERS` threads each run it back to back for a slice: how many,
/// how long, and the CPU time they took.
fn contended_slice(dlock: &Path, dir: &Path) -> (u64, Duration, Duration) {
    let done = Arc::new(AtomicU64::new(0));
    let cpu_before = children_cpu();
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
                    let status = dlock_cmd(dlock, dir).status().expect("spawn");
                    assert!(status.success(), "{dlock:?} failed: {status}");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    (
        done.load(Ordering::Relaxed),
        start.elapsed(),
        children_cpu() - cpu_before,
    )
}

/// Runs per second and CPU time per run of each build, measured in alternating slices.
fn contended(a: &Path, b: &Path, dir: &Path) -> [(f64, Duration); 2] {
    let mut totals = [(0, Duration::ZERO, Duration::ZERO); 2];
    for _ in 0..CONTENDED_SLICES {
        for (dlock, total) in [a, b].into_iter().zip(totals.iter_mut()) {
            let (n, t, cpu) = contended_slice(dlock, dir);
            total.0 += n;
            total.1 += t;
            total.2 += cpu;
        }
    }
    totals.map(|(n, t, cpu)| (n as f64 / t.as_secs_f64(), cpu / n.max(1) as u32))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let clone = clone_bin();
    let fork = fork_bin();
    println!("{}", build::describe(&clone));
    println!("fork variant: {}", fork.display());
    // Where benches/file.rs locks too.
    let dir = tempfile::tempdir().expect("temp dir");

    for _ in 0..WARM_UP {
        timed_run(&mut dlock_cmd(&clone, dir.path()));
        timed_run(&mut dlock_cmd(&fork, dir.path()));
    }

    // Interleaved pairs, each build first in every other pair, so that drift in machine load and
    // the order within a pair hit both alike.
    let (mut c, mut f) = (Runs::default(), Runs::default());
    let mut pair_ratios = Vec::with_capacity(UNCONTENDED_PAIRS);
    for i in 0..UNCONTENDED_PAIRS {
        let (cr, fr) = if i % 2 == 0 {
            let cr = timed_run(&mut dlock_cmd(&clone, dir.path()));
            (cr, timed_run(&mut dlock_cmd(&fork, dir.path())))
        } else {
            let fr = timed_run(&mut dlock_cmd(&fork, dir.path()));
            (timed_run(&mut dlock_cmd(&clone, dir.path())), fr)
        };
        pair_ratios.push(fr.0.as_secs_f64() / cr.0.as_secs_f64());
        c.add(cr);
        f.add(fr);
    }
    pair_ratios.sort_by(f64::total_cmp);
    let pair_ratio = pair_ratios[pair_ratios.len() / 2];

    let [(clone_rate, clone_cpu), (fork_rate, fork_cpu)] = contended(&clone, &fork, dir.path());

    println!(
        "dlock run -- true on the file backend, clone vs fork start, one run ({} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "uncontended median ({UNCONTENDED_PAIRS} pairs): clone {:.3} ms, fork {:.3} ms, \
         fork/clone = {:.2} (median of the pairs' ratios {pair_ratio:.2})",
        ms(c.median()),
        ms(f.median()),
        f.median().as_secs_f64() / c.median().as_secs_f64()
    );
    println!(
        "uncontended CPU per run (user+sys, with the command's): clone {:.3} ms, fork {:.3} ms, \
         fork/clone = {:.2}",
        ms(c.cpu_per_run()),
        ms(f.cpu_per_run()),
        f.cpu_per_run().as_secs_f64() / c.cpu_per_run().as_secs_f64()
    );
    println!(
        "uncontended minor page faults per run: clone {:.0}, fork {:.0}",
        c.minflt_per_run(),
        f.minflt_per_run()
    );
    println!(
        "{CONTENDERS}-way contended: clone {clone_rate:.0}/s, fork {fork_rate:.0}/s, \
         fork/clone = {:.2}; CPU per run: clone {:.3} ms, fork {:.3} ms, fork/clone = {:.2}",
        fork_rate / clone_rate,
        ms(clone_cpu),
        ms(fork_cpu),
        fork_cpu.as_secs_f64() / clone_cpu.as_secs_f64()
    );
}
