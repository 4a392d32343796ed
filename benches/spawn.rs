//! Whether dlock's own `clone(CLONE_VM|CLONE_VFORK)` start of the command (crates/sys/src/spawn.rs)
//! pays for itself against a plain `fork` and against the C library's `posix_spawn` (glibc's is
//! itself a vfork-like clone, asked for the same steps where it can take them): the same
//! `dlock run` on the file backend, built the three ways, in one run, reported as ratios fork/clone
//! and posix_spawn/clone of the wall time and of the CPU time per run (what `fork` costs is CPU:
//! copying dlock's page tables, then faulting them back in), uncontended and 8-way contended.
//!
//! Run: `cargo bench --bench spawn`. It builds the two other variants itself (the `fork-spawn` and
//! `posix-spawn` features, in target/fork-spawn and target/posix-spawn, so that they never replace
//! the build cargo made for this benchmark).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/support/build.rs"]
mod build;
#[path = "../tests/support/programs.rs"]
mod programs;

const UNCONTENDED_ROUNDS: usize = 300;
const WARM_UP: usize = 20;
const CONTENDERS: usize = 8;
/// Contended runs alternate between the builds in slices, so load drift hits them alike.
const CONTENDED_SLICE: Duration = Duration::from_secs(1);
const CONTENDED_SLICES: usize = 4;

/// The release build cargo made for this benchmark: the `clone` one.
fn clone_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dlock"))
}

/// Builds the variant of `feature` (`fork-spawn`, `posix-spawn`) in a target directory of its
/// own, target/FEATURE, and returns its executable.
fn variant_bin(feature: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target_dir = format!("target/{feature}");
    let args = [
        "build",
        "--release",
        "--features",
        feature,
        "--target-dir",
        &target_dir,
    ];
    println!("building the {feature} variant: cargo {}", args.join(" "));
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
        "building the {feature} variant failed: {status}"
    );
    manifest.join(target_dir).join("release/dlock")
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
fn contended<const N: usize>(builds: [&Path; N], dir: &Path) -> [(f64, Duration); N] {
    let mut totals = [(0, Duration::ZERO, Duration::ZERO); N];
    for _ in 0..CONTENDED_SLICES {
        for (dlock, total) in builds.into_iter().zip(totals.iter_mut()) {
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

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

const CLONE: usize = 0;
const FORK: usize = 1;
const POSIX: usize = 2;

fn main() {
    let builds = [
        clone_bin(),
        variant_bin("fork-spawn"),
        variant_bin("posix-spawn"),
    ];
    println!("{}", build::describe(&builds[CLONE]));
    println!("fork variant: {}", builds[FORK].display());
    println!("posix_spawn variant: {}", builds[POSIX].display());
    // Where benches/file.rs locks too.
    let dir = tempfile::tempdir().expect("temp dir");

    for _ in 0..WARM_UP {
        for dlock in &builds {
            timed_run(&mut dlock_cmd(dlock, dir.path()));
        }
    }

    // Interleaved rounds, one run of each build, which goes first turning round from one round to
    // the next, so that drift in machine load and the order within a round hit all alike.
    let mut runs: [Runs; 3] = Default::default();
    let (mut fork_ratios, mut posix_ratios) = (Vec::new(), Vec::new());
    for i in 0..UNCONTENDED_ROUNDS {
        let mut round = [(Duration::ZERO, Duration::ZERO, 0); 3];
        for k in 0..builds.len() {
            let b = (i + k) % builds.len();
            round[b] = timed_run(&mut dlock_cmd(&builds[b], dir.path()));
        }
        fork_ratios.push(ratio(round[FORK].0, round[CLONE].0));
        posix_ratios.push(ratio(round[POSIX].0, round[CLONE].0));
        for (r, run) in runs.iter_mut().zip(round) {
            r.add(run);
        }
    }
    let [c, f, p] = &runs;

    let [(clone_rate, clone_cpu), (fork_rate, fork_cpu), (posix_rate, posix_cpu)] =
        contended([&builds[CLONE], &builds[FORK], &builds[POSIX]], dir.path());

    println!(
        "dlock run -- true on the file backend, clone vs fork vs posix_spawn start, one run ({} \
         cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "uncontended median ({UNCONTENDED_ROUNDS} rounds): clone {:.3} ms, fork {:.3} ms, \
         posix_spawn {:.3} ms; fork/clone = {:.2} (median of the rounds' ratios {:.2}), \
         posix_spawn/clone = {:.2} ({:.2})",
        ms(c.median()),
        ms(f.median()),
        ms(p.median()),
        ratio(f.median(), c.median()),
        median(fork_ratios),
        ratio(p.median(), c.median()),
        median(posix_ratios),
    );
    println!(
        "uncontended CPU per run (user+sys, with the command's): clone {:.3} ms, fork {:.3} ms, \
         posix_spawn {:.3} ms; fork/clone = {:.2}, posix_spawn/clone = {:.2}",
        ms(c.cpu_per_run()),
        ms(f.cpu_per_run()),
        ms(p.cpu_per_run()),
        ratio(f.cpu_per_run(), c.cpu_per_run()),
        ratio(p.cpu_per_run(), c.cpu_per_run()),
    );
    println!(
        "uncontended minor page faults per run: clone {:.0}, fork {:.0}, posix_spawn {:.0}",
        c.minflt_per_run(),
        f.minflt_per_run(),
        p.minflt_per_run()
    );
    println!(
        "{CONTENDERS}-way contended: clone {clone_rate:.0}/s, fork {fork_rate:.0}/s, \
         posix_spawn {posix_rate:.0}/s; fork/clone = {:.2}, posix_spawn/clone = {:.2}",
        fork_rate / clone_rate,
        posix_rate / clone_rate,
    );
    println!(
        "{CONTENDERS}-way contended CPU per run: clone {:.3} ms, fork {:.3} ms, posix_spawn {:.3} \
         ms; fork/clone = {:.2}, posix_spawn/clone = {:.2}",
        ms(clone_cpu),
        ms(fork_cpu),
        ms(posix_cpu),
        ratio(fork_cpu, clone_cpu),
        ratio(posix_cpu, clone_cpu),
    );
}
