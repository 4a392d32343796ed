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

    pub fn wait_for(&mut self, what: &str, limit: Duration) {
        self.wait_for_line(&format!("a line with {what:?}"), limit, |l| {
            l.contains(what)
        });
    }

    /// Waits for a line that `matches`, `what` saying which in the failure.
    pub fn wait_for_line(&mut self, what: &str, limit: Duration, matches: impl Fn(&str) -> bool) {
        let end = Instant::now() + limit;
        while !self.seen.iter().any(|l| matches(l)) {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!(
                    "waited {limit:?} for {what}; stderr:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    pub fn finish(mut self, limit: Duration) -> (i32, String) {
        let status = wait_exit(&mut self.child, limit);
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        (status.code().unwrap_or(-1), self.seen.join("\n"))
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
