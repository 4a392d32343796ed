//! A dlock whose stderr is read line by line on a thread, so a test can wait for a line (an
//! event such as "waiting for lock" or "renewed") without blocking on the pipe.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use super::wait_exit;

/// A dlock whose stderr is read line by line on a thread.
pub struct Watched {
    pub child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Watched {
    /// Starts `cmd` with its stderr piped to the reader.
    pub fn start(mut cmd: Command) -> Watched {
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("start dlock");
        let pipe = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watched {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line within `end`, kept with the others; None when none came.
    fn next_line(&mut self, end: Instant) -> Option<String> {
        let left = end.saturating_duration_since(Instant::now());
        let line = self.lines.recv_timeout(left).ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    fn seen(&self) -> String {
        self.seen.join("\n")
    }

    /// Waits for a line (seen so far or to come) containing `what`.
    pub fn wait_for(&mut self, what: &str, limit: Duration) {
        self.wait_for_line(&format!("a line with {what:?}"), limit, |l| {
            l.contains(what)
        });
    }

    /// Waits for a line (seen so far or to come) that `matches`, `what` saying which in the
    /// failure.
    pub fn wait_for_line(&mut self, what: &str, limit: Duration, matches: impl Fn(&str) -> bool) {
        let end = Instant::now() + limit;
        while !self.seen.iter().any(|l| matches(l)) {
            if self.next_line(end).is_none() {
                panic!("waited {limit:?} for {what}; stderr:\n{}", self.seen());
            }
        }
    }

    /// Whether a line said so far contains `what` (never waits).
    pub fn has_said(&mut self, what: &str) -> bool {
        self.times_said(what) > 0
    }

    /// How many lines said so far contain `what` (never waits).
    pub fn times_said(&mut self, what: &str) -> usize {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.iter().filter(|l| l.contains(what)).count()
    }

    /// Waits for `count` more lines containing `what`, counting from now.
    pub fn wait_for_more(&mut self, what: &str, count: usize, limit: Duration) {
        let end = Instant::now() + limit;
        let mut found = 0;
        while found < count {
            match self.next_line(end) {
                Some(line) => found += usize::from(line.contains(what)),
                None => panic!(
                    "saw {found} of {count} lines with {what:?} within {limit:?}; stderr:\n{}",
                    self.seen()
                ),
            }
        }
    }

    /// Watches for `how_long`, failing at once if a line containing `what` comes.
    pub fn sees_no_line_with(&mut self, what: &str, how_long: Duration) {
        let end = Instant::now() + how_long;
        while let Some(line) = self.next_line(end) {
            assert!(!line.contains(what), "{}", self.seen());
        }
        // dlock may have ended, and said nothing more: the watch still lasts `how_long`.
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
    }

    /// Waits for dlock to exit; returns its exit code (-1 for a signal) and all it said.
    pub fn finish(mut self, limit: Duration) -> (i32, String) {
        let status = wait_exit(&mut self.child, limit);
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        (status.code().unwrap_or(-1), self.seen())
    }
}

impl Drop for Watched {
    /// A dlock still running when its test fails is killed, not left behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
