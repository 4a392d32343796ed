//! Scale, per backend (file, ZooKeeper, Redis), on one machine: 1,000 waiters on one lock, 10,000
//! locks held at once, and one lock held while idle (CPU used, renewal period).
//!
//! Run: `cargo bench --bench scale` (release build; starts its own servers). `DLOCK_SCALE_WAITERS`, `DLOCK_SCALE_LOCKS` and
//! `DLOCK_SCALE_IDLE_SECS` shrink or grow the three parts (defaults 1000, 10000, 60).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use zk_server::ZkServer;

#[path = "../tests/redis/server.rs"]
mod redis_server;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "../tests/zk/server.rs"]
mod zk_server;

/// One backend under measurement: the arguments that select it and how to read its server's
/// memory and command count (none for the file backend).
struct Subject {
    label: &'static str,
    args: Vec<String>,
    /// Bytes the server uses now, if there is a server.
    server_memory: Box<dyn Fn() -> Option<u64> + Sync>,
    /// Requests the server has handled so far, if it counts them.
    server_requests: Box<dyn Fn() -> Option<u64> + Sync>,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn dlock(bin: &Path, s: &Subject, args: &[&str]) -> Command {
    let mut c = support::programs::build(bin);
    c.args(&s.args).args(args).stdin(Stdio::null());
    c
}

/// Proportional resident memory of a process (its private pages plus its share of the shared
/// ones), in KiB: what each extra waiter really costs.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn waiters(bin: &Path, s: &Subject, count: u64, scratch: &Path) {
    let gate = scratch.join(format!("{}-gate", s.label));
    let mut holder = dlock(bin, s, &["run", "herd", "--", "sh", "-c"])
        .arg(format!(
            "touch {g}.in; while [ ! -e {g} ]; do sleep 0.01; done",
            g = gate.display()
        ))
        .spawn()
        .expect("holder");
    support::wait_for_file(&gate.with_extension("in"), Duration::from_secs(30));
    let mut queue: Vec<Child> = (0..count)
        .map(|_| {
            dlock(bin, s, &["run", "--wait", "10m", "herd", "--", "true"])
                .stderr(Stdio::null())
                .spawn()
                .expect("waiter")
        })
        .collect();
    // Memory per waiter, once they all wait (sampled after the spawn burst settles).
    let pids: Vec<u32> = queue.iter().map(|c| c.id()).collect();
    support::wait_until(
        "every waiter to be waiting",
        Duration::from_secs(120),
        || {
            assert!(
                queue
                    .iter_mut()
                    .all(|w| w.try_wait().ok().flatten().is_none()),
                "a waiter exited early"
            );
            pids.iter().all(|&p| rss_kib(p) > 0)
        },
    );
    let rss: u64 = pids.iter().map(|&p| rss_kib(p)).sum();
    let before = (s.server_requests)();
    let start = Instant::now();
    std::fs::write(&gate, "").expect("open the gate");
    for w in &mut queue {
        support::wait_exit(w, Duration::from_secs(600));
    }
    let all_through = start.elapsed();
    support::wait_exit(&mut holder, Duration::from_secs(30));
    let per_handoff = match ((s.server_requests)(), before) {
        (Some(after), Some(before)) => format!("{:.1}", (after - before) as f64 / count as f64),
        _ => "n/a (no server)".into(),
    };
    println!(
        "{}: {count} waiters on one lock: all through in {:.2}s ({:.2} ms per handoff), server requests per handoff {per_handoff}, dlock memory (PSS) per waiter {:.2} MiB",
        s.label,
        all_through.as_secs_f64(),
        all_through.as_secs_f64() * 1e3 / count as f64,
        rss as f64 / count as f64 / 1024.0
    );
}

fn many_locks(bin: &Path, s: &Subject, count: u64, scratch: &Path) {
    let marker = scratch.join(format!("{}-many.in", s.label));
    let stop = scratch.join(format!("{}-many.stop", s.label));
    let before = (s.server_memory)();
    let names: Vec<String> = (0..count).map(|i| format!("many/{i:05}")).collect();
    let start = Instant::now();
    let mut holder = dlock(bin, s, &["run", "--wait", "5m"])
        .args(&names)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            marker.display(),
            stop.display()
        ))
        .spawn()
        .expect("holder of many");
    support::wait_until(
        "the holder of many locks to start its command",
        Duration::from_secs(600),
        || {
            assert!(
                holder.try_wait().ok().flatten().is_none(),
                "the holder of many locks exited early"
            );
            marker.exists()
        },
    );
    let acquired = start.elapsed();
    let after = (s.server_memory)();
    let t = Instant::now();
    let out = dlock(bin, s, &["list", "many/"]).output().expect("list");
    let list_time = t.elapsed();
    let listed = String::from_utf8_lossy(&out.stdout).lines().count();
    std::fs::write(&stop, "").expect("stop");
    support::wait_exit(&mut holder, Duration::from_secs(120));
    let memory = match (after, before) {
        (Some(a), Some(b)) => format!("{:.0} bytes", a.saturating_sub(b) as f64 / count as f64),
        _ => "n/a (no server)".into(),
    };
    println!(
        "{}: {count} locks held at once by one dlock: acquired in {:.2}s, server memory per lock {memory}, `list` of {listed} in {:.0} ms",
        s.label,
        acquired.as_secs_f64(),
        list_time.as_secs_f64() * 1e3
    );
    assert_eq!(listed as u64, count, "list must show every held lock");
}

/// (wait4 reaps the child for its rusage; std's Child cannot report rusage, hence the allow.)
#[allow(clippy::zombie_processes)]
fn idle(bin: &Path, s: &Subject, seconds: u64) {
    // The default lease, as a user would run it.
    let ttl = Duration::from_secs(15);
    let child = dlock(
        bin,
        s,
        &["-v", "run", "idle", "--", "sleep", &seconds.to_string()],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("idle holder");
    let pid = child.id() as i32;
    let stderr = child.stderr.expect("stderr");
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut text = String::new();
        let _ = std::io::BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let cpu = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    // The rusage includes `sleep`, a millisecond or so: dlock's own share is at most this.
    let used = cpu(usage.ru_utime) + cpu(usage.ru_stime);
    let log = reader.join().unwrap_or_default();
    let stamps: Vec<std::time::SystemTime> = log
        .lines()
        .filter(|l| l.contains("dlock: renewed"))
        .filter_map(|l| humantime::parse_rfc3339(l.strip_prefix('[')?.split(']').next()?).ok())
        .collect();
    let gaps: Vec<f64> = stamps
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).unwrap_or_default().as_secs_f64() * 1e3)
        .collect();
    let (min, max) = gaps
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), &g| (lo.min(g), hi.max(g)));
    println!(
        "{}: one lock held {seconds}s idle: dlock CPU {:.1} ms (goal < 50 ms), {} renewals, every {:.0}..{:.0} ms (ttl/3 = {} ms)",
        s.label,
        used.as_secs_f64() * 1e3,
        stamps.len(),
        if gaps.is_empty() { 0.0 } else { min },
        max,
        (ttl / 3).as_millis()
    );
}

/// A counter from ZooKeeper's `mntr` four-letter word.
fn mntr(zk: &ZkServer, key: &str) -> Option<u64> {
    zk.four_letter("mntr")
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('\t')?.trim().parse().ok())
}

fn main() {
    println!(
        "{}",
        support::build::describe(std::path::Path::new(support::dlock_bin()))
    );
    let bin = PathBuf::from(support::dlock_bin());
    let zk = std::sync::Arc::new(ZkServer::start_for_benchmark());
    let scratch = tempfile::tempdir().expect("scratch");
    let waiter_count = env_or("DLOCK_SCALE_WAITERS", 1000);
    let lock_count = env_or("DLOCK_SCALE_LOCKS", 10_000);
    let idle_secs = env_or("DLOCK_SCALE_IDLE_SECS", 60);
    // dlock never creates a lock directory it is given.
    std::fs::create_dir(scratch.path().join("locks")).expect("create the lock directory");
    let file = Subject {
        label: "file",
        args: vec![
            "--url".into(),
            scratch.path().join("locks").display().to_string(),
        ],
        server_memory: Box::new(|| None),
        server_requests: Box::new(|| None),
    };
    let (zk_memory, zk_requests) = (zk.clone(), zk.clone());
    let zookeeper = Subject {
        label: "zk",
        args: vec!["--backend".into(), "zk".into(), "--url".into(), zk.url()],
        // The data tree's size as ZooKeeper reckons it; the JVM heap around it is not counted.
        server_memory: Box::new(move || mntr(&zk_memory, "zk_approximate_data_size")),
        server_requests: Box::new(move || mntr(&zk_requests, "zk_packets_received")),
    };
    let redis = std::sync::Arc::new(RedisServer::start());
    let (redis_memory, redis_requests) = (redis.clone(), redis.clone());
    let redis = Subject {
        label: "redis",
        args: vec![
            "--backend".into(),
            "redis".into(),
            "--url".into(),
            redis.url(),
        ],
        server_memory: Box::new(move || redis_info(&redis_memory, "memory", "used_memory")),
        server_requests: Box::new(move || {
            redis_info(&redis_requests, "stats", "total_commands_processed")
        }),
    };
    let subjects = [file, zookeeper, redis];
    for s in &subjects {
        waiters(&bin, s, waiter_count, scratch.path());
        many_locks(&bin, s, lock_count, scratch.path());
    }
    // The idle holds run side by side: they only wait.
    std::thread::scope(|scope| {
        for s in &subjects {
            let bin = &bin;
            scope.spawn(move || idle(bin, s, idle_secs));
        }
    });
}

/// A counter from Redis's `INFO SECTION`.
fn redis_info(redis: &RedisServer, section: &str, key: &str) -> Option<u64> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut redis.connection())
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
}
