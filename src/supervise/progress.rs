//! What a wait shows, for the two kinds of reader a wait has. In a CI log (stderr not a terminal)
//! one line when the wait starts, saying who holds the lock, then a short line at a steady interval
//! with how long it has waited and how much of `--wait` is left, so a job that seems to hang says
//! why. On a terminal one status line, redrawn in place, cut to the terminal's width so it never
//! wraps into a trail of lines. `-q` silences both; `-v` makes the log lines timestamped events.
//!
//! This file only words the lines and says when they are due; `report` prints them.

use std::time::{Duration, Instant};

use crate::lock::{Holder, LockName};

/// The interval of the log lines when `--progress-every` is not given.
pub const EVERY_DEFAULT: &str = "30s";

/// A wait in progress.
pub(super) struct Progress {
    name: LockName,
    holders: Vec<Holder>,
    /// In line before this waiter, where the backend keeps a line and said.
    ahead: Option<usize>,
    started: Instant,
    /// `--wait`, if given.
    budget: Option<Duration>,
    every: Duration,
    /// When the next log line is due; `None` until the wait has started (the lock found busy).
    next_line: Option<Instant>,
}

impl Progress {
    pub(super) fn new(name: &LockName, budget: Option<Duration>, every: Duration) -> Progress {
        Progress {
            name: name.clone(),
            holders: Vec::new(),
            ahead: None,
            started: Instant::now(),
            budget,
            every,
            next_line: None,
        }
    }

    /// The lock being waited for is `name`, held by `holders`. The first time: the line that says
    /// the wait starts (and for whom); afterwards `None`, the holders are only remembered.
    pub(super) fn busy(&mut self, name: &LockName, holders: &[Holder]) -> Option<String> {
        let first = self.next_line.is_none() || *name != self.name;
        self.name = name.clone();
        self.holders = holders.to_vec();
        if !first {
            return None;
        }
        self.next_line = Some(Instant::now() + self.every);
        let budget = match self.budget {
            Some(w) => format!(" (giving up after {})", words(w)),
            None => String::new(),
        };
        Some(format!(
            "waiting for lock {:?}{}{budget}",
            self.name.as_str(),
            describe_holders(holders)
        ))
    }

    /// The line that ends a wait that was logged: a log that said "waiting" says how it ended.
    /// `None` when the lock was free at once (nothing was said).
    pub(super) fn acquired(&self) -> Option<String> {
        self.next_line?;
        Some(format!(
            "acquired lock {:?} after waiting {}",
            self.name.as_str(),
            crate::text::duration(self.started.elapsed())
        ))
    }

    /// How many wait in line before this one, as the backend said.
    pub(super) fn in_line(&mut self, ahead: usize) {
        self.ahead = Some(ahead);
    }

    /// When the next log line is due, if the wait has started and lines are wanted.
    pub(super) fn due(&self) -> Option<Instant> {
        self.next_line.filter(|_| !self.every.is_zero())
    }

    /// The short log line, if one is due now.
    pub(super) fn tick(&mut self) -> Option<String> {
        let now = Instant::now();
        let due = self.due().filter(|&due| due <= now)?;
        // Steady: the next one an interval after this one was due, however late this came.
        self.next_line = Some((due + self.every).max(now));
        let waited = words(Duration::from_secs(self.started.elapsed().as_secs()));
        Some(format!(
            "still waiting for lock {:?} after {waited}{}",
            self.name.as_str(),
            self.left_and_place()
        ))
    }

    /// The terminal's status line, at most `width` characters.
    pub(super) fn status_line(&self, width: usize) -> String {
        let waited = words(Duration::from_secs(self.started.elapsed().as_secs()));
        let holder = match self.holders.first() {
            Some(h) => format!(", held{}", h.who()),
            None => String::new(),
        };
        let line = format!(
            "dlock: waiting {waited} for lock {:?}{}{holder}",
            self.name.as_str(),
            self.left_and_place()
        );
        fit(&line, width)
    }

    /// ` (4m 30s of --wait left, 2 ahead in line)`, as much of it as is known.
    fn left_and_place(&self) -> String {
        let mut parts = Vec::new();
        if let Some(budget) = self.budget {
            let left = budget.saturating_sub(self.started.elapsed());
            parts.push(format!(
                "{} of --wait left",
                words(Duration::from_secs(left.as_secs()))
            ));
        }
        match self.ahead {
            Some(0) => parts.push("next in line".into()),
            Some(n) => parts.push(format!("{n} ahead in line")),
            None => {}
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        }
    }
}

/// A duration as people write it: `1m 5s`, `300ms`.
fn words(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    crate::text::duration(d)
}

/// `line` cut to `width` characters, ending in `…` where cut.
fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

pub(super) fn describe_holders(holders: &[Holder]) -> String {
    match holders {
        [] => String::new(),
        [one] => format!(": held {}", one.describe()),
        [first, rest @ ..] => format!(": held {} and {} more", first.describe(), rest.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_to_the_width_and_a_short_one_left_alone() {
        assert_eq!(fit("dlock: waiting", 80), "dlock: waiting");
        assert_eq!(fit("dlock: waiting for lock", 10), "dlock: wa…");
        assert_eq!(fit("ééééé", 3).chars().count(), 3);
    }

    #[test]
    fn the_log_lines_say_the_budget_left_and_come_at_the_interval() {
        let name = LockName::new("deploy").expect("name");
        let mut p = Progress::new(&name, Some(Duration::from_secs(300)), Duration::ZERO);
        let first = p.busy(&name, &[]).expect("first line");
        assert_eq!(first, "waiting for lock \"deploy\" (giving up after 5m)");
        assert_eq!(p.busy(&name, &[]), None, "said once");
        assert_eq!(p.tick(), None, "an interval of 0: no further lines");
        p.every = Duration::from_millis(1);
        p.next_line = Some(Instant::now());
        p.in_line(2);
        let line = p.tick().expect("due");
        assert!(
            line.starts_with("still waiting for lock \"deploy\" after 0s (4m 59s of --wait left, 2 ahead in line)")
                || line.contains("(5m of --wait left, 2 ahead in line)"),
            "{line}"
        );
    }
}
