//! What the SQL benchmarks share: shell lines run side by side, flock(1) last, as ratios to it.
//! Every loop is bounded by a count. The Redis benchmark uses its floors only.

#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;

use crate::support::idle::cpu_times;
use crate::support::program;
use std::time::{Duration, Instant};

/// Tools to compare: a name and a shell line that takes the lock, runs `true` and lets it go;
/// dlock first, flock(1) last. `env`: one variable every line gets (the peer client's password).
pub struct Tools<'a> {
    pub lines: Vec<(String, String)>,
    pub env: (&'a str, &'a str),
    /// The server's process (its postmaster, its mariadbd), whose CPU `beside_before` counts.
    pub server: Option<u32>,
}

/// One contended turn: acquisitions per second, and the CPU seconds of the clients (every process
/// the turn started) and of the server (with the backends it started and reaped).
#[derive(Clone, Copy)]
struct Turn {
    rate: f64,
    clients: f64,
    server: f64,
}

impl<'a> Tools<'a> {
    /// `dlock` on `backend` at `url`, then the `peers`, then flock(1) on a file in `work`.
    pub fn around(
        dlock: &str,
        backend: &str,
        url: &str,
        peers: Vec<(&str, String)>,
        work: &Path,
        env: (&'a str, &'a str),
    ) -> Tools<'a> {
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let flock_file = work.join("flock.lock").display().to_string();
        let mut lines = vec![(
            format!("dlock {backend}"),
            format!(
                // -q: like the peers, nothing but errors (no line for each wait, so no read
                // of who holds the lock for it).
                "{} --backend {backend} --url {} -q run bench -- true",
                quote(dlock),
                quote(url)
            ),
        )];
        lines.extend(
            peers
                .into_iter()
                .map(|(name, line)| (name.to_owned(), line)),
        );
        lines.push((
            "flock(1)".into(),
            format!("flock {} true", quote(&flock_file)),
        ));
        Tools {
            lines,
            env,
            server: None,
        }
    }

    /// Where flock(1) is in the lines and the figures.
    pub fn flock(&self) -> usize {
        self.lines.len() - 1
    }

    /// Each line once (warms caches, creates tables), then `runs` rounds of each in turn: the
    /// median of each, in ms, printed with its ratio to flock(1).
    pub fn uncontended(&self, runs: usize) -> Vec<f64> {
        for (_, line) in &self.lines {
            self.shell(line);
        }
        println!("uncontended `run NAME -- true`, median of {runs} (interleaved):");
        let mut samples: Vec<Vec<Duration>> = vec![vec![]; self.lines.len()];
        for _ in 0..runs {
            for (i, (_, line)) in self.lines.iter().enumerate() {
                samples[i].push(self.shell(line));
            }
        }
        let medians: Vec<f64> = samples
            .iter_mut()
            .map(|s| {
                s.sort();
                s[s.len() / 2].as_secs_f64() * 1000.0
            })
            .collect();
        let flock = medians[self.flock()];
        for ((name, _), m) in self.lines.iter().zip(&medians) {
            println!("  {name:<24} {m:8.2} ms  ({:.2}x flock)", m / flock);
        }
        medians
    }

    /// `contenders` shells at once, each taking the lock `rounds` times, one tool after the
    /// other, for `turns` turns (this machine swings by 10% from one short run to the next): the
    /// median acquisitions per second of each, printed, with the range of dlock's ratio to each
    /// other tool over the turns.
    pub fn contended(&self, contenders: usize, rounds: usize, turns: usize) -> Vec<f64> {
        println!(
            "\n{contenders}-way contended, {rounds} acquisitions each, {turns} turns (median):"
        );
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); self.lines.len()];
        for _ in 0..turns {
            for ((name, line), rates) in self.lines.iter().zip(&mut rates) {
                rates.push(self.contended_once(name, line, contenders, rounds));
            }
        }
        let medians: Vec<f64> = rates.iter().map(|r| middle(r.clone())).collect();
        for (i, ((name, _), m)) in self.lines.iter().zip(&medians).enumerate() {
            let range = if i == 0 {
                String::new()
            } else {
                let ratios: Vec<f64> = rates[0].iter().zip(&rates[i]).map(|(d, p)| d / p).collect();
                let lo = ratios.iter().copied().fold(f64::MAX, f64::min);
                let hi = ratios.iter().copied().fold(0.0, f64::max);
                format!("  (dlock / this, turn by turn: {lo:.2} to {hi:.2})")
            };
            println!("  {name:<24} {m:8.1} acquisitions/s{range}");
        }
        medians
    }

    /// This dlock (the first line) and the older one (`before_line`, at `at`) alone, contended,
    /// in `turns` pairs of turns one after the other: the median and range of the pairs' ratios
    /// of rate and of CPU, the clients' and the server's. CPU is the steadier figure on two cores
    /// shared by eight contenders and the server, whose rate swings by 20% from turn to turn.
    pub fn beside_before(&self, at: usize, contenders: usize, rounds: usize, turns: usize) {
        let pairs: Vec<(Turn, Turn)> = (0..turns)
            .map(|_| {
                let now = self.measured_turn(0, contenders, rounds);
                (now, self.measured_turn(at, contenders, rounds))
            })
            .collect();
        println!(
            "\nbeside the dlock before (DLOCK_BENCH_BEFORE), {contenders}-way contended, \
             {turns} pairs of turns: this / before"
        );
        type Figure = fn(&Turn) -> f64;
        let figures: [(&str, Figure); 4] = [
            ("acquisitions/s", |t| t.rate),
            ("CPU, the clients'", |t| t.clients),
            ("CPU, the server's", |t| t.server),
            ("CPU, both", |t| t.clients + t.server),
        ];
        for (what, figure) in figures {
            let ratios: Vec<f64> = pairs
                .iter()
                .map(|(now, before)| figure(now) / figure(before).max(f64::MIN_POSITIVE))
                .collect();
            let lo = ratios.iter().copied().fold(f64::MAX, f64::min);
            let hi = ratios.iter().copied().fold(0.0, f64::max);
            println!(
                "  {what:<24} {:.3}x (pair by pair: {lo:.3} to {hi:.3})",
                middle(ratios.clone())
            );
        }
    }

    /// One contended turn of line `i`, with the CPU it cost.
    fn measured_turn(&self, i: usize, contenders: usize, rounds: usize) -> Turn {
        // This process's reaped children are the turn's shells and all they started.
        let clients = || cpu_times("self").1.as_secs_f64();
        let server = || {
            self.server
                .map_or(0.0, |pid| cpu_times(&pid.to_string()).1.as_secs_f64())
        };
        let (clients_before, server_before) = (clients(), server());
        let (name, line) = &self.lines[i];
        let rate = self.contended_once(name, line, contenders, rounds);
        Turn {
            rate,
            clients: clients() - clients_before,
            server: server() - server_before,
        }
    }

    /// One turn of `line`: acquisitions per second.
    fn contended_once(&self, name: &str, line: &str, contenders: usize, rounds: usize) -> f64 {
        let start = Instant::now();
        let children: Vec<_> = (0..contenders)
            .map(|_| {
                program("sh")
                    .arg("-c")
                    .arg(format!(
                        "i=0; while [ $i -lt {rounds} ]; do {line} || exit 1; i=$((i+1)); done"
                    ))
                    .env(self.env.0, self.env.1)
                    .stdout(Stdio::null())
                    // The waiters' "waiting for lock" lines are not what is measured.
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("sh")
            })
            .collect();
        for mut child in children {
            let status = child.wait().expect("wait for sh");
            assert!(status.success(), "{name} failed under contention: {line}");
        }
        (contenders * rounds) as f64 / start.elapsed().as_secs_f64()
    }

    /// Runs `line` with sh; the time taken.
    fn shell(&self, line: &str) -> Duration {
        let start = Instant::now();
        let status = program("sh")
            .arg("-c")
            .arg(line)
            .env(self.env.0, self.env.1)
            .stdout(Stdio::null())
            .status()
            .expect("sh");
        assert!(status.success(), "{line}");
        start.elapsed()
    }
}

/// The median of `values`.
fn middle(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// What a floor run does after connecting: one write, then (the connection closed) the command;
/// or a write, the command and a second write on the same connection, the least any lock that
/// keeps its record on the server does (take it, hold it while the command runs, give it back).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    OneWrite,
    WriteAround,
}

/// `DLOCK_BENCH_BEFORE=PATH`: an older dlock, as one more line beside this one (on the same
/// `backend` and `url`, lock `bench`), so that what a change costs reads as a ratio of runs
/// interleaved on one server; none when the variable is not set.
pub fn before_line(backend: &str, url: &str) -> Option<(&'static str, String)> {
    let before = std::env::var("DLOCK_BENCH_BEFORE").ok()?;
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    Some((
        "dlock (before)",
        format!(
            "{} --backend {backend} --url {} -q run bench -- true",
            quote(&before),
            quote(url)
        ),
    ))
}

/// This dlock's figures as ratios of the older one's (`before_line`, at `at` among the lines).
pub fn print_before(at: Option<usize>, medians: &[f64], rates: &[f64]) {
    if let Some(at) = at {
        println!(
            "  beside the dlock before (DLOCK_BENCH_BEFORE): uncontended {:.3}x its time, \
             contended {:.3}x its rate",
            medians[0] / medians[at],
            rates[0] / rates[at]
        );
    }
}

/// The floors of any tool that opens a connection per run, as lines of the benchmark: this
/// benchmark's own executable run as `floor URL` and `floor-around URL` (see
/// `run_floor_if_asked`). Neither takes a lock, so under contention they do not even wait for
/// each other: what they reach bounds what any such tool can.
pub fn floor_lines(url: &str) -> [(&'static str, String); 2] {
    let me = std::env::current_exe().expect("this benchmark's executable");
    let me = me.display();
    [
        ("floor: connect, 1 write", format!("'{me}' floor '{url}'")),
        (
            "floor: write, cmd, write",
            format!("'{me}' floor-around '{url}'"),
        ),
    ]
}

/// When this executable was started as `floor URL` or `floor-around URL`: `floor(URL, shape)`,
/// which connects with dlock's client and writes (running the command between two writes for
/// `Floor::WriteAround`), then for `Floor::OneWrite` the command; true when it did.
pub fn run_floor_if_asked(floor: fn(&str, Floor)) -> bool {
    let args: Vec<String> = std::env::args().collect();
    let [_, shape, url] = args.as_slice() else {
        return false;
    };
    let shape = match shape.as_str() {
        "floor" => Floor::OneWrite,
        "floor-around" => Floor::WriteAround,
        _ => return false,
    };
    floor(url, shape);
    if shape == Floor::OneWrite {
        command();
    }
    true
}

/// The command every line runs: `true`.
pub fn command() {
    let status = program("true").status().expect("run true");
    assert!(status.success());
}
