//! What the SQL benchmarks share: shell lines run side by side, flock(1) last, as ratios to it.
//! Every loop is bounded by a count.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Tools to compare: a name and a shell line that takes the lock, runs `true` and lets it go;
/// dlock first, flock(1) last. `env`: one variable every line gets (the peer client's password).
pub struct Tools<'a> {
    pub lines: Vec<(String, String)>,
    pub env: (&'a str, &'a str),
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
                "{} --backend {backend} --url {} run bench -- true",
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
        Tools { lines, env }
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
    /// other: acquisitions per second of each, printed.
    pub fn contended(&self, contenders: usize, rounds: usize) -> Vec<f64> {
        println!("\n{contenders}-way contended, {rounds} acquisitions each:");
        let mut rates = vec![];
        for (name, line) in &self.lines {
            let start = Instant::now();
            let children: Vec<_> = (0..contenders)
                .map(|_| {
                    Command::new("sh")
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
            let rate = (contenders * rounds) as f64 / start.elapsed().as_secs_f64();
            println!("  {name:<24} {rate:8.1} acquisitions/s");
            rates.push(rate);
        }
        rates
    }

    /// Runs `line` with sh; the time taken.
    fn shell(&self, line: &str) -> Duration {
        let start = Instant::now();
        let status = Command::new("sh")
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
