//! The mutual-exclusion checker: 16 clients loop on one lock for a bounded time while a fault
//! driver kills holders, pauses them past their lease ("GC pauses"), and stops or restarts the
//! servers. Every critical section writes through a fenced resource (tests/fenced-resource) that
//! refuses tokens lower than the highest it has seen. Afterwards the checker asserts: accepted
//! writes of two holders never interleave; every rejected write came from a holder whose lock was
//! really lost; nothing stays held; no child outlives its dlock.
//!
//! Size: `DLOCK_FAULT_SECS` (default 8) seconds per backend, `DLOCK_FAULT_SEED` to replay a run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

use crate::support::redis_server::{Comeback, RedisServer};
use crate::support::target::Target;
use crate::support::*;

const CLIENTS: usize = 16;
/// The lease the clients use: short, so pauses past it are cheap.
const TTL: &str = "1s";
const TTL_DURATION: Duration = Duration::from_secs(1);
const KILL_AFTER: &str = "1s";

pub struct Report {
    pub completed: usize,
    pub faults: BTreeMap<&'static str, usize>,
    pub overlaps: usize,
    pub stale_rejected: usize,
    /// Tokens whose writes were fenced off although their dlock never lost the lock: two holders.
    pub unjustified_rejections: Vec<u64>,
    pub worst_loss_to_exit: Option<Duration>,
}

/// A small deterministic generator, so a failing run can be replayed with its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fault_seconds() -> u64 {
    std::env::var("DLOCK_FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

fn resource() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fenced-resource")
}

/// Starts one client: a shell looping `dlock run crit` until the deadline (bounded by count too),
/// logging each run's exit status and token. Its own process group, so a pause stops it whole.
fn start_client(t: &Target, n: usize, seconds: u64, mode: &[&str]) -> Child {
    use std::os::unix::process::CommandExt;
    let dir = t.scratch.path().display().to_string();
    let section = format!(
        "echo $DLOCK_TOKEN > {dir}/token.{n}; echo $$ $(cut -d' ' -f22 /proc/$$/stat) > {dir}/child.$DLOCK_TOKEN; \
         {res} {dir} $DLOCK_TOKEN start-$$ || exit 0; sleep 0.1; {res} {dir} $DLOCK_TOKEN end-$$",
        res = resource().display()
    );
    let mut args = vec![
        "-v",
        "run",
        "--ttl",
        TTL,
        "--kill-after",
        KILL_AFTER,
        "--wait",
        "20s",
    ];
    args.extend_from_slice(mode);
    args.extend_from_slice(&["crit", "--", "sh", "-c", &section]);
    let run = t.shell_words(&args);
    let script = format!(
        "end=$(( $(date +%s) + {seconds} )); i=0; \
         while [ $i -lt 2000 ] && [ $(date +%s) -lt $end ]; do i=$((i + 1)); \
         rm -f {dir}/token.{n}; {run} 2>> {dir}/client.{n}.err; s=$?; \
         echo \"$s $(cat {dir}/token.{n} 2>/dev/null || echo none)\" >> {dir}/client.{n}.log; done"
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .process_group(0)
        .spawn()
        .expect("start client")
}

/// The current holder of `crit`: dlock's pid and token, if a dlock holds it.
fn holder(t: &Target) -> Option<(u32, u64)> {
    let out = output(t.dlock(&["status", "--json", "crit"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).ok()?;
    let h = json["holders"].as_array()?.first()?;
    Some((h["pid"].as_u64()? as u32, h["token"].as_u64()?))
}

/// Only ever signal a dlock this test started: check the command line before killing.
fn is_our_dlock(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).starts_with(dlock_bin()))
        .unwrap_or(false)
}

/// The command of the holder with `token`, if that very process still runs: the file holds its pid
/// and start time, since pids are reused within a run (and a reused one is never ours to signal).
fn child_pid(t: &Target, token: u64) -> Option<u32> {
    let record = std::fs::read_to_string(t.scratch.file(&format!("child.{token}"))).ok()?;
    let (pid, start) = record.trim().split_once(' ')?;
    let pid: u32 = pid.parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name: state is field 3, start time field 22.
    let after_name = stat.rsplit(") ").next()?;
    let started = after_name.split(' ').nth(19)?;
    (started == start && alive(pid)).then_some(pid)
}

fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: kill has no memory effects; the groups are ones this test started.
    unsafe { libc::kill(-pgid, sig) };
}

/// Runs the checker on one backend and returns its report, asserting the safety properties.
pub fn check(t: &Target, label: &str) -> Report {
    let report = run_checker(t, label, &[], fault_seconds());
    assert_eq!(
        report.overlaps, 0,
        "accepted writes of two holders interleaved"
    );
    assert!(
        report.unjustified_rejections.is_empty(),
        "tokens {:?} were fenced off although their dlock kept the lock",
        report.unjustified_rejections
    );
    assert!(report.completed > 0, "no critical section completed");
    report
}

/// Runs the clients and the fault driver; `mode` is added to every `dlock run`.
fn run_checker(t: &Target, label: &str, mode: &[&str], seconds: u64) -> Report {
    let seed = std::env::var("DLOCK_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("fault checker on {label}: {seconds}s, DLOCK_FAULT_SEED={seed}");
    let mut rng = Rng(seed);
    let mut clients: Vec<Child> = (0..CLIENTS)
        .map(|n| start_client(t, n, seconds, mode))
        .collect();
    let mut faults: BTreeMap<&'static str, usize> = BTreeMap::new();

    let end = Instant::now() + Duration::from_secs(seconds);
    let mut round = 0u64;
    while Instant::now() < end {
        // Pacing between faults, not synchronisation: the checker judges only the logs.
        std::thread::sleep(Duration::from_millis(150 + rng.below(300)));
        // Every kind in turn (the order of a round is fixed, the timing random), so even a short
        // run injects each kind the backend supports.
        let kinds = if t.servers.is_empty() { 2 } else { 4 };
        round += 1;
        match round % kinds {
            0 => {
                if let Some((pid, _)) = holder(t).filter(|(pid, _)| is_our_dlock(*pid)) {
                    signal(pid, libc::SIGKILL);
                    *faults.entry("holder SIGKILLed").or_default() += 1;
                }
            }
            1 => {
                // A "GC pause": the holder's client group (its dlock) and its command, stopped past
                // the lease, then resumed. Whatever it writes after that must be fenced off.
                if let Some((pid, token)) = holder(t).filter(|(pid, _)| is_our_dlock(*pid)) {
                    // SAFETY: getpgid has no memory effects.
                    let group = unsafe { libc::getpgid(pid as i32) };
                    let child = child_pid(t, token);
                    signal_group(group, libc::SIGSTOP);
                    if let Some(c) = child {
                        signal_group(c as i32, libc::SIGSTOP);
                    }
                    std::thread::sleep(TTL_DURATION * 3 / 2);
                    if let Some(c) = child {
                        signal_group(c as i32, libc::SIGCONT);
                    }
                    signal_group(group, libc::SIGCONT);
                    *faults.entry("holder paused past its lease").or_default() += 1;
                }
            }
            2 => {
                let server = &t.servers[rng.below(t.servers.len() as u64) as usize];
                server.pause(TTL_DURATION * 3 / 2);
                *faults.entry("server paused past the lease").or_default() += 1;
            }
            _ => {
                let server = &t.servers[rng.below(t.servers.len() as u64) as usize];
                server.restart();
                *faults.entry("server restarted").or_default() += 1;
            }
        }
    }
    for client in &mut clients {
        wait_exit(client, Duration::from_secs(60));
    }
    let report = judge(t);
    // Nothing stays held: leases of SIGKILLed holders run out within their ttl.
    wait_until(
        "every lock to be free after the run",
        TTL_DURATION * 10,
        || stdout(&output(t.dlock(&["list"]))).trim().is_empty(),
    );
    // No child outlives its dlock.
    for entry in std::fs::read_dir(t.scratch.path()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(pid) = name
            .strip_prefix("child.")
            .and_then(|_| child_pid(t, name[6..].parse().unwrap_or(0)))
        {
            let token: u64 = name[6..].parse().unwrap_or(0);
            wait_until(
                &format!("child {pid} to be gone"),
                Duration::from_secs(10),
                || child_pid(t, token).is_none(),
            );
        }
    }
    let report = Report { faults, ..report };
    eprintln!(
        "fault checker on {label}: {} critical sections completed; faults {:?}; {} overlaps of accepted writes; \
         {} stale writes rejected by fencing; worst loss-to-exit {:?}",
        report.completed, report.faults, report.overlaps, report.stale_rejected, report.worst_loss_to_exit
    );
    report
}

/// Reads the resource log and the clients' logs.
fn judge(t: &Target) -> Report {
    let log = std::fs::read_to_string(t.scratch.file("log")).unwrap_or_default();
    // (token, writer pid) of accepted writes, in order: two writers with one token (a broken token)
    // count as two holders.
    let mut accepted_runs: Vec<(u64, u32)> = Vec::new();
    let mut rejected: BTreeSet<u64> = BTreeSet::new();
    let mut completed = 0;
    for line in log.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let token: u64 = fields[1].parse().unwrap();
        let (what, writer) = fields[2].split_once('-').unwrap();
        match fields[0] {
            "accepted" => {
                accepted_runs.push((token, writer.parse().unwrap()));
                completed += usize::from(what == "end");
            }
            _ => {
                rejected.insert(token);
            }
        }
    }
    // Interleaving: once another holder has written, an earlier one may never be accepted again.
    let mut finished: BTreeSet<(u64, u32)> = BTreeSet::new();
    let mut overlaps = 0;
    let mut current = None;
    for token in accepted_runs {
        if current != Some(token) {
            if let Some(previous) = current {
                finished.insert(previous);
            }
            if finished.contains(&token) {
                overlaps += 1;
            }
            current = Some(token);
        }
    }

    // Each rejected write's holder really lost its lock: its dlock said so (79) or was killed.
    let mut outcome: BTreeMap<u64, i32> = BTreeMap::new();
    let mut worst: Option<Duration> = None;
    for n in 0..CLIENTS {
        let runs =
            std::fs::read_to_string(t.scratch.file(&format!("client.{n}.log"))).unwrap_or_default();
        for line in runs.lines() {
            let mut f = line.split(' ');
            let status: i32 = f.next().unwrap().parse().unwrap();
            if let Some(Ok(token)) = f.next().map(str::parse::<u64>) {
                outcome.insert(token, status);
            }
        }
        let err =
            std::fs::read_to_string(t.scratch.file(&format!("client.{n}.err"))).unwrap_or_default();
        let mut lost_at = None;
        for line in err.lines() {
            let stamp = || {
                let ts = line.strip_prefix('[')?.split(']').next()?;
                humantime::parse_rfc3339(ts).ok()
            };
            if line.contains("lost the lock") {
                lost_at = stamp();
            } else if line.contains("command exited") {
                if let (Some(lost), Some(exited)) = (lost_at.take(), stamp()) {
                    let d = exited.duration_since(lost).unwrap_or_default();
                    worst = Some(worst.map_or(d, |w| w.max(d)));
                }
            }
        }
    }
    // A holder really lost its lock when its dlock said so (79) or died (killed by the driver).
    let unjustified_rejections = rejected
        .iter()
        .filter(|token| matches!(outcome.get(token), Some(&s) if s != 79 && s <= 128))
        .copied()
        .collect();
    Report {
        completed,
        faults: BTreeMap::new(),
        overlaps,
        stale_rejected: rejected.len(),
        unjustified_rejections,
        worst_loss_to_exit: worst,
    }
}

#[test]
fn file_backend_keeps_mutual_exclusion_under_faults() {
    let t = Target::file_backend();
    // flock(2) locks have no lease, so a paused holder keeps its lock. Writes can still be fenced
    // off here: a SIGKILLed dlock frees the lock at once and the kernel kills its command, but a
    // process the command started (the resource's writer) may finish its write late. `check`
    // asserts that every such write came from a holder whose dlock was killed.
    check(&t, "file");
}

#[test]
fn redis_backend_keeps_mutual_exclusion_under_faults() {
    // A server for locks should persist what it acknowledges: append-only, fsync always. (One
    // restarted empty forgets its locks and tokens; tests/redis.rs shows the holder then loses.)
    let t = Target::redis(vec![RedisServer::start_durable()], Comeback::KeepingData);
    check(&t, "redis, one server with an append-only file");
}

#[test]
fn redlock_keeps_mutual_exclusion_under_faults() {
    // Servers without persistence, restarted empty after a lease as Redlock requires.
    let servers = (0..3).map(|_| RedisServer::start()).collect();
    let t = Target::redis(servers, Comeback::EmptyAfter(TTL_DURATION));
    check(&t, "redis, Redlock over three servers");
}

#[test]
fn the_checker_catches_two_holders_at_once() {
    // `--limit 2` lets two clients in together: the checker must see their writes fenced off
    // without either dlock having lost anything.
    let t = Target::file_backend();
    let report = run_checker(&t, "file with --limit 2", &["--limit", "2"], 3);
    assert!(
        !report.unjustified_rejections.is_empty(),
        "two holders at once went unnoticed"
    );
}

#[test]
fn zk_backend_keeps_mutual_exclusion_under_faults() {
    let t = Target::zk_backend();
    check(&t, "zk");
}
