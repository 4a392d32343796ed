//! The checker's clients: threads that each loop `dlock run crit -- <critical section>` until told
//! to stop, and record every run: when it started, how it ended, how long its command outlived a
//! lost lease, and whether the command outlived dlock.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::resource::{start_time, Begins, Resource, SECTION};
use crate::support::*;

/// Runs per client, a bound far above what a soak reaches.
const MAX_RUNS: usize = 1_000_000;
/// How long a command may take to go after its dlock exited before it counts as outliving it.
const ORPHAN_GRACE: Duration = Duration::from_secs(2);
/// The pause after a run that could not reach its server, doubled at each one in a row up to
/// `MOST_PAUSE`, as a cron job or a retry loop would wait. Without it, 16 clients respawn dlock some
/// 200 times a second while a server restarts, and starve a JVM that is starting on two cores (an
/// OpenSearch node was seen not to serve HTTP within 2 minutes at a load of 30).
const FIRST_PAUSE: Duration = Duration::from_millis(25);
const MOST_PAUSE: Duration = Duration::from_secs(1);

/// One `dlock run` as a client saw it.
pub struct Run {
    pub id: String,
    pub spawned: Instant,
    /// Exit status, 128+N for a signal.
    pub status: i32,
    /// From "lost the lock" to "command exited" in dlock's own log.
    pub loss_to_exit: Option<Duration>,
    /// The command still ran `ORPHAN_GRACE` after dlock exited.
    pub orphan: bool,
}

/// What the clients share with the fault driver.
pub struct Board {
    pub stop: AtomicBool,
    /// The pid of each client's running dlock.
    pub current: Mutex<Vec<Option<u32>>>,
    pub runs: Mutex<Vec<Run>>,
}

impl Board {
    pub fn dlock_of(&self, client: usize) -> Option<u32> {
        self.current.lock().expect("board")[client]
    }
}

/// How every client runs dlock.
pub struct Plan {
    /// The `dlock` arguments up to `run`'s own, per client (some reach the servers through relays).
    pub args: Vec<Vec<String>>,
    /// `run` options: ttl, kill-after, wait, mode.
    pub run_args: Vec<String>,
    pub linger_secs: u64,
    /// The most a client waits after a run before its next, drawn per run (nothing when zero).
    pub pace: Duration,
    pub scratch: std::path::PathBuf,
}

pub fn start(plan: Plan, resource: &Resource) -> (Arc<Board>, Vec<JoinHandle<()>>) {
    let board = Arc::new(Board {
        stop: AtomicBool::new(false),
        current: Mutex::new(vec![None; plan.args.len()]),
        runs: Mutex::new(Vec::new()),
    });
    let plan = Arc::new(plan);
    let handles = (0..plan.args.len())
        .map(|n| {
            let board = board.clone();
            let plan = plan.clone();
            let port = resource.port();
            // The log of begins tells this client which command each run started.
            let begins = resource.begins();
            std::thread::spawn(move || client(n, &plan, port, &board, &begins))
        })
        .collect();
    (board, handles)
}

fn client(n: usize, plan: &Plan, port: u16, board: &Board, begins: &Begins) {
    let err_path = plan.scratch.join(format!("client.{n}.err"));
    let mut offset = 0u64;
    let mut pause = Duration::ZERO;
    for i in 0..MAX_RUNS {
        if board.stop.load(Ordering::SeqCst) {
            return;
        }
        let id = format!("{n}.{i}");
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&err_path)
            .expect("client log");
        let mut cmd = dlock();
        cmd.args(&plan.args[n])
            .arg("-v")
            .arg("run")
            .args(&plan.run_args)
            .args(["crit", "--", "bash", "--noprofile", "--norc", "-c", SECTION])
            .env("FAULTS_PORT", port.to_string())
            .env("FAULTS_RUN", &id)
            .env("FAULTS_LINGER", plan.linger_secs.to_string())
            .stdout(Stdio::null())
            .stderr(err)
            // Its own group, so a pause stops dlock alone (its command has a group of its own).
            .process_group(0);
        let spawned = Instant::now();
        let mut child = cmd.spawn().expect("start dlock");
        board.current.lock().expect("board")[n] = Some(child.id());
        let status = wait(&mut child);
        board.current.lock().expect("board")[n] = None;
        let orphan = outlives(begins.command_of(&id));
        let log = read_from(&err_path, &mut offset);
        board.runs.lock().expect("board").push(Run {
            id,
            spawned,
            status,
            loss_to_exit: loss_to_exit(&log),
            orphan,
        });
        // 69: the server could not be reached (or answered nothing dlock could use).
        pause = if status == 69 {
            (pause * 2).clamp(FIRST_PAUSE, MOST_PAUSE)
        } else {
            Duration::ZERO
        };
        std::thread::sleep(pause + paced(plan.pace, n, i));
    }
}

/// A wait below `pace`, drawn from the client and run numbers (so a seed's replay waits alike).
fn paced(pace: Duration, client: usize, run: usize) -> Duration {
    let mut rng =
        super::Rng(((client as u64) << 32 | run as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    pace.mul_f64(rng.below(1000) as f64 / 1000.0)
}

/// Waits for dlock, bounded: `--wait 20s` plus a lost lease and `--kill-after`, with room.
fn wait(child: &mut Child) -> i32 {
    let status = wait_exit(child, Duration::from_secs(120));
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Whether the command (pid and start time) still runs `ORPHAN_GRACE` after its dlock exited.
/// One that does is killed, so that it cannot disturb the rest of the run.
fn outlives(command: Option<(u32, String)>) -> bool {
    let Some((pid, start)) = command else {
        return false;
    };
    let running = || alive(pid) && start_time(pid).as_deref() == Some(start.as_str());
    let end = Instant::now() + ORPHAN_GRACE;
    while Instant::now() < end {
        if !running() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if running() {
        // SAFETY: kill has no memory effects; the pid and start time are those of our command.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        return true;
    }
    false
}

/// What was appended to a client's log since `offset`.
fn read_from(path: &std::path::Path, offset: &mut u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        if file.seek(SeekFrom::Start(*offset)).is_ok() {
            let _ = file.read_to_string(&mut text);
        }
    }
    *offset += text.len() as u64;
    text
}

/// From dlock's `-v` log of one run: the time from "lost the lock" to "command exited".
fn loss_to_exit(log: &str) -> Option<Duration> {
    let stamp = |line: &str| {
        let ts = line.strip_prefix('[')?.split(']').next()?;
        humantime::parse_rfc3339(ts).ok()
    };
    let lost = log
        .lines()
        .find(|l| l.contains("lost the lock"))
        .and_then(stamp)?;
    let exited = log
        .lines()
        .find(|l| l.contains("command exited"))
        .and_then(stamp)?;
    Some(exited.duration_since(lost).unwrap_or_default())
}
