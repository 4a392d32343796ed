//! dlock on Redis side by side with flock(1) and `etcdctl lock`, all on this machine, in one run:
//! uncontended latency, 8-way contended acquisitions per second, handoff latency from one holder to
//! the next, and Redis commands per handoff with 5 and 50 waiters (from INFO commandstats).
//! Uncontended, beside them, the floor of any tool that keeps its lock in Redis and opens a
//! connection per run: this benchmark's own executable run as `floor-around URL` (see
//! side_by_side), with the client dlock uses (redis), connecting, writing, running the command and
//! writing again, with no lock.
//!
//! Run: `cargo bench --bench redis` (with `DLOCK_BENCH_BEFORE=PATH`, an older dlock is run in the
//! same rounds and compared, uncontended). It starts its own redis-server and etcd on free loopback
//! ports (with temporary data directories) and stops them at the end. Every loop is bounded both
//! by a count and by a time budget.

#[path = "../tests/etcd/server.rs"]
mod etcd_server;
#[path = "../tests/redis/server.rs"]
mod redis_server;
mod side_by_side;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::program;

use etcd_server::EtcdServer;
use redis_server::RedisServer;
use support::figures::{goal, middle, ms};

/// Uncontended runs of each tool (interleaved), and the time they may take together.
const UNCONTENDED_RUNS: usize = 200;
const UNCONTENDED_BUDGET: Duration = Duration::from_secs(60);
/// Contended: processes, acquisitions each, the time limit for one tool, and how many rounds the
/// tools take turns for (a short run on a shared machine is noisy: the goal is judged on the median
/// of the rounds' ratios).
const CONTENDERS: usize = 8;
const ROUNDS_EACH: usize = 40;
const CONTENDED_LIMIT: Duration = Duration::from_secs(120);
const CONTENDED_ROUNDS: usize = 7;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // The handoff measurement's children: this same binary, appending the time it started.
    if let Some(file) = args
        .iter()
        .position(|a| a == "--stamp")
        .and_then(|i| args.get(i + 1))
    {
        stamp(Path::new(file));
        return;
    }
    if side_by_side::run_floor_if_asked(connect_and_write) {
        return;
    }
    let dlock = support::dlock_bin();
    println!("{}", support::build::describe(Path::new(dlock)));
    let work = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let etcd = EtcdServer::start();
    let url = redis.url();
    let flock_file = work.path().join("flock.lock");
    let lock_dir = work.path().join("dlock-file");
    // dlock never creates a lock directory it is given.
    std::fs::create_dir(&lock_dir).expect("create the lock directory");
    println!(
        "dlock {dlock}\nredis-server at {url}, etcd at {}\n",
        etcd.endpoint()
    );

    // Uncontended: one acquisition, run `true`, release; median wall time per tool.
    let tools: Vec<(&str, Tool)> = vec![
        (
            "dlock redis",
            Box::new(|| redis_run(dlock, &url, "bench-u", &["true"])),
        ),
        (
            "dlock file",
            Box::new(|| {
                let dir = lock_dir.to_str().expect("UTF-8 temp path");
                command(dlock, &["--url", dir, "run", "bench-u", "--", "true"])
            }),
        ),
        (
            "flock",
            Box::new(|| command("flock", &[flock_file.to_str().expect("UTF-8"), "true"])),
        ),
        (
            "etcdctl lock",
            Box::new(|| {
                command(
                    "etcdctl",
                    &["--endpoints", etcd.endpoint(), "lock", "bench-u", "true"],
                )
            }),
        ),
    ];
    let before = std::env::var("DLOCK_BENCH_BEFORE").ok();
    let bench = std::env::current_exe().expect("own path");
    let bench = bench.to_str().expect("UTF-8 path");
    let mut tools = tools;
    tools.push((
        "floor",
        Box::new(|| command(bench, &["floor-around", &url])),
    ));
    // DLOCK_BENCH_BEFORE=PATH: an older dlock, run in the same rounds, so what a change costs
    // is read as a ratio of one run (the lines "before").
    if let Some(before) = before.as_deref() {
        let (url, dir) = (url.clone(), lock_dir.clone());
        tools.push((
            "redis (before)",
            Box::new(move || redis_run(before, &url, "bench-b", &["true"])),
        ));
        tools.push((
            "file (before)",
            Box::new(move || {
                let dir = dir.to_str().expect("UTF-8 temp path");
                command(before, &["--url", dir, "run", "bench-b", "--", "true"])
            }),
        ));
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); tools.len()];
    let started = Instant::now();
    for _ in 0..UNCONTENDED_RUNS {
        if started.elapsed() > UNCONTENDED_BUDGET {
            break;
        }
        for (i, (name, make)) in tools.iter().enumerate() {
            let t = Instant::now();
            let status = make().status().expect("run tool");
            assert!(status.success(), "{name} failed: {status}");
            samples[i].push(t.elapsed());
        }
    }
    let medians: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
    println!("uncontended, median of {} runs each:", samples[0].len());
    for ((name, _), m) in tools.iter().zip(&medians) {
        println!("  {name:<14} {:>8.3} ms", ms(*m));
    }
    // A tool's median, by its name in `tools`.
    let median_of = |tool: &str| {
        let at = tools.iter().position(|(name, _)| *name == tool);
        medians[at.expect("a tool of this benchmark")].as_secs_f64()
    };
    let (redis_u, flock_u, etcd_u) = (
        median_of("dlock redis"),
        median_of("flock"),
        median_of("etcdctl lock"),
    );
    if before.is_some() {
        for (now, then, what) in [
            ("dlock redis", "redis (before)", "redis"),
            ("dlock file", "file (before)", "file"),
        ] {
            println!(
                "  this dlock / the one before, {what}: {:.2}",
                median_of(now) / median_of(then)
            );
        }
    }
    let floor_u = median_of("floor");
    println!(
        "  the floor (connect, write, command, write; no lock): {:.2}x flock(1); dlock redis: \
         {:.2}x the floor",
        floor_u / flock_u,
        redis_u / floor_u
    );
    let ratio_flock = redis_u / flock_u;
    let ratio_etcd = etcd_u / redis_u;
    goal(
        "dlock redis / flock",
        ratio_flock,
        "<= 1.3",
        ratio_flock <= 1.3,
    );
    goal(
        "etcdctl lock / dlock redis",
        ratio_etcd,
        ">= 4",
        ratio_etcd >= 4.0,
    );

    // Contended: 8 shell loops taking the same lock with a short critical section. The CPU time
    // of everything they ran (and of redis-server) shows what bounds the rate on a small machine.
    let loops = [
        (
            "dlock redis",
            format!("{dlock} --backend redis --url {url} run bench-c -- true"),
        ),
        (
            "dlock file",
            format!("{dlock} --url {} run bench-c -- true", lock_dir.display()),
        ),
        ("flock", format!("flock {} true", flock_file.display())),
    ];
    println!(
        "\n{CONTENDERS}-way contended, {ROUNDS_EACH} acquisitions each, {CONTENDED_ROUNDS} rounds \
         taking turns (medians):"
    );
    // Per tool and round: acquisitions per second, CPU per acquisition in the processes and in
    // redis-server (ms).
    let mut runs: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); loops.len()];
    for _ in 0..CONTENDED_ROUNDS {
        for ((_, one), runs) in loops.iter().zip(&mut runs) {
            let server_cpu = redis_cpu(&redis);
            let (rate, cpu) = contended(one);
            let server_ms =
                (redis_cpu(&redis) - server_cpu) * 1000.0 / (CONTENDERS * ROUNDS_EACH) as f64;
            runs.push((rate, ms(cpu), server_ms));
        }
    }
    for ((name, _), runs) in loops.iter().zip(&runs) {
        let pick = |f: fn(&(f64, f64, f64)) -> f64| middle(runs.iter().map(f).collect());
        println!(
            "  {name:<14} {:>8.0} acquisitions/s; CPU per acquisition: {:.2} ms in the \
             processes, {:.2} ms in redis-server",
            pick(|r| r.0),
            pick(|r| r.1),
            pick(|r| r.2)
        );
    }
    let ratios: Vec<f64> = runs[0]
        .iter()
        .zip(&runs[2])
        .map(|(r, f)| r.0 / f.0)
        .collect();
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!("  dlock redis / flock by round: {}", shown.join(" "));
    let ratio = middle(ratios);
    goal("dlock redis / flock", ratio, ">= 0.8", ratio >= 0.8);

    // Handoffs: a queue of waiters, each holder's command stamping its start time.
    let bench = std::env::current_exe().expect("own path");
    println!("\nhandoff (release -> next holder's command started), a chain of queued waiters:");
    for waiters in [5, 50] {
        let chain = handoff_chain(&redis, dlock, &bench, work.path(), waiters);
        let p50 = percentile(&chain.handoffs, 50);
        let p90 = percentile(&chain.handoffs, 90);
        println!(
            "  {waiters:>2} waiters: p50 {:.3} ms, p90 {:.3} ms; per handoff: {:.1} client commands \
             (evalsha, subscribe...), {:.1} commands counting those inside scripts",
            ms(p50),
            ms(p90),
            chain.client_commands,
            chain.all_commands
        );
        println!("     commands per handoff by name: {}", chain.breakdown);
        if waiters == 50 {
            goal("handoff p50 (ms)", ms(p50), "<= 2", ms(p50) <= 2.0);
        }
    }
    // etcd and redis-server stop when dropped, here.
}

/// Makes the command for one run of a tool.
type Tool<'a> = Box<dyn Fn() -> Command + 'a>;

/// The floors of a tool that keeps its lock in Redis and opens a connection per run, with the
/// client dlock uses: connect and write; for `Floor::WriteAround`, the command and a second write
/// on the same connection. No lock, no lease, no script.
fn connect_and_write(url: &str, shape: side_by_side::Floor) {
    let client = redis::Client::open(url).expect("the floor's URL");
    let mut conn = client.get_connection().expect("connect");
    let mut write = |what: &str| {
        let () = redis::cmd("SET")
            .arg("bench-floor")
            .arg(1)
            .query(&mut conn)
            .expect(what);
    };
    write("the first write");
    if shape == side_by_side::Floor::WriteAround {
        side_by_side::command();
        write("the second write");
    }
}

fn command(program: &str, args: &[&str]) -> Command {
    let mut cmd = support::programs::program_or_build(program);
    cmd.args(args)
        .env_remove("DLOCK_URL")
        .env_remove("DLOCK_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

/// `dlock --backend redis --url URL run NAME -- COMMAND...`
fn redis_run(dlock: &str, url: &str, name: &str, command_line: &[&str]) -> Command {
    let mut args = vec!["--backend", "redis", "--url", url, "run", name, "--"];
    args.extend_from_slice(command_line);
    command(dlock, &args)
}

fn median(samples: &mut [Duration]) -> Duration {
    percentile(samples, 50)
}

fn percentile(samples: &[Duration], pct: usize) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted
        .get((sorted.len().saturating_sub(1)) * pct / 100)
        .copied()
        .unwrap_or_default()
}

/// Acquisitions per second of `CONTENDERS` shell loops running `one` `ROUNDS_EACH` times, and the
/// CPU time (user and system, of every process they ran) per acquisition.
fn contended(one: &str) -> (f64, Duration) {
    let script = format!("for i in $(seq {ROUNDS_EACH}); do {one} || exit 1; done");
    let cpu_before = children_cpu();
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
    let acquisitions = (CONTENDERS * ROUNDS_EACH) as u32;
    let rate = acquisitions as f64 / started.elapsed().as_secs_f64();
    (rate, (children_cpu() - cpu_before) / acquisitions)
}

/// User and system time of every waited-for descendant so far.
fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given; an all-zero rusage is valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// redis-server's CPU seconds so far (user and system), from INFO cpu.
fn redis_cpu(redis: &RedisServer) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(&mut redis.connection())
        .expect("INFO cpu");
    info.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(':')?;
            matches!(key, "used_cpu_sys" | "used_cpu_user")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

struct Chain {
    handoffs: Vec<Duration>,
    client_commands: f64,
    all_commands: f64,
    breakdown: String,
}

/// Queues `waiters` dlocks behind a holder, lets the holder go, and measures each handoff from the
/// stamps the holders' commands write, plus the server's commands per handoff.
fn handoff_chain(
    redis: &RedisServer,
    dlock: &str,
    bench: &Path,
    work: &Path,
    waiters: usize,
) -> Chain {
    let url = redis.url();
    let name = format!("bench-h{waiters}");
    let stamps = work.join(format!("stamps-{waiters}"));
    let ready = work.join(format!("holder-{waiters}"));
    let hold = format!("touch {}; exec sleep 60", ready.display());
    let mut holder = redis_run(dlock, &url, &name, &["sh", "-c", &hold])
        .spawn()
        .expect("start the first holder");
    support::wait_for_file(&ready, Duration::from_secs(30));
    let bench = bench.to_str().expect("UTF-8 path");
    let stamp_file = stamps.to_str().expect("UTF-8 path");
    let mut chain: Vec<Child> = Vec::new();
    let mut conn = redis.connection();
    for i in 1..=waiters {
        chain.push(
            redis_run(dlock, &url, &name, &[bench, "--stamp", stamp_file])
                .spawn()
                .expect("start a waiter"),
        );
        // One at a time, so the queue order is the start order.
        support::wait_until("a waiter to queue", Duration::from_secs(30), || {
            redis::cmd("ZCARD")
                .arg(format!("dlock:{{{name}}}:queue"))
                .query::<usize>(&mut conn)
                .is_ok_and(|n| n == i)
        });
    }
    // Every waiter listening for its grant (it subscribes in the same write that queues it; the
    // holder listens too): from here on, only handoffs happen.
    let listening = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("dlock:wake:*")
        .query::<Vec<String>>(&mut conn)
        .expect("PUBSUB CHANNELS");
    assert_eq!(listening.len(), waiters + 1, "every waiter listens");
    let before = command_stats(&mut conn);
    support::signal(holder.id(), libc::SIGTERM);
    support::wait_exit(&mut holder, Duration::from_secs(30));
    for waiter in &mut chain {
        let status = support::wait_exit(waiter, Duration::from_secs(120));
        assert!(status.success(), "a waiter failed: {status}");
    }
    let after = command_stats(&mut conn);
    let text = std::fs::read_to_string(&stamps).expect("stamps");
    let mut times: Vec<u128> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    times.sort();
    assert_eq!(times.len(), waiters, "every waiter's command ran once");
    let handoffs = times
        .windows(2)
        .map(|w| Duration::from_nanos((w[1] - w[0]) as u64))
        .collect();

    // The window holds `waiters` handoffs (the first holder's included) and the last release.
    let per = |n: u64| n as f64 / waiters as f64;
    let mut delta: BTreeMap<String, u64> = BTreeMap::new();
    for (cmd, calls) in &after {
        let d = calls - before.get(cmd).copied().unwrap_or(0);
        // Our own INFO and PUBSUB queries are not dlock's.
        if d > 0 && cmd != "info" && cmd != "pubsub|channels" && cmd != "zcard" {
            delta.insert(cmd.clone(), d);
        }
    }
    let client = [
        "evalsha",
        "eval",
        "script|load",
        "hello",
        "subscribe",
        "unsubscribe",
        "punsubscribe",
        "auth",
        "select",
        "ping",
    ];
    let client_total: u64 = delta
        .iter()
        .filter(|(c, _)| client.contains(&c.as_str()))
        .map(|(_, d)| d)
        .sum();
    let all_total: u64 = delta.values().sum();
    let breakdown = delta
        .iter()
        .map(|(c, d)| format!("{c} {:.1}", per(*d)))
        .collect::<Vec<_>>()
        .join(", ");
    Chain {
        handoffs,
        client_commands: per(client_total),
        all_commands: per(all_total),
        breakdown,
    }
}

/// Calls per command, from INFO commandstats.
fn command_stats(conn: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let calls = fields
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Appends the current wall-clock time in nanoseconds to `file` (one write: atomic with O_APPEND).
fn stamp(file: &Path) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .expect("open the stamp file");
    f.write_all(format!("{now}\n").as_bytes())
        .expect("write a stamp");
}
